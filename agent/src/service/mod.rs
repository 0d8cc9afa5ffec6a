//! The agent's gRPC service: each RPC checks who calls (mTLS identity and role), checks the
//! request in full, then acts. Read RPCs are open to the controller and client identities of
//! the project's CA (never to another agent); RPCs that change the node need the controller's
//! identity. At start it undoes what a predecessor that died left behind (recorded netem,
//! marked broker processes).
//!
//! - `node.rs`: Info and Clock; `metrics.rs`: the Metrics stream; `netem.rs`: the netem RPCs
//!   and their leases; `brokers.rs`: the broker RPCs, with `broker_leases.rs` for brokers
//!   started under a lease; `load.rs`: RunLoad and its budget; `slots.rs`: bounds on what runs
//!   at once; `access.rs`: who may call what; `status.rs`: errors as gRPC statuses.
//! - `exposition.rs`: the page `metrics_listen` serves, with `load_board.rs`: the loads
//!   running and ended lately, under the labels the controller gave them.

mod access;
mod broker_leases;
mod brokers;
mod exposition;
mod load;
mod load_board;
mod metrics;
mod netem;
mod node;
mod slots;
mod status;

use std::pin::Pin;
use std::sync::Arc;

use proto::agent::v1 as pb;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use self::access::{Access, authorize};
use self::brokers::BrokerControl;
use self::netem::NetemControl;
use crate::install::k3s::K3s;
use crate::install::nebula::Nebula;
use domain::{AgentConfig, NodeRole};

pub use self::exposition::METRIC_NAMES;
pub use self::netem::MAX_LEASE;

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The agent's state behind the RPCs.
pub struct AgentService {
    config: Arc<AgentConfig>,
    capabilities: pb::Capabilities,
    netem: NetemControl,
    brokers: BrokerControl,
    overlay: Nebula,
    cluster: K3s,
    /// The loads running and ended lately, for the metrics listener.
    loads: Arc<load_board::LoadBoard>,
    /// Fired at shutdown: running loads stop.
    shutdown: CancellationToken,
}

impl std::fmt::Debug for AgentService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentService")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl AgentService {
    /// Probes the node's capabilities, opens rtnetlink in the current network namespace, and
    /// undoes what a previous agent on this node left behind when it died: its recorded netem
    /// is cleared and its native brokers are stopped.
    pub async fn new(config: AgentConfig) -> Self {
        let netem = match crate::netem::Netem::connect() {
            Ok(netem) => Some(netem),
            Err(error) => {
                tracing::warn!(%error, "rtnetlink unavailable: the netem RPCs will refuse");
                None
            }
        };
        let config = Arc::new(config);
        let netem = NetemControl::new(netem, config.data_plane_interface.clone())
            .with_listen_address(config.listen.ip())
            .with_records(crate::netem::Records::new(&config.state_dir));
        netem.clear_stale().await;
        let brokers = BrokerControl::new(&config);
        brokers.stop_leftovers().await;
        let capabilities = node::probe_capabilities(brokers.install_paths()).await;
        AgentService {
            overlay: Nebula::new(&config),
            cluster: K3s::new(&config),
            netem,
            brokers,
            capabilities,
            config,
            loads: Arc::default(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Undoes what the agent did: stops loads, clears netem, stops brokers, then stops the
    /// k3s and Nebula children it supervises (units under systemd stay: they are installed).
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.netem.clear_all().await;
        self.brokers.stop_all().await;
        // k3s and Nebula stop independently; together within the longer of their bounds.
        tokio::join!(self.cluster.shutdown(), self.overlay.shutdown());
    }

    fn require(&self, role: NodeRole) -> Result<(), Status> {
        if self.config.has_role(role) {
            Ok(())
        } else {
            Err(status::unable(format!(
                "node {} does not have the {} role",
                self.config.name,
                role.as_str()
            )))
        }
    }
}

#[tonic::async_trait]
impl pb::agent_server::Agent for AgentService {
    #[tracing::instrument(skip_all)]
    async fn info(
        &self,
        request: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::NodeInfo>, Status> {
        authorize(&request, Access::Read)?;
        // Brokers looked for again at every call: one installed since the agent started
        // counts at once.
        let mut capabilities = self.capabilities.clone();
        capabilities.brokers = node::installed_brokers(self.brokers.install_paths());
        Ok(Response::new(node::node_info(&self.config, &capabilities)))
    }

    async fn clock(
        &self,
        request: Request<pb::ClockRequest>,
    ) -> Result<Response<pb::ClockReply>, Status> {
        // t2 first: the authorization check must not count as network delay.
        let received = loadgen::clock::unix_now_ns();
        authorize(&request, Access::Read)?;
        Ok(Response::new(node::clock_reply(
            request.get_ref(),
            received,
        )))
    }

    type MetricsStream = EventStream<pb::MetricsSample>;

    #[tracing::instrument(skip_all)]
    async fn metrics(
        &self,
        request: Request<pb::MetricsRequest>,
    ) -> Result<Response<Self::MetricsStream>, Status> {
        authorize(&request, Access::Read)?;
        let reader = metrics::Reader::of(&request)?;
        let request = request.into_inner();
        let interval = metrics::interval_of(&request)?;
        let samples = metrics::samples_of(&request, interval)?;
        metrics::check_watched(&request)?;
        let mut watched: Vec<metrics::Watched> = request
            .pids
            .iter()
            .map(|pid| metrics::Watched::process(*pid, format!("pid {pid}")))
            .collect();
        for name in &request.brokers {
            watched.push(self.brokers.watched(name).await?);
        }
        Ok(Response::new(Box::pin(metrics::stream(
            &reader, interval, samples, watched,
        )?)))
    }

    #[tracing::instrument(skip_all, fields(interface = %request.get_ref().interface))]
    async fn apply_netem(
        &self,
        request: Request<pb::ApplyNetemRequest>,
    ) -> Result<Response<pb::NetemState>, Status> {
        authorize(&request, Access::Change)?;
        self.require(NodeRole::Netem)?;
        Ok(Response::new(self.netem.apply(request.into_inner()).await?))
    }

    async fn renew_netem(
        &self,
        request: Request<pb::RenewNetemRequest>,
    ) -> Result<Response<pb::NetemState>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(self.netem.renew(request.into_inner()).await?))
    }

    async fn read_netem(
        &self,
        request: Request<pb::ReadNetemRequest>,
    ) -> Result<Response<pb::NetemState>, Status> {
        authorize(&request, Access::Read)?;
        Ok(Response::new(self.netem.read(request.into_inner()).await?))
    }

    #[tracing::instrument(skip_all, fields(interface = %request.get_ref().interface))]
    async fn clear_netem(
        &self,
        request: Request<pb::ClearNetemRequest>,
    ) -> Result<Response<pb::NetemState>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(self.netem.clear(request.into_inner()).await?))
    }

    #[tracing::instrument(skip_all)]
    async fn start_broker(
        &self,
        request: Request<pb::StartBrokerRequest>,
    ) -> Result<Response<pb::BrokerStatus>, Status> {
        authorize(&request, Access::Change)?;
        self.require(NodeRole::Broker)?;
        Ok(Response::new(
            self.brokers.start(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(skip_all, fields(name = %request.get_ref().name))]
    async fn renew_broker(
        &self,
        request: Request<pb::RenewBrokerRequest>,
    ) -> Result<Response<pb::BrokerStatus>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(
            self.brokers.renew(&request.into_inner().name).await?,
        ))
    }

    #[tracing::instrument(skip_all, fields(name = %request.get_ref().name))]
    async fn stop_broker(
        &self,
        request: Request<pb::StopBrokerRequest>,
    ) -> Result<Response<pb::BrokerStatus>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(
            self.brokers.stop(&request.into_inner().name).await?,
        ))
    }

    async fn get_broker(
        &self,
        request: Request<pb::GetBrokerRequest>,
    ) -> Result<Response<pb::BrokerStatus>, Status> {
        authorize(&request, Access::Read)?;
        Ok(Response::new(
            self.brokers.status(&request.into_inner().name).await?,
        ))
    }

    type RunLoadStream = EventStream<pb::RunLoadEvent>;

    #[tracing::instrument(skip_all)]
    async fn run_load(
        &self,
        request: Request<pb::RunLoadRequest>,
    ) -> Result<Response<Self::RunLoadStream>, Status> {
        authorize(&request, Access::Change)?;
        self.require(NodeRole::Loadgen)?;
        let stream = load::start(
            request.into_inner(),
            self.shutdown.clone(),
            &self.loads,
            &self.config.name,
        )?;
        Ok(Response::new(Box::pin(stream)))
    }

    #[tracing::instrument(skip_all)]
    async fn install_overlay(
        &self,
        request: Request<pb::InstallOverlayRequest>,
    ) -> Result<Response<pb::OverlayStatus>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(
            self.overlay.install(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(skip_all)]
    async fn uninstall_overlay(
        &self,
        request: Request<pb::UninstallOverlayRequest>,
    ) -> Result<Response<pb::OverlayStatus>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(self.overlay.uninstall().await?))
    }

    #[tracing::instrument(skip_all)]
    async fn install_cluster(
        &self,
        request: Request<pb::InstallClusterRequest>,
    ) -> Result<Response<pb::ClusterStatus>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(
            self.cluster.install(request.into_inner()).await?,
        ))
    }

    #[tracing::instrument(skip_all)]
    async fn uninstall_cluster(
        &self,
        request: Request<pb::UninstallClusterRequest>,
    ) -> Result<Response<pb::ClusterStatus>, Status> {
        authorize(&request, Access::Change)?;
        Ok(Response::new(self.cluster.uninstall().await?))
    }
}
