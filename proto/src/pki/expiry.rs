//! Certificates close to their end: the project's identities are valid for a year, and a CA or
//! agent certificate that lapses stops every run with a handshake error on the far side. So
//! `controller pki` and bootstrap look at a PKI folder and say, in time, which certificate
//! ends when; a plan's run, `controller serve` and an agent say the same of their own
//! certificates when they start ([`expiring_among`]), all through one decision, [`expiry`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use super::{PkiError, files::read_pem, pem_to_der};

/// How early the tools warn: a month leaves time to renew every node.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

/// A certificate in a PKI folder that ends soon, or has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiring {
    /// The certificate file (for a peer's certificate, [`crate::mtls::peer_expiry`]: the
    /// peer's identity).
    pub file: PathBuf,
    /// Its notAfter.
    pub not_after: SystemTime,
    /// How long it has left at the time of the check (`None`: already expired).
    pub left: Option<Duration>,
}

impl fmt::Display for Expiring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = humantime::format_rfc3339_seconds(self.not_after);
        match self.left {
            Some(left) => write!(
                f,
                "certificate {} expires in {} days ({at}): renew it with `controller pki --replace`",
                self.file.display(),
                left.as_secs() / 86_400
            ),
            None => write!(
                f,
                "certificate {} EXPIRED at {at}: peers refuse it; renew it with `controller pki --replace`",
                self.file.display()
            ),
        }
    }
}

/// Whether a certificate ending at `not_after` deserves a warning at `now`: it has ended, or
/// ends within `within`. The one decision behind every expiry warning.
pub fn expiry(
    file: PathBuf,
    not_after: SystemTime,
    within: Duration,
    now: SystemTime,
) -> Option<Expiring> {
    let left = not_after.duration_since(now).ok();
    left.is_none_or(|left| left <= within).then_some(Expiring {
        file,
        not_after,
        left,
    })
}

/// The notAfter of the certificate in `path`.
pub fn not_after(path: &Path) -> Result<SystemTime, PkiError> {
    let origin = path.display().to_string();
    der_not_after(&pem_to_der(&read_pem(path)?, &origin)?, &origin)
}

/// The notAfter of a DER certificate; `origin` names it in errors.
pub fn der_not_after(der: &[u8], origin: &str) -> Result<SystemTime, PkiError> {
    let origin = origin.to_owned();
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| PkiError::BadCertificate {
        origin: origin.clone(),
        reason: e.to_string(),
    })?;
    let seconds = cert.validity().not_after.timestamp();
    let seconds = u64::try_from(seconds).map_err(|_| PkiError::BadCertificate {
        origin,
        reason: format!("notAfter {seconds} s is before 1970"),
    })?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Every certificate (`*.pem`) in `dir` that ends within `within` of `now`, soonest first.
pub fn expiring_within(
    dir: &Path,
    within: Duration,
    now: SystemTime,
) -> Result<Vec<Expiring>, PkiError> {
    let entries = std::fs::read_dir(dir).map_err(|source| PkiError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let file = entry.path();
        if file.extension().and_then(|e| e.to_str()) != Some("pem") {
            continue;
        }
        let not_after = not_after(&file)?;
        found.extend(expiry(file, not_after, within, now));
    }
    found.sort_by_key(|expiring| expiring.not_after);
    Ok(found)
}

/// Of the certificates in `files` (a process's own: its CA and its identity), those that end
/// within `within` of `now`, soonest first.
pub fn expiring_among(
    files: &[&Path],
    within: Duration,
    now: SystemTime,
) -> Result<Vec<Expiring>, PkiError> {
    let mut found = Vec::new();
    for file in files {
        let not_after = not_after(file)?;
        found.extend(expiry(file.to_path_buf(), not_after, within, now));
    }
    found.sort_by_key(|expiring| expiring.not_after);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CertificateAuthority, IdentitySpec, Overwrite, Role, cert_path, write_pki};

    const DAY: Duration = Duration::from_secs(86_400);

    /// Warned: ended, or ending within the window (its edge included); not: ending later.
    #[test]
    fn the_decision_warns_within_the_window_and_after_the_end() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let file = || PathBuf::from("ca.pem");
        let decide = |not_after| expiry(file(), not_after, EXPIRY_WARNING, now);
        assert_eq!(decide(now + 31 * DAY), None);
        assert_eq!(decide(now + EXPIRY_WARNING + Duration::from_secs(1)), None);
        let edge = decide(now + EXPIRY_WARNING).expect("at the edge");
        assert_eq!(edge.left, Some(EXPIRY_WARNING));
        let soon = decide(now + 3 * DAY).expect("in three days");
        assert!(
            soon.to_string().contains("ca.pem expires in 3 days"),
            "{soon}"
        );
        let ended = decide(now - DAY).expect("ended");
        assert_eq!(ended.left, None);
        assert!(ended.to_string().contains("ca.pem EXPIRED"), "{ended}");
    }

    /// A process's own files: the agent certificate ending soon is named, its CA is not.
    #[test]
    fn among_a_processs_own_files_names_the_one_ending() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = CertificateAuthority::generate("test CA").expect("CA");
        let now = SystemTime::now();
        let soon = IdentitySpec::new(Role::Agent, "worker-1")
            .valid_between(now - Duration::from_secs(3600), now + 5 * DAY);
        write_pki(
            dir.path(),
            &ca,
            &[ca.issue(&soon).expect("agent")],
            Overwrite::Refuse,
        )
        .expect("writes");
        let agent = cert_path(dir.path(), "worker-1");
        let ca_file = dir.path().join(crate::pki::CA_CERT_FILE);
        let found = expiring_among(&[&ca_file, &agent], EXPIRY_WARNING, now).expect("reads");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].file, agent);
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").expect("written");
        let error = expiring_among(&[&garbage], EXPIRY_WARNING, now).expect_err("garbage");
        assert!(error.to_string().contains("garbage.pem"), "{error}");
    }

    /// An agent certificate ending in ten days is named, the year-long ones are not; one
    /// that has ended says so.
    #[test]
    fn names_the_certificates_that_end_within_the_window() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = CertificateAuthority::generate("test CA").expect("CA");
        let now = SystemTime::now();
        let soon = IdentitySpec::new(Role::Agent, "worker-1").valid_between(
            now - Duration::from_secs(3600),
            now + Duration::from_secs(10 * 86_400),
        );
        let issued = [
            ca.issue(&IdentitySpec::new(Role::Controller, "controller"))
                .expect("controller"),
            ca.issue(&soon).expect("agent"),
        ];
        write_pki(dir.path(), &ca, &issued, Overwrite::Refuse).expect("writes");
        let found = expiring_within(dir.path(), EXPIRY_WARNING, now).expect("reads");
        assert_eq!(found.len(), 1, "{found:?}");
        let text = found[0].to_string();
        assert!(
            text.contains("worker-1.pem expires in 9 days")
                || text.contains("worker-1.pem expires in 10 days"),
            "{text}"
        );
        let later = now + Duration::from_secs(20 * 86_400);
        let found = expiring_within(dir.path(), EXPIRY_WARNING, later).expect("reads");
        assert!(found[0].to_string().contains("EXPIRED"), "{found:?}");
        assert_eq!(
            found.len(),
            1,
            "the CA and controller still have most of a year"
        );
    }
}
