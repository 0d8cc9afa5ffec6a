//! The plan's serde tree.

use std::path::PathBuf;
use std::time::Duration;

use loadgen::size::ByteSize;
use serde::{Deserialize, Serialize};

pub use super::kinds::TestKind;

/// A whole study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Name of the study; the results folder is `<results_dir>/<name>-<time>`.
    pub name: String,
    /// Every test is repeated this many times (the study: at least 10).
    #[serde(default = "one")]
    pub repetitions: u32,
    /// Where results go.
    #[serde(default = "default_results_dir")]
    pub results_dir: PathBuf,
    /// What a failed cell does to the run.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// In what order a broker's cells run: each scenario's together, or the scenarios in
    /// turn once per repetition.
    #[serde(default)]
    pub order: CellOrder,
    /// Folder with the PKI (`ca.pem`, `controller.pem`, `controller.key`) for remote agents.
    #[serde(default)]
    pub pki_dir: Option<PathBuf>,
    /// Per-phase deadlines.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Live metrics of the run in Prometheus' text format, when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsEntry>,
    /// Phases 2 and 3 of the study: the overlay and the cluster brokers run on.
    #[serde(default)]
    pub testbed: TestbedEntry,
    /// The testbed's nodes.
    pub nodes: Vec<NodeEntry>,
    /// Brokers to measure, one after the other.
    pub brokers: Vec<BrokerEntry>,
    /// Network scenarios, applied one after the other for each broker.
    pub scenarios: Vec<ScenarioEntry>,
    /// Tests run in each scenario.
    pub tests: Vec<TestEntry>,
}

fn one() -> u32 {
    1
}

/// `[metrics]`: where the controller serves the run's metrics (`GET /metrics`, Prometheus'
/// text format, plain HTTP): give a loopback or management address a Prometheus server
/// reaches, never one the testbed's traffic or untrusted hosts reach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsEntry {
    /// `IP:PORT` to listen on, e.g. `127.0.0.1:9464`.
    #[serde(deserialize_with = "metrics_listen")]
    pub listen: std::net::SocketAddr,
    /// How long the listener stays up after the run, so that a scrape sees its last cells
    /// (at most 10 minutes; Ctrl-C ends it early).
    #[serde(default, with = "humantime_serde")]
    pub linger: Duration,
}

fn default_results_dir() -> PathBuf {
    PathBuf::from("results")
}

/// What a failed cell does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Mark the cell failed and go on.
    #[default]
    Continue,
    /// Stop the run (after undoing netem and brokers).
    Stop,
}

/// In what order a broker's cells run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellOrder {
    /// Each scenario's cells together: netem applied once per scenario.
    #[default]
    Grouped,
    /// Repetition 1 of every scenario, then repetition 2 of every scenario, ...: netem is
    /// applied once per scenario and repetition, and a drift of the machine over the run
    /// (another job starting, a CPU's clock) falls on every scenario alike instead of on
    /// whichever ran last, so each repetition compares scenarios measured minutes apart.
    Interleaved,
}

/// Deadlines of the phases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Connecting to an agent and reading its Info.
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    /// Starting a broker until it answers MQTT.
    #[serde(with = "humantime_serde")]
    pub deploy: Duration,
    /// Applying and verifying netem.
    #[serde(with = "humantime_serde")]
    pub netem: Duration,
    /// One test cell (connect, load, drain).
    #[serde(with = "humantime_serde")]
    pub cell: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            deploy: Duration::from_secs(120),
            netem: Duration::from_secs(30),
            cell: Duration::from_secs(600),
        }
    }
}

/// What a node may be asked to do: the agent's own roles, so plan and agent agree.
pub use domain::NodeRole;

/// The `agent` of a node emulated in a network namespace on this machine.
pub const NAMESPACE_AGENT: &str = "namespace";
/// The `agent` of a node whose agent the controller starts itself on loopback.
pub const LOCAL_AGENT: &str = "local";

/// Where a node's agent is: written in the plan as `"local"`, `"namespace"` or `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum AgentAt {
    /// An agent the controller starts itself on loopback.
    Local,
    /// A node this machine emulates in a network namespace of its own, with its agent inside
    /// (root needed, and sch_netem for impaired scenarios).
    Namespace,
    /// An agent reached over the network with the plan's PKI, at `host:port` as written
    /// (validation checks the port and names the field).
    Remote(String),
}

impl AgentAt {
    /// The host of a remote agent's `host:port` (brackets of an IPv6 address kept), or the
    /// whole address when it has no port.
    pub fn remote_host(&self) -> Option<&str> {
        match self {
            AgentAt::Remote(address) => Some(
                address
                    .rsplit_once(':')
                    .map_or(address.as_str(), |(host, _)| host),
            ),
            AgentAt::Local | AgentAt::Namespace => None,
        }
    }
}

impl From<String> for AgentAt {
    fn from(written: String) -> Self {
        match written.as_str() {
            LOCAL_AGENT => AgentAt::Local,
            NAMESPACE_AGENT => AgentAt::Namespace,
            _ => AgentAt::Remote(written),
        }
    }
}

impl From<AgentAt> for String {
    fn from(agent: AgentAt) -> Self {
        agent.to_string()
    }
}

impl std::fmt::Display for AgentAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AgentAt::Local => LOCAL_AGENT,
            AgentAt::Namespace => NAMESPACE_AGENT,
            AgentAt::Remote(address) => address,
        })
    }
}
/// Most nodes one machine emulates: /30 links in one /24.
pub const MAX_EMULATED_NODES: usize = 63;

/// A node of the testbed and how to reach its agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// Node name (as in its agent's certificate).
    pub name: String,
    /// Where its agent is: `host:port`, `"local"` or `"namespace"`.
    pub agent: AgentAt,
    /// Roles the plan uses it for.
    pub roles: Vec<NodeRole>,
    /// Address brokers on this node listen on and clients dial (data plane); for a local
    /// node, 127.0.0.1 when absent. An IP address, checked where the plan is read.
    #[serde(default, deserialize_with = "data_address")]
    pub data_address: Option<std::net::IpAddr>,
    /// The node's overlay address with prefix (`198.19.0.2/24`, as in its Nebula
    /// certificate); required on every node when `testbed.overlay = "nebula"`.
    #[serde(default)]
    pub overlay_ip: Option<String>,
}

/// `metrics.listen`, refused with its value when it is not `IP:PORT` (the TOML error adds the
/// file and line).
fn metrics_listen<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<std::net::SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "metrics.listen = {text:?}: not IP:PORT (e.g. \"127.0.0.1:9464\")"
        ))
    })
}

/// A node's `data_address`, refused with its value when it is not an IP address (the TOML
/// error adds the file and line).
fn data_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<std::net::IpAddr>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    text.parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!("data_address = {text:?}: not an IP address"))
    })
}

impl NodeEntry {
    /// True for an agent the controller starts in-process.
    pub fn is_local(&self) -> bool {
        self.agent == AgentAt::Local
    }

    /// True for a node emulated in a network namespace on this machine.
    pub fn is_namespace(&self) -> bool {
        self.agent == AgentAt::Namespace
    }

    /// True for an agent reached over the network with the plan's PKI.
    pub fn is_remote(&self) -> bool {
        matches!(self.agent, AgentAt::Remote(_))
    }
}

/// How a broker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BrokerKind {
    /// An installed binary with a generated configuration.
    Native,
    /// The Rust broker inside the agent.
    Embedded,
    /// Already running elsewhere; only its address is known.
    External,
    /// A pinned official image on the k3s cluster (`testbed.orchestrator = "k3s"`),
    /// deployed through the headnode's agent and pinned to `node`; `port` is its NodePort.
    Kubernetes,
}

/// A broker to measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerEntry {
    /// Name in results and figures.
    pub name: String,
    /// How it runs.
    pub kind: BrokerKind,
    /// Product for native and kubernetes brokers (`domain::Product`; kubernetes takes those
    /// with a pinned image).
    #[serde(default)]
    pub product: Option<String>,
    /// Node it runs on (native, embedded, kubernetes). An external broker may name the node
    /// it runs on too: that node's agent then emulates the broker's end of each impaired
    /// link (it deploys nothing); without it an impaired scenario has no link to emulate.
    #[serde(default)]
    pub node: Option<String>,
    /// MQTT port; 0 or absent = a free one.
    #[serde(default)]
    pub port: u16,
    /// `host:port` of an external broker.
    #[serde(default)]
    pub address: Option<String>,
    /// The node clients dial to reach it; absent: its own node (the direct path, the better
    /// measurement). Through another node a message crosses two more emulated egresses: a
    /// kubernetes broker is entered through that cluster node's NodePort, which kube-proxy
    /// forwards to the pod and back (`entry = "headnode"`, as the study's tests did); for a
    /// native or embedded broker the entry node's agent runs a forwarding hop (a TCP relay,
    /// tens of microseconds of its own besides the links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// Skip (with a note in the report) instead of failing when the product is not installed.
    #[serde(default)]
    pub optional: bool,
    /// The port of its MQTT-over-WebSocket listener: bound on its node (native) or a
    /// NodePort (kubernetes). Absent: a free port (a default NodePort), opened when a test
    /// of the plan speaks WebSocket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket_port: Option<u16>,
    /// `host:port` of an external broker's WebSocket listener, for tests that speak
    /// WebSocket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket_address: Option<String>,
    /// `host:port` (UDP) of an external broker's MQTT-over-QUIC listener, for tests that
    /// speak QUIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_address: Option<String>,
    /// Where a native mqttv5 broker's QUIC listener delivers PUBLISH: `control_only` (on each
    /// client's one stream, the default), `per_topic` or `per_publish` (on streams the broker
    /// opens, which only tests with `quic_streams` other than `single` read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_delivery: Option<domain::QuicDelivery>,
}

impl BrokerEntry {
    /// The product, for native and kubernetes brokers (validation made sure it is known).
    pub fn product(&self) -> Option<domain::Product> {
        self.product.as_deref().and_then(|name| name.parse().ok())
    }

    /// The broker as its kind has it: the fields that kind needs, typed. `None` only for an
    /// entry that validation refuses (a kind without its product, node or address).
    pub fn setup(&self) -> Option<BrokerSetup<'_>> {
        Some(match self.kind {
            BrokerKind::Native => BrokerSetup::Native {
                product: self.product()?,
                node: self.node.as_deref()?,
            },
            BrokerKind::Embedded => BrokerSetup::Embedded {
                node: self.node.as_deref()?,
            },
            BrokerKind::External => BrokerSetup::External {
                address: self.address.as_deref()?,
                websocket: self.websocket_address.as_deref(),
                quic: self.quic_address.as_deref(),
            },
            BrokerKind::Kubernetes => BrokerSetup::Kubernetes {
                product: self.product()?,
                node: self.node.as_deref()?,
            },
        })
    }
}

/// A broker as its kind has it, from a validated [`BrokerEntry`]: what runs it and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerSetup<'a> {
    /// An installed product, started by the agent of `node`.
    Native {
        /// The product.
        product: domain::Product,
        /// Its node.
        node: &'a str,
    },
    /// The broker inside the agent of `node`.
    Embedded {
        /// Its node.
        node: &'a str,
    },
    /// Run by someone else: clients dial `address` (`host:port`).
    External {
        /// `host:port`.
        address: &'a str,
        /// `host:port` of its WebSocket listener.
        websocket: Option<&'a str>,
        /// `host:port` (UDP) of its QUIC listener.
        quic: Option<&'a str>,
    },
    /// A product's pinned image on the k3s cluster, its pod pinned to `node` and applied by
    /// the headnode's agent.
    Kubernetes {
        /// The product.
        product: domain::Product,
        /// The cluster node its pod runs on.
        node: &'a str,
    },
}

/// How a scenario's total delay is split over the two ends of a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelaySplit {
    /// Half the total on each end's egress (the study's repository).
    #[default]
    HalfEachEnd,
    /// All of it on the broker node's egress.
    BrokerSide,
}

/// A network scenario: totals between any two nodes (study Table II).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioEntry {
    /// local, edge, cloud (presets) or a name of your own with every value given.
    pub name: String,
    /// Total one-way delay between two nodes.
    #[serde(default, with = "humantime_serde")]
    pub delay: Option<Duration>,
    /// Total delay variation.
    #[serde(default, with = "humantime_serde")]
    pub jitter: Option<Duration>,
    /// Total packet loss, percent.
    #[serde(default)]
    pub loss_percent: Option<f64>,
    /// Losses in bursts (netem's Gilbert-Elliott model) instead of `loss_percent`. A chain of
    /// states cannot be halved: each end's egress gets the model as given (with `split =
    /// "broker_side"`, the broker's egress only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gilbert_elliott: Option<domain::GilbertElliott>,
    /// How the totals are split over the two ends.
    #[serde(default)]
    pub split: DelaySplit,
}

/// A warm-up: a number of messages per publisher (counted tests) or a time (timed tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmupEntry {
    /// The first messages of each publisher.
    Messages(u64),
    /// The first stretch of publishing.
    Time(Duration),
}

impl Serialize for WarmupEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            WarmupEntry::Messages(count) => serializer.serialize_u64(*count),
            WarmupEntry::Time(time) => serializer.collect_str(&humantime::format_duration(*time)),
        }
    }
}

impl<'de> Deserialize<'de> for WarmupEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WarmupEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of messages or a time such as \"2s\"")
            }
            fn visit_u64<E: serde::de::Error>(self, count: u64) -> Result<WarmupEntry, E> {
                Ok(WarmupEntry::Messages(count))
            }
            fn visit_i64<E: serde::de::Error>(self, count: i64) -> Result<WarmupEntry, E> {
                u64::try_from(count)
                    .map(WarmupEntry::Messages)
                    .map_err(|_| E::custom("a warm-up cannot be negative"))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<WarmupEntry, E> {
                humantime::parse_duration(text)
                    .map(WarmupEntry::Time)
                    .map_err(|e| E::custom(format!("{text:?} is not a time: {e}")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// How a test's load is spread over its loadgen nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Spread {
    /// Publishers and subscribers each divided over the nodes by weight.
    #[default]
    Even,
    /// Two nodes: publishers on the first, subscribers on the second.
    Split,
}

impl Spread {
    pub fn as_str(self) -> &'static str {
        match self {
            Spread::Even => "even",
            Spread::Split => "split",
        }
    }
}

/// A test and its overrides of the preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestEntry {
    /// Which test.
    pub kind: TestKind,
    /// Nodes that run the load, its publishers and subscribers spread over them as
    /// `spread` says.
    pub loadgen: Vec<String>,
    /// How the load is spread over `loadgen`: `even` (by `weights`, the default) or `split`
    /// (two nodes: publishers on the first, subscribers on the second).
    #[serde(default)]
    pub spread: Option<Spread>,
    /// Each loadgen node's share under `even` spreading, in `loadgen`'s order (equal when
    /// absent).
    #[serde(default)]
    pub weights: Option<Vec<u32>>,
    /// Publishers (latency, payload).
    #[serde(default)]
    pub publishers: Option<u32>,
    /// Subscribers (latency, payload).
    #[serde(default)]
    pub subscribers: Option<u32>,
    /// Messages per publisher (latency, payload, burst).
    #[serde(default)]
    pub messages: Option<u64>,
    /// Warm-up: messages per publisher (latency, payload, burst) or a time (throughput).
    #[serde(default)]
    pub warmup: Option<WarmupEntry>,
    /// Measured time after the warm-up (throughput).
    #[serde(default, with = "humantime_serde")]
    pub duration: Option<Duration>,
    /// Offered rate of all publishers together, msg/s (throughput); a closed loop when
    /// absent.
    #[serde(default)]
    pub rate: Option<u64>,
    /// Open loop interval per publisher (latency, payload).
    #[serde(default, with = "humantime_serde")]
    pub interval: Option<Duration>,
    /// QoS: 0, 1 or 2.
    #[serde(default)]
    pub qos: Option<loadgen::spec::Qos>,
    /// Payload size (latency) .
    #[serde(default)]
    pub payload: Option<ByteSize>,
    /// Payload sizes, one cell each (payload test).
    #[serde(default)]
    pub payloads: Option<Vec<ByteSize>>,
    /// Client pairs, one cell each (throughput, burst, saturation).
    #[serde(default)]
    pub clients: Option<Vec<u32>>,
    /// How the saturation search runs (saturation).
    #[serde(default)]
    pub search: Option<loadgen::saturation::SearchSettings>,
    /// The client counts as a fraction of the Open MQTT Benchmark Suite's (p2p, fan-out,
    /// fan-in-shared, connections): `0.01` is 500 -> 500 point to point; 1 when absent.
    #[serde(default)]
    pub scale: Option<f64>,
    /// Any field of loadgen's workload spec, by its SPEC.toml name (`topology`, `qos`,
    /// `broker.protocol`, `connection.inflight`, ...), laid over the test's preset; the
    /// fields above and the sweep point apply after it. The broker's address and the shard
    /// are the run's to set.
    #[serde(default)]
    pub workload: Option<toml::Table>,
    /// How MQTT travels, one test each (`["tcp", "quic"]`): the plan runs the test once per
    /// transport, as consecutive tests, and the report sets TCP and QUIC side by side. Not
    /// together with `workload.broker.transport`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transports: Option<Vec<loadgen::spec::Transport>>,
    /// Not written in a plan: once a `transports` sweep is unrolled, the index the plan file
    /// gives this test, by which errors and the report name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrolled_from: Option<usize>,
}

/// The overlay network of phase 2.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlay {
    /// The nodes' own network.
    #[default]
    None,
    /// Nebula: the headnode is the lighthouse, every other node a member.
    Nebula,
}

/// The orchestrator of phase 3.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Orchestrator {
    /// Brokers run as processes (native, embedded) or elsewhere (external).
    #[default]
    None,
    /// k3s over the overlay: server on the headnode (no workloads), agents on broker nodes.
    K3s,
}

/// `[testbed]`: what the controller installs before any broker (the study's phases 2, 3).
/// Both are idempotent: a run on a testbed that has them changes nothing, and they stay
/// up after the run (`bootstrap uninstall` removes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TestbedEntry {
    /// `none` or `nebula`.
    pub overlay: Overlay,
    /// `none` or `k3s` (needs the overlay: flannel runs over it).
    pub orchestrator: Orchestrator,
    /// The node that is the lighthouse and the k3s server.
    pub headnode: Option<String>,
    /// Nebula's UDP port on every node.
    pub nebula_port: u16,
    /// Nebula's tun device (netem's data-plane interface on the nodes).
    pub overlay_interface: String,
    /// How long each installer may take (k3s pulls images on first start).
    #[serde(with = "humantime_serde")]
    pub install_timeout: Duration,
    /// What a plan whose nodes are emulated in namespaces does where this machine cannot
    /// emulate them.
    pub fallback: Fallback,
}

/// Where the plan's nodes cannot be emulated in namespaces (no root, or no sch_netem for a
/// scenario that impairs the links).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// The run stops before anything is made, saying what is missing.
    #[default]
    None,
    /// Each node runs on an agent the controller starts on loopback, as `agent = "local"`
    /// does: the scenarios that impair nothing are measured, and the run says once, at the
    /// start, why the others cannot be (no link between nodes on one loopback).
    Local,
}

impl Default for TestbedEntry {
    fn default() -> Self {
        TestbedEntry {
            overlay: Overlay::None,
            orchestrator: Orchestrator::None,
            headnode: None,
            nebula_port: 4242,
            overlay_interface: "nebula1".into(),
            install_timeout: Duration::from_secs(180),
            fallback: Fallback::None,
        }
    }
}
