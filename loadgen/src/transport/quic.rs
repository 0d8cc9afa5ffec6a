//! MQTT over QUIC: each connection is a QUIC connection of its own (its own UDP socket, as
//! each TCP connection has its own port). By default it carries every MQTT packet both ways
//! on one bidirectional stream: the single-stream mode EMQX uses by default and the mqttv5
//! broker's control stream with its `control_only` delivery. The QUIC and TLS 1.3 handshake
//! and the stream's opening happen inside [`QuicDialer::dial`], so they count into the
//! connect time. With `broker.quic_streams` set to a stream per topic or per PUBLISH, the
//! halves come from [`super::quic_streams`].
//!
//! In the single-stream mode, a broker that delivers on streams it opens itself (mqttv5's
//! default per-topic delivery) would deliver where loadgen does not read: such a stream
//! fails the connection's reads with that reason instead of being counted as loss.
//!
//! Without 0-RTT every connection is a full handshake: no client resumes TLS, least of all
//! with another client's ticket. With 0-RTT (`broker.quic_zero_rtt`) each client keeps the
//! TLS tickets of its own connections, as a device does: when it connects again with a
//! ticket that allows early data, its CONNECT leaves in the first flight. Until the broker's
//! verdict the client's tickets are set aside, so a broker that rejects the early data fails
//! that attempt (its stream never reaches the broker, and the reads say
//! [`EARLY_DATA_REJECTED`]), and the client's next attempt is a full handshake. Tried,
//! accepted and rejected (as a stream of the attempt said) are counted ([`ZeroRttCounts`]);
//! a try neither accepted nor rejected had no verdict within its attempt: its handshake
//! failed, or did not finish before the attempt's deadline.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;

use quinn::crypto::rustls::QuicClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{DialSetupError, ReadHalf, WriteHalf};
use crate::spec::QuicStreams;

/// The largest MQTT packet: fixed header byte, 4 length bytes, the largest remaining length.
const LARGEST_PACKET: usize = 1 + 4 + crate::spec::MQTT_MAX_REMAINING_LENGTH as usize;

/// The application protocol asked for in the TLS handshake: what EMQX and the mqttv5 broker
/// accept for MQTT over QUIC.
pub const ALPN: &[u8] = b"mqtt";

/// How long a connection may be silent before QUIC drops it: the mqttv5 broker's own 60 s.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// QUIC's own pings on a silent connection, well within [`IDLE_TIMEOUT`]: a client that holds
/// a connection without traffic (a churn client, a keep-alive of minutes) keeps it, as over
/// TCP, and MQTT's keep-alive alone decides when a client is gone.
const QUIC_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// How long a connection is kept, after its writer finished the stream, for the broker to
/// close it (as it does after DISCONNECT). Closing at once would discard what the broker has
/// not yet acknowledged, DISCONNECT included, and the broker would see a lost client.
pub(super) const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The error code of a connection closed normally (after DISCONNECT): 0, "no error".
pub(super) const CLOSED_NORMALLY: u32 = 0;

/// The error code loadgen closes a connection with when the broker opened a stream of its
/// own, which loadgen does not read: any code but 0 says "not a normal end".
const REFUSED_STREAM: u32 = 1;

/// What a read or write says when the broker rejected the connection's 0-RTT data: the
/// session tries again at once, with a full handshake.
pub const EARLY_DATA_REJECTED: &str = "the broker rejected the 0-RTT data";

/// QUIC connections to one broker, with the TLS configuration built once per run.
#[derive(Clone)]
pub(super) struct QuicDialer {
    config: quinn::ClientConfig,
    server_name: String,
    closing: Arc<Closing>,
    zero_rtt: Option<Arc<ZeroRtt>>,
    streams: QuicStreams,
    /// The largest packet read in the multi-stream modes, which cut packets themselves.
    largest: usize,
}

/// 0-RTT: the configuration each client's own is made from, the clients' configurations
/// (each with its own ticket store), and the counts.
struct ZeroRtt {
    tls: rustls::ClientConfig,
    transport: Arc<quinn::TransportConfig>,
    /// Each client's configuration, its ticket store inside; out of the map while a 0-RTT
    /// attempt awaits the broker's verdict.
    clients: Mutex<HashMap<String, quinn::ClientConfig>>,
    counts: Arc<ZeroRttShared>,
}

/// Connections opened with 0-RTT data, the ones the broker accepted and rejected, and the
/// verdicts still awaited (a run waits for them before it reads the counts).
#[derive(Default)]
struct ZeroRttShared {
    attempted: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
    pending: AtomicUsize,
    decided: Notify,
}

/// How many connections were opened with 0-RTT data, and how many of those the broker
/// accepted and rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZeroRttCounts {
    /// Opened with 0-RTT data: the client held a ticket that allowed it.
    pub attempted: u64,
    /// Of those, the ones whose early data the broker accepted.
    pub accepted: u64,
    /// Of those, the ones whose early data the broker rejected, its handshake done (a
    /// ticket it could not use: its ticket keys changed, as they do when it restarts).
    pub rejected: u64,
}

/// Connections closing in the background after their writer's shutdown: a run waits for them
/// ([`QuicDialer::settle`]) before its runtime goes, so no goodbye is cut off mid-way.
#[derive(Default)]
pub(super) struct Closing {
    count: AtomicUsize,
    done: Notify,
}

impl Closing {
    /// One more connection closing.
    pub(super) fn begin(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// One connection closed.
    pub(super) fn end(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        self.done.notify_waiters();
    }
}

impl QuicDialer {
    /// Trusts `roots` for `server_name` (the broker's host as the spec gives it); with
    /// `zero_rtt`, clients that connect again send 0-RTT data; `streams` carry MQTT.
    pub(super) fn new(
        roots: rustls::RootCertStore,
        server_name: &str,
        zero_rtt: bool,
        streams: QuicStreams,
    ) -> Result<Self, DialSetupError> {
        // ring everywhere: mixing rustls crypto providers in one process panics.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| DialSetupError::Rustls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let mut transport = quinn::TransportConfig::default();
        transport.keep_alive_interval(Some(QUIC_KEEP_ALIVE));
        transport.max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(IDLE_TIMEOUT)
                .map_err(|e| DialSetupError::Rustls(format!("QUIC idle timeout: {e}")))?,
        ));
        let transport = Arc::new(transport);
        // No client resumes with a ticket unless 0-RTT gives it its own (below).
        let mut tls = tls;
        tls.resumption = rustls::client::Resumption::disabled();
        let zero_rtt = zero_rtt.then(|| {
            let mut tls = tls.clone();
            tls.enable_early_data = true;
            tls.resumption = rustls::client::Resumption::disabled();
            Arc::new(ZeroRtt {
                tls,
                transport: transport.clone(),
                clients: Mutex::default(),
                counts: Arc::default(),
            })
        });
        let config = client_config(tls, &transport)?;
        // The name is checked against the certificate at each handshake; refuse a name that
        // cannot be one now, as the TCP dialer does.
        rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| DialSetupError::Rustls(format!("host {server_name:?}: {e}")))?;
        Ok(QuicDialer {
            config,
            server_name: server_name.to_string(),
            closing: Arc::default(),
            zero_rtt,
            streams,
            largest: LARGEST_PACKET,
        })
    }

    /// Caps the packets read in the multi-stream modes at `bytes`, as the codec caps them
    /// over TCP (the single stream is read by the codec itself).
    pub(super) fn with_largest_packet(mut self, bytes: usize) -> Self {
        self.largest = bytes.clamp(1, LARGEST_PACKET);
        self
    }

    /// This dialer without 0-RTT: every connection a full handshake, no tickets kept.
    pub(super) fn without_zero_rtt(&self) -> Self {
        QuicDialer {
            zero_rtt: None,
            ..self.clone()
        }
    }

    /// The 0-RTT counts once every verdict awaited is in (or [`CLOSE_WAIT`] has passed);
    /// `None` without 0-RTT.
    pub(super) async fn zero_rtt_counts(&self) -> Option<ZeroRttCounts> {
        let counts = &self.zero_rtt.as_ref()?.counts;
        let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
        loop {
            let decided = counts.decided.notified();
            if counts.pending.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, decided).await.is_err() {
                break;
            }
        }
        Some(ZeroRttCounts {
            attempted: counts.attempted.load(Ordering::Acquire),
            accepted: counts.accepted.load(Ordering::Acquire),
            rejected: counts.rejected.load(Ordering::Acquire),
        })
    }

    /// Counts a connection whose stream said the broker rejected its 0-RTT data: the
    /// handshake was done and the early data refused.
    pub(super) fn note_zero_rtt_rejected(&self) {
        if let Some(zero_rtt) = &self.zero_rtt {
            zero_rtt.counts.rejected.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The configuration `client` dials with: with 0-RTT, its own (its own tickets).
    fn config_of(&self, client: Option<&str>) -> Result<quinn::ClientConfig, io::Error> {
        let (Some(zero_rtt), Some(client)) = (&self.zero_rtt, client) else {
            return Ok(self.config.clone());
        };
        if let Some(config) = zero_rtt.clients().get(client) {
            return Ok(config.clone());
        }
        let mut tls = zero_rtt.tls.clone();
        // One server, the broker: rustls keeps up to 8 TLS 1.3 tickets for it.
        tls.resumption = rustls::client::Resumption::store(Arc::new(
            rustls::client::ClientSessionMemoryCache::new(1),
        ));
        let config = client_config(tls, &zero_rtt.transport).map_err(io::Error::other)?;
        Ok(zero_rtt
            .clients()
            .entry(client.to_string())
            .or_insert(config)
            .clone())
    }

    /// Waits, at most [`CLOSE_WAIT`], until every connection whose writer shut down has
    /// closed.
    pub(super) async fn settle(&self) {
        let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
        loop {
            // Created before the count is read: a wake-up in between is not missed.
            let done = self.closing.done.notified();
            if self.closing.count.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return;
            }
        }
    }

    /// Resolves `address`, handshakes from a UDP socket of its own and opens the stream;
    /// as `client` (its id), which with 0-RTT sends early data when it holds a ticket.
    pub(super) async fn dial(
        &self,
        address: &str,
        client: Option<&str>,
    ) -> io::Result<(ReadHalf, WriteHalf)> {
        let peer = tokio::net::lookup_host(address)
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{address} has no address"))
            })?;
        let local = match peer {
            SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        };
        // The endpoint's driver lives as long as its connection; the handle may go.
        let endpoint = quinn::Endpoint::client(local)?;
        let connecting = endpoint
            .connect_with(self.config_of(client)?, peer, &self.server_name)
            .map_err(|e| io::Error::other(format!("QUIC to {peer}: {e}")))?;
        let connection = match (&self.zero_rtt, client) {
            (Some(zero_rtt), Some(client)) => match connecting.into_0rtt() {
                Ok((connection, accepted)) => {
                    let config = zero_rtt.clients().remove(client);
                    zero_rtt.await_verdict(client, config, accepted);
                    connection
                }
                // No ticket that allows early data: a full handshake.
                Err(connecting) => connecting.await.map_err(|e| connection_error(peer, e))?,
            },
            _ => connecting.await.map_err(|e| connection_error(peer, e))?,
        };
        let (send, recv) = connection
            .open_bi()
            .await
            .map_err(|e| connection_error(peer, e))?;
        if !self.streams.is_single() {
            return Ok(super::quic_streams::halves(
                connection,
                send,
                recv,
                self.streams,
                self.largest,
                self.closing.clone(),
            ));
        }
        let foreign = Arc::new(OnceLock::new());
        let watch = tokio::spawn(refuse_broker_streams(connection.clone(), foreign.clone()));
        let reader = QuicReader {
            recv,
            foreign,
            watch,
        };
        let writer = QuicWriter {
            send,
            connection,
            finished: false,
            closing: self.closing.clone(),
        };
        Ok((Box::pin(reader), Box::pin(writer)))
    }
}

impl ZeroRtt {
    fn clients(&self) -> std::sync::MutexGuard<'_, HashMap<String, quinn::ClientConfig>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts an attempt, and an acceptance once the handshake is done (a rejection is
    /// counted where a stream says so, [`QuicDialer::note_zero_rtt_rejected`]). The client's
    /// configuration (`config`, taken out of the map) comes back only when the broker
    /// accepted: its store then gets this connection's tickets; after a rejection, or a
    /// handshake that never finished, the client starts again without tickets. The
    /// connection is not held here: an attempt given up closes it at once, rather than let
    /// its handshake, and the early CONNECT in it, go on after the client has moved on.
    fn await_verdict(
        self: &Arc<Self>,
        client: &str,
        config: Option<quinn::ClientConfig>,
        accepted: quinn::ZeroRttAccepted,
    ) {
        let counts = self.counts.clone();
        counts.attempted.fetch_add(1, Ordering::AcqRel);
        counts.pending.fetch_add(1, Ordering::AcqRel);
        let (zero_rtt, client) = (self.clone(), client.to_string());
        tokio::spawn(async move {
            if accepted.await {
                counts.accepted.fetch_add(1, Ordering::AcqRel);
                if let Some(config) = config {
                    // A redial meanwhile made a fresh one: either holds this client's tickets.
                    zero_rtt.clients().entry(client).or_insert(config);
                }
            }
            counts.pending.fetch_sub(1, Ordering::AcqRel);
            counts.decided.notify_waiters();
        });
    }
}

/// quinn's client configuration of `tls`, with `transport`.
fn client_config(
    tls: rustls::ClientConfig,
    transport: &Arc<quinn::TransportConfig>,
) -> Result<quinn::ClientConfig, DialSetupError> {
    let crypto = QuicClientConfig::try_from(tls)
        .map_err(|e| DialSetupError::Rustls(format!("QUIC: {e}")))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport.clone());
    Ok(config)
}

fn connection_error(peer: SocketAddr, error: quinn::ConnectionError) -> io::Error {
    let kind = match error {
        quinn::ConnectionError::TimedOut => io::ErrorKind::TimedOut,
        quinn::ConnectionError::ConnectionClosed(_) | quinn::ConnectionError::Reset => {
            io::ErrorKind::ConnectionRefused
        }
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("QUIC handshake with {peer}: {error}"))
}

/// Waits for a stream the broker opens; on one, records why the connection's reads fail.
/// Ends when the connection does (or when its reader is dropped, which aborts it).
async fn refuse_broker_streams(connection: quinn::Connection, foreign: Arc<OnceLock<String>>) {
    let kind = tokio::select! {
        opened = connection.accept_uni() => opened.ok().map(|_| "unidirectional"),
        opened = connection.accept_bi() => opened.ok().map(|_| "bidirectional"),
    };
    if let Some(kind) = kind {
        tracing::warn!(
            "the broker opened a {kind} QUIC stream; loadgen reads the connection's one stream only"
        );
        let _ = foreign.set(format!(
            "the broker opened a {kind} QUIC stream of its own (a per-topic or per-publish \
             delivery); loadgen reads MQTT on the connection's one stream only: configure \
             the broker to deliver on that stream (mqttv5: server_delivery_strategy = \
             \"control_only\")"
        ));
        connection.close(REFUSED_STREAM.into(), b"unexpected stream");
    }
}

/// The read half: the stream, and the reason the broker's own stream failed it, if one did.
struct QuicReader {
    recv: quinn::RecvStream,
    foreign: Arc<OnceLock<String>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for QuicReader {
    fn drop(&mut self) {
        // The watcher holds a handle on the connection: it must not outlive the reader.
        self.watch.abort();
    }
}

impl AsyncRead for QuicReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(reason) = self.foreign.get() {
            return Poll::Ready(Err(unread_stream(reason)));
        }
        match self.recv.poll_read_buf(cx, buf) {
            Poll::Ready(Err(error)) => Poll::Ready(read_error(error, &self.foreign)),
            other => other.map(|_| Ok(())),
        }
    }
}

/// The read error of a connection on which the broker opened a stream: of its own kind, so
/// the run's errors name it ([`super::read_failure`]).
fn unread_stream(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, reason.to_string())
}

/// A read error as the session reads it: the broker closing the connection with "no error"
/// (as after DISCONNECT, or an MQTT-level close) is the end of the stream, as a FIN is on TCP
/// (a read of nothing); anything else is an error.
fn read_error(error: quinn::ReadError, foreign: &OnceLock<String>) -> io::Result<()> {
    if let Some(reason) = foreign.get() {
        return Err(unread_stream(reason));
    }
    stream_read_end(error)
}

/// How a stream's read ends on `error`: the broker closing the connection with "no error"
/// is its end; a rejection of 0-RTT data is named ([`EARLY_DATA_REJECTED`]).
pub(super) fn stream_read_end(error: quinn::ReadError) -> io::Result<()> {
    match error {
        quinn::ReadError::ConnectionLost(quinn::ConnectionError::ApplicationClosed(close))
            if close.error_code == quinn::VarInt::from_u32(CLOSED_NORMALLY) =>
        {
            Ok(())
        }
        quinn::ReadError::ZeroRttRejected => Err(early_data_rejected()),
        other => Err(io::Error::other(other)),
    }
}

/// The error of a stream whose 0-RTT data the broker rejected.
fn early_data_rejected() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, EARLY_DATA_REJECTED)
}

/// The write half; its shutdown finishes the stream at once, as a FIN does on TCP, and
/// leaves the connection to close in the background once the broker has had what was
/// written (counted in `closing`, which the run waits for).
struct QuicWriter {
    send: quinn::SendStream,
    connection: quinn::Connection,
    finished: bool,
    closing: Arc<Closing>,
}

impl AsyncWrite for QuicWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.send).poll_write(cx, buf) {
            Poll::Ready(Err(quinn::WriteError::ZeroRttRejected)) => {
                Poll::Ready(Err(early_data_rejected()))
            }
            other => other.map_err(io::Error::from),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        AsyncWrite::poll_flush(Pin::new(&mut self.send), cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.finished {
            self.finished = true;
            // Finished or reset already (the broker closed first) is fine.
            let _ = self.send.finish();
            let connection = self.connection.clone();
            let closing = self.closing.clone();
            closing.begin();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(CLOSE_WAIT, connection.closed()).await;
                connection.close(CLOSED_NORMALLY.into(), b"");
                closing.end();
            });
        }
        Poll::Ready(Ok(()))
    }
}
