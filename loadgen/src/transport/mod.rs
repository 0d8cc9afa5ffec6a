//! Connections to the broker, split into a read and a write half: TCP, TLS on it when the
//! spec names a CA, and MQTT inside WebSocket frames on top with `transport = "websocket"`
//! (ws://, or wss:// with TLS); or one QUIC stream with `transport = "quic"`. Every layer is
//! set up inside [`Dialer::dial`], so the TLS and QUIC handshakes and the WebSocket upgrade
//! count into the connect time.
//!
//! # Layout
//! - this file: the [`Dialer`] and the TLS client configuration.
//! - `websocket`: the upgrade and the byte halves over WebSocket frames.
//! - `quic`: QUIC connections and the halves of their one stream.
//! - `quic_streams`: the halves of a QUIC connection with a stream per topic or per PUBLISH.
//! - `arrival`: the kernel's receive stamp under a subscriber's reads.

mod arrival;
mod quic;
mod quic_streams;
mod websocket;

pub use arrival::ArrivalStamp;
pub use quic::{ALPN as QUIC_ALPN, EARLY_DATA_REJECTED, ZeroRttCounts};

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::spec::{BrokerTarget, Transport};

/// The read half of a broker connection.
pub type ReadHalf = Pin<Box<dyn AsyncRead + Send>>;
/// The write half of a broker connection.
pub type WriteHalf = Pin<Box<dyn AsyncWrite + Send>>;

/// How to reach the broker: address and, for TLS, the client configuration built once per run;
/// for WebSocket, the upgrade request; for QUIC, its own configuration instead of TLS's.
#[derive(Clone)]
pub struct Dialer {
    address: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    websocket: Option<websocket::Upgrade>,
    quic: Option<quic::QuicDialer>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("address", &self.address)
            .field("tls", &self.tls.is_some())
            .field("websocket", &self.websocket.as_ref().map(|ws| ws.url()))
            .field("quic", &self.quic.is_some())
            .finish()
    }
}

/// The connection could not be set up from the spec: TLS, or the WebSocket request.
#[derive(Debug, thiserror::Error)]
pub enum DialSetupError {
    /// The CA file is missing, unreadable, not a regular file, larger than
    /// [`MAX_CA_FILE`] or holds no PEM certificate. One message for all of them: the path
    /// may come from someone other than the operator (a submitted plan, a controller), and
    /// the answer must not tell an existing file from a missing one; the reason is logged.
    #[error(
        "broker.tls_ca_file {path}: not usable: give a readable regular file of at most 1 MiB holding PEM CA certificates"
    )]
    CaFile {
        /// The file.
        path: String,
    },
    /// The inline CA holds no usable PEM certificate.
    #[error("broker.tls_ca_pem: {reason}")]
    CaPem {
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration or the host name.
    #[error("TLS setup: {0}")]
    Rustls(String),
    /// QUIC needs TLS 1.3, so a CA to trust (validation says so first, with the field).
    #[error("broker.transport \"quic\": QUIC is always TLS 1.3; set broker.tls_ca_file")]
    QuicWithoutCa,
    /// Host, port and WebSocket path make no valid upgrade request.
    #[error("broker.websocket_path {path:?}: {reason}")]
    WebSocketRequest {
        /// The path.
        path: String,
        /// What is wrong with the request.
        reason: String,
    },
}

impl Dialer {
    /// Prepares connections to `target` (reads the CA file once, checks the upgrade request).
    pub fn new(target: &BrokerTarget) -> Result<Self, DialSetupError> {
        let address = format!("{}:{}", target.host, target.port);
        let roots = target_roots(target)?;
        if target.transport == Transport::Quic {
            let roots = roots.ok_or(DialSetupError::QuicWithoutCa)?;
            return Ok(Dialer {
                address,
                tls: None,
                websocket: None,
                quic: Some(quic::QuicDialer::new(
                    roots,
                    &target.host,
                    target.quic_zero_rtt,
                    target.quic_streams,
                )?),
            });
        }
        let tls = match roots {
            None => None,
            Some(roots) => Some(tls_connector(roots, &target.host)?),
        };
        let websocket = match target.transport {
            Transport::Tcp | Transport::Quic => None,
            Transport::WebSocket => Some(websocket::Upgrade::new(target)?),
        };
        Ok(Dialer {
            address,
            tls,
            websocket,
            quic: None,
        })
    }

    /// Caps what the broker may send in one WebSocket frame or message, or one packet on a
    /// QUIC stream the codec does not read itself, at `bytes`, the largest packet the
    /// clients accept (TCP connections are capped by the codec).
    pub fn with_max_packet(mut self, bytes: usize) -> Self {
        self.websocket = self.websocket.map(|ws| ws.with_largest_packet(bytes));
        self.quic = self.quic.map(|quic| quic.with_largest_packet(bytes));
        self
    }

    /// This dialer for clients that connect once and never again (churn arrivals): over QUIC
    /// with 0-RTT they keep no tickets, so a fleet of them holds no memory for any.
    pub fn for_one_off_clients(&self) -> Dialer {
        Dialer {
            quic: self.quic.as_ref().map(quic::QuicDialer::without_zero_rtt),
            ..self.clone()
        }
    }

    /// The 0-RTT counts of QUIC connections, once the verdicts awaited are in (2 s at
    /// most); `None` unless the spec asked for 0-RTT.
    pub async fn zero_rtt_counts(&self) -> Option<ZeroRttCounts> {
        match &self.quic {
            Some(quic) => quic.zero_rtt_counts().await,
            None => None,
        }
    }

    /// Counts a 0-RTT attempt the broker rejected (its stream said [`EARLY_DATA_REJECTED`]).
    pub(crate) fn note_zero_rtt_rejected(&self) {
        if let Some(quic) = &self.quic {
            quic.note_zero_rtt_rejected();
        }
    }

    /// Waits (a few seconds at most) for connections still closing after their writers shut
    /// down: QUIC ones close in the background, and a run's runtime must not go before.
    pub async fn settle(&self) {
        if let Some(quic) = &self.quic {
            quic.settle().await;
        }
    }

    /// The `host:port` dialled.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Opens one connection with Nagle off (small MQTT packets must not wait for ACKs).
    ///
    /// Writers of WebSocket connections (and of TLS ones) may keep the last bytes written
    /// when the socket is full: flush before waiting for the broker's answer.
    pub async fn dial(&self) -> io::Result<(ReadHalf, WriteHalf)> {
        self.dial_as(None).await
    }

    /// [`Dialer::dial`] for the client `client` (its id, when it has one): over QUIC with
    /// 0-RTT, a client that connected before sends early data with its own ticket.
    pub async fn dial_as(&self, client: Option<&str>) -> io::Result<(ReadHalf, WriteHalf)> {
        if let Some(quic) = &self.quic {
            return quic.dial(&self.address, client).await;
        }
        let stream = self.connect().await?;
        if self.tls.is_none() && self.websocket.is_none() {
            // Owned halves: no lock between the reader and the writer of a plain socket.
            let (read, write) = stream.into_split();
            return Ok((Box::pin(read), Box::pin(write)));
        }
        self.layer(stream).await
    }

    /// [`Dialer::dial`], with the kernel's receive stamp of the newest bytes read kept
    /// (`None` when the kernel refuses to stamp): for subscribers, whose late reads are
    /// loadgen's and not the broker's. QUIC's datagrams are read by its endpoint's driver,
    /// not by the session, so they carry none.
    pub async fn dial_stamped(
        &self,
        client: Option<&str>,
    ) -> io::Result<(ReadHalf, WriteHalf, Option<Arc<ArrivalStamp>>)> {
        if let Some(quic) = &self.quic {
            let (read, write) = quic.dial(&self.address, client).await?;
            return Ok((read, write, None));
        }
        let stream = self.connect().await?;
        if self.tls.is_none() && self.websocket.is_none() {
            let (read, write) = stream.into_split();
            return Ok(match arrival::Stamped::new(read) {
                Ok(read) => {
                    let stamp = read.arrival();
                    (Box::pin(read), Box::pin(write), Some(stamp))
                }
                Err(read) => (Box::pin(read), Box::pin(write), None),
            });
        }
        match arrival::Stamped::new(stream) {
            Ok(stamped) => {
                let stamp = stamped.arrival();
                let (read, write) = self.layer(stamped).await?;
                Ok((read, write, Some(stamp)))
            }
            Err(stream) => {
                let (read, write) = self.layer(stream).await?;
                Ok((read, write, None))
            }
        }
    }

    async fn connect(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(&self.address).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// TLS and WebSocket on a connected socket, as the spec asks.
    async fn layer<S>(&self, stream: S) -> io::Result<(ReadHalf, WriteHalf)>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        match (&self.tls, &self.websocket) {
            (None, None) => {
                let (read, write) = tokio::io::split(stream);
                Ok((Box::pin(read), Box::pin(write)))
            }
            (Some((connector, name)), None) => {
                let tls = connector.connect(name.clone(), stream).await?;
                let (read, write) = tokio::io::split(tls);
                Ok((Box::pin(read), Box::pin(write)))
            }
            (None, Some(upgrade)) => upgrade.over(stream).await,
            (Some((connector, name)), Some(upgrade)) => {
                let tls = connector.connect(name.clone(), stream).await?;
                upgrade.over(tls).await
            }
        }
    }
}

/// The error kind a run counts for a failed read: QUIC's "the broker delivered on a stream of
/// its own, which is not read" apart from every other failure.
pub(crate) fn read_failure(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::Unsupported => "broker_opened_a_quic_stream",
        _ => "read_failed",
    }
}

/// Largest CA file read: a bundle of a few hundred certificates fits, `/dev/zero` does not
/// reach memory.
pub const MAX_CA_FILE: u64 = 1024 * 1024;

/// The certificates of the CA file at `path` (a regular file of at most [`MAX_CA_FILE`]),
/// or exactly why there are none: for the operator's log or its own configuration; a client
/// gets [`DialSetupError::CaFile`], which says the same for every reason.
pub fn ca_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let pem = host::read_capped(path, MAX_CA_FILE, host::Links::Follow)
        .map_err(|error| error.to_string())?;
    pem_roots(&pem)
}

/// The certificates in `pem`, or why there are none.
fn pem_roots(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_pemfile::certs(&mut &pem[..]) {
        let certificate = certificate.map_err(|error| format!("PEM: {error}"))?;
        roots
            .add(certificate)
            .map_err(|error| format!("certificate: {error}"))?;
    }
    if roots.is_empty() {
        return Err("no PEM certificate found".to_string());
    }
    Ok(roots)
}

/// [`ca_roots`] with the one message a client gets for every reason (the reason is logged).
fn ca_file_roots(path: &Path) -> Result<rustls::RootCertStore, DialSetupError> {
    let shown = path.display().to_string();
    ca_roots(path).map_err(|reason| {
        tracing::warn!(path = %shown, %reason, "broker.tls_ca_file refused");
        DialSetupError::CaFile { path: shown }
    })
}

/// The CA `target` trusts, from its file or inline; `None` without one (no TLS).
fn target_roots(target: &BrokerTarget) -> Result<Option<rustls::RootCertStore>, DialSetupError> {
    if let Some(pem) = &target.tls_ca_pem {
        // Sent by a controller for a listener an agent deployed: its reason is no secret.
        return pem_roots(pem.as_bytes())
            .map(Some)
            .map_err(|reason| DialSetupError::CaPem { reason });
    }
    target.tls_ca_file.as_deref().map(ca_file_roots).transpose()
}

fn tls_connector(
    roots: rustls::RootCertStore,
    host: &str,
) -> Result<(TlsConnector, ServerName<'static>), DialSetupError> {
    // ring everywhere: mixing rustls crypto providers in one process panics.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DialSetupError::Rustls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every connection a full handshake, as over QUIC without 0-RTT: rustls' default store
    // is shared by the whole dialer, so clients would resume with each other's tickets.
    config.resumption = rustls::client::Resumption::disabled();
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| DialSetupError::Rustls(format!("host {host:?}: {e}")))?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CA certificate's name in the test PKI's folder.
    const CA_PEM: &str = "ca.pem";

    fn with_ca(path: &Path) -> BrokerTarget {
        BrokerTarget {
            host: "localhost".to_string(),
            port: 8883,
            protocol: crate::spec::MqttVersion::V311,
            tls_ca_file: Some(path.to_path_buf()),
            tls_ca_pem: None,
            username: None,
            password: None,
            transport: Transport::Tcp,
            websocket_path: None,
            quic_zero_rtt: false,
            quic_streams: Default::default(),
        }
    }

    /// The message with the path taken out: what tells one refused file from another.
    fn refusal(path: &Path) -> String {
        let error = Dialer::new(&with_ca(path)).expect_err("refused");
        assert!(
            matches!(error, DialSetupError::CaFile { .. }),
            "{}: {error}",
            path.display()
        );
        error
            .to_string()
            .replace(&path.display().to_string(), "PATH")
    }

    #[test]
    fn a_ca_file_is_read_capped_and_refusals_do_not_tell_files_apart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = dir.path().join("pki");
        ::tests::pki::TestPki::create(&pki, &[]).expect("a PKI");
        Dialer::new(&with_ca(&pki.join(CA_PEM))).expect("a real CA is used");

        let no_pem = dir.path().join("shadow");
        std::fs::write(&no_pem, "root:*:19000:0:99999:7:::\n").expect("written");
        let unreadable = dir.path().join("unreadable.pem");
        std::fs::copy(pki.join(CA_PEM), &unreadable).expect("copied");
        std::fs::set_permissions(
            &unreadable,
            std::os::unix::fs::PermissionsExt::from_mode(0o000),
        )
        .expect("chmod");
        let large = dir.path().join("large.pem");
        std::fs::write(&large, vec![b'A'; MAX_CA_FILE as usize + 1]).expect("written");
        let missing = dir.path().join("missing.pem");
        let expected = refusal(&missing);
        assert!(expected.contains("broker.tls_ca_file PATH"), "{expected}");
        // Root reads a mode-000 file (and uses the CA in it); anyone else is refused with
        // the message of a missing file.
        let mut refused = vec![no_pem, large, dir.path().to_path_buf(), "/dev/zero".into()];
        if Dialer::new(&with_ca(&unreadable)).is_err() {
            refused.push(unreadable);
        }
        for path in refused {
            assert_eq!(refusal(&path), expected, "{}", path.display());
        }
    }

    #[test]
    fn an_inline_ca_is_trusted_as_a_file_is_and_garbage_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = dir.path().join("pki");
        ::tests::pki::TestPki::create(&pki, &[]).expect("a PKI");
        let pem = std::fs::read_to_string(pki.join(CA_PEM)).expect("the CA");
        for transport in [Transport::Tcp, Transport::Quic] {
            let target = BrokerTarget {
                tls_ca_file: None,
                tls_ca_pem: Some(pem.clone()),
                transport,
                ..with_ca(Path::new("unused"))
            };
            let dialer = Dialer::new(&target).expect("an inline CA is used");
            assert!(dialer.tls.is_some() || dialer.quic.is_some(), "{dialer:?}");
        }
        let garbage = BrokerTarget {
            tls_ca_file: None,
            tls_ca_pem: Some("not a certificate".to_string()),
            ..with_ca(Path::new("unused"))
        };
        let error = Dialer::new(&garbage).expect_err("no certificate in it");
        assert_eq!(
            error.to_string(),
            "broker.tls_ca_pem: no PEM certificate found"
        );
    }
}
