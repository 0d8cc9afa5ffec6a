//! `WorkloadSpec` and its parts.

use std::path::PathBuf;

use domain::FieldError;
use loadgen_model::header::HeaderPlace;
use loadgen_model::size::ByteSize;
use loadgen_model::spec::{
    BrokerTarget, Churn, Coalescing, ConnectionOptions, DrainOptions, EngineOptions, MqttVersion,
    OfflineGap, Pacing, Qos, QuicStreams, Reconnect, Retain, Shard, TopicTree, Topology, Transport,
    Wills, WorkloadSpec,
};

use super::{
    ConversionError, duration, duration_to_proto, enumeration, field, narrow_u8, narrow_u16,
    required,
};
use crate::loadgen::v1 as pb;

/// Validates a received spec: every field present and in range, then [`WorkloadSpec::validate`].
impl TryFrom<pb::WorkloadSpec> for WorkloadSpec {
    type Error = ConversionError;

    fn try_from(message: pb::WorkloadSpec) -> Result<Self, Self::Error> {
        spec_from_proto(message, "spec")
    }
}

/// Converts and validates the spec message found at path `at`.
pub(super) fn spec_from_proto(
    message: pb::WorkloadSpec,
    at: &str,
) -> Result<WorkloadSpec, ConversionError> {
    let spec = WorkloadSpec {
        broker: broker_from_proto(
            required(message.broker, at, "broker")?,
            &field(at, "broker"),
        )?,
        publishers: message.publishers,
        subscribers: message.subscribers,
        topology: topology_from_proto(message.topology, at)?,
        retain: message
            .retain
            .map(|retain| -> Result<Retain, ConversionError> {
                Ok(Retain {
                    late_subscribers: retain.late_subscribers,
                    filter: retain.filter,
                    handling: narrow_u8(retain.handling, &field(at, "retain"), "handling")?,
                    as_published: retain.as_published,
                })
            })
            .transpose()?,
        wills: message
            .wills
            .map(|wills| -> Result<Wills, ConversionError> {
                let at = field(at, "wills");
                Ok(Wills {
                    clients: wills.clients,
                    dropped: wills.dropped,
                    after: duration(wills.after, &at, "after")?,
                    delay: wills
                        .delay
                        .map(|d| duration(Some(d), &at, "delay"))
                        .transpose()?,
                    qos: qos_from_proto(wills.qos, &at)?,
                    retain: wills.retain,
                })
            })
            .transpose()?,
        topics: message.topics.map(|tree| TopicTree {
            pattern: tree.pattern,
            counts: tree.counts.into_iter().collect(),
            subscribe: tree.subscribe,
        }),
        topic_prefix: message.topic_prefix,
        qos: qos_from_proto(message.qos, at)?,
        // Unspecified (0) is "as qos"; any other value must be a QoS.
        subscriber_qos: match message.subscriber_qos {
            0 => None,
            value => Some(qos_field(value, at, "subscriber_qos")?),
        },
        payload: ByteSize(message.payload),
        header_in: if message.header_in_user_property {
            HeaderPlace::UserProperty
        } else {
            HeaderPlace::Payload
        },
        messages_per_publisher: message.messages_per_publisher,
        warmup_messages: message.warmup_messages,
        duration: message
            .duration
            .map(|d| duration(Some(d), at, "duration"))
            .transpose()?,
        warmup: message
            .warmup
            .map(|d| duration(Some(d), at, "warmup"))
            .transpose()?,
        pacing: pacing_from_proto(message.pacing, at)?,
        connection: connection_from_proto(
            required(message.connection, at, "connection")?,
            &field(at, "connection"),
        )?,
        engine: engine_from_proto(
            required(message.engine, at, "engine")?,
            &field(at, "engine"),
        )?,
        drain: drain_from_proto(required(message.drain, at, "drain")?, &field(at, "drain"))?,
        subscriber_rate_limit: message.subscriber_rate_limit,
        shard: message
            .shard
            .map(|shard| shard_from_proto(shard, &field(at, "shard")))
            .transpose()?,
        run_id: message.run_id,
        churn: message
            .churn
            .map(|churn| -> Result<Churn, ConversionError> {
                let at = field(at, "churn");
                Ok(Churn {
                    rate: churn.rate,
                    connections: churn.connections,
                    hold: duration(churn.hold, &at, "hold")?,
                })
            })
            .transpose()?,
    };
    spec.validate()
        .map_err(|error| ConversionError::from_spec(error, at))?;
    Ok(spec)
}

fn broker_from_proto(message: pb::BrokerTarget, at: &str) -> Result<BrokerTarget, ConversionError> {
    Ok(BrokerTarget {
        host: message.host,
        port: narrow_u16(message.port, at, "port")?,
        protocol: enumeration(
            message.protocol,
            at,
            "protocol",
            "MQTT version",
            |v| match v {
                pb::MqttVersion::Unspecified => None,
                pb::MqttVersion::V311 => Some(MqttVersion::V311),
                pb::MqttVersion::V5 => Some(MqttVersion::V5),
            },
        )?,
        tls_ca_file: message.tls_ca_file.map(PathBuf::from),
        tls_ca_pem: message.tls_ca_pem,
        quic_zero_rtt: message.quic_zero_rtt,
        username: message.username,
        password: message.password,
        transport: enumeration(
            message.transport,
            at,
            "transport",
            "MQTT transport",
            |v| match v {
                pb::MqttTransport::Unspecified => None,
                pb::MqttTransport::Tcp => Some(Transport::Tcp),
                pb::MqttTransport::Websocket => Some(Transport::WebSocket),
                pb::MqttTransport::Quic => Some(Transport::Quic),
            },
        )?,
        websocket_path: message.websocket_path,
        quic_streams: quic_streams_from_proto(message.quic_streams, at)?,
    })
}

/// Unspecified is one stream: a sender from before the field meant that.
fn quic_streams_from_proto(value: i32, at: &str) -> Result<QuicStreams, ConversionError> {
    enumeration(value, at, "quic_streams", "QUIC stream mode", |v| {
        Some(match v {
            pb::QuicStreams::Unspecified | pb::QuicStreams::Single => QuicStreams::Single,
            pb::QuicStreams::PerTopic => QuicStreams::PerTopic,
            pb::QuicStreams::PerPublish => QuicStreams::PerPublish,
        })
    })
}

fn topology_from_proto(value: i32, at: &str) -> Result<Topology, ConversionError> {
    enumeration(value, at, "topology", "topology", |v| match v {
        pb::Topology::Unspecified => None,
        pb::Topology::Shared => Some(Topology::Shared),
        pb::Topology::Pairs => Some(Topology::Pairs),
        pb::Topology::FanOut => Some(Topology::FanOut),
        pb::Topology::Tree => Some(Topology::Tree),
    })
}

fn qos_from_proto(value: i32, at: &str) -> Result<Qos, ConversionError> {
    qos_field(value, at, "qos")
}

/// The QoS in field `name` of the message at `at`.
fn qos_field(value: i32, at: &str, name: &str) -> Result<Qos, ConversionError> {
    enumeration(value, at, name, "QoS", |v| match v {
        pb::Qos::Unspecified => None,
        pb::Qos::AtMostOnce => Some(Qos::AtMostOnce),
        pb::Qos::AtLeastOnce => Some(Qos::AtLeastOnce),
        pb::Qos::ExactlyOnce => Some(Qos::ExactlyOnce),
    })
}

fn pacing_from_proto(
    pacing: Option<pb::workload_spec::Pacing>,
    at: &str,
) -> Result<Pacing, ConversionError> {
    // Reported as `pacing`, the domain's (and SPEC.toml's) name for the oneof.
    let at_pacing = field(at, "pacing");
    match required(pacing, at, "pacing")? {
        pb::workload_spec::Pacing::OpenLoop(open_loop) => Ok(Pacing::OpenLoop {
            interval: duration(open_loop.interval, &at_pacing, "interval")?,
        }),
        pb::workload_spec::Pacing::Burst(pb::Burst {}) => Ok(Pacing::Burst),
        pb::workload_spec::Pacing::Rate(pb::Rate { rate }) => Ok(Pacing::Rate { rate }),
        pb::workload_spec::Pacing::ClosedLoop(pb::ClosedLoop {}) => Ok(Pacing::ClosedLoop),
    }
}

fn engine_from_proto(
    message: pb::EngineOptions,
    at: &str,
) -> Result<EngineOptions, ConversionError> {
    let coalescing: Coalescing = message.coalescing.parse().map_err(|problem: String| {
        ConversionError::Invalid(FieldError {
            path: field(at, "coalescing"),
            value: format!("{:?}", message.coalescing),
            problem,
        })
    })?;
    Ok(EngineOptions {
        threads: narrow_u16(message.threads, at, "threads")?,
        coalescing,
    })
}

fn connection_from_proto(
    message: pb::ConnectionOptions,
    at: &str,
) -> Result<ConnectionOptions, ConversionError> {
    Ok(ConnectionOptions {
        client_id_prefix: message.client_id_prefix,
        clean_session: message.clean_session,
        keep_alive: duration(message.keep_alive, at, "keep_alive")?,
        ramp_up_per_second: message.ramp_up_per_second,
        connect_timeout: duration(message.connect_timeout, at, "connect_timeout")?,
        inflight: narrow_u16(message.inflight, at, "inflight")?,
        max_packet_size: message.max_packet_size.map(ByteSize),
        offline: message
            .offline
            .map(|gap| -> Result<OfflineGap, ConversionError> {
                let at = field(at, "offline");
                Ok(OfflineGap {
                    after: duration(gap.after, &at, "after")?,
                    gap: duration(gap.gap, &at, "gap")?,
                })
            })
            .transpose()?,
        reconnect: message
            .reconnect
            .map(|policy| -> Result<Reconnect, ConversionError> {
                let at = field(at, "reconnect");
                Ok(Reconnect {
                    within: duration(policy.within, &at, "within")?,
                    retry: duration(policy.retry, &at, "retry")?,
                    cut_all_at: policy
                        .cut_all_at
                        .map(|cut| duration(Some(cut), &at, "cut_all_at"))
                        .transpose()?,
                })
            })
            .transpose()?,
        topic_alias: message.topic_alias,
        message_expiry: message
            .message_expiry
            .map(|expiry| duration(Some(expiry), at, "message_expiry"))
            .transpose()?,
        receive_maximum: message
            .receive_maximum
            .map(|most| narrow_u16(most, at, "receive_maximum"))
            .transpose()?,
    })
}

fn drain_from_proto(message: pb::DrainOptions, at: &str) -> Result<DrainOptions, ConversionError> {
    Ok(DrainOptions {
        timeout: duration(message.timeout, at, "timeout")?,
        idle: duration(message.idle, at, "idle")?,
    })
}

/// A shard's ranges; whether they lie within the workload is for the caller to check.
pub(super) fn shard_from_proto(message: pb::Shard, at: &str) -> Result<Shard, ConversionError> {
    let publishers = required(message.publishers, at, "publishers")?;
    let subscribers = required(message.subscribers, at, "subscribers")?;
    Ok(Shard {
        publishers: publishers.start..publishers.end,
        subscribers: subscribers.start..subscribers.end,
    })
}

impl From<&WorkloadSpec> for pb::WorkloadSpec {
    fn from(spec: &WorkloadSpec) -> Self {
        pb::WorkloadSpec {
            broker: Some(pb::BrokerTarget::from(&spec.broker)),
            publishers: spec.publishers,
            subscribers: spec.subscribers,
            topology: pb::Topology::from(spec.topology).into(),
            retain: spec.retain.as_ref().map(|retain| pb::Retain {
                late_subscribers: retain.late_subscribers,
                filter: retain.filter.clone(),
                handling: u32::from(retain.handling),
                as_published: retain.as_published,
            }),
            wills: spec.wills.as_ref().map(|wills| pb::Wills {
                clients: wills.clients,
                dropped: wills.dropped,
                after: Some(duration_to_proto(wills.after)),
                delay: wills.delay.map(duration_to_proto),
                qos: pb::Qos::from(wills.qos).into(),
                retain: wills.retain,
            }),
            topics: spec.topics.as_ref().map(|tree| pb::TopicTree {
                pattern: tree.pattern.clone(),
                counts: tree.counts.clone().into_iter().collect(),
                subscribe: tree.subscribe.clone(),
            }),
            topic_prefix: spec.topic_prefix.clone(),
            qos: pb::Qos::from(spec.qos).into(),
            subscriber_qos: spec
                .subscriber_qos
                .map_or(0, |qos| pb::Qos::from(qos).into()),
            payload: spec.payload.bytes(),
            header_in_user_property: spec.header_in.is_property(),
            messages_per_publisher: spec.messages_per_publisher,
            warmup_messages: spec.warmup_messages,
            pacing: Some(match spec.pacing {
                Pacing::OpenLoop { interval } => {
                    pb::workload_spec::Pacing::OpenLoop(pb::OpenLoop {
                        interval: Some(duration_to_proto(interval)),
                    })
                }
                Pacing::Burst => pb::workload_spec::Pacing::Burst(pb::Burst {}),
                Pacing::Rate { rate } => pb::workload_spec::Pacing::Rate(pb::Rate { rate }),
                Pacing::ClosedLoop => pb::workload_spec::Pacing::ClosedLoop(pb::ClosedLoop {}),
            }),
            duration: spec.duration.map(duration_to_proto),
            warmup: spec.warmup.map(duration_to_proto),
            engine: Some(pb::EngineOptions {
                threads: spec.engine.threads.into(),
                coalescing: spec.engine.coalescing.to_string(),
            }),
            connection: Some(pb::ConnectionOptions::from(&spec.connection)),
            drain: Some(pb::DrainOptions {
                timeout: Some(duration_to_proto(spec.drain.timeout)),
                idle: Some(duration_to_proto(spec.drain.idle)),
            }),
            subscriber_rate_limit: spec.subscriber_rate_limit,
            shard: spec.shard.as_ref().map(pb::Shard::from),
            run_id: spec.run_id.clone(),
            churn: spec.churn.as_ref().map(|churn| pb::Churn {
                rate: churn.rate,
                connections: churn.connections,
                hold: Some(duration_to_proto(churn.hold)),
            }),
        }
    }
}

impl From<&BrokerTarget> for pb::BrokerTarget {
    fn from(broker: &BrokerTarget) -> Self {
        pb::BrokerTarget {
            host: broker.host.clone(),
            port: broker.port.into(),
            protocol: match broker.protocol {
                MqttVersion::V311 => pb::MqttVersion::V311,
                MqttVersion::V5 => pb::MqttVersion::V5,
            }
            .into(),
            // The path names a file on the agent's machine; a non-UTF-8 one cannot travel
            // intact in a proto string, and no plan writes one.
            tls_ca_file: broker
                .tls_ca_file
                .as_ref()
                .map(|path| path.to_string_lossy().into_owned()),
            username: broker.username.clone(),
            password: broker.password.clone(),
            transport: match broker.transport {
                Transport::Tcp => pb::MqttTransport::Tcp,
                Transport::WebSocket => pb::MqttTransport::Websocket,
                Transport::Quic => pb::MqttTransport::Quic,
            }
            .into(),
            websocket_path: broker.websocket_path.clone(),
            tls_ca_pem: broker.tls_ca_pem.clone(),
            quic_zero_rtt: broker.quic_zero_rtt,
            quic_streams: match broker.quic_streams {
                QuicStreams::Single => pb::QuicStreams::Single,
                QuicStreams::PerTopic => pb::QuicStreams::PerTopic,
                QuicStreams::PerPublish => pb::QuicStreams::PerPublish,
            }
            .into(),
        }
    }
}

impl From<&ConnectionOptions> for pb::ConnectionOptions {
    fn from(connection: &ConnectionOptions) -> Self {
        pb::ConnectionOptions {
            client_id_prefix: connection.client_id_prefix.clone(),
            clean_session: connection.clean_session,
            keep_alive: Some(duration_to_proto(connection.keep_alive)),
            ramp_up_per_second: connection.ramp_up_per_second,
            connect_timeout: Some(duration_to_proto(connection.connect_timeout)),
            inflight: connection.inflight.into(),
            max_packet_size: connection.max_packet_size.map(ByteSize::bytes),
            offline: connection.offline.map(|gap| pb::OfflineGap {
                after: Some(duration_to_proto(gap.after)),
                gap: Some(duration_to_proto(gap.gap)),
            }),
            reconnect: connection.reconnect.map(|policy| pb::Reconnect {
                within: Some(duration_to_proto(policy.within)),
                retry: Some(duration_to_proto(policy.retry)),
                cut_all_at: policy.cut_all_at.map(duration_to_proto),
            }),
            topic_alias: connection.topic_alias,
            message_expiry: connection.message_expiry.map(duration_to_proto),
            receive_maximum: connection.receive_maximum.map(u32::from),
        }
    }
}

impl From<&Shard> for pb::Shard {
    fn from(shard: &Shard) -> Self {
        pb::Shard {
            publishers: Some(pb::IndexRange {
                start: shard.publishers.start,
                end: shard.publishers.end,
            }),
            subscribers: Some(pb::IndexRange {
                start: shard.subscribers.start,
                end: shard.subscribers.end,
            }),
        }
    }
}

impl From<Topology> for pb::Topology {
    fn from(topology: Topology) -> Self {
        match topology {
            Topology::Shared => pb::Topology::Shared,
            Topology::Pairs => pb::Topology::Pairs,
            Topology::FanOut => pb::Topology::FanOut,
            Topology::Tree => pb::Topology::Tree,
        }
    }
}

impl From<Qos> for pb::Qos {
    fn from(qos: Qos) -> Self {
        match qos {
            Qos::AtMostOnce => pb::Qos::AtMostOnce,
            Qos::AtLeastOnce => pb::Qos::AtLeastOnce,
            Qos::ExactlyOnce => pb::Qos::ExactlyOnce,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;

    /// A change that breaks an otherwise valid message.
    type Mutation = Box<dyn FnOnce(&mut pb::WorkloadSpec)>;

    /// A latency-test spec in the study's shape: 100 publishers, 1 subscriber, open loop.
    pub(in crate::convert) fn open_loop_spec() -> WorkloadSpec {
        WorkloadSpec {
            broker: BrokerTarget {
                host: "198.18.0.2".into(),
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
            publishers: 100,
            subscribers: 1,
            topology: Topology::Shared,
            topics: None,
            topic_prefix: "continuum".into(),
            qos: Qos::AtLeastOnce,
            payload: ByteSize(10),
            header_in: Default::default(),
            messages_per_publisher: 40,
            warmup_messages: 4,
            duration: None,
            warmup: None,
            pacing: Pacing::OpenLoop {
                interval: Duration::from_millis(250),
            },
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

    /// A throughput-test spec with every optional field set: burst, TLS, login, shard.
    fn burst_spec_with_everything() -> WorkloadSpec {
        WorkloadSpec {
            broker: BrokerTarget {
                host: "broker.example".into(),
                port: 8883,
                protocol: MqttVersion::V5,
                tls_ca_file: Some(PathBuf::from("/etc/continuum/ca.pem")),
                tls_ca_pem: None,
                username: Some("bench".into()),
                password: Some("secret".into()),
                transport: Transport::Tcp,
                websocket_path: None,
                quic_zero_rtt: false,
                quic_streams: Default::default(),
            },
            publishers: 10,
            subscribers: 10,
            topology: Topology::Pairs,
            topics: None,
            topic_prefix: "lab/edge".into(),
            qos: Qos::ExactlyOnce,
            payload: ByteSize(1_000_000),
            header_in: HeaderPlace::UserProperty,
            messages_per_publisher: 1_000,
            warmup_messages: 0,
            duration: None,
            warmup: None,
            pacing: Pacing::Burst,
            connection: ConnectionOptions {
                client_id_prefix: "cq".into(),
                clean_session: false,
                keep_alive: Duration::from_secs(30),
                ramp_up_per_second: Some(50),
                connect_timeout: Duration::from_millis(1_500),
                inflight: 20,
                max_packet_size: Some(ByteSize(2_000_000)),
                offline: Some(OfflineGap {
                    after: Duration::from_millis(1_250),
                    gap: Duration::from_secs(2),
                }),
                reconnect: None,
                topic_alias: true,
                message_expiry: Some(Duration::from_secs(3)),
                receive_maximum: Some(5),
            },
            engine: EngineOptions {
                threads: 3,
                coalescing: Coalescing::Sleep(Duration::from_micros(250)),
            },
            drain: DrainOptions {
                timeout: Duration::from_secs(10),
                idle: Duration::from_nanos(500_000_001),
            },
            subscriber_rate_limit: Some(1_000),
            shard: Some(Shard {
                publishers: 0..5,
                subscribers: 5..10,
            }),
            run_id: Some("run-42".into()),
            churn: Some(Churn {
                rate: 250.5,
                connections: 10_000,
                hold: Duration::from_millis(1_500),
            }),
            retain: None,
            wills: None,
            subscriber_qos: Some(Qos::AtMostOnce),
        }
    }

    fn round_trip(spec: &WorkloadSpec) -> WorkloadSpec {
        WorkloadSpec::try_from(pb::WorkloadSpec::from(spec)).expect("a valid spec converts back")
    }

    #[test]
    fn open_loop_spec_round_trips() {
        let spec = open_loop_spec();
        assert_eq!(round_trip(&spec), spec);
    }

    #[test]
    fn burst_spec_with_shard_tls_and_login_round_trips() {
        let spec = burst_spec_with_everything();
        assert_eq!(round_trip(&spec), spec);
        let mut fan_out = spec;
        fan_out.topology = Topology::FanOut;
        fan_out.subscribers = 20;
        fan_out.qos = Qos::AtMostOnce;
        fan_out.shard = None;
        assert_eq!(round_trip(&fan_out), fan_out);
        let mut tree = fan_out;
        tree.topology = Topology::Tree;
        tree.subscribers = 2;
        tree.topics = Some(TopicTree {
            pattern: "site/{site}/device/{device}".into(),
            counts: [("site".to_string(), 2), ("device".to_string(), 5)].into(),
            subscribe: vec!["site/+/device/+".into(), "site/1/#".into()],
        });
        assert_eq!(round_trip(&tree), tree);
    }

    #[test]
    fn wills_round_trip_with_and_without_their_delay() {
        let mut spec = open_loop_spec();
        spec.broker.protocol = MqttVersion::V5;
        for delay in [Some(Duration::from_secs(2)), None] {
            spec.wills = Some(Wills {
                clients: 200,
                dropped: 50,
                after: Duration::from_millis(1_500),
                delay,
                qos: Qos::ExactlyOnce,
                retain: true,
            });
            assert_eq!(round_trip(&spec), spec);
        }
    }

    #[test]
    fn a_reconnect_policy_round_trips_with_and_without_its_cut() {
        let mut spec = open_loop_spec();
        spec.qos = Qos::AtLeastOnce;
        for cut_all_at in [Some(Duration::from_millis(1_500)), None] {
            spec.connection.reconnect = Some(Reconnect {
                within: Duration::from_secs(20),
                retry: Duration::from_millis(250),
                cut_all_at,
            });
            assert_eq!(round_trip(&spec), spec);
        }
    }

    #[test]
    fn timed_specs_round_trip_with_their_pacing() {
        let mut spec = open_loop_spec();
        spec.messages_per_publisher = 0;
        spec.warmup_messages = 0;
        spec.duration = Some(Duration::from_secs(10));
        spec.warmup = Some(Duration::from_millis(2_500));
        for pacing in [Pacing::Rate { rate: 50_000 }, Pacing::ClosedLoop] {
            spec.pacing = pacing;
            spec.qos = Qos::AtLeastOnce;
            spec.engine.coalescing = Coalescing::Off;
            assert_eq!(round_trip(&spec), spec);
        }
        let error = error_of(|m| {
            m.engine = Some(pb::EngineOptions {
                threads: 0,
                coalescing: "sometimes".into(),
            })
        });
        assert_eq!(error.path(), "spec.engine.coalescing");
    }

    fn error_of(mutate: impl FnOnce(&mut pb::WorkloadSpec)) -> ConversionError {
        let mut message = pb::WorkloadSpec::from(&open_loop_spec());
        mutate(&mut message);
        WorkloadSpec::try_from(message).expect_err("the message is invalid")
    }

    #[test]
    fn missing_sub_messages_name_their_path() {
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|m| m.broker = None), "spec.broker: missing"),
            (Box::new(|m| m.pacing = None), "spec.pacing: missing"),
            (
                Box::new(|m| {
                    m.pacing = Some(pb::workload_spec::Pacing::OpenLoop(pb::OpenLoop {
                        interval: None,
                    }))
                }),
                "spec.pacing.interval: missing",
            ),
            (Box::new(|m| m.drain = None), "spec.drain: missing"),
            (
                Box::new(|m| {
                    if let Some(connection) = m.connection.as_mut() {
                        connection.keep_alive = None;
                    }
                }),
                "spec.connection.keep_alive: missing",
            ),
            (
                Box::new(|m| {
                    m.shard = Some(pb::Shard {
                        publishers: None,
                        subscribers: None,
                    })
                }),
                "spec.shard.publishers: missing",
            ),
            (Box::new(|m| m.qos = 0), "spec.qos: missing"),
        ];
        for (mutate, expected) in cases {
            assert_eq!(error_of(mutate).to_string(), expected);
        }
    }

    #[test]
    fn quic_stream_modes_round_trip_and_unspecified_is_one_stream() {
        let mut spec = open_loop_spec();
        spec.broker.transport = Transport::Quic;
        spec.broker.tls_ca_pem = Some("-----BEGIN CERTIFICATE-----".into());
        for mode in [
            QuicStreams::Single,
            QuicStreams::PerTopic,
            QuicStreams::PerPublish,
        ] {
            spec.broker.quic_streams = mode;
            assert_eq!(round_trip(&spec), spec, "{mode}");
        }
        let mut message = pb::WorkloadSpec::from(&spec);
        if let Some(broker) = message.broker.as_mut() {
            broker.quic_streams = pb::QuicStreams::Unspecified.into();
        }
        let read = WorkloadSpec::try_from(message).expect("converts");
        assert_eq!(read.broker.quic_streams, QuicStreams::Single);
        let error = error_of(|m| m.broker.as_mut().map_or((), |b| b.quic_streams = 9));
        assert_eq!(error.path(), "spec.broker.quic_streams");
    }

    #[test]
    fn invalid_enum_values_name_their_path() {
        assert_eq!(
            error_of(|m| m.qos = 7).to_string(),
            "spec.qos: 7 is not a QoS"
        );
        let error = error_of(|m| m.broker.as_mut().map_or((), |b| b.protocol = 9));
        assert_eq!(error.path(), "spec.broker.protocol");
        assert_eq!(
            error,
            ConversionError::UnknownEnum {
                path: "spec.broker.protocol".into(),
                value: 9,
                kind: "MQTT version"
            }
        );
        assert_eq!(error_of(|m| m.topology = -1).path(), "spec.topology");
    }

    #[test]
    fn out_of_range_numbers_and_negative_durations_are_refused() {
        assert_eq!(
            error_of(|m| m.broker.as_mut().map_or((), |b| b.port = 70_000)).to_string(),
            "spec.broker.port = 70000: must be at most 65535"
        );
        let error = error_of(|m| {
            m.pacing = Some(pb::workload_spec::Pacing::OpenLoop(pb::OpenLoop {
                interval: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
            }))
        });
        assert_eq!(error.path(), "spec.pacing.interval");
        assert!(error.to_string().contains("-1s"), "{error}");
    }

    #[test]
    fn domain_validation_errors_carry_the_spec_path_and_value() {
        let error = error_of(|m| m.publishers = 0);
        assert_eq!(
            error.to_string(),
            "spec.publishers = 0: at least one publisher is needed"
        );
        let error = error_of(|m| {
            m.pacing = Some(pb::workload_spec::Pacing::OpenLoop(pb::OpenLoop {
                interval: Some(prost_types::Duration::default()),
            }))
        });
        assert_eq!(error.path(), "spec.pacing.interval");
        let error = error_of(|m| {
            m.shard = Some(pb::Shard::from(&Shard {
                publishers: 0..101,
                subscribers: 0..1,
            }))
        });
        assert_eq!(error.path(), "spec.shard.publishers");
    }

    #[test]
    fn invalid_messages_become_invalid_argument_statuses() {
        let status = tonic::Status::from(error_of(|m| m.qos = 7));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "spec.qos: 7 is not a QoS");
    }
}
