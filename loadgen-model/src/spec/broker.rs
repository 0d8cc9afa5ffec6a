//! The broker under test and the MQTT it is spoken to with.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// MQTT's largest packet: the remaining length is at most 268,435,455 bytes.
pub const MQTT_MAX_REMAINING_LENGTH: u64 = 268_435_455;

/// The broker under test. Its `Debug` shows no password, so neither do logs nor errors that
/// print a spec.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
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
    /// The CA certificates themselves (PEM), instead of `tls_ca_file`: what the controller
    /// sends for a broker whose agent made its certificate (a deployed QUIC listener). Read
    /// but never written, like the password: a results folder records the transport, and a
    /// CA made for one deployment says nothing a reader can use.
    #[serde(default, skip_serializing)]
    pub tls_ca_pem: Option<String>,
    /// Username for CONNECT.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for CONNECT (needs a username). Read from a spec file but never written:
    /// results embed their spec, and a password has no place in a results folder.
    #[serde(default, skip_serializing)]
    pub password: Option<String>,
    /// How MQTT travels: TCP (TLS with a CA), inside WebSocket frames (ws, or wss with a
    /// CA), as browsers and many gateways speak it, or over QUIC (always TLS 1.3, so a CA is
    /// required: `tls_ca_file`, or `tls_ca_pem` as a controller sends it).
    #[serde(default)]
    pub transport: Transport,
    /// The WebSocket request path; [`DEFAULT_WEBSOCKET_PATH`] when unset. Only with
    /// `transport = "websocket"`.
    #[serde(default)]
    pub websocket_path: Option<String>,
    /// Over QUIC, a client that connects again (after a loss, with `connection.reconnect`)
    /// resumes TLS with a ticket its own earlier connection got, and sends its CONNECT as
    /// 0-RTT data in the first flight. How many tried and how many the broker accepted is
    /// reported with the reconnects. Only with `transport = "quic"` and a reconnect policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quic_zero_rtt: bool,
    /// Over QUIC, which streams carry MQTT: one bidirectional stream for everything (the
    /// default), or a stream of the client's own per topic or per PUBLISH, with the broker's
    /// own streams read. Only with `transport = "quic"`.
    #[serde(default, skip_serializing_if = "QuicStreams::is_single")]
    pub quic_streams: QuicStreams,
}

impl fmt::Debug for BrokerTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("protocol", &self.protocol)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_ca_pem", &self.tls_ca_pem.as_ref().map(|pem| pem.len()))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("transport", &self.transport)
            .field("websocket_path", &self.websocket_path)
            .field("quic_zero_rtt", &self.quic_zero_rtt)
            .field("quic_streams", &self.quic_streams)
            .finish()
    }
}

/// The request path of a WebSocket connection unless the spec names one (Mosquitto serves
/// any path; RabbitMQ's web-mqtt serves `/ws`).
pub const DEFAULT_WEBSOCKET_PATH: &str = "/mqtt";

/// How MQTT packets reach the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// MQTT straight over TCP (or TLS).
    #[default]
    Tcp,
    /// MQTT in binary WebSocket frames (subprotocol `mqtt`), over TCP or TLS.
    #[cfg_attr(feature = "clap", value(name = "websocket", alias = "ws"))]
    WebSocket,
    /// MQTT over QUIC (UDP, TLS 1.3, ALPN `mqtt`), one connection per client: on one
    /// bidirectional stream (the single-stream mode EMQX uses by default and the mqttv5
    /// broker's control stream), or with more as [`QuicStreams`] says.
    Quic,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::WebSocket => "websocket",
            Transport::Quic => "quic",
        })
    }
}

/// Which QUIC streams carry a connection's MQTT packets. Every mode opens the connection
/// with one bidirectional stream for CONNECT and every packet but PUBLISH (the control
/// stream), and reads PUBLISH wherever the broker delivers it in the multi-stream modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum QuicStreams {
    /// Every packet both ways on the one stream: EMQX's default mode, and the mqttv5
    /// broker's `control_only` delivery. A stream the broker opens fails the connection,
    /// with that reason: its messages would go unread.
    #[default]
    Single,
    /// Each topic's PUBLISH packets on a unidirectional stream of their own, opened at the
    /// topic's first message and kept; PUBLISH read from the control stream and from every
    /// stream the broker opens (the mqttv5 broker's `per_topic` and `per_publish`
    /// deliveries). A loss on one topic's stream holds back no other topic.
    #[cfg_attr(feature = "clap", value(alias = "per_topic"))]
    PerTopic,
    /// Each PUBLISH on a new unidirectional stream, finished after it; read as with
    /// `per_topic`. No message waits for another's lost packet.
    #[cfg_attr(feature = "clap", value(alias = "per_publish"))]
    PerPublish,
}

impl QuicStreams {
    /// The default, one stream.
    pub fn is_single(&self) -> bool {
        *self == QuicStreams::Single
    }
}

impl fmt::Display for QuicStreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuicStreams::Single => "single",
            QuicStreams::PerTopic => "per_topic",
            QuicStreams::PerPublish => "per_publish",
        })
    }
}

impl BrokerTarget {
    /// Whether a CA is given, as a file or inline: the connection then speaks TLS.
    pub fn has_ca(&self) -> bool {
        self.tls_ca_file.is_some() || self.tls_ca_pem.is_some()
    }

    /// The WebSocket request path in use ([`DEFAULT_WEBSOCKET_PATH`] unless set).
    pub fn websocket_path(&self) -> &str {
        self.websocket_path
            .as_deref()
            .unwrap_or(DEFAULT_WEBSOCKET_PATH)
    }
}

impl fmt::Display for BrokerTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tls = self.has_ca();
        let scheme = match (self.transport, tls) {
            (Transport::Tcp, false) => "mqtt",
            (Transport::Tcp, true) => "mqtts",
            (Transport::WebSocket, false) => "ws",
            (Transport::WebSocket, true) => "wss",
            (Transport::Quic, _) => "mqtt+quic",
        };
        write!(f, "{scheme}://{}:{}", self.host, self.port)?;
        if self.transport == Transport::WebSocket {
            f.write_str(self.websocket_path())?;
        }
        Ok(())
    }
}

/// MQTT protocol version. On the command line also `311` or `4` (its protocol level) for
/// 3.1.1 and `5.0` for 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum MqttVersion {
    /// MQTT 3.1.1 (the study's version).
    #[default]
    #[serde(rename = "3.1.1")]
    #[cfg_attr(feature = "clap", value(name = "3.1.1", aliases = ["311", "4"]))]
    V311,
    /// MQTT 5.
    #[serde(rename = "5")]
    #[cfg_attr(feature = "clap", value(name = "5", alias = "5.0"))]
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
