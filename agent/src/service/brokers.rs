//! The Broker RPCs: requests become checked [`BrokerSpec`]s (errors name the field), the
//! registry starts and stops them, and its statuses go back as messages.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use proto::agent::v1 as pb;
use tonic::{Code, Status};

use super::status::{invalid, missing};
use crate::broker::{
    BrokerError, BrokerKind, BrokerOptions, BrokerSpec, BrokerState, BrokerStatus, Brokers,
    BrokersConfig, ErrorCode, InstallPaths, Product,
};

/// The brokers this agent runs.
pub(crate) struct BrokerControl {
    brokers: Brokers,
}

impl BrokerControl {
    /// Native brokers keep their files under `state_dir`.
    pub(crate) fn new(state_dir: PathBuf) -> Self {
        BrokerControl {
            brokers: Brokers::new(BrokersConfig {
                state_dir,
                install: InstallPaths::default(),
            }),
        }
    }

    pub(crate) async fn start(
        &self,
        request: pb::StartBrokerRequest,
    ) -> Result<pb::BrokerStatus, Status> {
        let spec = spec_from(request.spec.ok_or_else(|| missing("spec"))?)?;
        let status = self.brokers.start(spec).await.map_err(from_broker)?;
        Ok(status_to_message(&status))
    }

    pub(crate) async fn stop(&self, name: &str) -> Result<pb::BrokerStatus, Status> {
        let status = self.brokers.stop(name).await.map_err(from_broker)?;
        Ok(status_to_message(&status))
    }

    pub(crate) async fn status(&self, name: &str) -> Result<pb::BrokerStatus, Status> {
        let status = self.brokers.status(name).await.map_err(from_broker)?;
        Ok(status_to_message(&status))
    }

    /// The process the Metrics RPC watches for broker `name`.
    pub(crate) async fn pid_of(&self, name: &str) -> Result<u32, Status> {
        let status = self.brokers.status(name).await.map_err(from_broker)?;
        status.pid.ok_or_else(|| {
            Status::failed_precondition(format!(
                "broker {name} has no process to watch ({:?})",
                status.state
            ))
        })
    }

    /// Stops every broker (agent shutdown); failures are logged, not fatal.
    pub(crate) async fn stop_all(&self) {
        for (name, error) in self.brokers.stop_all().await {
            tracing::warn!(broker = %name, %error, "stopping broker at shutdown");
        }
    }
}

fn from_broker(error: BrokerError) -> Status {
    let code = match error.code() {
        ErrorCode::InvalidArgument => Code::InvalidArgument,
        ErrorCode::FailedPrecondition => Code::FailedPrecondition,
        ErrorCode::AlreadyExists => Code::AlreadyExists,
        ErrorCode::NotFound => Code::NotFound,
        ErrorCode::Unavailable => Code::Unavailable,
        ErrorCode::Internal => Code::Internal,
    };
    Status::new(code, error.to_string())
}

fn product_from(value: i32) -> Result<Product, Status> {
    match pb::Product::try_from(value) {
        Ok(pb::Product::Mosquitto) => Ok(Product::Mosquitto),
        Ok(pb::Product::Rabbitmq) => Ok(Product::RabbitMq),
        Ok(pb::Product::Emqx) => Ok(Product::Emqx),
        Ok(pb::Product::Vernemq) => Ok(Product::VerneMq),
        Ok(pb::Product::Hivemq) => Ok(Product::HiveMq),
        Ok(pb::Product::Unspecified) | Err(_) => Err(invalid(
            "spec.kind.native.product",
            format!("{value} is not a broker product"),
        )),
    }
}

/// A requested broker as a checked spec; the registry checks name and port further.
pub(crate) fn spec_from(message: pb::BrokerSpec) -> Result<BrokerSpec, Status> {
    let kind = match message.kind.ok_or_else(|| missing("spec.kind"))? {
        pb::broker_spec::Kind::Native(native) => BrokerKind::Native {
            product: product_from(native.product)?,
        },
        pb::broker_spec::Kind::Embedded(_) => BrokerKind::Embedded,
        pb::broker_spec::Kind::External(external) => BrokerKind::External {
            address: external.address.parse::<SocketAddr>().map_err(|e| {
                invalid(
                    "spec.kind.external.address",
                    format!("{:?}: {e}", external.address),
                )
            })?,
        },
        // The kubernetes driver is being written; until it lands the request is refused.
        pb::broker_spec::Kind::Kubernetes(_) => {
            return Err(crate::service::status::unable(
                "spec.kind.kubernetes: the kubernetes driver is not available in this agent",
            ));
        }
    };
    let bind = match (&kind, message.bind.as_str()) {
        (BrokerKind::External { .. }, _) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (_, "") => return Err(missing("spec.bind")),
        (_, text) => text
            .parse()
            .map_err(|e| invalid("spec.bind", format!("{text:?}: {e}")))?,
    };
    let port = u16::try_from(message.port)
        .map_err(|_| invalid("spec.port", format!("{} is not a TCP port", message.port)))?;
    let mut options = BrokerOptions::default();
    for (key, value) in &message.options {
        let field = format!("spec.options.{key}");
        match key.as_str() {
            "max_inflight_messages" => {
                options.max_inflight_messages = Some(
                    value
                        .parse()
                        .map_err(|e| invalid(&field, format!("{value:?}: {e}")))?,
                )
            }
            "max_queued_messages" => {
                options.max_queued_messages = Some(
                    value
                        .parse()
                        .map_err(|e| invalid(&field, format!("{value:?}: {e}")))?,
                )
            }
            "start_deadline" => {
                let deadline: Duration = humantime::parse_duration(value)
                    .map_err(|e| invalid(&field, format!("{value:?}: {e}")))?;
                options.start_deadline = Some(deadline);
            }
            _ => {
                return Err(invalid(
                    &field,
                    "unknown option (max_inflight_messages, max_queued_messages, start_deadline)",
                ));
            }
        }
    }
    Ok(BrokerSpec {
        name: message.name,
        kind,
        bind,
        port,
        options,
    })
}

/// A registry status as a message.
pub(crate) fn status_to_message(status: &BrokerStatus) -> pb::BrokerStatus {
    let (state, detail) = match &status.state {
        BrokerState::Starting => (pb::BrokerState::Starting, status.detail.clone()),
        BrokerState::Running => (pb::BrokerState::Running, status.detail.clone()),
        BrokerState::Stopping | BrokerState::Stopped => {
            (pb::BrokerState::Stopped, status.detail.clone())
        }
        BrokerState::Failed(reason) => (pb::BrokerState::Failed, reason.clone()),
    };
    pb::BrokerStatus {
        name: status.name.clone(),
        state: state.into(),
        address: status.address.map(|a| a.to_string()).unwrap_or_default(),
        pid: status.pid.unwrap_or(0),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(product: pb::Product) -> pb::BrokerSpec {
        pb::BrokerSpec {
            name: "b1".into(),
            kind: Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
                product: product.into(),
            })),
            bind: "127.0.0.1".into(),
            port: 0,
            options: Default::default(),
        }
    }

    #[test]
    fn a_native_spec_converts_with_its_options() {
        let mut message = native(pb::Product::Mosquitto);
        message
            .options
            .insert("max_inflight_messages".into(), "40".into());
        message
            .options
            .insert("start_deadline".into(), "30s".into());
        let spec = spec_from(message).expect("valid");
        assert_eq!(
            spec.kind,
            BrokerKind::Native {
                product: Product::Mosquitto
            }
        );
        assert_eq!(spec.options.max_inflight_messages, Some(40));
        assert_eq!(spec.options.start_deadline, Some(Duration::from_secs(30)));
    }

    #[test]
    fn bad_fields_are_named() {
        let message = |f: fn(&mut pb::BrokerSpec)| {
            let mut m = native(pb::Product::Mosquitto);
            f(&mut m);
            spec_from(m).expect_err("invalid").message().to_string()
        };
        assert!(
            message(
                |m| m.kind = Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
                    product: 0
                }))
            )
            .starts_with("spec.kind.native.product")
        );
        assert!(message(|m| m.kind = None).starts_with("spec.kind: missing"));
        assert!(message(|m| m.bind = "nowhere".into()).starts_with("spec.bind"));
        assert!(message(|m| m.port = 70_000).starts_with("spec.port"));
        assert!(
            message(|m| {
                m.options.insert("colour".into(), "blue".into());
            })
            .starts_with("spec.options.colour")
        );
    }
}
