//! TCP (optionally TLS) connections to the broker, split into a read and a write half.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::spec::BrokerTarget;

/// The read half of a broker connection.
pub type ReadHalf = Pin<Box<dyn AsyncRead + Send>>;
/// The write half of a broker connection.
pub type WriteHalf = Pin<Box<dyn AsyncWrite + Send>>;

/// How to reach the broker: address and, for TLS, the client configuration built once per run.
#[derive(Clone)]
pub struct Dialer {
    address: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("address", &self.address)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// TLS could not be set up from the spec.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
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
}

impl Dialer {
    /// Prepares connections to `target` (reads the CA file once).
    pub fn new(target: &BrokerTarget) -> Result<Self, TlsSetupError> {
        let address = format!("{}:{}", target.host, target.port);
        let tls = match &target.tls_ca_file {
            None => None,
            Some(path) => Some(tls_connector(path, &target.host)?),
        };
        Ok(Dialer { address, tls })
    }

    /// The `host:port` dialled.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Opens one connection with Nagle off (small MQTT packets must not wait for ACKs).
    pub async fn dial(&self) -> io::Result<(ReadHalf, WriteHalf)> {
        let stream = TcpStream::connect(&self.address).await?;
        stream.set_nodelay(true)?;
        match &self.tls {
            None => {
                let (read, write) = stream.into_split();
                Ok((Box::pin(read), Box::pin(write)))
            }
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), stream).await?;
                let (read, write) = tokio::io::split(tls);
                Ok((Box::pin(read), Box::pin(write)))
            }
        }
    }
}

fn tls_connector(
    path: &Path,
    host: &str,
) -> Result<(TlsConnector, ServerName<'static>), TlsSetupError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| TlsSetupError::CaFile {
        path: shown.clone(),
        source,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_pemfile::certs(&mut pem.as_slice()) {
        let certificate = certificate.map_err(|source| TlsSetupError::CaFile {
            path: shown.clone(),
            source,
        })?;
        roots
            .add(certificate)
            .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsSetupError::NoCertificate { path: shown });
    }
    // ring everywhere: mixing rustls crypto providers in one process panics.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Rustls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| TlsSetupError::Rustls(format!("host {host:?}: {e}")))?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}
