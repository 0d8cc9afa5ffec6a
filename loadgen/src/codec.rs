//! MQTT 3.1.1 and 5 packets through rumqttc's own `mqttbytes` codec.
//!
//! The engine does not use rumqttc's `AsyncClient`: it flushes the socket once per publish
//! through a channel, which costs several µs a message. Instead each connection encodes packets
//! with the codec straight into its own write buffer, and a publisher encodes its PUBLISH once as
//! a template and only patches the packet id and the measurement header per message.

use bytes::{Bytes, BytesMut};
use rumqttc::mqttbytes::{self as v4_bytes, QoS as V4QoS, v4};
use rumqttc::v5::mqttbytes::{QoS as V5QoS, v5};

use crate::spec::{MqttVersion, Qos, SESSION_EXPIRY};

/// What a client needs to know of a packet the broker sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// CONNACK: accepted or the broker's reason, and v5 limits.
    ConnAck {
        /// `None` when accepted, else the broker's return/reason code, named
        /// ([`crate::reason_codes`]).
        refusal: Option<&'static str>,
        /// MQTT 5 receive maximum: in-flight QoS 1/2 messages the broker accepts.
        receive_maximum: Option<u16>,
        /// The broker still had this client's session (clean session off).
        session_present: bool,
        /// MQTT 5: what the broker says it allows (empty for 3.1.1).
        limits: ServerLimits,
    },
    /// SUBACK: how many filters were refused and why, and the QoS granted.
    SubAck {
        /// Packet id of the SUBSCRIBE.
        pkid: u16,
        /// Filters the broker refused.
        refused: usize,
        /// The first refusal's reason code, named (`suback_refused_...`).
        refusal: Option<&'static str>,
        /// The lowest QoS granted to an accepted filter (a broker may grant less than asked).
        granted: Option<u8>,
    },
    /// An application message.
    Publish {
        /// Delivery QoS.
        qos: u8,
        /// RETAIN: sent because of a new subscription, from what the broker kept.
        retain: bool,
        /// Packet id (0 at QoS 0).
        pkid: u16,
        /// The payload, measurement header first (unless it came as a property).
        payload: Bytes,
        /// MQTT 5: the measurement header from its user property
        /// ([`crate::header::HEADER_PROPERTY`]), when the message carried one.
        header: Option<[u8; 16]>,
    },
    /// PUBACK for a QoS 1 publish.
    PubAck(u16),
    /// PUBREC for a QoS 2 publish.
    PubRec(u16),
    /// MQTT 5: a PUBACK or PUBREC whose reason code refuses the publish (0x80 and above):
    /// the broker took the message and will not deliver it, and said why (an error count's
    /// name, e.g. `puback_refused_not_authorized`).
    PubRefused {
        /// Packet id of the refused PUBLISH.
        pkid: u16,
        /// The refusal, as an error count names it.
        refusal: &'static str,
    },
    /// PUBREL of an incoming QoS 2 publish.
    PubRel(u16),
    /// PUBCOMP ends an outgoing QoS 2 publish.
    PubComp(u16),
    /// Answer to our PINGREQ.
    PingResp,
    /// The broker ends the connection: its reason code, named (`broker_disconnect_...`; 3.1.1 has
    /// none).
    Disconnect(&'static str),
    /// Anything a load client does not act on.
    Other,
}

/// What an MQTT 5 CONNACK's properties say the broker allows; absent ones are MQTT 5's
/// defaults (QoS 2, retain, wildcards and shared subscriptions available, no topic alias).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerLimits {
    /// Maximum QoS.
    pub maximum_qos: Option<u8>,
    /// Retain Available.
    pub retain_available: Option<bool>,
    /// Wildcard Subscription Available.
    pub wildcards_available: Option<bool>,
    /// Shared Subscription Available.
    pub shared_available: Option<bool>,
    /// Topic Alias Maximum.
    pub topic_alias_maximum: Option<u16>,
    /// Maximum Packet Size.
    pub maximum_packet_size: Option<u32>,
    /// Session Expiry Interval, when the broker imposes its own.
    pub session_expiry_interval: Option<u32>,
}

/// A packet could not be decoded or encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MQTT codec: {0}")]
pub struct CodecError(pub String);

fn v4_qos(qos: Qos) -> V4QoS {
    match qos {
        Qos::AtMostOnce => V4QoS::AtMostOnce,
        Qos::AtLeastOnce => V4QoS::AtLeastOnce,
        Qos::ExactlyOnce => V4QoS::ExactlyOnce,
    }
}

fn v5_qos(qos: Qos) -> V5QoS {
    match qos {
        Qos::AtMostOnce => V5QoS::AtMostOnce,
        Qos::AtLeastOnce => V5QoS::AtLeastOnce,
        Qos::ExactlyOnce => V5QoS::ExactlyOnce,
    }
}

/// Credentials and session settings of a CONNECT.
#[derive(Debug, Clone)]
pub struct ConnectFields<'a> {
    /// Client identifier.
    pub client_id: &'a str,
    /// Keep-alive in seconds.
    pub keep_alive_secs: u16,
    /// Clean session / clean start.
    pub clean_session: bool,
    /// Username and password.
    pub login: Option<(&'a str, &'a str)>,
    /// Largest packet we accept (announced in v5).
    pub max_packet_size: u32,
    /// QoS 1/2 deliveries we accept unacknowledged (announced in v5).
    pub receive_maximum: u16,
    /// The client's will, if it has one.
    pub will: Option<WillFields<'a>>,
}

/// A will, as CONNECT carries it.
#[derive(Debug, Clone)]
pub struct WillFields<'a> {
    /// Where the broker publishes it.
    pub topic: &'a str,
    /// What it publishes.
    pub payload: &'a [u8],
    /// At which QoS.
    pub qos: Qos,
    /// Retained or not.
    pub retain: bool,
    /// MQTT 5 will delay interval, s.
    pub delay_secs: Option<u32>,
}

/// Encoder and decoder for one protocol version.
#[derive(Debug, Clone, Copy)]
pub struct Codec {
    version: MqttVersion,
    max_incoming: usize,
    /// MQTT 5: its SUBSCRIBEs ask for retain-as-published.
    retain_as_published: bool,
}

impl Codec {
    /// A codec that refuses incoming packets larger than `max_incoming` bytes.
    pub fn new(version: MqttVersion, max_incoming: usize) -> Self {
        Codec {
            version,
            max_incoming,
            retain_as_published: false,
        }
    }

    /// The same codec, its MQTT 5 SUBSCRIBEs asking for retain-as-published when `on`.
    pub fn with_retain_as_published(self, on: bool) -> Self {
        Codec {
            retain_as_published: on,
            ..self
        }
    }

    /// Decodes one packet from the front of `buffer`; `Ok(None)` when it is not complete yet.
    pub fn decode(&self, buffer: &mut BytesMut) -> Result<Option<Incoming>, CodecError> {
        match self.version {
            MqttVersion::V311 => match v4::Packet::read(buffer, self.max_incoming) {
                Ok(packet) => Ok(Some(from_v4(packet))),
                Err(v4_bytes::Error::InsufficientBytes(_)) => Ok(None),
                Err(error) => Err(CodecError(format!("{error:?}"))),
            },
            MqttVersion::V5 => {
                if let Some(short) = short_v5_disconnect(buffer) {
                    return Ok(short);
                }
                let limit = u32::try_from(self.max_incoming).unwrap_or(u32::MAX);
                match v5::Packet::read(buffer, Some(limit)) {
                    Ok(packet) => Ok(Some(from_v5(packet))),
                    Err(rumqttc::v5::mqttbytes::Error::InsufficientBytes(_)) => Ok(None),
                    Err(error) => Err(CodecError(format!("{error:?}"))),
                }
            }
        }
    }

    /// Appends a CONNECT.
    pub fn connect(
        &self,
        fields: &ConnectFields<'_>,
        out: &mut BytesMut,
    ) -> Result<(), CodecError> {
        match self.version {
            MqttVersion::V311 => {
                let mut connect = v4::Connect::new(fields.client_id);
                connect.keep_alive = fields.keep_alive_secs;
                connect.clean_session = fields.clean_session;
                if let Some((user, password)) = fields.login {
                    connect.set_login(user, password);
                }
                connect.last_will = fields.will.as_ref().map(|will| {
                    v4::LastWill::new(will.topic, will.payload, v4_qos(will.qos), will.retain)
                });
                self.write_v4(v4::Packet::Connect(connect), out)
            }
            MqttVersion::V5 => {
                let mut properties = v5::ConnectProperties::new();
                properties.max_packet_size = Some(fields.max_packet_size);
                properties.receive_maximum = Some(fields.receive_maximum.max(1));
                if !fields.clean_session {
                    // MQTT 5 ends a session when its client leaves unless told otherwise.
                    properties.session_expiry_interval =
                        Some(u32::try_from(SESSION_EXPIRY.as_secs()).unwrap_or(u32::MAX));
                }
                let delay = fields.will.as_ref().and_then(|will| will.delay_secs);
                if let Some(delay) = delay {
                    // A will is published when its delay ends or its session does, whichever
                    // comes first (MQTT 5 §3.1.3.2.2): the session must outlive the delay.
                    let expiry = properties.session_expiry_interval.unwrap_or(0);
                    properties.session_expiry_interval = Some(expiry.max(delay));
                }
                let connect = v5::Connect {
                    keep_alive: fields.keep_alive_secs,
                    client_id: fields.client_id.to_string(),
                    clean_start: fields.clean_session,
                    properties: Some(properties),
                };
                let login = fields.login.map(|(username, password)| v5::Login {
                    username: username.to_string(),
                    password: password.to_string(),
                });
                let will = fields.will.as_ref().map(|will| {
                    let properties = will.delay_secs.map(|delay| v5::LastWillProperties {
                        delay_interval: Some(delay),
                        payload_format_indicator: None,
                        message_expiry_interval: None,
                        content_type: None,
                        response_topic: None,
                        correlation_data: None,
                        user_properties: Vec::new(),
                    });
                    v5::LastWill {
                        topic: Bytes::copy_from_slice(will.topic.as_bytes()),
                        message: Bytes::copy_from_slice(will.payload),
                        qos: v5_qos(will.qos),
                        retain: will.retain,
                        properties,
                    }
                });
                self.write_v5(v5::Packet::Connect(connect, will, login), out)
            }
        }
    }

    /// Appends a SUBSCRIBE of one filter.
    pub fn subscribe(
        &self,
        pkid: u16,
        filter: &str,
        qos: Qos,
        out: &mut BytesMut,
    ) -> Result<(), CodecError> {
        self.subscribe_handling(pkid, filter, qos, 0, out)
    }

    /// [`Self::subscribe`] with MQTT 5 retain handling `handling` (0: retained messages at
    /// every subscribe, 1: only to a new subscription, 2: never; 3.1.1 has only 0).
    pub fn subscribe_handling(
        &self,
        pkid: u16,
        filter: &str,
        qos: Qos,
        handling: u8,
        out: &mut BytesMut,
    ) -> Result<(), CodecError> {
        match self.version {
            MqttVersion::V311 => {
                if handling != 0 {
                    return Err(CodecError("retain handling is MQTT 5".to_string()));
                }
                let mut subscribe = v4::Subscribe::new(filter, v4_qos(qos));
                subscribe.pkid = pkid;
                self.write_v4(v4::Packet::Subscribe(subscribe), out)
            }
            MqttVersion::V5 => {
                let mut options = v5::Filter::new(filter, v5_qos(qos));
                options.preserve_retain = self.retain_as_published;
                options.retain_forward_rule = match handling {
                    0 => v5::RetainForwardRule::OnEverySubscribe,
                    1 => v5::RetainForwardRule::OnNewSubscribe,
                    _ => v5::RetainForwardRule::Never,
                };
                let mut subscribe = v5::Subscribe::new(options, None);
                subscribe.pkid = pkid;
                self.write_v5(v5::Packet::Subscribe(subscribe), out)
            }
        }
    }

    /// Appends the acknowledgement packets: PUBACK, PUBREC, PUBREL, PUBCOMP.
    pub fn ack(&self, kind: AckKind, pkid: u16, out: &mut BytesMut) -> Result<(), CodecError> {
        match self.version {
            MqttVersion::V311 => self.write_v4(
                match kind {
                    AckKind::PubAck => v4::Packet::PubAck(v4::PubAck::new(pkid)),
                    AckKind::PubRec => v4::Packet::PubRec(v4::PubRec::new(pkid)),
                    AckKind::PubRel => v4::Packet::PubRel(v4::PubRel::new(pkid)),
                    AckKind::PubComp => v4::Packet::PubComp(v4::PubComp::new(pkid)),
                },
                out,
            ),
            MqttVersion::V5 => self.write_v5(
                match kind {
                    AckKind::PubAck => v5::Packet::PubAck(v5::PubAck::new(pkid, None)),
                    AckKind::PubRec => v5::Packet::PubRec(v5::PubRec::new(pkid, None)),
                    AckKind::PubRel => v5::Packet::PubRel(v5::PubRel::new(pkid, None)),
                    AckKind::PubComp => v5::Packet::PubComp(v5::PubComp::new(pkid, None)),
                },
                out,
            ),
        }
    }

    /// Appends a PINGREQ.
    pub fn ping(&self, out: &mut BytesMut) -> Result<(), CodecError> {
        match self.version {
            MqttVersion::V311 => self.write_v4(v4::Packet::PingReq, out),
            MqttVersion::V5 => self.write_v5(v5::Packet::PingReq(v5::PingReq), out),
        }
    }

    /// Appends a DISCONNECT (normal).
    pub fn disconnect(&self, out: &mut BytesMut) -> Result<(), CodecError> {
        match self.version {
            MqttVersion::V311 => self.write_v4(v4::Packet::Disconnect, out),
            MqttVersion::V5 => self.write_v5(
                v5::Packet::Disconnect(v5::Disconnect::new(
                    v5::DisconnectReasonCode::NormalDisconnection,
                )),
                out,
            ),
        }
    }

    /// Encodes a PUBLISH once so that it can be stamped per message.
    pub fn publish_template(
        &self,
        topic: &str,
        qos: Qos,
        payload_len: usize,
    ) -> Result<PublishTemplate, CodecError> {
        self.publish_template_with(topic, qos, payload_len, PublishExtras::default())
    }

    /// [`Self::publish_template`], with MQTT 5 properties on every message.
    pub fn publish_template_with(
        &self,
        topic: &str,
        qos: Qos,
        payload_len: usize,
        extras: PublishExtras,
    ) -> Result<PublishTemplate, CodecError> {
        let (prefix, pkid_offset) = match self.version {
            MqttVersion::V311 => {
                if extras != PublishExtras::default() {
                    return Err(CodecError("publish properties are MQTT 5".to_string()));
                }
                let mut packet = BytesMut::new();
                let placeholder = Bytes::from(vec![0u8; payload_len]);
                let mut publish = v4::Publish::from_bytes(topic, v4_qos(qos), placeholder);
                publish.pkid = u16::from(qos != Qos::AtMostOnce);
                publish
                    .write(&mut packet)
                    .map_err(|e| CodecError(format!("{e:?}")))?;
                let prefix_len = packet.len() - payload_len;
                packet.truncate(prefix_len);
                // The packet id sits right before the payload.
                let pkid_offset = (qos != Qos::AtMostOnce).then(|| prefix_len - 2);
                (packet.to_vec(), pkid_offset)
            }
            MqttVersion::V5 => v5_publish_prefix(topic, qos, payload_len, None, extras)?,
        };
        Ok(PublishTemplate {
            prefix,
            pkid_offset,
            opening: None,
            payload_len,
            header_property: extras.header_property,
        })
    }

    /// An MQTT 5 PUBLISH template whose topic travels as topic alias `alias`: the first
    /// message on a connection carries the topic and sets the alias, every later one an
    /// empty topic and the alias alone.
    pub fn aliased_publish_template(
        &self,
        topic: &str,
        qos: Qos,
        payload_len: usize,
        alias: u16,
        extras: PublishExtras,
    ) -> Result<PublishTemplate, CodecError> {
        if self.version != MqttVersion::V5 {
            return Err(CodecError("topic aliases are MQTT 5".to_string()));
        }
        let (opening, opening_pkid_offset) =
            v5_publish_prefix(topic, qos, payload_len, Some(alias), extras)?;
        let (prefix, pkid_offset) = v5_publish_prefix("", qos, payload_len, Some(alias), extras)?;
        Ok(PublishTemplate {
            prefix,
            pkid_offset,
            opening: Some(Opening {
                prefix: opening,
                pkid_offset: opening_pkid_offset,
            }),
            payload_len,
            header_property: extras.header_property,
        })
    }

    fn write_v4(&self, packet: v4::Packet, out: &mut BytesMut) -> Result<(), CodecError> {
        packet
            .write(out, usize::MAX)
            .map(|_| ())
            .map_err(|e| CodecError(format!("{e:?}")))
    }

    fn write_v5(&self, packet: v5::Packet, out: &mut BytesMut) -> Result<(), CodecError> {
        packet
            .write(out, None)
            .map(|_| ())
            .map_err(|e| CodecError(format!("{e:?}")))
    }
}

/// The MQTT 5 properties every PUBLISH of a template carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishExtras {
    /// Message expiry interval, seconds.
    pub expiry_secs: Option<u32>,
    /// The measurement header travels in a user property ([`crate::header::HEADER_PROPERTY`]),
    /// its value the last bytes before the payload.
    pub header_property: bool,
}

/// An MQTT 5 PUBLISH up to its payload, with the offset of its packet id (none at QoS 0).
fn v5_publish_prefix(
    topic: &str,
    qos: Qos,
    payload_len: usize,
    alias: Option<u16>,
    extras: PublishExtras,
) -> Result<(Vec<u8>, Option<usize>), CodecError> {
    let mut packet = BytesMut::new();
    let placeholder = Bytes::from(vec![0u8; payload_len]);
    let expiry_secs = extras.expiry_secs;
    let user_properties = if extras.header_property {
        // User properties come last: the value's 32 digits end right before the payload.
        let placeholder = "0".repeat(crate::header::PROPERTY_HEX_LEN);
        vec![(crate::header::HEADER_PROPERTY.to_string(), placeholder)]
    } else {
        Vec::new()
    };
    let any = alias.is_some() || expiry_secs.is_some() || extras.header_property;
    let properties = any.then(|| v5::PublishProperties {
        topic_alias: alias,
        message_expiry_interval: expiry_secs,
        user_properties,
        ..v5::PublishProperties::default()
    });
    let mut publish = v5::Publish::new(topic, v5_qos(qos), placeholder, properties);
    publish.pkid = u16::from(qos != Qos::AtMostOnce);
    publish
        .write(&mut packet)
        .map_err(|e| CodecError(format!("{e:?}")))?;
    let prefix_len = packet.len() - payload_len;
    // The packet id follows the fixed header (its type byte and a remaining length of one to
    // four bytes, the last without the continuation bit) and the topic with its length.
    let remaining_len_bytes = packet[1..]
        .iter()
        .take(4)
        .position(|byte| byte & 0x80 == 0)
        .map_or(4, |last| last + 1);
    let pkid_offset = (qos != Qos::AtMostOnce).then(|| 1 + remaining_len_bytes + 2 + topic.len());
    if extras.header_property
        && !packet[..prefix_len].ends_with(&[b'0'; crate::header::PROPERTY_HEX_LEN])
    {
        return Err(CodecError(
            "the header property is not the last before the payload".to_string(),
        ));
    }
    packet.truncate(prefix_len);
    Ok((packet.to_vec(), pkid_offset))
}

/// The four publish acknowledgements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    /// QoS 1 acknowledgement.
    PubAck,
    /// QoS 2 step 1 (receiver).
    PubRec,
    /// QoS 2 step 2 (sender).
    PubRel,
    /// QoS 2 step 3 (receiver).
    PubComp,
}

/// A PUBLISH encoded once: everything before the payload, with the packet id's position.
#[derive(Debug, Clone)]
pub struct PublishTemplate {
    prefix: Vec<u8>,
    pkid_offset: Option<usize>,
    /// With a topic alias: the first message on a connection, which carries the topic.
    opening: Option<Opening>,
    payload_len: usize,
    /// The prefix ends with the header property's value, stamped per message.
    header_property: bool,
}

/// The prefix of a connection's first PUBLISH when the others travel by topic alias.
#[derive(Debug, Clone)]
struct Opening {
    prefix: Vec<u8>,
    pkid_offset: Option<usize>,
}

/// `prefix` appended to `out` with `pkid` at `pkid_offset`.
fn write_patched(prefix: &[u8], pkid_offset: Option<usize>, pkid: u16, out: &mut BytesMut) {
    let start = out.len();
    out.extend_from_slice(prefix);
    if let Some(offset) = pkid_offset {
        out[start + offset..start + offset + 2].copy_from_slice(&pkid.to_be_bytes());
    }
}

impl PublishTemplate {
    /// Appends a message's measurement header and the rest of its payload after a prefix
    /// just written: the header at the payload's start, or (a header property) as the hex
    /// value the prefix ends with, the payload then all `padding`.
    pub fn write_header(&self, header: &[u8], padding: &[u8], out: &mut BytesMut) {
        if self.header_property {
            // A property carries the full header only (the spec makes it so).
            debug_assert_eq!(
                header.len(),
                16,
                "a header property carries the full header"
            );
            let end = out.len();
            let value = end - crate::header::PROPERTY_HEX_LEN;
            if let Ok(full) = <&[u8; 16]>::try_from(header) {
                crate::header::property_hex(full, &mut out[value..end]);
            }
        } else {
            out.extend_from_slice(header);
        }
        out.extend_from_slice(padding);
    }

    /// Bytes of one packet on the wire.
    pub fn packet_len(&self) -> usize {
        self.prefix.len() + self.payload_len
    }

    /// Appends the packet prefix with `pkid` patched in; the caller appends the payload.
    pub fn write_prefix(&self, pkid: u16, out: &mut BytesMut) {
        write_patched(&self.prefix, self.pkid_offset, pkid, out);
    }

    /// [`Self::write_prefix`] of a connection's first message: with a topic alias, the one
    /// that carries the topic and sets the alias.
    pub fn write_opening_prefix(&self, pkid: u16, out: &mut BytesMut) {
        match &self.opening {
            Some(opening) => write_patched(&opening.prefix, opening.pkid_offset, pkid, out),
            None => self.write_prefix(pkid, out),
        }
    }

    /// The same PUBLISH with RETAIN set: the broker keeps it as its topic's last value.
    pub fn retained(mut self) -> Self {
        let prefixes = std::iter::once(&mut self.prefix)
            .chain(self.opening.as_mut().map(|opening| &mut opening.prefix));
        for prefix in prefixes {
            if let Some(first) = prefix.first_mut() {
                *first |= RETAIN_FLAG;
            }
        }
        self
    }

    /// [`Self::write_prefix`] (or, `opening`, [`Self::write_opening_prefix`]) of a message
    /// sent again after a reconnect: the DUP flag set, as MQTT asks of a re-delivery.
    pub fn write_prefix_again(&self, pkid: u16, out: &mut BytesMut, opening: bool) {
        let start = out.len();
        if opening {
            self.write_opening_prefix(pkid, out);
        } else {
            self.write_prefix(pkid, out);
        }
        out[start] |= DUP_FLAG;
    }
}

/// The RETAIN bit of a PUBLISH's first byte.
const RETAIN_FLAG: u8 = 0x01;
/// The DUP bit of a PUBLISH's first byte.
const DUP_FLAG: u8 = 0x08;

/// An MQTT 5 DISCONNECT of fewer than two bytes after its header (the reason code alone, or
/// nothing: normal), which MQTT 5 allows and rumqttc misreads as incomplete (and drops).
/// `None` for anything else, left to rumqttc; `Some(None)` while the packet is incomplete.
fn short_v5_disconnect(buffer: &mut BytesMut) -> Option<Option<Incoming>> {
    const DISCONNECT: u8 = 0xE0;
    match buffer.as_ref() {
        [DISCONNECT] => Some(None),
        [DISCONNECT, 0, ..] => {
            let _ = buffer.split_to(2);
            Some(Some(Incoming::Disconnect(
                crate::reason_codes::disconnect_v5(v5::DisconnectReasonCode::NormalDisconnection),
            )))
        }
        [DISCONNECT, 1] => Some(None),
        [DISCONNECT, 1, reason, ..] => {
            let reason = v5::DisconnectReasonCode::try_from(*reason).map_or(
                crate::reason_codes::DISCONNECT_UNKNOWN,
                crate::reason_codes::disconnect_v5,
            );
            let _ = buffer.split_to(3);
            Some(Some(Incoming::Disconnect(reason)))
        }
        _ => None,
    }
}

/// A SUBACK from its answers per filter (the QoS granted, or the refusal named).
fn suback(pkid: u16, answers: impl Iterator<Item = Result<u8, &'static str>>) -> Incoming {
    let (mut refused, mut refusal, mut granted) = (0, None, None::<u8>);
    for answer in answers {
        match answer {
            Ok(qos) => granted = Some(granted.map_or(qos, |lowest| lowest.min(qos))),
            Err(name) => {
                refused += 1;
                refusal = refusal.or(Some(name));
            }
        }
    }
    Incoming::SubAck {
        pkid,
        refused,
        refusal,
        granted,
    }
}

fn from_v4(packet: v4::Packet) -> Incoming {
    match packet {
        v4::Packet::ConnAck(ack) => Incoming::ConnAck {
            refusal: crate::reason_codes::connack_v4(ack.code),
            receive_maximum: None,
            session_present: ack.session_present,
            limits: ServerLimits::default(),
        },
        v4::Packet::SubAck(ack) => suback(
            ack.pkid,
            ack.return_codes.iter().map(crate::reason_codes::suback_v4),
        ),
        v4::Packet::Publish(publish) => Incoming::Publish {
            qos: publish.qos as u8,
            retain: publish.retain,
            pkid: publish.pkid,
            payload: publish.payload,
            header: None,
        },
        v4::Packet::PubAck(ack) => Incoming::PubAck(ack.pkid),
        v4::Packet::PubRec(ack) => Incoming::PubRec(ack.pkid),
        v4::Packet::PubRel(ack) => Incoming::PubRel(ack.pkid),
        v4::Packet::PubComp(ack) => Incoming::PubComp(ack.pkid),
        v4::Packet::PingResp => Incoming::PingResp,
        v4::Packet::Disconnect => Incoming::Disconnect(crate::reason_codes::DISCONNECT_V4),
        _ => Incoming::Other,
    }
}

fn from_v5(packet: v5::Packet) -> Incoming {
    match packet {
        v5::Packet::ConnAck(ack) => Incoming::ConnAck {
            refusal: crate::reason_codes::connack_v5(ack.code),
            receive_maximum: ack.properties.as_ref().and_then(|p| p.receive_max),
            session_present: ack.session_present,
            limits: ack
                .properties
                .as_ref()
                .map(|p| ServerLimits {
                    maximum_qos: p.max_qos,
                    retain_available: p.retain_available.map(|v| v != 0),
                    wildcards_available: p.wildcard_subscription_available.map(|v| v != 0),
                    shared_available: p.shared_subscription_available.map(|v| v != 0),
                    topic_alias_maximum: p.topic_alias_max,
                    maximum_packet_size: p.max_packet_size,
                    session_expiry_interval: p.session_expiry_interval,
                })
                .unwrap_or_default(),
        },
        v5::Packet::SubAck(ack) => suback(
            ack.pkid,
            ack.return_codes.iter().map(crate::reason_codes::suback_v5),
        ),
        v5::Packet::Publish(publish) => Incoming::Publish {
            qos: publish.qos as u8,
            retain: publish.retain,
            pkid: publish.pkid,
            header: publish.properties.as_ref().and_then(|properties| {
                properties
                    .user_properties
                    .iter()
                    .find(|(name, _)| name == crate::header::HEADER_PROPERTY)
                    .and_then(|(_, value)| crate::header::from_property_hex(value))
            }),
            payload: publish.payload,
        },
        v5::Packet::PubAck(ack) => match crate::reason_codes::puback_refusal(&ack.reason) {
            None => Incoming::PubAck(ack.pkid),
            Some(refusal) => Incoming::PubRefused {
                pkid: ack.pkid,
                refusal,
            },
        },
        v5::Packet::PubRec(ack) => match crate::reason_codes::pubrec_refusal(&ack.reason) {
            None => Incoming::PubRec(ack.pkid),
            Some(refusal) => Incoming::PubRefused {
                pkid: ack.pkid,
                refusal,
            },
        },
        v5::Packet::PubRel(ack) => Incoming::PubRel(ack.pkid),
        v5::Packet::PubComp(ack) => Incoming::PubComp(ack.pkid),
        v5::Packet::PingResp(_) => Incoming::PingResp,
        v5::Packet::Disconnect(disconnect) => {
            Incoming::Disconnect(crate::reason_codes::disconnect_v5(disconnect.reason_code))
        }
        _ => Incoming::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_as_broker_would(version: MqttVersion, bytes: &[u8]) -> (u8, u16, Vec<u8>) {
        let mut buffer = BytesMut::from(bytes);
        match Codec::new(version, 1 << 20)
            .decode(&mut buffer)
            .expect("decodes")
        {
            Some(Incoming::Publish {
                qos, pkid, payload, ..
            }) => (qos, pkid, payload.to_vec()),
            other => panic!("expected a publish, got {other:?}"),
        }
    }

    #[test]
    fn template_patches_pkid_and_carries_payload_in_both_versions() {
        for version in [MqttVersion::V311, MqttVersion::V5] {
            for qos in [Qos::AtMostOnce, Qos::AtLeastOnce, Qos::ExactlyOnce] {
                let codec = Codec::new(version, 1 << 20);
                let template = codec.publish_template("a/b/c", qos, 12).expect("encodes");
                let mut out = BytesMut::new();
                template.write_prefix(0xBEEF, &mut out);
                out.extend_from_slice(b"hello world!");
                assert_eq!(out.len(), template.packet_len());
                let (level, pkid, payload) = decode_as_broker_would(version, &out);
                assert_eq!(level, qos.level(), "{version} {qos:?}");
                assert_eq!(
                    pkid,
                    if qos == Qos::AtMostOnce { 0 } else { 0xBEEF },
                    "{version} {qos:?}"
                );
                assert_eq!(payload, b"hello world!");
            }
        }
    }

    /// The properties an MQTT 5 broker reads from a stamped template, the aliased one's
    /// opening and later messages alike, the header property stamped per message.
    #[test]
    fn expiry_alias_and_the_header_property_ride_every_stamped_v5_publish() {
        let codec = Codec::new(MqttVersion::V5, 1 << 20);
        let read = |out: &BytesMut| match v5::Packet::read(&mut out.clone(), None) {
            Ok(v5::Packet::Publish(publish)) => publish,
            other => panic!("expected a publish, got {other:?}"),
        };
        for qos in [Qos::AtMostOnce, Qos::AtLeastOnce, Qos::ExactlyOnce] {
            let plain = codec
                .publish_template_with(
                    "a/b",
                    qos,
                    4,
                    PublishExtras {
                        expiry_secs: Some(7),
                        header_property: false,
                    },
                )
                .expect("encodes");
            let mut out = BytesMut::new();
            plain.write_prefix(0xBEEF, &mut out);
            out.extend_from_slice(b"ping");
            let publish = read(&out);
            assert_eq!(
                publish.pkid,
                if qos == Qos::AtMostOnce { 0 } else { 0xBEEF }
            );
            assert_eq!(
                publish.properties.and_then(|p| p.message_expiry_interval),
                Some(7)
            );
            assert_eq!(&publish.payload[..], b"ping");

            let aliased = codec
                .aliased_publish_template(
                    "a/b",
                    qos,
                    4,
                    1,
                    PublishExtras {
                        expiry_secs: Some(9),
                        header_property: true,
                    },
                )
                .expect("encodes");
            for opening in [true, false] {
                let mut out = BytesMut::new();
                if opening {
                    aliased.write_opening_prefix(0x1234, &mut out);
                } else {
                    aliased.write_prefix(0x1234, &mut out);
                }
                let header: Vec<u8> = (0..16).collect();
                aliased.write_header(&header, b"pong", &mut out);
                if !opening {
                    assert_eq!(out.len(), aliased.packet_len());
                }
                match codec.decode(&mut out.clone()) {
                    Ok(Some(Incoming::Publish {
                        header: Some(read_back),
                        payload,
                        ..
                    })) => {
                        assert_eq!(read_back.to_vec(), header, "{qos:?} opening {opening}");
                        assert_eq!(&payload[..], b"pong", "the payload is the device's alone");
                    }
                    other => panic!("expected a publish with its header, got {other:?}"),
                }
                let publish = read(&out);
                let properties = publish.properties.expect("properties");
                assert_eq!(
                    (properties.topic_alias, properties.message_expiry_interval),
                    (Some(1), Some(9)),
                    "{qos:?} opening {opening}"
                );
                assert_eq!(
                    publish.pkid,
                    if qos == Qos::AtMostOnce { 0 } else { 0x1234 }
                );
                assert_eq!(&publish.topic[..], if opening { &b"a/b"[..] } else { b"" });
            }
        }
        assert!(
            Codec::new(MqttVersion::V311, 1 << 20)
                .publish_template_with(
                    "a",
                    Qos::AtLeastOnce,
                    4,
                    PublishExtras {
                        expiry_secs: Some(1),
                        header_property: false,
                    }
                )
                .is_err(),
            "3.1.1 has no properties"
        );
    }

    /// The broker's answers are named by their reason codes, one count each.
    #[test]
    fn suback_and_disconnect_reason_codes_are_named() {
        let v5_codec = Codec::new(MqttVersion::V5, 1 << 20);
        let decode = |packet: v5::Packet| {
            let mut out = BytesMut::new();
            packet.write(&mut out, None).expect("encodes");
            let bytes = out.to_vec();
            v5_codec
                .decode(&mut out)
                .expect("decodes")
                .unwrap_or_else(|| panic!("whole: {bytes:02x?}"))
        };
        let suback = v5::SubAck {
            pkid: 3,
            return_codes: vec![
                v5::SubscribeReasonCode::Success(V5QoS::AtLeastOnce),
                v5::SubscribeReasonCode::SharedSubscriptionsNotSupported,
                v5::SubscribeReasonCode::Success(V5QoS::AtMostOnce),
            ],
            properties: None,
        };
        assert_eq!(
            decode(v5::Packet::SubAck(suback)),
            Incoming::SubAck {
                pkid: 3,
                refused: 1,
                refusal: Some("suback_refused_shared_subscriptions_not_supported"),
                granted: Some(0),
            }
        );
        // A DISCONNECT with its reason alone, with an empty property length, and bare; each
        // followed by a PINGRESP that must still be read.
        for bytes in [
            &[0xE0, 0x01, 0x8E][..],
            &[0xE0, 0x02, 0x8E, 0x00],
            &[0xE0, 0x00],
        ] {
            let mut buffer = BytesMut::from(bytes);
            buffer.extend_from_slice(&[0xD0, 0x00]);
            let expected = if bytes.len() == 2 {
                "broker_disconnect_normal"
            } else {
                "broker_disconnect_session_taken_over"
            };
            assert_eq!(
                v5_codec.decode(&mut buffer),
                Ok(Some(Incoming::Disconnect(expected))),
                "{bytes:02x?}"
            );
            assert_eq!(v5_codec.decode(&mut buffer), Ok(Some(Incoming::PingResp)));
        }
        let mut partial = BytesMut::from(&[0xE0, 0x01][..]);
        assert_eq!(v5_codec.decode(&mut partial), Ok(None));
        assert_eq!(
            partial.len(),
            2,
            "an incomplete DISCONNECT waits for its reason"
        );
        let connack = v5::ConnAck {
            session_present: false,
            code: v5::ConnectReturnCode::ServerBusy,
            properties: None,
        };
        assert!(matches!(
            decode(v5::Packet::ConnAck(connack)),
            Incoming::ConnAck {
                refusal: Some("connack_refused_server_busy"),
                ..
            }
        ));
    }

    #[test]
    fn partial_packets_wait_for_more_bytes() {
        let codec = Codec::new(MqttVersion::V311, 1 << 20);
        let template = codec
            .publish_template("t", Qos::AtMostOnce, 100)
            .expect("encodes");
        let mut out = BytesMut::new();
        template.write_prefix(0, &mut out);
        out.extend_from_slice(&[0u8; 50]);
        assert_eq!(codec.decode(&mut out), Ok(None));
    }

    #[test]
    fn oversized_packets_are_an_error_not_a_hang() {
        let codec = Codec::new(MqttVersion::V311, 64);
        let template = codec
            .publish_template("t", Qos::AtMostOnce, 100)
            .expect("encodes");
        let mut out = BytesMut::new();
        template.write_prefix(0, &mut out);
        out.extend_from_slice(&[0u8; 100]);
        assert!(codec.decode(&mut out).is_err());
    }
}
