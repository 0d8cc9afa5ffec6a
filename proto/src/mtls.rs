//! Mutual TLS for every Continuum gRPC connection: tonic server and client TLS configs built
//! from an identity and the project CA, and the caller's identity and role checks that gRPC
//! handlers run.
//!
//! Authentication happens in rustls, before any handler runs: a server built with
//! [`Credentials::server_tls`] requires a client certificate chaining to the CA and within
//! its validity period (rustls's `WebPkiClientVerifier`), so a peer without a certificate,
//! with one from another CA, or with an expired one never gets a request through.
//! Authorization happens in the handler: [`require_role`] reads the verified certificate's
//! role and answers `PERMISSION_DENIED` to a role the RPC does not allow.
//!
//! ```no_run
//! # use std::path::Path;
//! # fn demo() -> Result<(), proto::mtls::MtlsError> {
//! // On an agent node: /etc/continuum holds ca.pem, worker-1.pem and worker-1.key.
//! let tls = proto::mtls::server_tls(Path::new("/etc/continuum"), "worker-1")?;
//! // tonic::transport::Server::builder().tls_config(tls)?...
//! # let _ = tls; Ok(()) }
//! ```
//!
//! [`Credentials::connect_pinned`] opens a client channel that also checks the server's role
//! during the handshake (an agent client refuses a controller, `controller remote` an agent).
//! Clients dial agents by IP address (198.18.x.y on a testbed); agents' certificates carry
//! those addresses as subjectAltNames, so no server-name override is needed. Where a client
//! dials a name the certificate lacks, `ClientTlsConfig::domain_name` sets the name to check.
//!
//! Certificates that peers present are checked for their end too: the client warns (once per
//! peer and process, [`warn_once`]) when the server's ends within [`pki::EXPIRY_WARNING`], and
//! servers do the same for their callers with [`peer_expiry`].

use std::path::Path;
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use tonic::{Request, Status};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::pki::{self, CA_CERT_FILE, IssuedIdentity, PeerIdentity, PkiError, Role};

mod peer_expiry;
mod role_pinned;
pub use peer_expiry::{certificate_expiry, warn_once};
pub use role_pinned::{PinnedConnectError, TcpDial};

/// How long a server waits for a TLS handshake, so a peer that connects and stalls does not
/// hold a connection slot forever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An identity together with the CA its peers must come from: everything one end of an mTLS
/// connection needs.
#[derive(Debug, Clone)]
pub struct Credentials {
    ca_cert_pem: String,
    identity: IssuedIdentity,
}

impl Credentials {
    /// Loads `dir/ca.pem`, `dir/<name>.pem` and `dir/<name>.key` (the layout
    /// [`pki::write_pki`] writes; `ca.key` is not needed).
    pub fn load(dir: &Path, name: &str) -> Result<Self, MtlsError> {
        let ca_path = dir.join(CA_CERT_FILE);
        let ca_cert_pem = pki::read_pem(&ca_path)?;
        let identity = IssuedIdentity::load(dir, name)?;
        Self::new(ca_cert_pem, identity, &ca_path.display().to_string())
    }

    /// Loads the CA certificate, the identity's certificate and its key from explicit paths.
    pub fn from_files(ca_cert: &Path, cert: &Path, key: &Path) -> Result<Self, MtlsError> {
        let ca_cert_pem = pki::read_pem(ca_cert)?;
        let identity = IssuedIdentity::from_pem(
            &pki::read_pem(cert)?,
            &pki::read_pem(key)?,
            &cert.display().to_string(),
            &key.display().to_string(),
        )?;
        Self::new(ca_cert_pem, identity, &ca_cert.display().to_string())
    }

    /// Pairs an identity with the CA certificate (PEM), checking that the CA really signed
    /// the identity's certificate, so a mixed-up directory fails here and not as an opaque
    /// handshake error on the peer. `ca_origin` names the CA certificate's source in errors.
    pub fn new(
        ca_cert_pem: String,
        identity: IssuedIdentity,
        ca_origin: &str,
    ) -> Result<Self, MtlsError> {
        let ca_der = pki::pem_to_der(&ca_cert_pem, ca_origin)?;
        let (_, ca) = X509Certificate::from_der(&ca_der).map_err(|e| PkiError::BadCertificate {
            origin: ca_origin.to_owned(),
            reason: e.to_string(),
        })?;
        let leaf_der = pki::pem_to_der(&identity.cert_pem, &identity.name)?;
        let signed_by_ca = X509Certificate::from_der(&leaf_der)
            .is_ok_and(|(_, leaf)| leaf.verify_signature(Some(ca.public_key())).is_ok());
        if !signed_by_ca {
            return Err(MtlsError::NotIssuedByCa {
                identity: identity.identity(),
                ca_origin: ca_origin.to_owned(),
            });
        }
        Ok(Self {
            ca_cert_pem,
            identity,
        })
    }

    /// Who these credentials prove to be.
    pub fn identity(&self) -> PeerIdentity {
        self.identity.identity()
    }

    /// The TLS config of a gRPC server: presents this identity and requires every client to
    /// present a valid certificate from the CA. Refused for a `client` identity, whose
    /// certificate is not a TLS server certificate.
    pub fn server_tls(&self) -> Result<ServerTlsConfig, MtlsError> {
        if self.identity.role == Role::Client {
            return Err(MtlsError::NotAServer(self.identity()));
        }
        Ok(ServerTlsConfig::new()
            .identity(self.tonic_identity())
            .client_ca_root(Certificate::from_pem(&self.ca_cert_pem))
            .client_auth_optional(false)
            .timeout(HANDSHAKE_TIMEOUT))
    }

    /// The TLS config of a gRPC client: presents this identity and trusts only the CA (no
    /// system roots). The server's certificate must be valid for the host in the URI dialed,
    /// DNS name or IP address; call `domain_name` on the result to check another name.
    pub fn client_tls(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_cert_pem))
            .identity(self.tonic_identity())
    }

    fn tonic_identity(&self) -> Identity {
        Identity::from_pem(&self.identity.cert_pem, &self.identity.key_pem)
    }
}

/// [`Credentials::load`] then [`Credentials::server_tls`].
pub fn server_tls(dir: &Path, name: &str) -> Result<ServerTlsConfig, MtlsError> {
    Credentials::load(dir, name)?.server_tls()
}

/// [`Credentials::load`] then [`Credentials::client_tls`].
pub fn client_tls(dir: &Path, name: &str) -> Result<ClientTlsConfig, MtlsError> {
    Ok(Credentials::load(dir, name)?.client_tls())
}

/// The caller's identity, read from the client certificate rustls verified for this
/// connection. `UNAUTHENTICATED` if there is none (a server without TLS, or one serving
/// something other than a TCP listener, where tonic records no peer certificates) or if it
/// carries no Continuum identity.
pub fn peer_identity<T>(request: &Request<T>) -> Result<PeerIdentity, Status> {
    let certs = request.peer_certs().ok_or_else(|| {
        Status::unauthenticated("no client certificate: this service accepts mutual TLS only")
    })?;
    let leaf = certs.first().ok_or_else(|| {
        Status::unauthenticated("no client certificate: this service accepts mutual TLS only")
    })?;
    PeerIdentity::from_der(leaf).map_err(|e| {
        Status::unauthenticated(format!("client certificate has no Continuum identity: {e}"))
    })
}

/// Whether the caller's certificate (the leaf rustls verified) ends within `within` of
/// `now`: `Some` with the caller's identity in place of a file, for the server to warn about
/// a peer before its certificate lapses. `None` too when there is no readable certificate:
/// [`peer_identity`] refuses those.
pub fn peer_expiry<T>(
    request: &Request<T>,
    within: Duration,
    now: std::time::SystemTime,
) -> Option<pki::Expiring> {
    let certs = request.peer_certs()?;
    let leaf = certs.first()?;
    let who = PeerIdentity::from_der(leaf)
        .map(|identity| identity.to_string())
        .unwrap_or_else(|_| "of an unnamed peer".to_owned());
    certificate_expiry(leaf, &who, within, now)
}

/// The caller's identity if its role is one of `allowed`; otherwise `PERMISSION_DENIED`
/// naming the caller and the roles the RPC requires, or `UNAUTHENTICATED` as in
/// [`peer_identity`].
pub fn require_role<T>(request: &Request<T>, allowed: &[Role]) -> Result<PeerIdentity, Status> {
    let caller = peer_identity(request)?;
    if allowed.contains(&caller.role) {
        return Ok(caller);
    }
    let required = match allowed {
        [] => "no role may call it".to_owned(),
        roles => {
            let names: Vec<&str> = roles.iter().map(|role| role.as_str()).collect();
            format!("it requires role {}", names.join(" or "))
        }
    };
    Err(Status::permission_denied(format!(
        "{caller} may not call this RPC: {required}"
    )))
}

/// Why mTLS credentials could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MtlsError {
    /// Reading or checking the PKI files failed; the error names the file.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// The identity's certificate was not signed by the CA it is paired with.
    #[error("the certificate of {identity} was not issued by the CA in {ca_origin}")]
    NotIssuedByCa {
        /// The identity whose certificate does not chain.
        identity: PeerIdentity,
        /// Where the CA certificate came from.
        ca_origin: String,
    },
    /// The credentials' PEM could not be turned into a rustls client configuration.
    #[error("TLS client configuration: {0}")]
    ClientConfig(String),
    /// A `client` identity cannot serve TLS: its certificate lacks serverAuth.
    #[error("{0} cannot run a TLS server: client certificates are not server certificates")]
    NotAServer(PeerIdentity),
}
