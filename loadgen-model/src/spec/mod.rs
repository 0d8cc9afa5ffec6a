//! The workload specification: what one loadgen run does.
//!
//! The same type is read from `SPEC.toml`, built by the study's [presets](crate::presets), and
//! received by an agent over gRPC. A spec always describes the *whole* workload; a [`Shard`]
//! says which of its publishers and subscribers this instance runs, so several loadgen
//! instances can share one workload and their results merge exactly.
//!
//! A run is either *counted* (`messages_per_publisher`, the study's burst and latency tests) or
//! *timed* (`duration` after a `warmup`, for sustained rates); [`RunLength`] is the view the
//! engine uses.
//!
//! Each concern has its own file, all re-exported here: the broker and the MQTT it speaks
//! (`broker`), who publishes to whom (`topology`), when messages leave (`pacing`), the
//! connection, engine and drain settings (`options`), a fleet of connecting and
//! disconnecting clients beside the workload (`churn`), MQTT topic filters and how they match
//! (`filter`), topic trees named by a pattern (`tree`), who receives whose messages
//! (`routing`), retained messages and their late subscribers (`retain`), MQTT 5 message
//! expiry and how missing messages are judged against it (`expiry`), and the checks with their TOML paths (`validate`).

mod broker;
mod churn;
mod expiry;
mod filter;
mod options;
mod pacing;
mod reconnect;
mod retain;
mod routing;
mod topology;
mod tree;
mod validate;
mod wills;

pub use broker::{
    BrokerTarget, DEFAULT_WEBSOCKET_PATH, MQTT_MAX_REMAINING_LENGTH, MqttVersion, Qos, QuicStreams,
    Transport,
};
pub use churn::{Churn, MAX_CHURN_CONNECTIONS, MAX_CHURN_RATE};
pub use expiry::{
    EXPIRY_GRANULARITY, EXPIRY_RETURN_SLACK, MAX_MESSAGE_EXPIRY, delivered_past_expiry,
    expirable_until,
};
pub use filter::{MAX_TOPIC_BYTES, TopicFilter, check_topic_name};
pub use options::{
    AUTO_COALESCING_BURST, AUTO_COALESCING_RATE, CLOSED_LOOP_FLOOR, Coalescing, ConnectionOptions,
    DrainOptions, EngineOptions, MAX_COALESCING, OfflineGap, SESSION_EXPIRY,
};
pub use pacing::{MAX_DURATION, MAX_RATE, Pacing, RunLength, Schedule, Timetable};
pub use reconnect::{DEFAULT_RETRY, Reconnect};
pub use retain::{MAX_LATE_SUBSCRIBERS, Retain};
pub use routing::{MAX_TREE_MATCHES, MatchedPublishers, Routing, Subscribed};
pub use topology::{Shard, Topology};
pub use tree::{MAX_TREE_FILTERS, MAX_TREE_TOPICS, TopicNames, TopicTree};
pub use validate::{
    MAX_CA_PEM, MAX_CLIENTS, MAX_DELIVERY_TRACKS, MAX_PAYLOAD_BYTES_HELD, MAX_TRACKED_MESSAGES,
    SpecError,
};
pub use wills::{MAX_WILL_CLIENTS, WILL_CLOSE_WAIT, WILL_QUIET, Wills};

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::header::{HeaderEncoding, HeaderPlace};
use crate::size::ByteSize;

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
    /// Topology `tree`: the topics publishers publish to and the filters subscribers read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<TopicTree>,
    /// First level of every topic; a run id is appended so runs never see each other's messages.
    #[serde(default = "default_topic_prefix")]
    pub topic_prefix: String,
    /// QoS of publishes, and of subscriptions unless `subscriber_qos` says otherwise.
    pub qos: Qos,
    /// QoS the subscribers subscribe at, when not `qos`: below it, the broker must downgrade
    /// each delivery (MQTT: a message reaches a subscriber at the lower of the two), and every
    /// delivery is judged at that effective QoS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscriber_qos: Option<Qos>,
    /// Exact payload size of every PUBLISH, measurement header included (unless the header
    /// travels in a user property: `header_in`).
    pub payload: ByteSize,
    /// Where the measurement header travels: in the payload, or (MQTT 5) in a user property,
    /// leaving the payload exactly what a device sends.
    #[serde(default, skip_serializing_if = "is_default_place")]
    pub header_in: HeaderPlace,
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
    /// A fleet of clients beside the workload that connect and disconnect at a set rate;
    /// run by the instance holding publisher 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn: Option<Churn>,
    /// Publishers retain their messages, and late subscribers check what the broker kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain: Option<Retain>,
    /// Clients with a will beside the workload, some dropped without DISCONNECT, and a
    /// watcher that must get each dropped client's will once; run by the instance holding
    /// publisher 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wills: Option<Wills>,
}

/// Why TOML text gave no workload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecReadError {
    /// Not valid TOML, or it has unknown fields.
    #[error("spec: {0}")]
    Syntax(String),
    /// A field has a bad value.
    #[error("spec: {0}")]
    Invalid(#[from] SpecError),
}

fn is_default_place(place: &HeaderPlace) -> bool {
    *place == HeaderPlace::Payload
}

fn default_topic_prefix() -> String {
    "continuum".to_string()
}

impl WorkloadSpec {
    /// Parses and validates a spec from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, SpecReadError> {
        let spec: WorkloadSpec =
            toml::from_str(text).map_err(|e| SpecReadError::Syntax(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// The QoS subscribers subscribe at.
    pub fn subscription_qos(&self) -> Qos {
        self.subscriber_qos.unwrap_or(self.qos)
    }

    /// The QoS every delivery is judged at: the lower of publish and subscription.
    pub fn effective_qos(&self) -> Qos {
        self.qos.min(self.subscription_qos())
    }

    /// The measurement header every message carries: the full one in a user property,
    /// else the one the payload has room for.
    pub fn header_encoding(&self) -> HeaderEncoding {
        if self.header_in.is_property() {
            return HeaderEncoding::Full;
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec file may carry a password, but nothing loadgen writes (results embed their
    /// spec) does.
    #[test]
    fn a_password_is_read_but_never_written() {
        let mut spec = example();
        spec.broker.username = Some("bob".into());
        spec.broker.password = Some("hunter2".into());
        let json = serde_json::to_string(&spec).expect("serializes");
        assert!(
            !json.contains("hunter2") && !json.contains("password"),
            "{json}"
        );
        let toml_text = toml::to_string(&spec).expect("serializes");
        assert!(!toml_text.contains("hunter2"), "{toml_text}");
        let read: BrokerTarget =
            toml::from_str("host = \"h\"\nport = 1\nusername = \"bob\"\npassword = \"hunter2\"\n")
                .expect("parses");
        assert_eq!(read.password.as_deref(), Some("hunter2"));
        let debug = format!("{spec:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("<redacted>"),
            "{debug}"
        );
    }

    pub(crate) fn example() -> WorkloadSpec {
        WorkloadSpec {
            broker: BrokerTarget {
                host: "127.0.0.1".into(),
                port: 1883,
                protocol: MqttVersion::V311,
                tls_ca_file: None,
                tls_ca_pem: None,
                username: None,
                password: None,
                transport: Transport::Tcp,
                websocket_path: None,
                quic_zero_rtt: false,
                quic_streams: Default::default(),
            },
            publishers: 4,
            subscribers: 4,
            topology: Topology::Pairs,
            topics: None,
            topic_prefix: default_topic_prefix(),
            qos: Qos::AtLeastOnce,
            payload: ByteSize(10),
            header_in: HeaderPlace::Payload,
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
            churn: None,
            retain: None,
            wills: None,
            subscriber_qos: None,
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
}
