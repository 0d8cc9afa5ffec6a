//! `manifest.json`: everything needed to reproduce and defend a run.

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

/// One node as the run found it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Node name.
    pub name: String,
    /// Agent address, or "local".
    pub agent: String,
    /// Architecture, cores, memory, kernel, OS, agent version.
    pub arch: String,
    /// Logical cores.
    pub cores: u32,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// OS.
    pub os: String,
    /// Agent version.
    pub agent_version: String,
    /// netem available, and why not.
    pub netem: String,
    /// Agent clock minus controller clock, ns.
    pub clock_offset_ns: i64,
    /// The offset is exact within this, ns.
    pub clock_error_bound_ns: u64,
}

/// A scenario as applied on one node, read back from its kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedNetem {
    /// Broker being measured.
    pub broker: String,
    /// Scenario.
    pub scenario: String,
    /// Node.
    pub node: String,
    /// Interface.
    pub interface: String,
    /// What was asked, e.g. `delay 1.25ms jitter 0.25ms loss 0.02%`.
    pub asked: String,
    /// What the kernel holds.
    pub read_back: String,
}

/// The run's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The plan as run (defaults filled in).
    pub plan: Plan,
    /// The plan file's text, verbatim.
    pub plan_text: String,
    /// Controller version.
    pub controller_version: String,
    /// When the run started, Unix ms.
    pub started_unix_ms: u64,
    /// Nodes and their clocks.
    pub nodes: Vec<NodeRecord>,
    /// netem applied per broker, scenario and node.
    pub netem: Vec<AppliedNetem>,
    /// Scenarios skipped and why (e.g. no netem on a node).
    pub skipped: Vec<String>,
    /// The overlay and cluster phases 2 and 3 found or brought up (absent when the plan
    /// asks for neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testbed: Option<TestbedRecord>,
    /// Each broker as it was deployed (the last deployment, on a resumed run).
    #[serde(default)]
    pub brokers: Vec<BrokerRecord>,
}

/// A broker as the agent that started it described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerRecord {
    /// The plan's broker name.
    pub name: String,
    /// The node whose agent deployed it (the headnode for a kubernetes broker).
    pub node: String,
    /// Where clients dialled it.
    pub address: String,
    /// What runs: product and process, or image, Deployment and node.
    pub detail: String,
}

/// What phases 2 and 3 left running, as the agents reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TestbedRecord {
    /// Nebula on each node.
    pub overlay: Vec<OverlayRecord>,
    /// The k3s cluster as its server lists it.
    pub cluster: Option<ClusterRecord>,
}

/// Nebula on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverlayRecord {
    /// Node.
    pub node: String,
    /// Lighthouse or member.
    pub lighthouse: bool,
    /// Its overlay address with prefix.
    pub overlay_cidr: String,
    /// What the installer did ("started", "already running").
    pub detail: String,
    /// Overlay peers checked from this node: address, reachable, round trip or why not.
    pub peers: Vec<(String, bool, String)>,
}

/// The k3s cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterRecord {
    /// The server (headnode).
    pub server: String,
    /// Nodes as the server lists them: name, Ready, internal IP, taints.
    pub nodes: Vec<(String, bool, String, Vec<String>)>,
}
