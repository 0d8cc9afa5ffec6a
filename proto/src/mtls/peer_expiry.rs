//! Certificates that peers present, close to their end: a client warns about the server it
//! dials (an agent, `controller serve`), an agent about the controllers and clients that call
//! it, so the operator hears of a lapse on the far side before handshakes start failing
//! there. Each peer once per process: agents are called every second, and a warning a second
//! would bury the log it is meant for.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::pki::{self, Expiring};

/// Most peers remembered as warned about; past it a peer may be warned about again, rather
/// than the set growing with every identity a CA ever issued.
const MAX_REMEMBERED: usize = 4096;

/// The peers this process has warned about.
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Whether the DER certificate `der` that `peer` presented ends within `within` of `now` (or
/// has ended): `Some` with `peer` in place of a file. `None` too for a certificate that does
/// not parse; the handshake's own checks refuse those.
pub fn certificate_expiry(
    der: &[u8],
    peer: &str,
    within: Duration,
    now: SystemTime,
) -> Option<Expiring> {
    let not_after = pki::der_not_after(der, peer).ok()?;
    pki::expiry(peer.into(), not_after, within, now)
}

/// Logs `expiring` (a peer's certificate) as a warning, unless this process already warned
/// about that peer; `side` says which end it is (`"server"`, `"caller"`), as in "the
/// server's certificate agent \"worker-1\" expires in 5 days". True if it logged.
pub fn warn_once(expiring: &Expiring, side: &str) -> bool {
    let peer = expiring.file.display().to_string();
    let first = {
        let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
        let warned = warned.get_or_insert_with(HashSet::new);
        if warned.len() >= MAX_REMEMBERED {
            warned.clear();
        }
        warned.insert(peer)
    };
    if first {
        tracing::warn!("the {side}'s {expiring}");
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CertificateAuthority, EXPIRY_WARNING, IdentitySpec, Role, pem_to_der};

    const DAY: Duration = Duration::from_secs(86_400);

    fn certificate(role: Role, name: &str, lasts: Duration) -> Vec<u8> {
        let ca = CertificateAuthority::generate("test CA").expect("CA");
        let now = SystemTime::now();
        let spec = IdentitySpec::new(role, name).valid_between(now - DAY, now + lasts);
        let issued = ca.issue(&spec).expect("issued");
        pem_to_der(&issued.cert_pem, name).expect("DER")
    }

    #[test]
    fn a_peer_certificate_ending_within_the_window_is_named_and_a_year_long_one_is_not() {
        let now = SystemTime::now();
        let soon = certificate(Role::Agent, "worker-1", 5 * DAY);
        let expiring = certificate_expiry(&soon, "agent \"worker-1\"", EXPIRY_WARNING, now)
            .expect("ends in five days");
        let text = expiring.to_string();
        assert!(
            text.contains("agent \"worker-1\" expires in 4 days")
                || text.contains("agent \"worker-1\" expires in 5 days"),
            "{text}"
        );
        let year = certificate(Role::Controller, "controller", 365 * DAY);
        assert_eq!(
            certificate_expiry(&year, "controller", EXPIRY_WARNING, now),
            None
        );
        assert_eq!(
            certificate_expiry(b"not DER", "x", EXPIRY_WARNING, now),
            None
        );
    }

    #[test]
    fn each_peer_is_warned_about_once() {
        let now = SystemTime::now();
        let soon = certificate(Role::Agent, "once-1", 5 * DAY);
        let expiring =
            certificate_expiry(&soon, "agent \"once-1\"", EXPIRY_WARNING, now).expect("soon");
        assert!(warn_once(&expiring, "server"));
        assert!(!warn_once(&expiring, "server"));
        let other = certificate(Role::Agent, "once-2", 5 * DAY);
        let other =
            certificate_expiry(&other, "agent \"once-2\"", EXPIRY_WARNING, now).expect("soon");
        assert!(warn_once(&other, "server"));
    }
}
