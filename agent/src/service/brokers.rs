//! The Broker RPCs: requests become checked [`BrokerSpec`]s (proto's conversion names the
//! field), the registry starts and stops them, and its statuses go back as messages.

use proto::agent::v1 as pb;
use tonic::{Code, Status};

use std::sync::Arc;

use super::broker_leases::{BrokerLeases, MAX_LEASE};
use super::metrics::Watched;
use super::status::{invalid, missing};
use crate::broker::{
    BrokerError, BrokerState, BrokerStatus, Brokers, BrokersConfig, ErrorCode, InstallPaths,
    Kubectl,
};
use domain::{AgentConfig, BrokerSpec};

/// The brokers this agent runs, and the leases some of them are held under.
pub(crate) struct BrokerControl {
    brokers: Arc<Brokers>,
    leases: Arc<BrokerLeases>,
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

    /// `(name, pid)` of each running broker with a process on this node.
    pub(crate) fn running_pids(&self) -> Vec<(String, u32)> {
        self.brokers.watched_pids()
    }

    /// The time left on each broker lease.
    pub(crate) fn leases_remaining(&self) -> Vec<(String, std::time::Duration)> {
        self.leases.remaining()
    }

    /// Where native products are looked for.
    pub(crate) fn install_paths(&self) -> &InstallPaths {
        self.brokers.install_paths()
    }

    /// Stops the native brokers a previous agent on this node left running.
    pub(crate) async fn stop_leftovers(&self) -> Vec<String> {
        self.brokers.stop_leftovers().await
    }

    /// Brokers run as `config` says.
    pub(crate) fn with(config: BrokersConfig) -> Self {
        BrokerControl {
            brokers: Arc::new(Brokers::new(config)),
            leases: Arc::default(),
        }
    }

    pub(crate) async fn start(
        &self,
        request: pb::StartBrokerRequest,
    ) -> Result<pb::BrokerStatus, Status> {
        let spec = BrokerSpec::try_from(request.spec.ok_or_else(|| missing("spec"))?)?;
        let lease = request.lease.as_ref().map(lease_from).transpose()?;
        let name = spec.name.clone();
        // A forwarding hop is no broker: nothing to probe.
        let probed = !matches!(spec.kind, domain::BrokerKind::Forward { .. });
        let login = match spec.kind {
            domain::BrokerKind::Native { product }
            | domain::BrokerKind::Kubernetes { product, .. } => recipes::anonymous_login(product),
            _ => None,
        };
        let status = self.brokers.start(spec).await.map_err(from_broker)?;
        if let Some(ttl) = lease {
            self.leases.hold(&self.brokers, &name, ttl);
        }
        let mut message = status_to_message(&status);
        if let Some(address) = status.address.filter(|_| probed) {
            message.capabilities = probe(address, login)
                .await
                .map(|caps| pb::BrokerCapabilities::from(&caps));
            // The lease runs from the answer: the controller renews it only from then on.
            self.leases.renew(&name);
        }
        Ok(message)
    }

    /// Extends the lease of broker `name`.
    pub(crate) async fn renew(&self, name: &str) -> Result<pb::BrokerStatus, Status> {
        if !self.leases.renew(name) {
            return Err(Status::failed_precondition(format!(
                "broker {name} holds no lease (never started with one, or it ran out and the \
                 broker was stopped): start it again"
            )));
        }
        self.status(name).await
    }

    pub(crate) async fn stop(&self, name: &str) -> Result<pb::BrokerStatus, Status> {
        self.leases.release(name);
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

fn lease_from(value: &prost_types::Duration) -> Result<std::time::Duration, Status> {
    let lease = std::time::Duration::try_from(*value)
        .map_err(|_| invalid("lease", format!("{value:?} is negative")))?;
    if lease.is_zero() || lease > MAX_LEASE {
        return Err(invalid(
            "lease",
            format!("{lease:?} must be above zero and at most {MAX_LEASE:?}"),
        ));
    }
    Ok(lease)
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

/// Whole probe's bound: a broker that stalls it must not stall the run's deploy (the
/// controller allows this beyond its deploy timeout).
const PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// What the broker at `address` supports (plain MQTT over TCP, anonymous: with the login
/// its product's anonymous access asks for, if any); `None` when it could not be probed.
async fn probe(
    address: std::net::SocketAddr,
    login: Option<recipes::Login>,
) -> Option<loadgen::capabilities::Capabilities> {
    let mut target = loadgen::presets::latency().broker;
    target.host = address.ip().to_string();
    target.port = address.port();
    if let Some(login) = login {
        target.username = Some(login.username.to_string());
        target.password = Some(login.password.to_string());
    }
    let probed = tokio::time::timeout(
        PROBE_WITHIN,
        loadgen::probe::probe(&target, std::time::Duration::from_secs(3)),
    )
    .await;
    match probed {
        Ok(Some(caps)) => {
            tracing::info!(%address, capabilities = %caps.summary(), "broker probed");
            Some(caps)
        }
        _ => {
            tracing::warn!(%address, "the broker could not be probed");
            None
        }
    }
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
        websocket_address: status
            .websocket_address
            .map(|a| a.to_string())
            .unwrap_or_default(),
        pid: status.pid.unwrap_or(0),
        detail,
        capabilities: None,
        quic_address: status
            .quic
            .as_ref()
            .map(|quic| quic.address.to_string())
            .unwrap_or_default(),
        quic_ca_pem: status
            .quic
            .as_ref()
            .map(|quic| quic.ca_pem.clone())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn kubernetes(node: &str, namespace: &str, node_port: u32) -> pb::BrokerSpec {
        pb::BrokerSpec {
            name: "bench".into(),
            kind: Some(pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
                product: pb::Product::Vernemq.into(),
                node: node.into(),
                namespace: namespace.into(),
                node_port,
                on_every_node: false,
            })),
            // Ignored for Kubernetes brokers: the address is the node's NodePort.
            bind: String::new(),
            port: 0,
            options: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_broker_whose_lease_is_not_renewed_is_stopped() {
        let state = tempfile::tempdir().expect("temp dir");
        let control = BrokerControl::with(BrokersConfig {
            state_dir: state.path().to_owned(),
            ..BrokersConfig::default()
        });
        let embedded = pb::BrokerSpec {
            name: "leased".into(),
            kind: Some(pb::broker_spec::Kind::Embedded(pb::EmbeddedBroker {})),
            bind: "127.0.0.1".into(),
            port: 0,
            options: Default::default(),
        };
        let lease = Duration::from_millis(400);
        let started = control
            .start(pb::StartBrokerRequest {
                spec: Some(embedded),
                lease: prost_types::Duration::try_from(lease).ok(),
            })
            .await
            .expect("starts");
        let address: std::net::SocketAddr = started.address.parse().expect("an address");
        // Renewed, it outlives its lease several times over.
        for _ in 0..4 {
            tokio::time::sleep(lease / 2).await;
            control.renew("leased").await.expect("renewed");
        }
        assert!(
            tokio::net::TcpStream::connect(address).await.is_ok(),
            "still serving"
        );
        // Not renewed: stopped once the lease has run out, and a late renewal is refused.
        tokio::time::sleep(lease * 3).await;
        let status = control.status("leased").await.expect("known");
        assert_eq!(status.state(), pb::BrokerState::Stopped, "{status:?}");
        assert!(
            tokio::net::TcpStream::connect(address).await.is_err(),
            "stopped"
        );
        let late = control.renew("leased").await.expect_err("ran out");
        assert_eq!(late.code(), Code::FailedPrecondition);
        assert!(
            late.message().contains("holds no lease"),
            "{}",
            late.message()
        );
        // Leases are bounded like netem's.
        let too_long = pb::StartBrokerRequest {
            spec: Some(pb::BrokerSpec {
                name: "long".into(),
                kind: Some(pb::broker_spec::Kind::Embedded(pb::EmbeddedBroker {})),
                bind: "127.0.0.1".into(),
                port: 0,
                options: Default::default(),
            }),
            lease: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
        };
        let refused = control.start(too_long).await.expect_err("an hour");
        assert!(
            refused.message().starts_with("lease:"),
            "{}",
            refused.message()
        );
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
            on_every_node: false,
        }));
        let started = control
            .start(pb::StartBrokerRequest {
                spec: Some(request),
                lease: None,
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
            on_every_node: false,
        }));
        control_b
            .start(pb::StartBrokerRequest {
                spec: Some(other),
                lease: None,
            })
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
