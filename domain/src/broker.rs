//! What a caller asks an agent to run: [`BrokerSpec`] (which broker, where it listens, its
//! limits), and the checks that turn a bad request into an [`InvalidSpec`] naming the field.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::invalid_spec::InvalidSpec;
use crate::name::check_name;
use crate::product::Product;

/// One broker instance to run on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSpec {
    /// Instance id, unique on this agent: `[A-Za-z0-9_-]{1,64}`.
    pub name: String,
    /// Which broker and how it is run.
    pub kind: BrokerKind,
    /// Address the MQTT listener binds (native and embedded; ignored for external).
    pub bind: IpAddr,
    /// MQTT port; 0 lets the agent pick a free one (native and embedded).
    pub port: u16,
    /// Limits and timing.
    pub options: BrokerOptions,
}

/// How a broker is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerKind {
    /// A broker process from an installed product, with a config the agent generates.
    Native {
        /// Which product.
        product: Product,
    },
    /// rumqttd inside the agent process: nothing to install.
    Embedded,
    /// A broker someone else runs; the agent only records and probes its address.
    External {
        /// Where MQTT clients reach it.
        address: SocketAddr,
    },
    /// A pinned official image on the Kubernetes cluster this agent reaches with kubectl:
    /// ConfigMap + Deployment + NodePort Service, the pod pinned to `node`.
    Kubernetes {
        /// Which product.
        product: Product,
        /// The node the pod runs on (its `kubernetes.io/hostname` label).
        node: String,
        /// The namespace of its objects.
        namespace: String,
        /// The NodePort clients connect to; `None` means the product's default.
        node_port: Option<u16>,
        /// Whether every node's NodePort forwards to the pod (`externalTrafficPolicy:
        /// Cluster`: kube-proxy forwards from a node without the pod, as the study's tests
        /// relied on when they dialled the headnode), or only the pod's node answers
        /// (`Local`, no extra hop and no source NAT: the default).
        on_every_node: bool,
    },
    /// Not a broker: a TCP forwarder on this node to a broker on another, the entry hop of
    /// a message's path (as kube-proxy forwarded the study's messages from the headnode to
    /// the worker). Each connection is relayed byte for byte, with `TCP_NODELAY` both ways.
    Forward {
        /// The broker it forwards to.
        target: SocketAddr,
    },
}

/// Namespace of Kubernetes brokers unless the request names one.
pub const DEFAULT_NAMESPACE: &str = "continuum";

/// The NodePort range of a default Kubernetes API server (`--service-node-port-range`).
pub const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Limits and timing of one instance. The defaults lift every limit a benchmark could trip
/// over by accident: 1 MB+ packets, anonymous clients, deep queues.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerOptions {
    /// Unacknowledged QoS 1/2 messages per client. `None` keeps the product's default
    /// (Mosquitto and VerneMQ 20, EMQX 32, rumqttd 100).
    pub max_inflight_messages: Option<u16>,
    /// Messages queued per client beyond those in flight. `None` means
    /// [`DEFAULT_MAX_QUEUED_MESSAGES`].
    pub max_queued_messages: Option<u32>,
    /// How long a start may take before it counts as failed. `None` means the driver's
    /// default (10 s for Mosquitto and embedded, 60 s for the JVM and Erlang brokers).
    pub start_deadline: Option<Duration>,
    /// A second listener speaking MQTT over WebSocket (browsers, many gateways) on this
    /// port, beside the MQTT one; 0 lets the agent pick a free one (a kubernetes broker's
    /// default NodePort for it). `None`: no WebSocket listener.
    pub websocket_port: Option<u16>,
    /// A listener speaking MQTT over QUIC (UDP, TLS 1.3) on this port, with a certificate the
    /// agent makes for the instance; 0 lets the agent pick a free one. `None`: no QUIC
    /// listener. Native brokers only.
    pub quic_port: Option<u16>,
    /// Where the QUIC listener delivers PUBLISH to subscribers: on each connection's one
    /// stream (the default), or on streams the broker opens per topic or per message
    /// (the mqttv5 broker only).
    pub quic_delivery: QuicDelivery,
}

/// Where a broker delivers PUBLISH to a client over QUIC (the mqttv5 broker's
/// `server_delivery_strategy`, whose names these are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuicDelivery {
    /// On the client's control stream, the one it opened: what a single-stream client reads.
    #[default]
    ControlOnly,
    /// On a stream the broker opens per topic, kept for that topic's later messages.
    PerTopic,
    /// On a stream the broker opens per message.
    PerPublish,
}

impl QuicDelivery {
    /// Every name, as an error lists them.
    pub const NAMES: &'static str = "control_only, per_topic or per_publish";

    /// Its name in a plan and in the broker's settings.
    pub fn name(self) -> &'static str {
        match self {
            QuicDelivery::ControlOnly => "control_only",
            QuicDelivery::PerTopic => "per_topic",
            QuicDelivery::PerPublish => "per_publish",
        }
    }
}

impl std::str::FromStr for QuicDelivery {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        [
            QuicDelivery::ControlOnly,
            QuicDelivery::PerTopic,
            QuicDelivery::PerPublish,
        ]
        .into_iter()
        .find(|delivery| delivery.name() == name)
        .ok_or_else(|| format!("not a QUIC delivery ({})", Self::NAMES))
    }
}

/// Queue limit used unless [`BrokerOptions::max_queued_messages`] is set: high enough that a
/// benchmark measures the broker, not Mosquitto's default of 1000 queued messages.
pub const DEFAULT_MAX_QUEUED_MESSAGES: u32 = 1_000_000;

/// Longest start deadline accepted.
pub const MAX_START_DEADLINE: Duration = Duration::from_secs(600);

impl BrokerOptions {
    /// The start deadline, or `default` if none was given; never over [`MAX_START_DEADLINE`],
    /// so a deadline computed from it (`Instant::now() + ...`) cannot overflow.
    pub fn start_deadline_or(&self, default: Duration) -> Duration {
        self.start_deadline
            .unwrap_or(default)
            .min(MAX_START_DEADLINE)
    }

    /// [`Self::max_queued_messages`] or its default.
    pub fn max_queued_messages(&self) -> u32 {
        self.max_queued_messages
            .unwrap_or(DEFAULT_MAX_QUEUED_MESSAGES)
    }
}

impl BrokerSpec {
    /// Checks what can be checked without touching the node.
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        validate_name(&self.name)?;
        self.kind.validate()?;
        if matches!(self.kind, BrokerKind::Kubernetes { .. }) {
            validate_object_name(&self.name)?;
        }
        if let Some(deadline) = self.options.start_deadline
            && (deadline.is_zero() || deadline > MAX_START_DEADLINE)
        {
            return Err(InvalidSpec::new(
                "options.start_deadline",
                format!("{deadline:?}"),
                format!("must be above 0 and at most {MAX_START_DEADLINE:?}"),
            ));
        }
        let websocket_refused = match self.kind {
            BrokerKind::Embedded => Some(
                "the embedded broker serves no WebSocket (rumqttd's websocket listener is not built in)",
            ),
            BrokerKind::External { .. } => Some("an external broker's listeners are its own"),
            BrokerKind::Forward { .. } => Some("a forwarding hop relays one port"),
            BrokerKind::Native { .. } | BrokerKind::Kubernetes { .. } => None,
        };
        if let (Some(port), Some(reason)) = (self.options.websocket_port, websocket_refused) {
            return Err(InvalidSpec::new("options.websocket_port", port, reason));
        }
        if let (BrokerKind::Kubernetes { node_port, .. }, Some(ws)) =
            (&self.kind, self.options.websocket_port)
            && ws != 0
            && (!NODE_PORTS.contains(&ws) || Some(ws) == *node_port)
        {
            return Err(InvalidSpec::new(
                "options.websocket_port",
                ws,
                format!(
                    "is a kubernetes broker's WebSocket NodePort: it must be in {}-{} and \
                     differ from its MQTT NodePort",
                    NODE_PORTS.start(),
                    NODE_PORTS.end()
                ),
            ));
        }
        if self
            .options
            .websocket_port
            .is_some_and(|ws| ws != 0 && ws == self.port)
        {
            return Err(InvalidSpec::new(
                "options.websocket_port",
                self.port,
                "is the MQTT port; the WebSocket listener needs a port of its own",
            ));
        }
        if let Some(port) = self.options.quic_port {
            self.validate_quic_port(port)?;
        }
        if self.options.max_queued_messages == Some(0) {
            return Err(InvalidSpec::new(
                "options.max_queued_messages",
                0,
                "would drop every queued message; leave it unset for the default",
            ));
        }
        Ok(())
    }

    /// `options.quic_port`: a native broker's UDP port, or a kubernetes broker's UDP
    /// NodePort (0: the product's default), on the node whose address its certificate names.
    fn validate_quic_port(&self, port: u16) -> Result<(), InvalidSpec> {
        let refused = |reason: String| Err(InvalidSpec::new("options.quic_port", port, reason));
        match &self.kind {
            BrokerKind::Native { .. } => Ok(()),
            BrokerKind::Kubernetes {
                node_port,
                on_every_node,
                ..
            } => {
                if *on_every_node {
                    return refused(
                        "the QUIC listener's certificate names the address of the pod's node \
                         only, so its clients cannot enter through another node \
                         (on_every_node)"
                            .into(),
                    );
                }
                let taken = [*node_port, self.options.websocket_port];
                if port != 0 && (!NODE_PORTS.contains(&port) || taken.contains(&Some(port))) {
                    return refused(format!(
                        "is a kubernetes broker's QUIC NodePort (UDP): it must be in {}-{} and \
                         differ from its MQTT and WebSocket NodePorts",
                        NODE_PORTS.start(),
                        NODE_PORTS.end()
                    ));
                }
                Ok(())
            }
            _ => refused(
                "the agent opens a QUIC listener for a native or a kubernetes broker only".into(),
            ),
        }
    }

    /// The address the broker listens on once its port is known.
    pub fn listen_address(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.bind, port)
    }

    /// A one-line summary for logs and errors.
    pub fn summary(&self) -> String {
        match &self.kind {
            BrokerKind::Native { product } => {
                format!("native {product} on {}:{}", self.bind, self.port)
            }
            BrokerKind::Embedded => format!("embedded on {}:{}", self.bind, self.port),
            BrokerKind::External { address } => format!("external at {address}"),
            BrokerKind::Forward { target } => {
                format!("forwarder on {}:{} to {target}", self.bind, self.port)
            }
            BrokerKind::Kubernetes {
                product,
                node,
                namespace,
                node_port,
                on_every_node,
            } => {
                let port = node_port.map_or_else(|| "default".to_owned(), |p| p.to_string());
                let reach = if *on_every_node { " on every node" } else { "" };
                format!(
                    "kubernetes {product} in {namespace} on node {node}, NodePort {port}{reach}"
                )
            }
        }
    }
}

impl BrokerKind {
    /// Checks the kind's own fields (an external address, a Kubernetes target); errors name
    /// them as `kind.<field>` (`kind.kubernetes.node` for the Kubernetes ones, as on the wire).
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        match self {
            BrokerKind::Forward { target } => {
                if target.port() == 0 || target.ip().is_unspecified() {
                    return Err(InvalidSpec::new(
                        "kind.forward.target",
                        target,
                        "is not an address to forward to (port 0 or unspecified)",
                    ));
                }
            }
            BrokerKind::External { address } => {
                if address.port() == 0 {
                    return Err(InvalidSpec::new(
                        "kind.address",
                        address,
                        "has port 0; an external broker needs its real port",
                    ));
                }
                if address.ip().is_unspecified() {
                    return Err(InvalidSpec::new(
                        "kind.address",
                        address,
                        "is unspecified; give an address clients can connect to",
                    ));
                }
            }
            BrokerKind::Kubernetes {
                node,
                namespace,
                node_port,
                ..
            } => {
                // The node name is matched as the value of the kubernetes.io/hostname label,
                // and label values are at most 63 characters.
                if !is_dns_name(node, 63, true) {
                    return Err(InvalidSpec::new(
                        "kind.kubernetes.node",
                        node,
                        "is not a Kubernetes node name (lower-case letters, digits, '-' and \
                         '.', 1 to 63 characters, starting and ending alphanumeric)",
                    ));
                }
                if !is_dns_name(namespace, 63, false) {
                    return Err(InvalidSpec::new(
                        "kind.kubernetes.namespace",
                        namespace,
                        "is not a namespace name (lower-case letters, digits and '-', 1 to 63 \
                         characters, starting and ending alphanumeric)",
                    ));
                }
                if let Some(port) = node_port
                    && !NODE_PORTS.contains(port)
                {
                    return Err(InvalidSpec::new(
                        "kind.kubernetes.node_port",
                        port,
                        format!(
                            "is outside the NodePort range {}-{}",
                            NODE_PORTS.start(),
                            NODE_PORTS.end()
                        ),
                    ));
                }
            }
            BrokerKind::Native { .. } | BrokerKind::Embedded => {}
        }
        Ok(())
    }
}

/// True if `text` is an RFC 1123 label (`dots` false) or subdomain of at most `max` bytes:
/// lower-case alphanumerics and '-' (and '.'), starting and ending alphanumeric.
fn is_dns_name(text: &str, max: usize, dots: bool) -> bool {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    !text.is_empty()
        && text.len() <= max
        && edge_ok(text.chars().next())
        && edge_ok(text.chars().last())
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.'))
}

/// A Kubernetes broker's name becomes the name of its Deployment and Service, and a Service
/// name must be an RFC 1035 label: it starts with a letter.
fn validate_object_name(name: &str) -> Result<(), InvalidSpec> {
    if is_dns_name(name, 63, false) && name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Ok(());
    }
    Err(InvalidSpec::new(
        "name",
        name,
        "names the Kubernetes Deployment and Service, so it must be lower-case letters, \
         digits and '-', start with a letter and end with a letter or digit",
    ))
}

fn validate_name(name: &str) -> Result<(), InvalidSpec> {
    check_name(name).map_err(|problem| InvalidSpec::new("name", name, problem.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn spec(name: &str) -> BrokerSpec {
        BrokerSpec {
            name: name.to_owned(),
            kind: BrokerKind::Embedded,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            options: BrokerOptions::default(),
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(spec("bench-1_a").validate().is_ok());
        for bad in ["", "a/b", "../x", "a b", "ä", &"x".repeat(65)] {
            let error = spec(bad).validate().unwrap_err();
            assert!(error.to_string().starts_with("name: "), "{bad:?}: {error}");
        }
    }

    #[test]
    fn options_and_external_addresses_are_checked() {
        let mut zero_deadline = spec("a");
        zero_deadline.options.start_deadline = Some(Duration::ZERO);
        let error = zero_deadline.validate().unwrap_err();
        assert!(error.to_string().starts_with("options.start_deadline"));

        let mut no_queue = spec("a");
        no_queue.options.max_queued_messages = Some(0);
        assert!(no_queue.validate().is_err());

        let mut external = spec("a");
        external.kind = BrokerKind::External {
            address: "198.18.0.1:0".parse().unwrap(),
        };
        assert!(
            external
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("kind.address")
        );
    }

    #[test]
    fn a_websocket_listener_is_asked_only_of_brokers_that_can_open_one() {
        let mut embedded = spec("a");
        embedded.options.websocket_port = Some(0);
        let error = embedded.validate().unwrap_err().to_string();
        assert!(
            error.starts_with("options.websocket_port: \"0\" the embedded broker"),
            "{error}"
        );
        let mut native = spec("a");
        native.kind = BrokerKind::Native {
            product: Product::Mosquitto,
        };
        native.options.websocket_port = Some(0);
        assert_eq!(native.validate(), Ok(()));
        native.port = 1883;
        native.options.websocket_port = Some(1883);
        let error = native.validate().unwrap_err().to_string();
        assert!(error.contains("is the MQTT port"), "{error}");
    }

    #[test]
    fn a_quic_listener_is_asked_only_of_native_and_kubernetes_brokers() {
        let mut native = spec("a");
        native.kind = BrokerKind::Native {
            product: Product::Mqttv5,
        };
        native.options.quic_port = Some(0);
        assert_eq!(native.validate(), Ok(()));
        let mut embedded = spec("a");
        embedded.options.quic_port = Some(14567);
        let error = embedded.validate().unwrap_err().to_string();
        assert!(
            error.starts_with("options.quic_port: \"14567\" the agent opens a QUIC listener for a native or a kubernetes broker only"),
            "{error}"
        );
        let mut pod = kubernetes("a", "worker-1", "continuum", Some(31884));
        pod.options.websocket_port = Some(32384);
        for port in [0, 32484] {
            pod.options.quic_port = Some(port);
            assert_eq!(pod.validate(), Ok(()), "{port}");
        }
        for port in [14567, 31884, 32384] {
            pod.options.quic_port = Some(port);
            let error = pod.validate().unwrap_err().to_string();
            assert!(
                error.contains("is a kubernetes broker's QUIC NodePort (UDP): it must be in 30000-32767 and differ"),
                "{port}: {error}"
            );
        }
        pod.options.quic_port = Some(0);
        if let BrokerKind::Kubernetes { on_every_node, .. } = &mut pod.kind {
            *on_every_node = true;
        }
        let error = pod.validate().unwrap_err().to_string();
        assert!(
            error.contains("cannot enter through another node"),
            "{error}"
        );
    }

    fn kubernetes(name: &str, node: &str, namespace: &str, node_port: Option<u16>) -> BrokerSpec {
        let mut spec = spec(name);
        spec.kind = BrokerKind::Kubernetes {
            product: Product::Mosquitto,
            node: node.to_owned(),
            namespace: namespace.to_owned(),
            node_port,
            on_every_node: false,
        };
        spec
    }

    #[test]
    fn kubernetes_targets_are_checked_and_errors_name_the_field() {
        let field_of = |spec: BrokerSpec| match spec.validate() {
            Ok(()) => String::new(),
            Err(error) => error.to_string().split(':').next().unwrap().to_owned(),
        };
        assert_eq!(
            field_of(kubernetes("bench", "worker-1", "continuum", None)),
            ""
        );
        assert_eq!(
            field_of(kubernetes("b2", "node.example.org", "ns-1", Some(30000))),
            ""
        );
        assert_eq!(
            field_of(kubernetes("bench", "rpi4", "continuum", Some(32767))),
            ""
        );
        for node in ["", "Worker", "-a", "a-", "a_b", &"n".repeat(64)] {
            assert_eq!(
                field_of(kubernetes("bench", node, "continuum", None)),
                "kind.kubernetes.node",
                "{node:?}"
            );
        }
        for namespace in ["", "a.b", "Upper", "x-"] {
            assert_eq!(
                field_of(kubernetes("bench", "w", namespace, None)),
                "kind.kubernetes.namespace",
                "{namespace:?}"
            );
        }
        for port in [1883, 29999, 32768] {
            assert_eq!(
                field_of(kubernetes("bench", "w", "continuum", Some(port))),
                "kind.kubernetes.node_port",
                "{port}"
            );
        }
        // Valid agent names that cannot name a Service.
        for name in ["Bench", "bench_1", "1bench", "bench-"] {
            assert_eq!(
                field_of(kubernetes(name, "w", "continuum", None)),
                "name",
                "{name:?}"
            );
        }
        let text = kubernetes("bench", "w", "continuum", Some(31999)).summary();
        assert_eq!(
            text,
            "kubernetes mosquitto in continuum on node w, NodePort 31999"
        );
    }
}
