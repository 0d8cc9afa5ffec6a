//! A gRPC channel whose TLS handshake also checks the server's role.
//!
//! Chaining to the project CA proves only that the server holds *some* Continuum identity;
//! the controller's and every agent's certificates are all TLS server certificates. A client
//! that means to reach an agent must not hand its requests (a plan, a broker's password) to
//! a controller or to another node's agent that happens to answer at that address, and
//! `controller remote` must reach a controller. tonic's TLS settings have no hook for that
//! check, so this module does the TLS itself, with rustls: the CA-chain and name checks of
//! `WebPkiServerVerifier`, then the role written in the certificate's
//! `continuum://<role>/<name>` URI. A wrong role fails the handshake, before any request is
//! sent.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hyper_util::rt::TokioIo;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint, Uri};

use super::peer_expiry::{certificate_expiry, warn_once};
use super::{Credentials, MtlsError};
use crate::pki::{EXPIRY_WARNING, Expiring, PeerIdentity, Role};

/// The TCP keep-alive of the connections: the same cadence as the channels' HTTP/2 PINGs.
const TCP_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// Opens the TCP connection to `host:port` in a way of the caller's choosing (from inside a
/// network namespace, say); the TLS and gRPC on top are the same.
pub type TcpDial = Arc<
    dyn Fn(
            String,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<TcpStream>> + Send>>
        + Send
        + Sync,
>;

impl Credentials {
    /// Opens a channel to `address` (`host:port`) that presents this identity, trusts only the
    /// CA, requires the server's certificate to be valid for `server_name` (or for the host of
    /// `address`) and to carry role `expected`. `endpoint` sets timeouts and keep-alive on the
    /// endpoint built for `address`.
    pub async fn connect_pinned(
        &self,
        address: &str,
        server_name: Option<&str>,
        expected: Role,
        endpoint: impl FnOnce(Endpoint) -> Endpoint,
    ) -> Result<Channel, PinnedConnectError> {
        self.connect_pinned_via(address, server_name, expected, endpoint, None)
            .await
    }

    /// [`Self::connect_pinned`], with the TCP connection opened by `dial` when given.
    pub async fn connect_pinned_via(
        &self,
        address: &str,
        server_name: Option<&str>,
        expected: Role,
        endpoint: impl FnOnce(Endpoint) -> Endpoint,
        dial: Option<TcpDial>,
    ) -> Result<Channel, PinnedConnectError> {
        let name = server_name.unwrap_or_else(|| host_of(address));
        let name = ServerName::try_from(name.to_owned()).map_err(|_| PinnedConnectError::Name {
            name: name.to_owned(),
        })?;
        let tls = TlsConnector::from(Arc::new(self.role_pinned_config(expected)?));
        // The TLS is done here, so tonic sees a plain connection: the URI's scheme is `http`
        // and it only tells hyper where to dial.
        let uri = format!("http://{address}");
        let base = Endpoint::from_shared(uri).map_err(PinnedConnectError::Transport)?;
        let connector = tower::service_fn(move |uri: Uri| {
            let tls = tls.clone();
            let name = name.clone();
            let dial = dial.clone();
            async move {
                let authority = uri
                    .authority()
                    .map(|authority| authority.as_str().to_owned())
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no authority"))?;
                let tcp = match dial {
                    Some(dial) => dial(authority).await?,
                    None => TcpStream::connect(authority).await?,
                };
                tcp.set_nodelay(true)?;
                let keep_alive = socket2::TcpKeepalive::new().with_time(TCP_KEEP_ALIVE);
                socket2::SockRef::from(&tcp).set_tcp_keepalive(&keep_alive)?;
                let stream = tls.connect(name, tcp).await?;
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        });
        endpoint(base)
            .connect_with_connector(connector)
            .await
            .map_err(PinnedConnectError::Transport)
    }

    fn role_pinned_config(&self, expected: Role) -> Result<rustls::ClientConfig, MtlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let bad = |what: &str, error: &dyn std::fmt::Display| {
            MtlsError::ClientConfig(format!("{what}: {error}"))
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_cert_pem.as_bytes()) {
            let cert = cert.map_err(|e| bad("CA certificate", &e))?;
            roots.add(cert).map_err(|e| bad("CA certificate", &e))?;
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| bad("server verifier", &e))?;
        let chain = CertificateDer::pem_slice_iter(self.identity.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("own certificate", &e))?;
        let key = PrivateKeyDer::from_pem_slice(self.identity.key_pem.as_bytes())
            .map_err(|e| bad("own key", &e))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("protocol versions", &e))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(RolePinnedVerifier { webpki, expected }))
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad("own certificate and key", &e))?;
        // gRPC is HTTP/2 only; the server picks it through ALPN.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// `host` of `host:port`, without the brackets of an IPv6 literal.
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A channel with a role-pinned TLS handshake could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PinnedConnectError {
    /// The TLS configuration could not be built from the credentials.
    #[error(transparent)]
    Tls(#[from] MtlsError),
    /// The name to check the server's certificate against is neither a DNS name nor an IP.
    #[error("{name:?} is not a server name a certificate can carry")]
    Name {
        /// The name.
        name: String,
    },
    /// The address is invalid, or connecting or the handshake failed (a wrong role among the
    /// causes).
    #[error(transparent)]
    Transport(tonic::transport::Error),
}

/// The CA and name checks of WebPKI, then the role in the server's certificate.
#[derive(Debug)]
struct RolePinnedVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    expected: Role,
}

/// The role in the server's (CA-verified) certificate `der` is `expected`; and whether that
/// certificate ends within [`EXPIRY_WARNING`] of `now`, for the client to warn about.
fn check_server_role(
    der: &[u8],
    expected: Role,
    now: SystemTime,
) -> Result<Option<Expiring>, rustls::Error> {
    let identity = PeerIdentity::from_der(der).map_err(|error| {
        rustls::Error::General(format!(
            "the server's certificate has no Continuum identity: {error}"
        ))
    })?;
    if identity.role != expected {
        return Err(rustls::Error::General(format!(
            "the server is {identity}, not an identity of role {expected}"
        )));
    }
    Ok(certificate_expiry(
        der,
        &identity.to_string(),
        EXPIRY_WARNING,
        now,
    ))
}

impl ServerCertVerifier for RolePinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now.as_secs());
        if let Some(expiring) = check_server_role(end_entity.as_ref(), self.expected, now)? {
            warn_once(&expiring, "server");
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CertificateAuthority, IdentitySpec, pem_to_der};

    const DAY: Duration = Duration::from_secs(86_400);

    /// A client dialling an agent whose certificate ends in five days is told so (and still
    /// connects); a year-long one is not mentioned; a wrong role is refused first.
    #[test]
    fn a_servers_certificate_close_to_its_end_is_decided_worth_a_warning() {
        let ca = CertificateAuthority::generate("test CA").expect("CA");
        let now = SystemTime::now();
        let der = |spec: IdentitySpec| {
            let issued = ca.issue(&spec).expect("issued");
            pem_to_der(&issued.cert_pem, "server").expect("DER")
        };
        let soon =
            der(IdentitySpec::new(Role::Agent, "worker-1").valid_between(now - DAY, now + 5 * DAY));
        let expiring = check_server_role(&soon, Role::Agent, now)
            .expect("the role is right")
            .expect("ends within the window");
        assert!(
            expiring
                .to_string()
                .starts_with("certificate agent \"worker-1\" expires in"),
            "{expiring}"
        );
        let year = der(IdentitySpec::new(Role::Agent, "worker-2"));
        assert_eq!(
            check_server_role(&year, Role::Agent, now).expect("right role"),
            None
        );
        let error = check_server_role(&soon, Role::Controller, now).expect_err("wrong role");
        assert!(
            error.to_string().contains("not an identity of role"),
            "{error}"
        );
    }

    #[test]
    fn the_host_of_an_address_drops_port_and_brackets() {
        assert_eq!(host_of("198.18.0.2:7443"), "198.18.0.2");
        assert_eq!(host_of("[::1]:7443"), "::1");
        assert_eq!(host_of("worker-1:7443"), "worker-1");
    }
}
