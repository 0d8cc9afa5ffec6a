//! Brokers on the wire: `BrokerSpec` <-> [`domain::BrokerSpec`], `Product` <->
//! [`domain::Product`]. Receiving checks presence, ranges and the kind's own rules
//! (`BrokerKind::validate`); the name and port are checked by the agent's registry, which
//! every caller goes through.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use domain::broker::DEFAULT_NAMESPACE;
use domain::{
    BrokerKind, BrokerOptions, BrokerSpec, FieldError, InvalidSpec, Product, QuicDelivery,
};

use super::{ConversionError, enumeration, field, required};
use crate::agent::v1 as pb;

/// The option keys a `BrokerSpec` message may carry.
const OPTION_KEYS: &str = "max_inflight_messages, max_queued_messages, start_deadline, websocket_port, quic_port, \
     quic_delivery";

impl From<Product> for pb::Product {
    fn from(product: Product) -> Self {
        match product {
            Product::Mosquitto => pb::Product::Mosquitto,
            Product::RabbitMq => pb::Product::Rabbitmq,
            Product::Emqx => pb::Product::Emqx,
            Product::VerneMq => pb::Product::Vernemq,
            Product::HiveMq => pb::Product::Hivemq,
            Product::Mqttv5 => pb::Product::Mqttv5,
            Product::Aedes => pb::Product::Aedes,
            Product::Amqtt => pb::Product::Amqtt,
            Product::ActiveMq => pb::Product::Activemq,
            Product::Ejabberd => pb::Product::Ejabberd,
            Product::Rmqtt => pb::Product::Rmqtt,
        }
    }
}

/// The product a wire number names; `None` for the unspecified zero or a number this side
/// does not know (a newer peer's product).
pub fn known_product(value: i32) -> Option<Product> {
    product(value, "product").ok()
}

/// A product field; the unspecified zero is missing.
fn product(value: i32, at: &str) -> Result<Product, ConversionError> {
    enumeration(
        value,
        at,
        "product",
        "broker product",
        |p: pb::Product| match p {
            pb::Product::Unspecified => None,
            pb::Product::Mosquitto => Some(Product::Mosquitto),
            pb::Product::Rabbitmq => Some(Product::RabbitMq),
            pb::Product::Emqx => Some(Product::Emqx),
            pb::Product::Vernemq => Some(Product::VerneMq),
            pb::Product::Hivemq => Some(Product::HiveMq),
            pb::Product::Mqttv5 => Some(Product::Mqttv5),
            pb::Product::Aedes => Some(Product::Aedes),
            pb::Product::Amqtt => Some(Product::Amqtt),
            pb::Product::Activemq => Some(Product::ActiveMq),
            pb::Product::Ejabberd => Some(Product::Ejabberd),
            pb::Product::Rmqtt => Some(Product::Rmqtt),
        },
    )
}

/// A broker request: `spec` is its path in errors (`spec.kind.kubernetes.node: missing`).
impl TryFrom<pb::BrokerSpec> for BrokerSpec {
    type Error = ConversionError;

    fn try_from(message: pb::BrokerSpec) -> Result<Self, ConversionError> {
        let at = "spec";
        let kind = match required(message.kind, at, "kind")? {
            pb::broker_spec::Kind::Native(native) => BrokerKind::Native {
                product: product(native.product, "spec.kind.native")?,
            },
            pb::broker_spec::Kind::Embedded(_) => BrokerKind::Embedded,
            pb::broker_spec::Kind::External(external) => BrokerKind::External {
                address: socket_address(&external.address, "spec.kind.external.address")?,
            },
            pb::broker_spec::Kind::Kubernetes(kubernetes) => kubernetes_kind(kubernetes)?,
            pb::broker_spec::Kind::Forward(forward) => BrokerKind::Forward {
                target: socket_address(&forward.target, "spec.kind.forward.target")?,
            },
        };
        // The kind's own errors read `kind.kubernetes.<field>: ...`.
        kind.validate().map_err(|error| spec_error(at, error))?;
        let bind = match (&kind, message.bind.as_str()) {
            // Neither binds on the agent's node: the address is elsewhere (a NodePort).
            (BrokerKind::External { .. } | BrokerKind::Kubernetes { .. }, _) => {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            }
            (_, "") => {
                return Err(ConversionError::Missing {
                    path: field(at, "bind"),
                });
            }
            (_, text) => text.parse().map_err(|error: std::net::AddrParseError| {
                ConversionError::Invalid(FieldError {
                    path: field(at, "bind"),
                    value: format!("{text:?}"),
                    problem: error.to_string(),
                })
            })?,
        };
        let port = u16::try_from(message.port).map_err(|_| {
            ConversionError::Invalid(FieldError {
                path: field(at, "port"),
                value: message.port.to_string(),
                problem: "is not a TCP port".to_owned(),
            })
        })?;
        Ok(BrokerSpec {
            name: message.name,
            kind,
            bind,
            port,
            options: options(&message.options)?,
        })
    }
}

/// `host:port` at `path`, parsed.
fn socket_address(text: &str, path: &str) -> Result<SocketAddr, ConversionError> {
    text.parse().map_err(|error: std::net::AddrParseError| {
        ConversionError::Invalid(FieldError {
            path: path.to_owned(),
            value: format!("{text:?}"),
            problem: error.to_string(),
        })
    })
}

/// A Kubernetes target; the namespace defaults to [`DEFAULT_NAMESPACE`].
fn kubernetes_kind(message: pb::KubernetesBroker) -> Result<BrokerKind, ConversionError> {
    let at = "spec.kind.kubernetes";
    if message.node.is_empty() {
        return Err(ConversionError::Missing {
            path: field(at, "node"),
        });
    }
    let node_port = match message.node_port {
        0 => None,
        port => Some(u16::try_from(port).map_err(|_| {
            spec_error(
                "spec",
                InvalidSpec::new("kind.kubernetes.node_port", port, "is not a TCP port"),
            )
        })?),
    };
    Ok(BrokerKind::Kubernetes {
        product: product(message.product, at)?,
        node: message.node,
        namespace: if message.namespace.is_empty() {
            DEFAULT_NAMESPACE.to_owned()
        } else {
            message.namespace
        },
        node_port,
        on_every_node: message.on_every_node,
    })
}

fn options(
    message: &std::collections::BTreeMap<String, String>,
) -> Result<BrokerOptions, ConversionError> {
    let mut options = BrokerOptions::default();
    for (key, value) in message {
        let invalid = |problem: String| {
            ConversionError::Invalid(FieldError {
                path: format!("spec.options.{key}"),
                value: format!("{value:?}"),
                problem,
            })
        };
        match key.as_str() {
            "max_inflight_messages" => {
                options.max_inflight_messages =
                    Some(value.parse().map_err(|e| invalid(format!("{e}")))?);
            }
            "max_queued_messages" => {
                options.max_queued_messages =
                    Some(value.parse().map_err(|e| invalid(format!("{e}")))?);
            }
            "start_deadline" => {
                let deadline: Duration =
                    humantime::parse_duration(value).map_err(|e| invalid(e.to_string()))?;
                if deadline > domain::broker::MAX_START_DEADLINE {
                    return Err(invalid(format!(
                        "longer than {}",
                        humantime::format_duration(domain::broker::MAX_START_DEADLINE)
                    )));
                }
                options.start_deadline = Some(deadline);
            }
            "websocket_port" => {
                options.websocket_port = Some(value.parse().map_err(|e| invalid(format!("{e}")))?);
            }
            "quic_port" => {
                options.quic_port = Some(value.parse().map_err(|e| invalid(format!("{e}")))?);
            }
            "quic_delivery" => {
                options.quic_delivery = value.parse().map_err(invalid)?;
            }
            _ => return Err(invalid(format!("unknown option ({OPTION_KEYS})"))),
        }
    }
    Ok(options)
}

/// A domain check's error, its field placed under the message at `at`.
fn spec_error(at: &str, error: InvalidSpec) -> ConversionError {
    ConversionError::Rule {
        path: format!("{at}.{}", error.field),
        problem: format!("{:?} {}", error.value, error.reason),
    }
}

/// A broker as a request.
impl From<&BrokerSpec> for pb::BrokerSpec {
    fn from(spec: &BrokerSpec) -> Self {
        let kind = match &spec.kind {
            BrokerKind::Native { product } => pb::broker_spec::Kind::Native(pb::NativeBroker {
                product: pb::Product::from(*product).into(),
            }),
            BrokerKind::Embedded => pb::broker_spec::Kind::Embedded(pb::EmbeddedBroker {}),
            BrokerKind::External { address } => {
                pb::broker_spec::Kind::External(pb::ExternalBroker {
                    address: address.to_string(),
                })
            }
            BrokerKind::Forward { target } => pb::broker_spec::Kind::Forward(pb::ForwardingHop {
                target: target.to_string(),
            }),
            BrokerKind::Kubernetes {
                product,
                node,
                namespace,
                node_port,
                on_every_node,
            } => pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
                product: pb::Product::from(*product).into(),
                node: node.clone(),
                namespace: namespace.clone(),
                node_port: node_port.map_or(0, u32::from),
                on_every_node: *on_every_node,
            }),
        };
        let mut options = std::collections::BTreeMap::new();
        if let Some(inflight) = spec.options.max_inflight_messages {
            options.insert("max_inflight_messages".to_owned(), inflight.to_string());
        }
        if let Some(queued) = spec.options.max_queued_messages {
            options.insert("max_queued_messages".to_owned(), queued.to_string());
        }
        if let Some(deadline) = spec.options.start_deadline {
            options.insert(
                "start_deadline".to_owned(),
                humantime::format_duration(deadline).to_string(),
            );
        }
        if let Some(port) = spec.options.websocket_port {
            options.insert("websocket_port".to_owned(), port.to_string());
        }
        if let Some(port) = spec.options.quic_port {
            options.insert("quic_port".to_owned(), port.to_string());
        }
        if spec.options.quic_delivery != QuicDelivery::ControlOnly {
            options.insert(
                "quic_delivery".to_owned(),
                spec.options.quic_delivery.name().to_owned(),
            );
        }
        pb::BrokerSpec {
            name: spec.name.clone(),
            kind: Some(kind),
            bind: spec.bind.to_string(),
            port: u32::from(spec.port),
            options,
        }
    }
}

impl From<&loadgen_model::capabilities::Capabilities> for pb::BrokerCapabilities {
    fn from(caps: &loadgen_model::capabilities::Capabilities) -> Self {
        pb::BrokerCapabilities {
            mqtt311: caps.mqtt311,
            mqtt5: caps.mqtt5,
            maximum_qos: caps.maximum_qos.map(u32::from),
            retain: caps.retain,
            retain_to_wildcards: caps.retain_to_wildcards,
            wildcards: caps.wildcards,
            shared_subscriptions: caps.shared_subscriptions,
            topic_alias_maximum: caps.topic_alias_maximum.map(u32::from),
            receive_maximum: caps.receive_maximum.map(u32::from),
            maximum_packet_size: caps.maximum_packet_size,
            kept_sessions: caps.kept_sessions,
            session_expiry_secs: caps.session_expiry_secs,
            will_delay: caps.will_delay,
            notes: caps.notes.clone(),
        }
    }
}

/// What an agent reported; values out of MQTT's ranges are dropped as unknown, and notes are
/// kept short (they reach the manifest and the report).
impl From<pb::BrokerCapabilities> for loadgen_model::capabilities::Capabilities {
    fn from(caps: pb::BrokerCapabilities) -> Self {
        const MAX_NOTES: usize = 16;
        const MAX_NOTE_CHARS: usize = 200;
        loadgen_model::capabilities::Capabilities {
            mqtt311: caps.mqtt311,
            mqtt5: caps.mqtt5,
            maximum_qos: caps
                .maximum_qos
                .and_then(|q| u8::try_from(q).ok())
                .filter(|q| *q <= 2),
            retain: caps.retain,
            retain_to_wildcards: caps.retain_to_wildcards,
            wildcards: caps.wildcards,
            shared_subscriptions: caps.shared_subscriptions,
            topic_alias_maximum: caps.topic_alias_maximum.and_then(|v| u16::try_from(v).ok()),
            receive_maximum: caps.receive_maximum.and_then(|v| u16::try_from(v).ok()),
            maximum_packet_size: caps.maximum_packet_size,
            kept_sessions: caps.kept_sessions,
            session_expiry_secs: caps.session_expiry_secs,
            will_delay: caps.will_delay,
            notes: caps
                .notes
                .into_iter()
                .take(MAX_NOTES)
                .map(|note| note.chars().take(MAX_NOTE_CHARS).collect())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(product: pb::Product) -> pb::BrokerSpec {
        pb::BrokerSpec {
            name: "b1".into(),
            kind: Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
                product: product.into(),
            })),
            bind: "127.0.0.1".into(),
            port: 0,
            options: Default::default(),
        }
    }

    #[test]
    fn a_native_spec_converts_with_its_options() {
        let mut message = native(pb::Product::Mosquitto);
        message
            .options
            .insert("max_inflight_messages".into(), "40".into());
        message
            .options
            .insert("start_deadline".into(), "30s".into());
        message.options.insert("quic_port".into(), "0".into());
        message
            .options
            .insert("quic_delivery".into(), "per_topic".into());
        let spec = BrokerSpec::try_from(message).expect("valid");
        assert_eq!(spec.options.quic_port, Some(0));
        assert_eq!(spec.options.quic_delivery, QuicDelivery::PerTopic);
        assert_eq!(
            spec.kind,
            BrokerKind::Native {
                product: Product::Mosquitto
            }
        );
        assert_eq!(spec.options.max_inflight_messages, Some(40));
        assert_eq!(spec.options.start_deadline, Some(Duration::from_secs(30)));
        assert_eq!(
            BrokerSpec::try_from(pb::BrokerSpec::from(&spec)).expect("round trip"),
            spec
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let message = |f: fn(&mut pb::BrokerSpec)| {
            let mut m = native(pb::Product::Mosquitto);
            f(&mut m);
            BrokerSpec::try_from(m).expect_err("invalid").to_string()
        };
        assert!(
            message(
                |m| m.kind = Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
                    product: 0
                }))
            )
            .starts_with("spec.kind.native.product")
        );
        assert!(message(|m| m.kind = None).starts_with("spec.kind: missing"));
        assert!(message(|m| m.bind = "nowhere".into()).starts_with("spec.bind"));
        assert!(message(|m| m.port = 70_000).starts_with("spec.port"));
        assert!(
            message(|m| {
                m.options.insert("colour".into(), "blue".into());
            })
            .starts_with("spec.options.colour")
        );
        let delivery = message(|m| {
            m.options.insert("quic_delivery".into(), "sideways".into());
        });
        assert_eq!(
            delivery,
            "spec.options.quic_delivery = \"sideways\": not a QUIC delivery (control_only, \
             per_topic or per_publish)"
        );
        // A deadline the agent would add to `Instant::now()` must not overflow it.
        let too_long = message(|m| {
            m.options
                .insert("start_deadline".into(), "18446744073709551615s".into());
        });
        assert!(
            too_long.starts_with("spec.options.start_deadline") && too_long.contains("longer than"),
            "{too_long}"
        );
    }

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

    #[test]
    fn a_kubernetes_spec_converts_with_its_defaults() {
        let spec = BrokerSpec::try_from(kubernetes("worker-1", "", 0)).expect("valid");
        assert_eq!(
            spec.kind,
            BrokerKind::Kubernetes {
                product: Product::VerneMq,
                node: "worker-1".into(),
                namespace: "continuum".into(),
                node_port: None,
                on_every_node: false,
            }
        );
        assert_eq!(spec.bind, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let spec = BrokerSpec::try_from(kubernetes("worker-1", "lab", 31999)).expect("valid");
        assert!(matches!(
            spec.kind,
            BrokerKind::Kubernetes { node_port: Some(31999), ref namespace, .. } if namespace == "lab"
        ));
    }

    #[test]
    fn bad_kubernetes_fields_are_named() {
        let message = |m: pb::BrokerSpec| BrokerSpec::try_from(m).expect_err("invalid").to_string();
        for (bad, field) in [
            (kubernetes("", "", 0), "spec.kind.kubernetes.node: missing"),
            (kubernetes("Worker 1", "", 0), "spec.kind.kubernetes.node: "),
            (
                kubernetes("w", "Lab", 0),
                "spec.kind.kubernetes.namespace: ",
            ),
            (
                kubernetes("w", "", 1883),
                "spec.kind.kubernetes.node_port: ",
            ),
            (
                kubernetes("w", "", 70_000),
                "spec.kind.kubernetes.node_port: ",
            ),
        ] {
            let text = message(bad);
            assert!(text.starts_with(field), "{text}");
        }
        let mut no_product = kubernetes("w", "", 0);
        no_product.kind = Some(pb::broker_spec::Kind::Kubernetes(pb::KubernetesBroker {
            product: 0,
            node: "w".into(),
            ..Default::default()
        }));
        assert!(message(no_product).starts_with("spec.kind.kubernetes.product"));
    }
}

#[cfg(test)]
mod capability_tests {
    use loadgen_model::capabilities::Capabilities;

    use super::pb;

    #[test]
    fn capabilities_round_trip_and_out_of_range_values_are_unknown() {
        let caps = Capabilities {
            mqtt311: true,
            mqtt5: true,
            maximum_qos: Some(1),
            retain: Some(true),
            retain_to_wildcards: Some(false),
            wildcards: Some(true),
            shared_subscriptions: Some(false),
            topic_alias_maximum: Some(10),
            receive_maximum: Some(20),
            maximum_packet_size: Some(1 << 20),
            kept_sessions: Some(true),
            session_expiry_secs: Some(300),
            will_delay: Some(false),
            notes: vec!["shared subscription: SUBACK refused".into()],
        };
        assert_eq!(
            Capabilities::from(pb::BrokerCapabilities::from(&caps)),
            caps
        );
        let hostile = pb::BrokerCapabilities {
            maximum_qos: Some(7),
            receive_maximum: Some(70_000),
            notes: vec!["x".repeat(10_000); 100],
            ..pb::BrokerCapabilities::default()
        };
        let read = Capabilities::from(hostile);
        assert_eq!((read.maximum_qos, read.receive_maximum), (None, None));
        assert_eq!(read.notes.len(), 16);
        assert!(read.notes.iter().all(|n| n.chars().count() == 200));
    }
}
