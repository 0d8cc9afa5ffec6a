//! The Broker RPCs: requests become checked [`BrokerSpec`]s (errors name the field), the
//! registry starts and stops them, and its statuses go back as messages.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use proto::agent::v1 as pb;
use tonic::{Code, Status};

use super::metrics::Watched;
use super::status::{invalid, missing};
use crate::broker::{
    BrokerError, BrokerKind, BrokerOptions, BrokerSpec, BrokerState, BrokerStatus, Brokers,
    BrokersConfig, DEFAULT_NAMESPACE, ErrorCode, InstallPaths, Kubectl, Product,
};
use crate::config::AgentConfig;

/// The brokers this agent runs.
pub(crate) struct BrokerControl {
    brokers: Brokers,
}

impl BrokerControl {
    /// Native brokers keep their files under `<state_dir>/brokers`; Kubernetes brokers are
    /// applied with `<k3s> kubectl --kubeconfig <the k3s server's kubeconfig>`.
    pub(crate) fn new(config: &AgentConfig) -> Self {
        Self::with(BrokersConfig {
            state_dir: config.state_dir.join("brokers"),
            install: InstallPaths::default(),
            kubectl: Kubectl::k3s(&config.k3s.binary, Some(&config.kubeconfig_path())),
        })
    }

    /// Brokers run as `config` says.
    pub(crate) fn with(config: BrokersConfig) -> Self {
        BrokerControl {
            brokers: Brokers::new(config),
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

    /// What the Metrics RPC watches for broker `name`: its process, or for a pod its
    /// usage sampler, asked once here so that a cluster without the metrics API is a clear
    /// error now rather than a stream of empty samples.
    pub(crate) async fn watched(&self, name: &str) -> Result<Watched, Status> {
        let status = self.brokers.status(name).await.map_err(from_broker)?;
        if let Some(pid) = status.pid {
            return Ok(Watched::process(pid, name));
        }
        if status.state == BrokerState::Running
            && let Some(sampler) = self.brokers.usage_sampler(name)
        {
            sampler.sample().await.map_err(from_broker)?;
            return Ok(Watched::sampled(sampler, name));
        }
        Err(Status::failed_precondition(format!(
            "broker {name} has no process to watch ({:?})",
            status.state
        )))
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

fn product_from(value: i32, field: &str) -> Result<Product, Status> {
    match pb::Product::try_from(value) {
        Ok(pb::Product::Mosquitto) => Ok(Product::Mosquitto),
        Ok(pb::Product::Rabbitmq) => Ok(Product::RabbitMq),
        Ok(pb::Product::Emqx) => Ok(Product::Emqx),
        Ok(pb::Product::Vernemq) => Ok(Product::VerneMq),
        Ok(pb::Product::Hivemq) => Ok(Product::HiveMq),
        Ok(pb::Product::Unspecified) | Err(_) => {
            Err(invalid(field, format!("{value} is not a broker product")))
        }
    }
}

/// A Kubernetes target, its fields checked (errors name `spec.kind.kubernetes.<field>`).
fn kubernetes_from(message: pb::KubernetesBroker) -> Result<BrokerKind, Status> {
    if message.node.is_empty() {
        return Err(missing("spec.kind.kubernetes.node"));
    }
    let node_port = match message.node_port {
        0 => None,
        port => Some(u16::try_from(port).map_err(|_| {
            invalid(
                "spec.kind.kubernetes.node_port",
                format!("{port} is not a TCP port"),
            )
        })?),
    };
    let kind = BrokerKind::Kubernetes {
        product: product_from(message.product, "spec.kind.kubernetes.product")?,
        node: message.node,
        namespace: if message.namespace.is_empty() {
            DEFAULT_NAMESPACE.to_owned()
        } else {
            message.namespace
        },
        node_port,
    };
    // The kind's own errors read `kind.kubernetes.<field>: ...`.
    kind.validate()
        .map_err(|error| Status::invalid_argument(format!("spec.{error}")))?;
    Ok(kind)
}

/// A requested broker as a checked spec; the registry checks name and port further.
pub(crate) fn spec_from(message: pb::BrokerSpec) -> Result<BrokerSpec, Status> {
    let kind = match message.kind.ok_or_else(|| missing("spec.kind"))? {
        pb::broker_spec::Kind::Native(native) => BrokerKind::Native {
            product: product_from(native.product, "spec.kind.native.product")?,
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
        pb::broker_spec::Kind::Kubernetes(kubernetes) => kubernetes_from(kubernetes)?,
    };
    let bind = match (&kind, message.bind.as_str()) {
        // Neither binds on this node: the address is elsewhere (the node's NodePort).
        (BrokerKind::External { .. } | BrokerKind::Kubernetes { .. }, _) => {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        }
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

    fn kubernetes(node: &str, namespace: &str, node_port: u32) -> pb::BrokerSpec {
        pb::BrokerSpec {
            name: "bench".into(),
            kind: Some(pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
                product: pb::Product::Vernemq.into(),
                node: node.into(),
                namespace: namespace.into(),
                node_port,
            })),
            // Ignored for Kubernetes brokers: the address is the node's NodePort.
            bind: String::new(),
            port: 0,
            options: Default::default(),
        }
    }

    #[test]
    fn a_kubernetes_spec_converts_with_its_defaults() {
        let spec = spec_from(kubernetes("worker-1", "", 0)).expect("valid");
        assert_eq!(
            spec.kind,
            BrokerKind::Kubernetes {
                product: Product::VerneMq,
                node: "worker-1".into(),
                namespace: "continuum".into(),
                node_port: None,
            }
        );
        assert_eq!(spec.bind, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let spec = spec_from(kubernetes("worker-1", "lab", 31999)).expect("valid");
        assert!(matches!(
            spec.kind,
            BrokerKind::Kubernetes { node_port: Some(31999), ref namespace, .. } if namespace == "lab"
        ));
    }

    #[test]
    fn bad_kubernetes_fields_are_named() {
        let message = |m: pb::BrokerSpec| spec_from(m).expect_err("invalid").message().to_string();
        for (bad, field) in [
            (kubernetes("", "", 0), "spec.kind.kubernetes.node: missing"),
            (kubernetes("Worker 1", "", 0), "spec.kind.kubernetes.node: "),
            (
                kubernetes("w", "Lab", 0),
                "spec.kind.kubernetes.namespace: ",
            ),
            (
                kubernetes("w", "", 1883),
                "spec.kind.kubernetes.node_port: ",
            ),
            (
                kubernetes("w", "", 70_000),
                "spec.kind.kubernetes.node_port: ",
            ),
        ] {
            let text = message(bad);
            assert!(text.starts_with(field), "{text}");
        }
        let mut no_product = kubernetes("w", "", 0);
        no_product.kind = Some(pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
            product: 0,
            node: "w".into(),
            ..Default::default()
        }));
        assert!(message(no_product).starts_with("spec.kind.kubernetes.product"));
    }

    /// The Metrics RPC's lookup for a broker on Kubernetes (cluster faked: see fake_k3s.rs).
    #[tokio::test]
    async fn a_kubernetes_broker_is_watched_through_its_pod_metrics() {
        use crate::broker::kubernetes::fake_k3s::{FakeK3s, broker_on_a_node_port};
        use crate::service::metrics::Source;

        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let control = BrokerControl::with(BrokersConfig {
            state_dir: fake.dir().join("state"),
            kubectl: fake.kubectl(),
            ..BrokersConfig::default()
        });
        let mut request = kubernetes("worker-1", "", port.into());
        request.kind = Some(pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
            product: pb::Product::Mosquitto.into(),
            node: "worker-1".into(),
            namespace: String::new(),
            node_port: port.into(),
        }));
        let started = control
            .start(pb::StartBrokerRequest {
                spec: Some(request),
            })
            .await
            .unwrap();
        assert_eq!(started.pid, 0);
        assert_eq!(started.address, format!("127.0.0.1:{port}"));

        let watched = control.watched("bench").await.unwrap();
        assert_eq!(watched.label, "bench");
        assert!(matches!(watched.source, Source::Sampled(_)));

        // Without the metrics API the lookup fails now, saying so, rather than streaming
        // empty samples. (A fresh control: the sampler reuses an answer for a second.)
        fake.fail(
            "podmetrics.json",
            "Error from server (NotFound): the server could not find the requested resource",
        );
        let control_b = BrokerControl::with(BrokersConfig {
            state_dir: fake.dir().join("state-b"),
            kubectl: fake.kubectl(),
            ..BrokersConfig::default()
        });
        let mut other = kubernetes("worker-1", "", port.into());
        other.name = "bench-b".into();
        other.kind = Some(pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
            product: pb::Product::Mosquitto.into(),
            node: "worker-1".into(),
            namespace: String::new(),
            node_port: port.into(),
        }));
        control_b
            .start(pb::StartBrokerRequest { spec: Some(other) })
            .await
            .unwrap();
        let error = control_b.watched("bench-b").await.unwrap_err();
        assert_eq!(error.code(), Code::Unavailable, "{error:?}");
        assert!(error.message().contains("metrics-server"), "{error:?}");

        control.stop_all().await;
        control_b.stop_all().await;
        pod.stop().await.unwrap();
    }
}
