//! The workload specification: what one loadgen run does.
//!
//! The same type is read from `SPEC.toml`, built by the CLI presets, and (later) received by an
//! agent over gRPC. A spec always describes the *whole* workload; a [`Shard`] says which of its
//! publishers and subscribers this instance runs, so several loadgen instances can share one
//! workload and their results merge exactly.
//!
//! A run is either *counted* (`messages_per_publisher`, the study's burst and latency tests) or
//! *timed* (`duration` after a `warmup`, for sustained rates); [`RunLength`] is the view the
//! engine uses.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::header::HeaderEncoding;
use crate::size::ByteSize;

/// MQTT's largest packet: the remaining length is at most 268,435,455 bytes.
pub const MQTT_MAX_REMAINING_LENGTH: u64 = 268_435_455;

/// One loadgen workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Where the broker is and how to talk to it.
    pub broker: BrokerTarget,
    /// Publisher connections in the whole workload.
    pub publishers: u32,
    /// Subscriber connections in the whole workload.
    pub subscribers: u32,
    /// How publishers' topics map to subscribers.
    #[serde(default)]
    pub topology: Topology,
    /// First level of every topic; a run id is appended so runs never see each other's messages.
    #[serde(default = "default_topic_prefix")]
    pub topic_prefix: String,
    /// QoS of publishes and subscriptions.
    pub qos: Qos,
    /// Exact payload size of every PUBLISH, measurement header included.
    pub payload: ByteSize,
    /// Counted runs: messages each publisher sends, warm-up included. 0 in a timed run (one
    /// with a `duration`).
    #[serde(default)]
    pub messages_per_publisher: u64,
    /// Counted runs: the first messages of each publisher are sent and counted but excluded
    /// from latency and rate figures.
    #[serde(default)]
    pub warmup_messages: u64,
    /// Timed runs: how long the measured part lasts, after the warm-up.
    #[serde(default, with = "humantime_serde")]
    pub duration: Option<Duration>,
    /// Timed runs: publishing before the measured part; its messages are sent and counted but
    /// excluded from latency and rate figures.
    #[serde(default, with = "humantime_serde")]
    pub warmup: Option<Duration>,
    /// When publishers send: on a schedule (open loop, per publisher or as an offered rate),
    /// as fast as the window allows for a duration (closed loop), or a counted burst.
    pub pacing: Pacing,
    /// Connection settings shared by every client.
    #[serde(default)]
    pub connection: ConnectionOptions,
    /// How the engine itself runs (threads, waiting for the network).
    #[serde(default)]
    pub engine: EngineOptions,
    /// How long to wait for in-flight messages after the last publish.
    #[serde(default)]
    pub drain: DrainOptions,
    /// Caps how fast each subscriber reads (messages/s): a deliberately slow consumer.
    #[serde(default)]
    pub subscriber_rate_limit: Option<u32>,
    /// The part of the workload this instance runs; all of it when absent.
    #[serde(default)]
    pub shard: Option<Shard>,
    /// Identifies the run in topics and client ids; generated when absent. Instances that share a
    /// workload must share it.
    #[serde(default)]
    pub run_id: Option<String>,
}

fn default_topic_prefix() -> String {
    "continuum".to_string()
}

/// The broker under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerTarget {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// MQTT protocol version.
    #[serde(default)]
    pub protocol: MqttVersion,
    /// Connect with TLS, trusting this CA certificate (PEM).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// Username for CONNECT.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for CONNECT (needs a username).
    #[serde(default)]
    pub password: Option<String>,
}

impl fmt::Display for BrokerTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls_ca_file.is_some() {
            "mqtts"
        } else {
            "mqtt"
        };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// MQTT protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MqttVersion {
    /// MQTT 3.1.1 (the study's version).
    #[default]
    #[serde(rename = "3.1.1")]
    V311,
    /// MQTT 5.
    #[serde(rename = "5")]
    V5,
}

impl fmt::Display for MqttVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MqttVersion::V311 => "3.1.1",
            MqttVersion::V5 => "5",
        })
    }
}

/// MQTT quality of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub enum Qos {
    /// At most once.
    AtMostOnce,
    /// At least once: duplicates are legal, loss is not.
    AtLeastOnce,
    /// Exactly once: neither loss nor duplicates are legal.
    ExactlyOnce,
}

impl Qos {
    /// The numeric level, 0-2.
    pub fn level(self) -> u8 {
        self.into()
    }
}

impl From<Qos> for u8 {
    fn from(qos: Qos) -> u8 {
        match qos {
            Qos::AtMostOnce => 0,
            Qos::AtLeastOnce => 1,
            Qos::ExactlyOnce => 2,
        }
    }
}

impl TryFrom<u8> for Qos {
    type Error = String;

    fn try_from(level: u8) -> Result<Self, Self::Error> {
        match level {
            0 => Ok(Qos::AtMostOnce),
            1 => Ok(Qos::AtLeastOnce),
            2 => Ok(Qos::ExactlyOnce),
            other => Err(format!("QoS must be 0, 1 or 2, not {other}")),
        }
    }
}

/// How publishers' topics reach subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// Every publisher publishes to one topic that every subscriber reads (the study's latency
    /// tests: 100 publishers, 1 subscriber).
    #[default]
    Shared,
    /// Publisher i publishes to its own topic, read by subscriber i only (the study's throughput
    /// test); needs as many subscribers as publishers.
    Pairs,
    /// Each publisher has its own topic, read by an equal group of subscribers (subscriber j
    /// reads publisher j mod P); subscribers must be a multiple of publishers.
    FanOut,
}

impl Topology {
    /// The publishers whose messages subscriber `subscriber` receives.
    pub fn publishers_of(self, subscriber: u32, publishers: u32) -> Range<u32> {
        match self {
            Topology::Shared => 0..publishers,
            Topology::Pairs | Topology::FanOut => {
                let publisher = subscriber % publishers.max(1);
                publisher..publisher + 1
            }
        }
    }

    /// How many subscribers receive each message of `publisher`.
    pub fn fanout_of(self, publisher: u32, publishers: u32, subscribers: u32) -> u32 {
        match self {
            Topology::Shared => subscribers,
            Topology::Pairs | Topology::FanOut => {
                let full_groups = subscribers / publishers.max(1);
                let remainder = subscribers % publishers.max(1);
                full_groups + u32::from(publisher < remainder)
            }
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Topology::Shared => "shared",
            Topology::Pairs => "pairs",
            Topology::FanOut => "fan-out",
        })
    }
}

/// When publishers send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Pacing {
    /// Each publisher sends one message every `interval`, publishers evenly staggered; latency
    /// is measured from the intended send time, whatever the broker does.
    OpenLoop {
        /// Time between two messages of one publisher.
        #[serde(with = "humantime_serde")]
        interval: Duration,
    },
    /// Open loop at an offered rate over all publishers together: message k of the workload
    /// (publisher k mod P) is due at k / rate seconds; latency from the intended time.
    Rate {
        /// Messages per second offered by all publishers together.
        rate: u64,
    },
    /// Each publisher keeps its in-flight window full (QoS 1/2) or TCP busy (QoS 0) for the
    /// run's `duration`: what the broker takes, sustained.
    ClosedLoop,
    /// Each publisher sends its `messages_per_publisher` as fast as the broker (TCP and the
    /// in-flight window) takes them: the study's burst, which ends before any steady state.
    Burst,
}

impl Pacing {
    /// True for the schedules whose messages are stamped with their intended send time.
    pub fn is_open_loop(&self) -> bool {
        matches!(self, Pacing::OpenLoop { .. } | Pacing::Rate { .. })
    }

    /// The mode's name as written in a spec.
    pub fn mode(&self) -> &'static str {
        match self {
            Pacing::OpenLoop { .. } => "open-loop",
            Pacing::Rate { .. } => "rate",
            Pacing::ClosedLoop => "closed-loop",
            Pacing::Burst => "burst",
        }
    }
}

/// How long a run lasts, as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunLength {
    /// Each publisher sends `per_publisher` messages; the first `warmup` are not measured.
    Counted {
        /// Messages per publisher, warm-up included.
        per_publisher: u64,
        /// Leading messages excluded from the figures.
        warmup: u64,
    },
    /// Publishing lasts `warmup + measure`; messages stamped in the warm-up are not measured.
    Timed {
        /// Publishing before the measured window.
        warmup: Duration,
        /// The measured window.
        measure: Duration,
    },
}

/// The longest timed run: its rate series (10 ms buckets) stay a few MB.
pub const MAX_DURATION: Duration = Duration::from_secs(3_600);
/// The highest offered rate: one message per 100 ns over all publishers.
pub const MAX_RATE: u64 = 10_000_000;

/// The intended send times of one open-loop publisher, in ps so that an offered rate that
/// does not divide a second keeps its exact average.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The run's start on the run clock, ns.
    pub start_ns: u64,
    /// The first message's offset from the start, ps.
    pub first_ps: u128,
    /// Time between two messages of this publisher, ps.
    pub interval_ps: u128,
    /// Counted runs: messages this publisher sends.
    pub limit: Option<u64>,
}

impl Schedule {
    /// The same schedule starting at `start_ns`.
    pub fn starting_at(self, start_ns: u64) -> Self {
        Schedule { start_ns, ..self }
    }

    /// When message `seq` is due, ns on the run clock.
    pub fn intended_ns(&self, seq: u64) -> u64 {
        let offset_ps = self
            .first_ps
            .saturating_add(u128::from(seq).saturating_mul(self.interval_ps));
        self.start_ns
            .saturating_add(u64::try_from(offset_ps / 1_000).unwrap_or(u64::MAX))
    }

    /// How many messages are due strictly before `end_ns` (capped by a counted run's limit).
    pub fn messages_before(&self, end_ns: u64) -> u64 {
        let span_ps = u128::from(end_ns.saturating_sub(self.start_ns)) * 1_000;
        let due = if span_ps <= self.first_ps {
            0
        } else {
            u64::try_from((span_ps - self.first_ps).div_ceil(self.interval_ps)).unwrap_or(u64::MAX)
        };
        self.limit.map_or(due, |limit| due.min(limit))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Connection settings shared by all clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionOptions {
    /// Client ids are `{prefix}-{run id}-p{n}` and `...-s{n}`.
    pub client_id_prefix: String,
    /// MQTT clean session (3.1.1) / clean start (5).
    pub clean_session: bool,
    /// MQTT keep-alive.
    #[serde(with = "humantime_serde")]
    pub keep_alive: Duration,
    /// New connections per second while connecting; unlimited when absent.
    pub ramp_up_per_second: Option<u32>,
    /// Deadline for one connection's TCP + TLS + CONNECT/CONNACK (+ SUBACK).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Unacknowledged QoS 1/2 messages a publisher may have out at once. MQTT 5 brokers
    /// announce their limit (receive maximum) and the lower one applies; MQTT 3.1.1 has no such
    /// negotiation, and Mosquitto 2.0 silently drops incoming QoS 2 messages beyond its own
    /// limit, so the default is Mosquitto's default, 20.
    pub inflight: u16,
    /// Largest MQTT packet accepted from the broker; derived from the payload when absent.
    pub max_packet_size: Option<ByteSize>,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        ConnectionOptions {
            client_id_prefix: "continuum".to_string(),
            clean_session: true,
            keep_alive: Duration::from_secs(60),
            ramp_up_per_second: None,
            connect_timeout: Duration::from_secs(5),
            inflight: 20,
            max_packet_size: None,
        }
    }
}

/// How the engine runs: on its own runtime, so that an agent's other work and the load do
/// not share threads, with settings that keep the instrument's cost to the broker low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineOptions {
    /// Runtime threads; 0 chooses: half the CPUs this process may use, at least one (a load
    /// generator beside the broker on one host should not take the broker's cores).
    pub threads: u16,
    /// Receive coalescing.
    pub coalescing: Coalescing,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: 0,
            coalescing: Coalescing::Auto,
        }
    }
}

/// Receive coalescing: before an idle engine thread waits for the network, it first sleeps as
/// long as it has just been busy (at most a cap), when it has been busy at least half of the
/// recent time, and reads what arrived meanwhile in one go.
/// On one host (loopback, veth) the broker's write() does the receiver's TCP work and wakes a
/// waiting reader, and a reader that acknowledges every segment at once keeps the broker's
/// Nagle from coalescing its writes; a reader that is not waiting costs the broker neither.
/// Like a NIC's adaptive interrupt moderation, it trades a bounded delay, only under heavy
/// load, for fewer wake-ups of the broker and of loadgen itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coalescing {
    /// On for bursts (cap 2 ms), offered rates (cap 1 ms) and closed loops (a cap short
    /// enough that the loop's windows, publishers x in-flight, could still carry 1M msg/s);
    /// off for the open-loop latency tests, whose figure is the delay.
    Auto,
    /// Never: every arrival is read at once.
    Off,
    /// On with this cap, whatever the pacing (at most 1 ms).
    Sleep(Duration),
}

/// The coalescing cap `Auto` uses for bursts.
pub const AUTO_COALESCING_BURST: Duration = Duration::from_millis(2);
/// The coalescing cap `Auto` uses for offered rates.
pub const AUTO_COALESCING_RATE: Duration = Duration::from_millis(1);
/// A closed loop's coalescing may not hold its windows back below this rate, msg/s.
pub const CLOSED_LOOP_FLOOR: u64 = 1_000_000;
/// The longest coalescing sleep.
pub const MAX_COALESCING: Duration = Duration::from_millis(5);

impl Coalescing {
    /// The cap this setting gives for `spec`'s pacing, if any.
    pub fn sleep_for(self, spec: &WorkloadSpec) -> Option<Duration> {
        match self {
            Coalescing::Off => None,
            Coalescing::Sleep(sleep) => Some(sleep),
            Coalescing::Auto => match spec.pacing {
                Pacing::Burst => Some(AUTO_COALESCING_BURST),
                Pacing::Rate { .. } => Some(AUTO_COALESCING_RATE),
                Pacing::ClosedLoop => {
                    // The messages in flight over all windows, per µs of sleep, at the floor.
                    let shard = spec.effective_shard();
                    let in_flight =
                        shard.publishers.len() as u64 * u64::from(spec.connection.inflight);
                    let cap = Duration::from_micros(in_flight * 1_000_000 / CLOSED_LOOP_FLOOR);
                    Some(cap.min(AUTO_COALESCING_RATE)).filter(|cap| !cap.is_zero())
                }
                Pacing::OpenLoop { .. } => None,
            },
        }
    }
}

impl fmt::Display for Coalescing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coalescing::Auto => f.write_str("auto"),
            Coalescing::Off => f.write_str("off"),
            Coalescing::Sleep(sleep) => write!(f, "{}", humantime::format_duration(*sleep)),
        }
    }
}

impl std::str::FromStr for Coalescing {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Coalescing::Auto),
            "off" => Ok(Coalescing::Off),
            other => humantime::parse_duration(other)
                .map(Coalescing::Sleep)
                .map_err(|_| {
                    format!("{other:?} is not \"auto\", \"off\" or a duration like \"50us\"")
                }),
        }
    }
}

impl Serialize for Coalescing {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Coalescing {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The drain phase after the last publish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrainOptions {
    /// Hard deadline for outstanding deliveries and acknowledgements.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Stop early when nothing arrived for this long (messages are then counted lost).
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            timeout: Duration::from_secs(30),
            idle: Duration::from_secs(2),
        }
    }
}

/// The publishers and subscribers (global indices) one instance runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// Global publisher indices run here.
    pub publishers: Range<u32>,
    /// Global subscriber indices run here.
    pub subscribers: Range<u32>,
}

/// A spec field with a bad value: names the TOML path, the value and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} = {value}: {problem}")]
pub struct SpecError {
    /// TOML path of the field, e.g. `pacing.interval`.
    pub path: String,
    /// The offending value as written.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

fn invalid(path: &str, value: impl fmt::Display, problem: impl Into<String>) -> SpecError {
    SpecError {
        path: path.to_string(),
        value: value.to_string(),
        problem: problem.into(),
    }
}

impl WorkloadSpec {
    /// Checks every field; the first problem found is returned with its TOML path.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.broker.host.trim().is_empty() {
            return Err(invalid("broker.host", "\"\"", "a broker host is required"));
        }
        if self.broker.port == 0 {
            return Err(invalid("broker.port", 0, "port 0 is not a broker port"));
        }
        if self.broker.password.is_some() && self.broker.username.is_none() {
            return Err(invalid(
                "broker.password",
                "(set)",
                "a password needs broker.username",
            ));
        }
        if self.publishers == 0 {
            return Err(invalid("publishers", 0, "at least one publisher is needed"));
        }
        match self.topology {
            Topology::Pairs if self.subscribers != self.publishers => {
                return Err(invalid(
                    "subscribers",
                    self.subscribers,
                    format!(
                        "topology \"pairs\" needs as many subscribers as publishers ({})",
                        self.publishers
                    ),
                ));
            }
            Topology::FanOut
                if !self.subscribers.is_multiple_of(self.publishers) || self.subscribers == 0 =>
            {
                return Err(invalid(
                    "subscribers",
                    self.subscribers,
                    format!(
                        "topology \"fan-out\" needs a non-zero multiple of publishers ({})",
                        self.publishers
                    ),
                ));
            }
            _ => {}
        }
        if self.topic_prefix.is_empty() || self.topic_prefix.contains(['+', '#']) {
            return Err(invalid(
                "topic_prefix",
                format!("{:?}", self.topic_prefix),
                "must be a non-empty topic without wildcards",
            ));
        }
        let payload = self.payload.bytes();
        let encoding = HeaderEncoding::for_payload(payload).ok_or_else(|| {
            invalid(
                "payload",
                self.payload,
                format!(
                    "too small for the measurement header (at least {} B)",
                    HeaderEncoding::SMALLEST_PAYLOAD
                ),
            )
        })?;
        // Topic, packet id and properties take a little room; 1 KiB is generous.
        if payload + 1024 > MQTT_MAX_REMAINING_LENGTH {
            return Err(invalid(
                "payload",
                self.payload,
                format!("over MQTT's packet limit of {MQTT_MAX_REMAINING_LENGTH} bytes (256 MB)"),
            ));
        }
        self.validate_length(encoding)?;
        if u64::from(self.publishers) > encoding.max_publishers() {
            return Err(invalid(
                "publishers",
                self.publishers,
                format!(
                    "a {payload} B payload carries the {encoding} header, which numbers at most {} publishers",
                    encoding.max_publishers()
                ),
            ));
        }
        self.validate_connection()?;
        self.validate_engine()?;
        if self.drain.timeout.is_zero() {
            return Err(invalid("drain.timeout", "0s", "must be above zero"));
        }
        if self.subscriber_rate_limit == Some(0) {
            return Err(invalid(
                "subscriber_rate_limit",
                0,
                "must be above zero when set",
            ));
        }
        if let Some(shard) = &self.shard
            && self.pacing == Pacing::ClosedLoop
            && self.qos == Qos::AtMostOnce
            && (shard.publishers != (0..self.publishers)
                || shard.subscribers != (0..self.subscribers))
        {
            return Err(invalid(
                "pacing.mode",
                "\"closed-loop\"",
                "a closed loop at QoS 0 counts its window end to end, so one instance must run every publisher and subscriber (use QoS 1 or an offered rate to split the load)",
            ));
        }
        if let Some(shard) = &self.shard {
            if shard.publishers.end > self.publishers
                || shard.publishers.start > shard.publishers.end
            {
                return Err(invalid(
                    "shard.publishers",
                    format!("{:?}", shard.publishers),
                    format!("must lie within 0..{}", self.publishers),
                ));
            }
            if shard.subscribers.end > self.subscribers
                || shard.subscribers.start > shard.subscribers.end
            {
                return Err(invalid(
                    "shard.subscribers",
                    format!("{:?}", shard.subscribers),
                    format!("must lie within 0..{}", self.subscribers),
                ));
            }
        }
        if let Some(run_id) = &self.run_id
            && (run_id.is_empty()
                || !run_id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(invalid(
                "run_id",
                format!("{run_id:?}"),
                "use letters, digits and '-' only",
            ));
        }
        Ok(())
    }

    /// Counted or timed, and a pacing that fits: the combinations a run can honestly carry out.
    fn validate_length(&self, encoding: HeaderEncoding) -> Result<(), SpecError> {
        let payload = self.payload.bytes();
        match self.pacing {
            Pacing::OpenLoop { interval } if interval.is_zero() => {
                return Err(invalid(
                    "pacing.interval",
                    "0s",
                    "open loop needs an interval above zero (use mode = \"burst\" for as fast as possible)",
                ));
            }
            Pacing::Rate { rate: 0 } => {
                return Err(invalid(
                    "pacing.rate",
                    0,
                    "an offered rate must be above zero (use mode = \"closed-loop\" for as fast as the broker takes them)",
                ));
            }
            Pacing::Rate { rate } if rate > MAX_RATE => {
                return Err(invalid(
                    "pacing.rate",
                    rate,
                    format!("at most {MAX_RATE} messages/s"),
                ));
            }
            _ => {}
        }
        match self.duration {
            None => {
                if self.warmup.is_some() {
                    return Err(invalid(
                        "warmup",
                        humantime::format_duration(self.warmup.unwrap_or_default()),
                        "a warm-up time needs a duration (counted runs use warmup_messages)",
                    ));
                }
                if self.pacing == Pacing::ClosedLoop {
                    return Err(invalid(
                        "pacing.mode",
                        "\"closed-loop\"",
                        "a closed loop runs for a duration: set duration (and warmup)",
                    ));
                }
                if self.messages_per_publisher == 0 {
                    return Err(invalid(
                        "messages_per_publisher",
                        0,
                        "at least one message is needed (or a duration for a timed run)",
                    ));
                }
                if self.warmup_messages >= self.messages_per_publisher {
                    return Err(invalid(
                        "warmup_messages",
                        self.warmup_messages,
                        format!(
                            "must be fewer than messages_per_publisher ({})",
                            self.messages_per_publisher
                        ),
                    ));
                }
            }
            Some(duration) => {
                let shown = humantime::format_duration(duration);
                if duration.is_zero() {
                    return Err(invalid("duration", "0s", "must be above zero"));
                }
                if duration > MAX_DURATION {
                    return Err(invalid(
                        "duration",
                        shown,
                        format!("at most {}", humantime::format_duration(MAX_DURATION)),
                    ));
                }
                if self.warmup.unwrap_or_default() > MAX_DURATION {
                    return Err(invalid(
                        "warmup",
                        humantime::format_duration(self.warmup.unwrap_or_default()),
                        format!("at most {}", humantime::format_duration(MAX_DURATION)),
                    ));
                }
                if self.pacing == Pacing::Burst {
                    return Err(invalid(
                        "pacing.mode",
                        "\"burst\"",
                        "a burst is counted (messages_per_publisher); for a duration use mode = \"closed-loop\" or \"rate\"",
                    ));
                }
                if self.messages_per_publisher != 0 {
                    return Err(invalid(
                        "messages_per_publisher",
                        self.messages_per_publisher,
                        "a timed run (duration) sends as many as its pacing allows: leave it out",
                    ));
                }
                if self.warmup_messages != 0 {
                    return Err(invalid(
                        "warmup_messages",
                        self.warmup_messages,
                        "a timed run's warm-up is a time: use warmup = \"2s\"",
                    ));
                }
            }
        }
        let most = encoding.max_messages_per_publisher();
        if let Some(planned) = self.planned_messages_per_publisher()
            && planned > most
        {
            let (path, value) = if self.duration.is_some() {
                (
                    "duration",
                    humantime::format_duration(self.run_time()).to_string(),
                )
            } else {
                ("messages_per_publisher", planned.to_string())
            };
            return Err(invalid(
                path,
                value,
                format!(
                    "{planned} messages per publisher; a {payload} B payload carries the {encoding} header, which numbers at most {most}"
                ),
            ));
        }
        Ok(())
    }

    fn validate_engine(&self) -> Result<(), SpecError> {
        if let Coalescing::Sleep(sleep) = self.engine.coalescing
            && (sleep.is_zero() || sleep > MAX_COALESCING)
        {
            return Err(invalid(
                "engine.coalescing",
                humantime::format_duration(sleep),
                format!(
                    "must lie between 1us and {} (or be \"off\")",
                    humantime::format_duration(MAX_COALESCING)
                ),
            ));
        }
        if self.engine.threads > 1024 {
            return Err(invalid(
                "engine.threads",
                self.engine.threads,
                "at most 1024",
            ));
        }
        Ok(())
    }

    fn validate_connection(&self) -> Result<(), SpecError> {
        let connection = &self.connection;
        if connection.keep_alive.as_secs() > u64::from(u16::MAX) {
            return Err(invalid(
                "connection.keep_alive",
                humantime::format_duration(connection.keep_alive),
                "MQTT allows at most 65535 s",
            ));
        }
        if connection.connect_timeout.is_zero() {
            return Err(invalid(
                "connection.connect_timeout",
                "0s",
                "must be above zero",
            ));
        }
        if connection.inflight == 0 {
            return Err(invalid(
                "connection.inflight",
                0,
                "at least one message must be allowed in flight",
            ));
        }
        if connection.ramp_up_per_second == Some(0) {
            return Err(invalid(
                "connection.ramp_up_per_second",
                0,
                "must be above zero when set (omit it for no ramp-up)",
            ));
        }
        if let Some(limit) = connection.max_packet_size
            && limit.bytes() < self.payload.bytes()
        {
            return Err(invalid(
                "connection.max_packet_size",
                limit,
                format!("smaller than the payload ({})", self.payload),
            ));
        }
        Ok(())
    }

    /// Parses and validates a spec from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, crate::LoadgenError> {
        let spec: WorkloadSpec =
            toml::from_str(text).map_err(|e| crate::LoadgenError::SpecSyntax(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Counted or timed, as the engine runs it (call on a validated spec).
    pub fn length(&self) -> RunLength {
        match self.duration {
            Some(measure) => RunLength::Timed {
                warmup: self.warmup.unwrap_or_default(),
                measure,
            },
            None => RunLength::Counted {
                per_publisher: self.messages_per_publisher,
                warmup: self.warmup_messages,
            },
        }
    }

    /// Publishing time of a timed run, warm-up included (zero for counted runs).
    pub fn run_time(&self) -> Duration {
        match self.length() {
            RunLength::Timed { warmup, measure } => warmup.saturating_add(measure),
            RunLength::Counted { .. } => Duration::ZERO,
        }
    }

    /// Messages each publisher will send, when the spec fixes it: counted runs, and timed
    /// runs on a schedule; `None` for a closed loop.
    pub fn planned_messages_per_publisher(&self) -> Option<u64> {
        match (self.length(), &self.pacing) {
            (RunLength::Counted { per_publisher, .. }, _) => Some(per_publisher),
            (RunLength::Timed { .. }, Pacing::ClosedLoop | Pacing::Burst) => None,
            (RunLength::Timed { .. }, _) => {
                let schedule = self.schedule_of(0)?;
                Some(schedule.messages_before(schedule.start_ns + nanos(self.run_time())))
            }
        }
    }

    /// The open-loop schedule of `publisher` relative to a start at 0 (`None` for closed
    /// loop and burst). Publishers are spread evenly over one interval, as independent clients
    /// are; at an offered rate, message k of the workload is due at k / rate.
    pub fn schedule_of(&self, publisher: u32) -> Option<Schedule> {
        let publishers = u128::from(self.publishers.max(1));
        let (interval_ps, first_ps) = match self.pacing {
            Pacing::OpenLoop { interval } => {
                let interval_ps = interval.as_nanos().saturating_mul(1_000);
                (
                    interval_ps,
                    interval_ps * u128::from(publisher) / publishers,
                )
            }
            Pacing::Rate { rate } => {
                let rate = u128::from(rate.max(1));
                (
                    1_000_000_000_000 * publishers / rate,
                    1_000_000_000_000 * u128::from(publisher) / rate,
                )
            }
            Pacing::ClosedLoop | Pacing::Burst => return None,
        };
        Some(Schedule {
            start_ns: 0,
            first_ps,
            interval_ps: interval_ps.max(1),
            limit: match self.length() {
                RunLength::Counted { per_publisher, .. } => Some(per_publisher),
                RunLength::Timed { .. } => None,
            },
        })
    }

    /// The shard this instance runs: the explicit one, or everything.
    pub fn effective_shard(&self) -> Shard {
        self.shard.clone().unwrap_or(Shard {
            publishers: 0..self.publishers,
            subscribers: 0..self.subscribers,
        })
    }

    /// The measurement header every payload carries.
    pub fn header_encoding(&self) -> HeaderEncoding {
        HeaderEncoding::for_payload(self.payload.bytes()).unwrap_or(HeaderEncoding::Compact)
    }

    /// The largest packet clients accept: the configured one, or the payload plus room.
    pub fn max_packet_bytes(&self) -> usize {
        let derived = (self.payload.bytes() + 64 * 1024).min(MQTT_MAX_REMAINING_LENGTH + 5);
        let bytes = self
            .connection
            .max_packet_size
            .map_or(derived, ByteSize::bytes);
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// The topic publisher `publisher` publishes to, under the run's unique prefix.
    pub fn topic_of(&self, run_id: &str, publisher: u32) -> String {
        match self.topology {
            Topology::Shared => format!("{}/{run_id}/shared", self.topic_prefix),
            Topology::Pairs | Topology::FanOut => {
                format!("{}/{run_id}/p{publisher}", self.topic_prefix)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn example() -> WorkloadSpec {
        WorkloadSpec {
            broker: BrokerTarget {
                host: "127.0.0.1".into(),
                port: 1883,
                protocol: MqttVersion::V311,
                tls_ca_file: None,
                username: None,
                password: None,
            },
            publishers: 4,
            subscribers: 4,
            topology: Topology::Pairs,
            topic_prefix: default_topic_prefix(),
            qos: Qos::AtLeastOnce,
            payload: ByteSize(10),
            messages_per_publisher: 10,
            warmup_messages: 0,
            duration: None,
            warmup: None,
            pacing: Pacing::Burst,
            connection: ConnectionOptions::default(),
            engine: EngineOptions::default(),
            drain: DrainOptions::default(),
            subscriber_rate_limit: None,
            shard: None,
            run_id: None,
        }
    }

    #[test]
    fn parses_a_full_toml_spec() {
        let spec = WorkloadSpec::from_toml(
            r#"
            publishers = 100
            subscribers = 1
            topology = "shared"
            qos = 1
            payload = "1KB"
            messages_per_publisher = 20
            warmup_messages = 2
            [pacing]
            mode = "open-loop"
            interval = "250ms"
            [broker]
            host = "localhost"
            port = 1883
            protocol = "5"
            [connection]
            keep_alive = "30s"
            inflight = 10
            "#,
        )
        .expect("valid spec");
        assert_eq!(spec.payload, ByteSize(1000));
        assert_eq!(spec.broker.protocol, MqttVersion::V5);
        assert_eq!(
            spec.pacing,
            Pacing::OpenLoop {
                interval: Duration::from_millis(250)
            }
        );
        assert_eq!(spec.connection.inflight, 10);
        assert_eq!(spec.connection.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn unknown_fields_are_named() {
        let error = WorkloadSpec::from_toml("publisherz = 1").expect_err("unknown field");
        assert!(error.to_string().contains("publisherz"), "{error}");
    }

    #[test]
    fn bad_values_name_their_path_and_value() {
        type Mutation = Box<dyn Fn(&mut WorkloadSpec)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|s| s.publishers = 0), "publishers = 0"),
            (
                Box::new(|s| {
                    s.pacing = Pacing::OpenLoop {
                        interval: Duration::ZERO,
                    }
                }),
                "pacing.interval = 0s",
            ),
            (
                Box::new(|s| s.payload = ByteSize(300_000_000)),
                "payload = 300MB",
            ),
            (Box::new(|s| s.payload = ByteSize(9)), "payload = 9B"),
            (Box::new(|s| s.subscribers = 3), "subscribers = 3"),
            (Box::new(|s| s.warmup_messages = 10), "warmup_messages = 10"),
            (
                Box::new(|s| s.connection.inflight = 0),
                "connection.inflight = 0",
            ),
            (
                Box::new(|s| {
                    s.shard = Some(Shard {
                        publishers: 0..9,
                        subscribers: 0..1,
                    })
                }),
                "shard.publishers = 0..9",
            ),
        ];
        for (mutate, expected) in cases {
            let mut spec = example();
            mutate(&mut spec);
            let error = spec.validate().expect_err(expected);
            assert!(
                error.to_string().starts_with(expected),
                "{error} should start with {expected}"
            );
        }
    }

    #[test]
    fn compact_header_limits_are_enforced() {
        let mut spec = example();
        spec.topology = Topology::Shared;
        spec.publishers = 70_000;
        assert_eq!(spec.validate().expect_err("too many").path, "publishers");
        spec.payload = ByteSize(16);
        spec.validate()
            .expect("the full header numbers 2^32 publishers");
    }

    #[test]
    fn topologies_route_as_documented() {
        assert_eq!(Topology::Shared.publishers_of(3, 100), 0..100);
        assert_eq!(Topology::Pairs.publishers_of(7, 10), 7..8);
        assert_eq!(Topology::FanOut.publishers_of(7, 5), 2..3);
        assert_eq!(Topology::Shared.fanout_of(0, 100, 3), 3);
        assert_eq!(Topology::FanOut.fanout_of(1, 5, 20), 4);
        assert_eq!(Topology::Pairs.fanout_of(9, 10, 10), 1);
    }
}
