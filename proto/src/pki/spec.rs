//! [`IdentitySpec`]: what goes into an identity's certificate, checked before issuing.

use std::net::IpAddr;
use std::time::SystemTime;

use super::{BACKDATE, DEFAULT_IDENTITY_VALIDITY, PkiError, Role, validate_name};

/// What to put in an identity's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentitySpec {
    /// The holder's role.
    pub role: Role,
    /// The holder's name (see [`validate_name`]): `controller`, `worker-1`, `laptop`.
    pub name: String,
    /// DNS names the holder serves TLS under (subjectAltName dNSName).
    pub dns_names: Vec<String>,
    /// IP addresses the holder serves TLS on (subjectAltName iPAddress), so clients can dial
    /// an address without overriding the TLS server name.
    pub ip_addresses: Vec<IpAddr>,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity; may lie in the past (tests make expired certificates this way).
    pub not_after: SystemTime,
}

impl IdentitySpec {
    /// A spec with no subjectAltNames besides the identity URI, valid from [`BACKDATE`] ago
    /// for [`DEFAULT_IDENTITY_VALIDITY`].
    pub fn new(role: Role, name: impl Into<String>) -> Self {
        let now = SystemTime::now();
        Self {
            role,
            name: name.into(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            not_before: now - BACKDATE,
            not_after: now + DEFAULT_IDENTITY_VALIDITY,
        }
    }

    /// Adds a DNS name the holder serves under.
    pub fn with_dns_name(mut self, name: impl Into<String>) -> Self {
        self.dns_names.push(name.into());
        self
    }

    /// Adds an IP address the holder serves on.
    pub fn with_ip_address(mut self, address: IpAddr) -> Self {
        self.ip_addresses.push(address);
        self
    }

    /// Sets the validity period.
    pub fn valid_between(mut self, not_before: SystemTime, not_after: SystemTime) -> Self {
        self.not_before = not_before;
        self.not_after = not_after;
        self
    }

    pub(super) fn validate(&self) -> Result<(), PkiError> {
        let invalid = |reason: String| PkiError::InvalidSpec {
            name: self.name.clone(),
            reason,
        };
        validate_name(&self.name).map_err(|e| invalid(e.to_string()))?;
        if self.not_after <= self.not_before {
            return Err(invalid("not_after must be later than not_before".into()));
        }
        for dns in &self.dns_names {
            if !is_dns_name(dns) {
                return Err(invalid(format!("dns_names: {dns:?} is not a DNS name")));
            }
        }
        Ok(())
    }
}

/// A hostname: dot-separated labels of letters, digits and inner hyphens, 253 bytes at most.
fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}
