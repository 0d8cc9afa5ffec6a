//! `manifest.json`: everything needed to reproduce and defend a run.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use proto::agent::v1 as pb;
use serde::{Deserialize, Serialize};

use super::ResultsError;
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
    /// What was asked.
    pub asked: NetemRecord,
    /// What the node's kernel held after applying it; `None` when it held no netem.
    pub read_back: Option<NetemRecord>,
}

impl AppliedNetem {
    /// What the kernel held, as shown in reports: its netem, or `nothing`.
    pub fn read_back_text(&self) -> String {
        self.read_back
            .as_ref()
            .map_or_else(|| "nothing".to_string(), NetemRecord::to_string)
    }
}

/// netem parameters as numbers with their unit. Delays are in ns: the kernel holds them in
/// 64 ns ticks, so what it reads back (1.249984 ms for 1.25 ms) is not a whole µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetemRecord {
    /// Delay added to every packet leaving the interface, ns.
    pub delay_ns: u64,
    /// Random variation of the delay, ns.
    pub jitter_ns: u64,
    /// Share of packets dropped, percent.
    pub loss_percent: f64,
    /// Egress rate limit, bytes per second; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_sec: Option<u64>,
    /// netem's queue length, packets; the kernel's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_packets: Option<u32>,
    /// Losses in bursts (Gilbert-Elliott) instead of `loss_percent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gilbert_elliott: Option<domain::GilbertElliott>,
}

impl NetemRecord {
    /// The record of a netem spec as sent to or read back from an agent (an absent delay
    /// or jitter is none).
    pub fn of(spec: &pb::NetemSpec) -> Self {
        let ns = |d: &Option<prost_types::Duration>| {
            d.and_then(|d| Duration::try_from(d).ok())
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        };
        NetemRecord {
            delay_ns: ns(&spec.delay),
            jitter_ns: ns(&spec.jitter),
            loss_percent: spec.loss_percent,
            rate_bytes_per_sec: spec.rate_bytes_per_sec,
            limit_packets: spec.limit_packets,
            gilbert_elliott: spec
                .gilbert_elliott
                .as_ref()
                .map(|model| domain::GilbertElliott {
                    p_percent: model.p_percent,
                    r_percent: model.r_percent,
                    bad_loss_percent: model.bad_loss_percent,
                    good_loss_percent: model.good_loss_percent,
                }),
        }
    }

    /// The delay.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns)
    }
}

/// `delay 1.25ms jitter 0.25ms loss 0.02%`, as the report shows it; a loss model as
/// `loss gemodel p 5% r 50% 1-h 100% 1-k 0% (mean 9.090909% per egress)`: the model runs on
/// each egress a message crosses, so a message crossing two loses about twice that.
impl fmt::Display for NetemRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The kernel holds chances as fractions of 2^32: 0.05 reads back as 0.0500000082.
        let shown = |percent: f64| (percent * 1e6).round() / 1e6;
        write!(
            f,
            "delay {}ms jitter {}ms ",
            self.delay_ns as f64 / 1e6,
            self.jitter_ns as f64 / 1e6,
        )?;
        match &self.gilbert_elliott {
            None => write!(f, "loss {}%", shown(self.loss_percent)),
            Some(model) => write!(
                f,
                "loss gemodel p {}% r {}% 1-h {}% 1-k {}% (mean {}% per egress)",
                shown(model.p_percent),
                shown(model.r_percent),
                shown(model.bad_loss_percent),
                shown(model.good_loss_percent),
                shown(model.mean_loss_percent()),
            ),
        }
    }
}

/// The run's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The plan as run (defaults filled in); written with its secrets redacted.
    #[serde(serialize_with = "plan_without_secrets")]
    pub plan: Plan,
    /// The plan file's text, verbatim but for its secrets, which are redacted when written.
    #[serde(serialize_with = "text_without_secrets")]
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
    /// The nodes each broker's messages visit under each test's load (the emulation check
    /// adds up their egresses).
    #[serde(default)]
    pub paths: Vec<PathRecord>,
    /// Every cell of this folder has its `record.json`, which a report reads; false for a
    /// folder written before records (or resumed from one), read from `summary.csv`.
    #[serde(default)]
    pub cell_records: bool,
}

/// The path of one broker's messages under one test's load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRecord {
    /// The plan's broker name.
    pub broker: String,
    /// The test's index in the plan.
    pub test: usize,
    /// The nodes, publisher first and subscriber last.
    #[serde(flatten)]
    pub path: crate::plan::MessagePath,
}

impl PathRecord {
    /// Every broker's path under every test of `plan`, for the brokers that run on a node.
    pub fn of_plan(plan: &crate::plan::Plan) -> Vec<Self> {
        (0..plan.brokers.len())
            .flat_map(|broker| (0..plan.tests.len()).map(move |test| (broker, test)))
            .filter_map(|(broker, test)| {
                Some(Self {
                    broker: plan.brokers[broker].name.clone(),
                    test,
                    path: crate::plan::MessagePath::of(plan, broker, test)?,
                })
            })
            .collect()
    }
}

/// A results folder is shared and published, so the manifest never holds a password: the
/// run keeps the real plan in memory (its cells connect with it) and writes this one.
fn plan_without_secrets<S: serde::Serializer>(
    plan: &Plan,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    plan.redacted().serialize(serializer)
}

fn text_without_secrets<S: serde::Serializer>(
    text: &str,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&crate::plan::redact_plan_text(text))
}

impl Manifest {
    /// Reads `manifest.json`; a field this version does not read (an older folder's) is
    /// named by its path, e.g. `netem[0].asked`. A folder written before secrets were
    /// redacted is read without them, so a report rebuilt from it does not print them.
    pub fn read(path: &Path) -> Result<Manifest, ResultsError> {
        let text = super::in_place::read_in_place(path, super::folder::MAX_MANIFEST_BYTES)?;
        let mut json = serde_json::Deserializer::from_str(&text);
        let manifest: Manifest =
            serde_path_to_error::deserialize(&mut json).map_err(|error| ResultsError::Format {
                path: path.display().to_string(),
                problem: format!("{}: {}", error.path(), error.inner()),
            })?;
        Ok(Manifest {
            plan: manifest.plan.redacted(),
            plan_text: crate::plan::redact_plan_text(&manifest.plan_text),
            ..manifest
        })
    }
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
    /// Where WebSocket clients dialled it, when it had such a listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket_address: Option<String>,
    /// Where QUIC clients dialled it (UDP), when it had such a listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_address: Option<String>,
    /// What runs: product and process, or image, Deployment and node.
    pub detail: String,
    /// What it supports, as probed when it was started; absent for an external broker or
    /// one that could not be probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<loadgen::capabilities::Capabilities>,
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
    /// Overlay peers checked from this node.
    pub peers: Vec<OverlayPeer>,
}

/// An overlay peer as one node checked it through the tunnel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayPeer {
    /// The peer's overlay address.
    pub address: String,
    /// It answered.
    pub reachable: bool,
    /// The round trip, or why not.
    pub detail: String,
}

/// The k3s cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterRecord {
    /// The server (headnode).
    pub server: String,
    /// Nodes as the server lists them.
    pub nodes: Vec<ClusterNode>,
}

/// A k3s node as the server lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    /// Node name.
    pub name: String,
    /// Ready.
    pub ready: bool,
    /// Its internal IP.
    pub internal_ip: String,
    /// Its taints, `key=value:Effect`.
    pub taints: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_reads_as_the_report_shows_it() {
        let spec = pb::NetemSpec {
            delay: prost_types::Duration::try_from(Duration::from_nanos(1_249_984)).ok(),
            jitter: prost_types::Duration::try_from(Duration::from_micros(250)).ok(),
            loss_percent: 0.050_000_008_2,
            rate_bytes_per_sec: None,
            limit_packets: Some(1000),
            gilbert_elliott: None,
        };
        let record = NetemRecord::of(&spec);
        assert_eq!((record.delay_ns, record.jitter_ns), (1_249_984, 250_000));
        assert_eq!(
            record.to_string(),
            "delay 1.249984ms jitter 0.25ms loss 0.05%"
        );
        assert_eq!(record.delay(), Duration::from_nanos(1_249_984));

        // A loss model read back: the kernel's 1-h of 70 % is 69.99999998 %.
        let bursts = pb::NetemSpec {
            loss_percent: 0.0,
            gilbert_elliott: Some(pb::GilbertElliott {
                p_percent: 5.000_000_004,
                r_percent: 50.0,
                bad_loss_percent: 69.999_999_98,
                good_loss_percent: 0.0,
            }),
            ..spec
        };
        assert_eq!(
            NetemRecord::of(&bursts).to_string(),
            "delay 1.249984ms jitter 0.25ms loss gemodel p 5% r 50% 1-h 70% 1-k 0% (mean 6.363636% per egress)"
        );
    }

    #[test]
    fn an_older_manifest_names_the_field_it_cannot_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("manifest.json");
        let plan = crate::plan::Plan::parse(
            "name = \"p\"\nnodes = [{ name = \"n\", agent = \"local\", roles = [\"loadgen\", \"broker\"] }]\n\
             brokers = [{ name = \"b\", kind = \"embedded\", node = \"n\" }]\n\
             scenarios = [{ name = \"local\" }]\ntests = [{ kind = \"latency\", loadgen = [\"n\"] }]\n",
            "plan.toml",
        )
        .expect("plan");
        let mut json = serde_json::to_value(Manifest {
            plan,
            plan_text: String::new(),
            controller_version: "0.1.0".into(),
            started_unix_ms: 0,
            nodes: Vec::new(),
            netem: Vec::new(),
            skipped: Vec::new(),
            testbed: None,
            brokers: Vec::new(),
            paths: Vec::new(),
            cell_records: true,
        })
        .expect("json");
        json["netem"] = serde_json::json!([{
            "broker": "b", "scenario": "edge", "node": "n", "interface": "eth0",
            "asked": "delay 1.25ms jitter 0.25ms loss 0.02%", "read_back": "nothing"
        }]);
        std::fs::write(&path, json.to_string()).expect("write");
        let error = Manifest::read(&path).expect_err("string netem").to_string();
        assert!(
            error.contains("manifest.json: netem[0].asked: invalid type: string"),
            "{error}"
        );
    }
}
