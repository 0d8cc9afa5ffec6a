//! The project's own PKI: one certificate authority and the identities it issues to the
//! controller, to each agent and to remote clients, made with rcgen.
//!
//! Every certificate names its holder's [`Role`] and name (see [`identity`] for the
//! encoding), so a server learns who calls from the certificate alone and the RPC policy
//! ("only the controller mutates") needs no other credential. Agents and the controller get
//! certificates that are valid TLS server *and* client certificates for the DNS names and IP
//! addresses the caller lists; remote clients get client certificates only.
//!
//! ```
//! use proto::pki::{CertificateAuthority, IdentitySpec, PeerIdentity, Role};
//!
//! let ca = CertificateAuthority::generate("Continuum test CA")?;
//! let worker = ca.issue(
//!     &IdentitySpec::new(Role::Agent, "worker-1").with_ip_address([198, 18, 0, 11].into()),
//! )?;
//! assert_eq!(worker.identity(), PeerIdentity { role: Role::Agent, name: "worker-1".into() });
//! # Ok::<(), proto::pki::PkiError>(())
//! ```
//!
//! # Layout
//! - this file: [`CertificateAuthority`], [`IssuedIdentity`], [`PkiError`].
//! - `spec.rs`: [`IdentitySpec`], what an identity's certificate will say.
//! - [`identity`]: [`Role`], [`PeerIdentity`] and how they are written into and read from a
//!   certificate.
//! - `files.rs`: the on-disk layout (`ca.pem`, `ca.key`, `<name>.pem`, `<name>.key`; keys
//!   0600 in a 0700 directory) with [`write_pki`], the `load`/`write` methods and
//!   [`Overwrite`].

mod expiry;
mod files;
pub mod identity;
mod spec;

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;
use x509_parser::time::ASN1Time;

pub use expiry::{
    EXPIRY_WARNING, Expiring, der_not_after, expiring_among, expiring_within, expiry, not_after,
};
pub(crate) use files::read_pem;
pub use files::{CA_CERT_FILE, CA_KEY_FILE, Overwrite, cert_path, key_path, write_pki};
pub use identity::{IdentityError, PeerIdentity, Role, validate_name};
pub use spec::IdentitySpec;

/// How long a new CA is valid: ten years, so a testbed's PKI outlives its experiments.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long an identity is valid unless its [`IdentitySpec`] says otherwise: one year.
pub const DEFAULT_IDENTITY_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How far in the past new certificates start, so a node whose clock lags a little (a
/// Raspberry Pi without an RTC before NTP catches up) still accepts them.
pub const BACKDATE: Duration = Duration::from_secs(3600);

/// The certificate authority: its certificate and the key that signs identities.
pub struct CertificateAuthority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl CertificateAuthority {
    /// Makes a new self-signed CA (`CA:true`, path length 0, key usage keyCertSign and
    /// cRLSign) with a fresh ECDSA P-256 key, valid from [`BACKDATE`] ago for
    /// [`CA_VALIDITY`].
    pub fn generate(common_name: &str) -> Result<Self, PkiError> {
        if common_name.is_empty() || common_name.len() > 64 {
            return Err(PkiError::InvalidSpec {
                name: common_name.to_owned(),
                reason: "a CA common name must have 1 to 64 characters".into(),
            });
        }
        let mut params = CertificateParams::default();
        let mut subject = DistinguishedName::new();
        subject.push(DnType::OrganizationName, "Continuum");
        subject.push(DnType::CommonName, common_name);
        params.distinguished_name = subject;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = datetime(now - BACKDATE, common_name)?.to_datetime();
        params.not_after = datetime(now + CA_VALIDITY, common_name)?.to_datetime();
        let generate = |source| PkiError::Generate {
            what: format!("CA {common_name:?}"),
            source,
        };
        let key = KeyPair::generate().map_err(generate)?;
        let cert = params.self_signed(&key).map_err(generate)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Rebuilds a CA from its PEM certificate and PEM (PKCS#8) key. Refuses a certificate
    /// that is not a CA and a key that does not belong to the certificate. `origin` names
    /// where the PEM came from (a path, usually) in errors.
    pub fn from_pem(
        cert_pem: &str,
        key_pem: &str,
        cert_origin: &str,
        key_origin: &str,
    ) -> Result<Self, PkiError> {
        let der = pem_to_der(cert_pem, cert_origin)?;
        let (_, cert) = X509Certificate::from_der(&der).map_err(|e| PkiError::BadCertificate {
            origin: cert_origin.to_owned(),
            reason: e.to_string(),
        })?;
        let is_ca = matches!(cert.basic_constraints(), Ok(Some(bc)) if bc.value.ca);
        if !is_ca {
            return Err(PkiError::NotCa {
                origin: cert_origin.to_owned(),
            });
        }
        let key = parse_key(key_pem, key_origin)?;
        check_key_matches(&cert, &key, cert_origin, key_origin)?;
        let issuer =
            Issuer::from_ca_cert_der(&der.into(), key).map_err(|e| PkiError::BadCertificate {
                origin: cert_origin.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            cert_pem: cert_pem.to_owned(),
            issuer,
        })
    }

    /// The CA certificate in PEM: what every node trusts (`ca.pem`).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key in PEM (`ca.key`). It stays on the machine that issues
    /// identities; nodes never need it.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Issues an identity: a fresh ECDSA P-256 key and a certificate signed by this CA that
    /// carries the spec's role and name (see [`identity`]), its DNS names and IP addresses as
    /// subjectAltNames, and extended key usages by role (agent and controller: serverAuth and
    /// clientAuth; client: clientAuth).
    pub fn issue(&self, spec: &IdentitySpec) -> Result<IssuedIdentity, PkiError> {
        spec.validate()?;
        let identity = PeerIdentity {
            role: spec.role,
            name: spec.name.clone(),
        };
        let invalid = |reason: String| PkiError::InvalidSpec {
            name: spec.name.clone(),
            reason,
        };
        let mut params = CertificateParams::default();
        let mut subject = DistinguishedName::new();
        subject.push(DnType::OrganizationName, "Continuum");
        subject.push(DnType::OrganizationalUnitName, spec.role.as_str());
        subject.push(DnType::CommonName, spec.name.as_str());
        params.distinguished_name = subject;
        let uri = Ia5String::try_from(identity.uri())
            .map_err(|e| invalid(format!("identity URI: {e}")))?;
        params.subject_alt_names.push(SanType::URI(uri));
        for dns in &spec.dns_names {
            let dns = Ia5String::try_from(dns.as_str())
                .map_err(|e| invalid(format!("DNS name {dns:?}: {e}")))?;
            params.subject_alt_names.push(SanType::DnsName(dns));
        }
        params
            .subject_alt_names
            .extend(spec.ip_addresses.iter().copied().map(SanType::IpAddress));
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match spec.role {
            Role::Controller | Role::Agent => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Role::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        params.not_before = datetime(spec.not_before, &spec.name)?.to_datetime();
        params.not_after = datetime(spec.not_after, &spec.name)?.to_datetime();

        let generate = |source| PkiError::Generate {
            what: identity.to_string(),
            source,
        };
        let key = KeyPair::generate().map_err(generate)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(generate)?;
        Ok(IssuedIdentity {
            role: spec.role,
            name: spec.name.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl fmt::Debug for CertificateAuthority {
    /// Shows the issuer's subject, never the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// An issued identity: its certificate and private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedIdentity {
    /// The holder's role, as written in the certificate.
    pub role: Role,
    /// The holder's name, as written in the certificate; also the file stem on disk.
    pub name: String,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8). Secret: written 0600, never logged.
    pub key_pem: String,
}

impl IssuedIdentity {
    /// Reads an identity back from PEM: the role and name come from the certificate, and the
    /// key must belong to it. `cert_origin` and `key_origin` name the sources in errors.
    pub fn from_pem(
        cert_pem: &str,
        key_pem: &str,
        cert_origin: &str,
        key_origin: &str,
    ) -> Result<Self, PkiError> {
        let der = pem_to_der(cert_pem, cert_origin)?;
        let (_, cert) = X509Certificate::from_der(&der).map_err(|e| PkiError::BadCertificate {
            origin: cert_origin.to_owned(),
            reason: e.to_string(),
        })?;
        let identity =
            PeerIdentity::from_certificate(&cert).map_err(|source| PkiError::NoIdentity {
                origin: cert_origin.to_owned(),
                source,
            })?;
        let key = parse_key(key_pem, key_origin)?;
        check_key_matches(&cert, &key, cert_origin, key_origin)?;
        Ok(Self {
            role: identity.role,
            name: identity.name,
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    /// The role and name this identity proves.
    pub fn identity(&self) -> PeerIdentity {
        PeerIdentity {
            role: self.role,
            name: self.name.clone(),
        }
    }
}

impl fmt::Debug for IssuedIdentity {
    /// Shows who the identity is, never the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedIdentity")
            .field("role", &self.role)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why a PKI operation failed. Each variant names the file (or other origin), identity or
/// field at fault.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// An [`IdentitySpec`] (or CA name) that cannot become a certificate.
    #[error("identity {name:?}: {reason}")]
    InvalidSpec {
        /// The identity's (or CA's) name.
        name: String,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// rcgen failed to make a key or certificate.
    #[error("generating the certificate of {what}: {source}")]
    Generate {
        /// Whose certificate.
        what: String,
        /// rcgen's error.
        source: rcgen::Error,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file that would be written exists and [`Overwrite::Refuse`] was asked.
    #[error("{path}: already exists, refusing to overwrite it")]
    AlreadyExists {
        /// The existing file.
        path: String,
    },
    /// Not a PEM X.509 certificate.
    #[error("{origin}: not a PEM X.509 certificate: {reason}")]
    BadCertificate {
        /// Where the certificate came from.
        origin: String,
        /// The parser's complaint.
        reason: String,
    },
    /// Not a PEM private key rcgen can use.
    #[error("{origin}: not a PEM private key: {source}")]
    BadKey {
        /// Where the key came from.
        origin: String,
        /// rcgen's error.
        source: rcgen::Error,
    },
    /// The key does not belong to the certificate.
    #[error("{key_origin}: this key does not belong to the certificate {cert_origin}")]
    KeyMismatch {
        /// Where the certificate came from.
        cert_origin: String,
        /// Where the key came from.
        key_origin: String,
    },
    /// A certificate used as the CA has no `CA:true` basic constraint.
    #[error("{origin}: not a CA certificate (no basicConstraints CA:true)")]
    NotCa {
        /// Where the certificate came from.
        origin: String,
    },
    /// The certificate carries no readable Continuum identity.
    #[error("{origin}: {source}")]
    NoIdentity {
        /// Where the certificate came from.
        origin: String,
        /// Why the identity could not be read.
        source: IdentityError,
    },
}

/// `t` as the ASN1Time whose `to_datetime()` is the `OffsetDateTime` rcgen wants (so this
/// crate needs no direct `time` dependency).
fn datetime(t: SystemTime, name: &str) -> Result<ASN1Time, PkiError> {
    let invalid = |reason: &str| PkiError::InvalidSpec {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| invalid("validity times must be after 1970"))?
        .as_secs();
    let secs = i64::try_from(secs).map_err(|_| invalid("validity time out of range"))?;
    ASN1Time::from_timestamp(secs).map_err(|_| invalid("validity time out of range"))
}

/// The DER of the first `CERTIFICATE` block in `pem`.
pub(crate) fn pem_to_der(pem: &str, origin: &str) -> Result<Vec<u8>, PkiError> {
    let bad = |reason: String| PkiError::BadCertificate {
        origin: origin.to_owned(),
        reason,
    };
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| bad(e.to_string()))?;
    if block.label != "CERTIFICATE" {
        return Err(bad(format!(
            "found a {:?} PEM block, expected CERTIFICATE",
            block.label
        )));
    }
    Ok(block.contents)
}

fn parse_key(key_pem: &str, origin: &str) -> Result<KeyPair, PkiError> {
    KeyPair::from_pem(key_pem).map_err(|source| PkiError::BadKey {
        origin: origin.to_owned(),
        source,
    })
}

fn check_key_matches(
    cert: &X509Certificate<'_>,
    key: &KeyPair,
    cert_origin: &str,
    key_origin: &str,
) -> Result<(), PkiError> {
    if cert.public_key().subject_public_key.data.as_ref() == key.public_key_raw() {
        Ok(())
    } else {
        Err(PkiError::KeyMismatch {
            cert_origin: cert_origin.to_owned(),
            key_origin: key_origin.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests;
