//! What the run asks of a node's agent, in the run's own types: [`NodeAgent`]. The gRPC
//! implementation (`crate::agent_client`) converts these to and from the wire; the undo
//! tests put an in-memory stand-in (`memory.rs`) in front of real in-process agents, through
//! [`Testbed`].
//!
//! The run bounds each call with its own deadlines (they name what took too long), so a
//! [`NodeAgent`] only answers or fails.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use domain::{BrokerSpec, NetemParams, NodeRole};
use futures_util::Stream;
use loadgen::{RunResult, WorkloadSpec};

use crate::clock::ClockOffset;
use crate::results::NetemRecord;

#[cfg(test)]
pub(super) mod memory;

/// How often netem leases are renewed. Each renewal has the agent read its qdisc back, so a
/// netem lapse (an agent restarted, an interface recreated) fails the cell within about a
/// second.
pub const NETEM_RENEW_EVERY: Duration = Duration::from_secs(1);

/// The testbed as the run reaches it: each node's agent once the run connected to it, and
/// how often netem leases are renewed there.
pub trait Testbed: Send + Sync {
    /// The agent the run uses for `node`, whose agent it reached as `connected`.
    fn agent(&self, node: &str, connected: Agent) -> Agent;

    /// How often netem leases are renewed.
    fn netem_renewal(&self) -> Duration;
}

/// The testbed as it is: the agents the run connected to, netem renewed every second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Connected;

impl Testbed for Connected {
    fn agent(&self, _node: &str, connected: Agent) -> Agent {
        connected
    }

    fn netem_renewal(&self) -> Duration {
        NETEM_RENEW_EVERY
    }
}

/// An answer from an agent, to be awaited.
pub type Reply<'a, T> = Pin<Box<dyn Future<Output = Result<T, AgentError>> + Send + 'a>>;

/// A load under way on an agent: its result once the load ends.
pub type LoadResult = Pin<Box<dyn Future<Output = Result<RunResult, AgentError>> + Send>>;

/// Samples of a node and the processes it watches, until the stream ends.
pub type MetricsStream = Pin<Box<dyn Stream<Item = Result<MetricsSample, AgentError>> + Send>>;

/// A node's agent, as the run uses it.
pub type Agent = Arc<dyn NodeAgent>;

/// What the run asks of one node's agent.
pub trait NodeAgent: Send + Sync + fmt::Debug {
    /// What the node is and can do.
    fn info(&self) -> Reply<'_, NodeInfo>;

    /// The agent's clock against ours, from `exchanges` clock exchanges.
    fn clock(&self, exchanges: u32) -> Reply<'_, ClockOffset>;

    /// Starts `spec` under a lease of `lease` (renewed with [`NodeAgent::renew_broker`]).
    fn start_broker<'a>(&'a self, spec: &'a BrokerSpec, lease: Duration) -> Reply<'a, Started>;

    /// Renews the lease of the broker named `name`.
    fn renew_broker<'a>(&'a self, name: &'a str) -> Reply<'a, ()>;

    /// Stops the broker named `name`.
    fn stop_broker<'a>(&'a self, name: &'a str) -> Reply<'a, ()>;

    /// Applies `params` on the node's data-plane interface under a lease of `lease`.
    fn apply_netem<'a>(&'a self, params: &'a NetemParams, lease: Duration) -> Reply<'a, InForce>;

    /// Renews the netem lease; the agent reads its qdisc back and fails when netem went.
    fn renew_netem(&self) -> Reply<'_, ()>;

    /// Clears netem.
    fn clear_netem(&self) -> Reply<'_, ()>;

    /// Starts `load`; answered at once (the load itself may wait for its barrier), then its
    /// result when it ends. Dropping the result cancels the load.
    fn run_load(&self, load: Load) -> Reply<'_, LoadResult>;

    /// Samples of the node and of the broker named `broker`, every `interval`.
    fn metrics<'a>(&'a self, broker: &'a str, interval: Duration) -> Reply<'a, MetricsStream>;

    /// Installs (or finds running) the overlay as `install` says.
    fn install_overlay<'a>(&'a self, install: &'a OverlayInstall) -> Reply<'a, OverlayInstalled>;

    /// Installs (or finds running) the cluster's server or agent as `install` says.
    fn install_cluster<'a>(&'a self, install: &'a ClusterInstall) -> Reply<'a, ClusterInstalled>;
}

/// Why an agent did not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The node lacks what the request needs (a broker's product is not installed).
    #[error("{0}")]
    Unmet(String),
    /// The agent answered with an error, or could not be reached.
    #[error("{}", with_cause(.message, .cause.as_deref()))]
    Failed {
        /// What the agent (or the transport) said.
        message: String,
        /// The transport's underlying cause, when there is one.
        cause: Option<String>,
    },
    /// The agent's answer is not one the run can use.
    #[error("{0}")]
    Reply(String),
}

impl AgentError {
    /// What the agent said, without the transport's cause.
    pub fn message(&self) -> &str {
        match self {
            AgentError::Unmet(message)
            | AgentError::Failed { message, .. }
            | AgentError::Reply(message) => message,
        }
    }
}

fn with_cause(message: &str, cause: Option<&str>) -> String {
    match cause {
        Some(cause) => format!("{message}: {cause}"),
        None => message.to_string(),
    }
}

/// What a node's agent says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// The agent's configured node name.
    pub name: String,
    /// CPU architecture: x86_64, aarch64.
    pub arch: String,
    /// Logical cores.
    pub cores: u32,
    /// Memory.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// OS name and version.
    pub os: String,
    /// The agent's version.
    pub agent_version: String,
    /// The roles it has (roles this controller does not know are left out).
    pub roles: BTreeSet<NodeRole>,
    /// Whether netem can be applied, and why not; none when the agent did not say.
    pub netem: Option<Capability>,
    /// The broker products installed on the node, as its agent found them; `None` when the
    /// agent did not say (it is then found out when a broker is deployed).
    pub installed_brokers: Option<Vec<domain::Product>>,
}

/// Whether a node can do something, and its detail (a path, or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// It can.
    pub available: bool,
    /// A path, or why not.
    pub detail: String,
}

/// A broker an agent started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Where MQTT clients dial it.
    pub address: SocketAddr,
    /// Where WebSocket clients dial it, when it has such a listener.
    pub websocket: Option<SocketAddr>,
    /// Where QUIC clients dial it, and the CA of the certificate its agent made, when it has
    /// such a listener.
    pub quic: Option<(SocketAddr, String)>,
    /// What runs (product, process or image, node).
    pub detail: String,
    /// What the broker supports, as its agent probed it; `None` when it could not.
    pub capabilities: Option<loadgen::capabilities::Capabilities>,
}

/// netem as a node's kernel holds it after an apply.
#[derive(Debug, Clone, PartialEq)]
pub struct InForce {
    /// The interface it is on.
    pub interface: String,
    /// What the kernel read back; none when it holds no netem.
    pub read_back: Option<NetemRecord>,
}

/// A load for one agent: the workload (or its shard), on a timeline shared by the agents of
/// the cell.
#[derive(Debug, Clone)]
pub struct Load {
    /// The workload.
    pub spec: WorkloadSpec,
    /// The timeline's origin on the agent's clock, Unix ns; 0 to start at once.
    pub origin_unix_ns: u64,
    /// The barrier, ns after the origin.
    pub start_at_ns: u64,
    /// What the load measures (run, cell, broker, ...), for the agent's metrics.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// One sample of a node's metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSample {
    /// When it was taken, Unix ns on the agent's clock.
    pub unix_ns: u64,
    /// CPU busy, percent of all cores.
    pub cpu_percent: f64,
    /// Memory in use.
    pub memory_used_bytes: u64,
    /// The processes watched.
    pub processes: Vec<ProcessSample>,
}

/// One watched process in a [`MetricsSample`].
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSample {
    /// What it is watched as (a broker's name).
    pub label: String,
    /// CPU, percent of one core.
    pub cpu_percent: f64,
    /// Resident memory.
    pub rss_bytes: u64,
    /// False once it is gone.
    pub alive: bool,
}

/// Installing the overlay on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayInstall {
    /// This node is the lighthouse.
    pub lighthouse: bool,
    /// Its overlay address with prefix.
    pub overlay_cidr: String,
    /// The lighthouses a member joins (none for the lighthouse).
    pub lighthouses: Vec<Lighthouse>,
    /// Nebula's UDP port.
    pub listen_port: u16,
    /// The tun device's name.
    pub interface: String,
    /// Overlay addresses that must answer through the tunnel.
    pub check_reachable: Vec<String>,
    /// How long the install and its check may take.
    pub timeout: Duration,
}

/// A lighthouse a member joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lighthouse {
    /// Its overlay address.
    pub overlay_ip: String,
    /// host:port of its Nebula listener on the underlay.
    pub underlay_address: String,
}

/// The overlay on a node after an install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayInstalled {
    /// Its overlay address with prefix.
    pub overlay_cidr: String,
    /// What changed.
    pub detail: String,
    /// The peers checked.
    pub peers: Vec<Peer>,
}

/// An overlay peer, checked through the tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its overlay address.
    pub overlay_ip: String,
    /// It answered.
    pub reachable: bool,
    /// The round trip, or why it failed.
    pub detail: String,
}

/// Installing the cluster on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInstall {
    /// Server or agent.
    pub role: ClusterRole,
    /// The cluster's shared secret.
    pub token: String,
    /// The node's address in the cluster.
    pub node_ip: String,
    /// The interface flannel uses.
    pub flannel_interface: String,
    /// Its Kubernetes node name.
    pub node_name: String,
    /// How long the install may take.
    pub timeout: Duration,
}

/// What a node is in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRole {
    /// The server; `schedule_workloads: false` taints it so workloads stay off it.
    Server {
        /// Workloads may run on it.
        schedule_workloads: bool,
    },
    /// An agent joining the server at `server_url`.
    Agent {
        /// https://<server>:6443
        server_url: String,
    },
}

/// The cluster on a node after an install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInstalled {
    /// What changed.
    pub detail: String,
    /// The cluster's nodes as the server lists them (a server's answer only).
    pub nodes: Vec<ClusterMember>,
}

/// A node as the cluster's server lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMember {
    /// Its name.
    pub name: String,
    /// It is Ready.
    pub ready: bool,
    /// Its address in the cluster.
    pub internal_ip: String,
    /// Its taints, as key=value:effect.
    pub taints: Vec<String>,
}
