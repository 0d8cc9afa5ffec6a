//! Opening one MQTT connection: TCP (+TLS), CONNECT, CONNACK and, for subscribers, SUBSCRIBE
//! and SUBACK, under one deadline.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::codec::{Codec, ConnectFields, Incoming};
use crate::spec::{Qos, WorkloadSpec};
use crate::transport::{ArrivalStamp, Dialer, EARLY_DATA_REJECTED, ReadHalf, WriteHalf};

/// Bytes reserved before each socket read, so large packets are not read 64 bytes at a time.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// An open MQTT connection.
pub(crate) struct Session {
    pub reader: ReadHalf,
    pub writer: WriteHalf,
    /// Bytes read but not yet decoded.
    pub read_buffer: BytesMut,
    pub codec: Codec,
    /// MQTT 5: in-flight messages the broker accepts.
    pub receive_maximum: Option<u16>,
    /// CONNACK said the broker had kept this client's session.
    pub session_present: bool,
    /// MQTT 5: what CONNACK said the broker allows.
    pub limits: crate::codec::ServerLimits,
    /// The QoS SUBACK granted the subscription (a broker may grant less than asked).
    pub granted_qos: Option<u8>,
    /// Subscribers: the kernel's receive stamp of the newest bytes read (`None` for
    /// publishers, and where the kernel does not stamp).
    pub arrival: Option<Arc<ArrivalStamp>>,
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectFailure {
    /// TCP connect failed (refused, unreachable, TLS handshake).
    #[error("cannot connect: {0}")]
    Io(String),
    /// The broker did not answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The broker answered CONNACK with a refusal (its reason code, named).
    #[error("the broker refused CONNECT: {0}")]
    Refused(&'static str),
    /// The broker refused the subscription to `filter` (its reason code, named).
    #[error("the broker refused SUBSCRIBE to {filter}: {refusal}")]
    SubscribeRefused {
        /// The filter refused.
        filter: String,
        /// Why, as the SUBACK's reason code names it.
        refusal: &'static str,
    },
    /// The broker closed the connection or sent something unexpected.
    #[error("protocol: {0}")]
    Protocol(String),
}

impl ConnectFailure {
    /// A short kind name for error counts.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectFailure::Io(_) => "connect_io",
            ConnectFailure::Timeout(_) => "connect_timeout",
            // The broker's answer, one count per reason code.
            ConnectFailure::Refused(refusal) => refusal,
            ConnectFailure::SubscribeRefused { refusal, .. } => refusal,
            ConnectFailure::Protocol(_) => "connect_protocol",
        }
    }
}

/// Whether a subscription is made again on a session the broker kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptSession {
    /// Subscribe whatever CONNACK says (a new run's clients).
    SubscribeAnyway,
    /// A kept session holds the subscription already, and its queued messages may arrive
    /// before any SUBACK: subscribe only when the broker started a new session.
    HoldsTheSubscription,
}

/// Whether the connection keeps the kernel's receive stamp of what it reads: subscribers do,
/// for their read delay ([`crate::transport::ArrivalStamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StampReads {
    Yes,
    No,
}

/// Opens a session and, when `subscription` is given, subscribes (and stamps its reads), all
/// within `deadline`.
pub(crate) async fn open(
    dialer: &Dialer,
    codec: Codec,
    fields: &ConnectFields<'_>,
    subscription: Option<(&str, Qos)>,
    deadline: Duration,
) -> Result<Session, ConnectFailure> {
    let stamp = match subscription {
        Some(_) => StampReads::Yes,
        None => StampReads::No,
    };
    open_with(
        dialer,
        codec,
        fields,
        subscription,
        KeptSession::SubscribeAnyway,
        stamp,
        deadline,
    )
    .await
}

/// [`open`], with what a kept session means for the subscription.
pub(crate) async fn open_with(
    dialer: &Dialer,
    codec: Codec,
    fields: &ConnectFields<'_>,
    subscription: Option<(&str, Qos)>,
    kept: KeptSession,
    stamp: StampReads,
    deadline: Duration,
) -> Result<Session, ConnectFailure> {
    let attempts = async {
        let mut attempt = 1;
        loop {
            match open_unbounded(dialer, codec, fields, subscription, kept, stamp).await {
                // A broker busy tearing down the previous run's clients may drop a handshake
                // (seen with rumqttd under load): try again, within the same deadline.
                Err(ConnectFailure::Protocol(reason))
                    if reason == CLOSED_DURING_HANDSHAKE && attempt < HANDSHAKE_ATTEMPTS =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // The broker refused this connection's 0-RTT data (counted, whatever comes
                // next): at once again, as a QUIC client resends on 1-RTT, with a full
                // handshake this time.
                Err(ConnectFailure::Io(reason)) if reason.contains(EARLY_DATA_REJECTED) => {
                    dialer.note_zero_rtt_rejected();
                    if attempt >= HANDSHAKE_ATTEMPTS {
                        return Err(ConnectFailure::Io(reason));
                    }
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    };
    match tokio::time::timeout(deadline, attempts).await {
        Ok(result) => result,
        Err(_) => Err(ConnectFailure::Timeout(deadline)),
    }
}

/// How a handshake ends when the broker closes the socket before answering.
const CLOSED_DURING_HANDSHAKE: &str = "the broker closed the connection";
/// Handshakes tried per connection when the broker closes one before answering.
const HANDSHAKE_ATTEMPTS: u32 = 3;

async fn open_unbounded(
    dialer: &Dialer,
    codec: Codec,
    fields: &ConnectFields<'_>,
    subscription: Option<(&str, Qos)>,
    kept: KeptSession,
    stamp: StampReads,
) -> Result<Session, ConnectFailure> {
    let dialed = match stamp {
        StampReads::Yes => dialer.dial_stamped(Some(fields.client_id)).await,
        StampReads::No => dialer
            .dial_as(Some(fields.client_id))
            .await
            .map(|(read, write)| (read, write, None)),
    };
    let (reader, writer, arrival) = dialed.map_err(|e| ConnectFailure::Io(e.to_string()))?;
    let mut session = Session {
        reader,
        writer,
        read_buffer: BytesMut::with_capacity(READ_CHUNK),
        codec,
        receive_maximum: None,
        session_present: false,
        limits: crate::codec::ServerLimits::default(),
        granted_qos: None,
        arrival,
    };
    let mut out = BytesMut::new();
    codec
        .connect(fields, &mut out)
        .map_err(|e| ConnectFailure::Protocol(e.to_string()))?;
    session.send(&out).await?;
    match session.next_packet().await? {
        Incoming::ConnAck {
            refusal: None,
            receive_maximum,
            session_present,
            limits,
        } => {
            session.receive_maximum = receive_maximum;
            session.session_present = session_present;
            session.limits = limits;
        }
        Incoming::ConnAck {
            refusal: Some(code),
            ..
        } => return Err(ConnectFailure::Refused(code)),
        other => {
            return Err(ConnectFailure::Protocol(format!(
                "expected CONNACK, got {other:?}"
            )));
        }
    }
    let subscription = subscription
        .filter(|_| !(session.session_present && kept == KeptSession::HoldsTheSubscription));
    if let Some((filter, qos)) = subscription {
        out.clear();
        codec
            .subscribe(1, filter, qos, &mut out)
            .map_err(|e| ConnectFailure::Protocol(e.to_string()))?;
        session.send(&out).await?;
        match session.next_packet().await? {
            Incoming::SubAck {
                pkid: 1,
                refused: 0,
                granted,
                ..
            } => session.granted_qos = granted,
            Incoming::SubAck { refusal, .. } => {
                return Err(ConnectFailure::SubscribeRefused {
                    filter: filter.to_string(),
                    refusal: refusal.unwrap_or("suback_refused_failure"),
                });
            }
            other => {
                return Err(ConnectFailure::Protocol(format!(
                    "expected SUBACK, got {other:?}"
                )));
            }
        }
    }
    Ok(session)
}

impl Session {
    async fn send(&mut self, bytes: &[u8]) -> Result<(), ConnectFailure> {
        self.writer
            .write_all(bytes)
            .await
            .map_err(|e| ConnectFailure::Io(e.to_string()))?;
        self.writer
            .flush()
            .await
            .map_err(|e| ConnectFailure::Io(e.to_string()))
    }

    async fn next_packet(&mut self) -> Result<Incoming, ConnectFailure> {
        loop {
            if let Some(packet) = self
                .codec
                .decode(&mut self.read_buffer)
                .map_err(|e| ConnectFailure::Protocol(e.to_string()))?
            {
                return Ok(packet);
            }
            self.read_buffer.reserve(READ_CHUNK);
            let read = self
                .reader
                .read_buf(&mut self.read_buffer)
                .await
                .map_err(|e| ConnectFailure::Io(e.to_string()))?;
            if read == 0 {
                return Err(ConnectFailure::Protocol(
                    CLOSED_DURING_HANDSHAKE.to_string(),
                ));
            }
        }
    }
}

/// The CONNECT of `client_id`: every client of a run sends the same settings.
pub(crate) fn connect_fields<'a>(spec: &'a WorkloadSpec, client_id: &'a str) -> ConnectFields<'a> {
    ConnectFields {
        client_id,
        keep_alive_secs: u16::try_from(spec.connection.keep_alive.as_secs()).unwrap_or(u16::MAX),
        clean_session: spec.connection.clean_session,
        login: spec
            .broker
            .username
            .as_deref()
            .map(|user| (user, spec.broker.password.as_deref().unwrap_or(""))),
        max_packet_size: u32::try_from(spec.max_packet_bytes()).unwrap_or(u32::MAX),
        receive_maximum: spec.connection.receive_maximum.unwrap_or(u16::MAX),
        will: None,
    }
}
