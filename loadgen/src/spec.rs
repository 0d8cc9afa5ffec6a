//! The workload specification: what one loadgen run does.
//!
//! The same type is read from `SPEC.toml`, built by the CLI presets, and (later) received by an
//! agent over gRPC. A spec always describes the *whole* workload; a [`Shard`] says which of its
//! publishers and subscribers this instance runs, so several loadgen instances can share one
//! workload and their results merge exactly.

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
    /// Messages each publisher sends, warm-up included.
    pub messages_per_publisher: u64,
    /// The first messages of each publisher are sent and counted but excluded from latency and
    /// rate figures.
    #[serde(default)]
    pub warmup_messages: u64,
    /// Open loop on a schedule, or burst.
    pub pacing: Pacing,
    /// Connection settings shared by every client.
    #[serde(default)]
    pub connection: ConnectionOptions,
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
    /// Each publisher sends its messages as fast as the broker (TCP and the in-flight window)
    /// takes them.
    Burst,
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
        if self.messages_per_publisher == 0 {
            return Err(invalid(
                "messages_per_publisher",
                0,
                "at least one message is needed",
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
        if self.messages_per_publisher > encoding.max_messages_per_publisher() {
            return Err(invalid(
                "messages_per_publisher",
                self.messages_per_publisher,
                format!(
                    "a {payload} B payload carries the {encoding} header, which numbers at most {} messages",
                    encoding.max_messages_per_publisher()
                ),
            ));
        }
        if let Pacing::OpenLoop { interval } = self.pacing
            && interval.is_zero()
        {
            return Err(invalid(
                "pacing.interval",
                "0s",
                "open loop needs an interval above zero (use mode = \"burst\" for as fast as possible)",
            ));
        }
        self.validate_connection()?;
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
            pacing: Pacing::Burst,
            connection: ConnectionOptions::default(),
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
