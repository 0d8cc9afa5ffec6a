//! Who a certificate belongs to: its [`Role`] and name, written into the certificate by
//! [`CertificateAuthority::issue`](super::CertificateAuthority::issue) and read back from a
//! peer's certificate by [`PeerIdentity::from_der`].
//!
//! The identity lives in two places. The subjectAltName URI `continuum://<role>/<name>` is
//! the authoritative one: SAN URIs are typed, unambiguous and what SPIFFE-style systems use.
//! The subject (CN = name, OU = role) repeats it for humans reading `openssl x509 -text`;
//! parsing insists that both agree, so a certificate that says two different things is
//! refused rather than interpreted.

use std::fmt;
use std::str::FromStr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;
use x509_parser::x509::X509Name;

/// The scheme and separator that start an identity URI in a certificate's subjectAltName.
pub const IDENTITY_URI_PREFIX: &str = "continuum://";

/// What an identity may do, fixed when its certificate is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The controller: the only identity allowed to call RPCs that change anything. Its
    /// certificate is both a TLS client and a TLS server certificate (`controller serve`).
    Controller,
    /// An agent on one testbed node: serves the agent RPCs and may read from other agents.
    /// Its certificate is both a TLS server and a TLS client certificate.
    Agent,
    /// A remote client (a user's laptop) driving the controller. TLS client only.
    Client,
}

impl Role {
    /// Every role, in a fixed order.
    pub const ALL: [Role; 3] = [Role::Controller, Role::Agent, Role::Client];

    /// The role as written in certificates: `controller`, `agent` or `client`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Agent => "agent",
            Role::Client => "client",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| IdentityError::UnknownRole(s.to_owned()))
    }
}

/// The identity a certificate carries: a role and a name such as `agent` / `worker-1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerIdentity {
    /// What the holder may do.
    pub role: Role,
    /// Which controller, agent or client it is; unique within one PKI directory.
    pub name: String,
}

impl PeerIdentity {
    /// The subjectAltName URI that carries this identity: `continuum://<role>/<name>`.
    pub fn uri(&self) -> String {
        format!("{IDENTITY_URI_PREFIX}{}/{}", self.role, self.name)
    }

    /// Reads the identity from a DER certificate. The certificate's signature and validity
    /// are not checked here: on a connection rustls has done that before this runs.
    pub fn from_der(der: &[u8]) -> Result<Self, IdentityError> {
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|e| IdentityError::NotCertificate(e.to_string()))?;
        Self::from_certificate(&cert)
    }

    /// Reads the identity from a parsed certificate; see [`PeerIdentity::from_der`].
    pub fn from_certificate(cert: &X509Certificate<'_>) -> Result<Self, IdentityError> {
        let san = cert
            .subject_alternative_name()
            .map_err(|e| IdentityError::NotCertificate(format!("subjectAltName: {e}")))?;
        let uris: Vec<&str> = san
            .iter()
            .flat_map(|ext| ext.value.general_names.iter())
            .filter_map(|name| match name {
                GeneralName::URI(uri) if uri.starts_with(IDENTITY_URI_PREFIX) => Some(*uri),
                _ => None,
            })
            .collect();
        let uri = match uris.as_slice() {
            [] => return Err(IdentityError::NoUri),
            [uri] => *uri,
            several => return Err(IdentityError::SeveralUris(several.len())),
        };
        let identity = parse_uri(uri)?;
        check_subject(
            cert.subject(),
            "CN",
            &identity.name,
            X509Name::iter_common_name,
        )?;
        check_subject(
            cert.subject(),
            "OU",
            identity.role.as_str(),
            X509Name::iter_organizational_unit,
        )?;
        Ok(identity)
    }
}

impl fmt::Display for PeerIdentity {
    /// `agent "worker-1"`: how error messages name a caller.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.role, self.name)
    }
}

/// Why a certificate's identity could not be read, or a name is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The bytes are not an X.509 certificate (or an extension in it is malformed).
    #[error("not a DER X.509 certificate: {0}")]
    NotCertificate(String),
    /// No subjectAltName URI starting with `continuum://`: not a Continuum identity.
    #[error("no {IDENTITY_URI_PREFIX}<role>/<name> URI in subjectAltName")]
    NoUri,
    /// More than one identity URI: ambiguous, so refused.
    #[error("{0} {IDENTITY_URI_PREFIX} URIs in subjectAltName, expected exactly one")]
    SeveralUris(usize),
    /// The identity URI is not `continuum://<role>/<name>`.
    #[error("identity URI {uri:?}: {reason}")]
    BadUri {
        /// The URI as found in the certificate.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The role is not one of `controller`, `agent`, `client`.
    #[error("unknown role {0:?} (expected controller, agent or client)")]
    UnknownRole(String),
    /// The name breaks the naming rule (see [`validate_name`]).
    #[error("identity name {name:?}: {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// The rule it breaks.
        reason: String,
    },
    /// The subject disagrees with the identity URI.
    #[error("subject {attribute} is {found:?} but the identity URI says {expected:?}")]
    SubjectMismatch {
        /// `CN` or `OU`.
        attribute: &'static str,
        /// What the subject holds (all values, comma-separated).
        found: String,
        /// What the URI says it should hold.
        expected: String,
    },
}

/// Checks an identity name: the domain's name rule with '.' allowed, and not `ca`
/// ([`domain::check_identity_name`]). Names become file names (`<name>.pem`, `<name>.key`)
/// next to `ca.pem`, so the rule keeps out path separators, `..`, hidden files and the
/// CA's own files.
pub fn validate_name(name: &str) -> Result<(), IdentityError> {
    domain::check_identity_name(name).map_err(|reason| IdentityError::InvalidName {
        name: name.to_owned(),
        reason: reason.to_string(),
    })
}

fn parse_uri(uri: &str) -> Result<PeerIdentity, IdentityError> {
    let bad = |reason| IdentityError::BadUri {
        uri: uri.to_owned(),
        reason,
    };
    let rest = uri
        .strip_prefix(IDENTITY_URI_PREFIX)
        .ok_or_else(|| bad("does not start with continuum://"))?;
    let (role, name) = rest
        .split_once('/')
        .ok_or_else(|| bad("expected continuum://<role>/<name>"))?;
    let role = role.parse()?;
    validate_name(name)?;
    Ok(PeerIdentity {
        role,
        name: name.to_owned(),
    })
}

/// Requires the subject attribute to hold exactly `expected`, once.
fn check_subject<'a, I>(
    subject: &'a X509Name<'a>,
    attribute: &'static str,
    expected: &str,
    values: impl Fn(&'a X509Name<'a>) -> I,
) -> Result<(), IdentityError>
where
    I: Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'a>>,
{
    let found: Vec<String> = values(subject)
        .map(|value| match value.as_str() {
            Ok(s) => s.to_owned(),
            Err(_) => "<not a string>".to_owned(),
        })
        .collect();
    if found.len() == 1 && found[0] == expected {
        Ok(())
    } else {
        Err(IdentityError::SubjectMismatch {
            attribute,
            found: found.join(","),
            expected: expected.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_through_their_names() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert_eq!(
            "admin".parse::<Role>(),
            Err(IdentityError::UnknownRole("admin".into()))
        );
    }

    #[test]
    fn uri_round_trips() {
        let identity = PeerIdentity {
            role: Role::Agent,
            name: "worker-1".into(),
        };
        assert_eq!(identity.uri(), "continuum://agent/worker-1");
        assert_eq!(parse_uri(&identity.uri()), Ok(identity));
    }

    #[test]
    fn malformed_uris_are_refused() {
        assert!(matches!(
            parse_uri("continuum://agent"),
            Err(IdentityError::BadUri { .. })
        ));
        assert!(matches!(
            parse_uri("continuum://root/x"),
            Err(IdentityError::UnknownRole(_))
        ));
        assert!(matches!(
            parse_uri("continuum://agent/a/b"),
            Err(IdentityError::InvalidName { .. })
        ));
        assert!(matches!(
            parse_uri("continuum://agent/"),
            Err(IdentityError::InvalidName { .. })
        ));
    }

    #[test]
    fn names_that_could_escape_the_pki_directory_are_refused() {
        for name in [
            "",
            "..",
            ".hidden",
            "a/b",
            "ca",
            "x y",
            "é",
            &"a".repeat(65),
        ] {
            assert!(validate_name(name).is_err(), "{name:?} was accepted");
        }
        for name in ["worker-1", "controller", "laptop_2", "node.lab", "7"] {
            assert_eq!(validate_name(name), Ok(()));
        }
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(matches!(
            PeerIdentity::from_der(b"not a certificate"),
            Err(IdentityError::NotCertificate(_))
        ));
    }
}
