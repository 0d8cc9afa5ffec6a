//! Connections to the broker, split into a read and a write half: TCP, TLS on it when the
//! spec names a CA, and MQTT inside WebSocket frames on top with `transport = "websocket"`
//! (ws://, or wss:// with TLS). Every layer is set up inside [`Dialer::dial`], so the TLS
//! handshake and the WebSocket upgrade count into the connect time.
//!
//! # Layout
//! - this file: the [`Dialer`] and the TLS client configuration.
//! - `websocket`: the upgrade and the byte halves over WebSocket frames.

mod websocket;

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
/// for WebSocket, the upgrade request.
#[derive(Clone)]
pub struct Dialer {
    address: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    websocket: Option<websocket::Upgrade>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("address", &self.address)
            .field("tls", &self.tls.is_some())
            .field("websocket", &self.websocket.as_ref().map(|ws| ws.url()))
            .finish()
    }
}

/// The connection could not be set up from the spec: TLS, or the WebSocket request.
#[derive(Debug, thiserror::Error)]
pub enum DialSetupError {
    /// The CA file could not be read.
    #[error("broker.tls_ca_file {path}: {source}")]
    CaFile {
        /// The file.
        path: String,
        /// The I/O error.
        source: io::Error,
    },
    /// The CA file holds no usable certificate.
    #[error("broker.tls_ca_file {path}: no PEM certificate found")]
    NoCertificate {
        /// The file.
        path: String,
    },
    /// rustls refused the configuration or the host name.
    #[error("TLS setup: {0}")]
    Rustls(String),
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
        let tls = match &target.tls_ca_file {
            None => None,
            Some(path) => Some(tls_connector(path, &target.host)?),
        };
        let websocket = match target.transport {
            Transport::Tcp => None,
            Transport::WebSocket => Some(websocket::Upgrade::new(target)?),
        };
        Ok(Dialer {
            address,
            tls,
            websocket,
        })
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
        let stream = TcpStream::connect(&self.address).await?;
        stream.set_nodelay(true)?;
        match (&self.tls, &self.websocket) {
            (None, None) => {
                let (read, write) = stream.into_split();
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

fn tls_connector(
    path: &Path,
    host: &str,
) -> Result<(TlsConnector, ServerName<'static>), DialSetupError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| DialSetupError::CaFile {
        path: shown.clone(),
        source,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_pemfile::certs(&mut pem.as_slice()) {
        let certificate = certificate.map_err(|source| DialSetupError::CaFile {
            path: shown.clone(),
            source,
        })?;
        roots
            .add(certificate)
            .map_err(|e| DialSetupError::Rustls(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(DialSetupError::NoCertificate { path: shown });
    }
    // ring everywhere: mixing rustls crypto providers in one process panics.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DialSetupError::Rustls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| DialSetupError::Rustls(format!("host {host:?}: {e}")))?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}
