//! `controller pki`: the project's CA and identities for users who do not use `bootstrap`
//! (and for tests). Keys are written 0600 into a 0700 folder, never over existing keys.
//! Everything the command reads (the CA, every certificate it checks for expiry) is read and
//! checked before it writes anything, so a stray file fails it with the folder untouched.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use proto::pki::{
    CertificateAuthority, IdentitySpec, IssuedIdentity, Overwrite, PkiError, Role, write_pki,
};

/// One identity to issue, as written on the command line: `NAME` or
/// `NAME=ADDRESS[,ADDRESS...]` where an address is an IP or a DNS name the peer dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityArg {
    /// The identity's name.
    pub name: String,
    /// IP addresses to put in the certificate.
    pub ips: Vec<IpAddr>,
    /// DNS names to put in the certificate.
    pub dns: Vec<String>,
}

impl std::str::FromStr for IdentityArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, addresses) = text.split_once('=').unwrap_or((text, ""));
        if name.is_empty() {
            return Err(format!("{text:?}: a name is needed before '='"));
        }
        let mut arg = IdentityArg {
            name: name.to_string(),
            ips: Vec::new(),
            dns: Vec::new(),
        };
        for address in addresses.split(',').filter(|a| !a.is_empty()) {
            match address.parse::<IpAddr>() {
                Ok(ip) => arg.ips.push(ip),
                Err(_) => arg.dns.push(address.to_string()),
            }
        }
        Ok(arg)
    }
}

/// What `controller pki` writes.
#[derive(Debug, Clone)]
pub struct PkiRequest {
    /// Target folder.
    pub dir: PathBuf,
    /// The controller's identity.
    pub controller: IdentityArg,
    /// One identity per agent.
    pub agents: Vec<IdentityArg>,
    /// Remote clients (laptops).
    pub clients: Vec<IdentityArg>,
    /// Replace existing files.
    pub replace: bool,
}

fn spec(role: Role, arg: &IdentityArg) -> IdentitySpec {
    let mut spec = IdentitySpec::new(role, arg.name.clone());
    for ip in &arg.ips {
        spec = spec.with_ip_address(*ip);
    }
    for dns in &arg.dns {
        spec = spec.with_dns_name(dns.clone());
    }
    spec
}

/// Creates the CA (or loads the one in `dir` when only adding identities) and issues every
/// identity; returns the files' folder.
pub fn create(request: &PkiRequest) -> Result<Vec<String>, PkiError> {
    // The expiry check below reads every `.pem` in the folder: read them all now, so a
    // stray non-certificate fails the command before it has written a single file.
    if request.dir.exists() {
        proto::pki::expiring_within(
            &request.dir,
            proto::pki::EXPIRY_WARNING,
            std::time::SystemTime::now(),
        )?;
    }
    let ca = match CertificateAuthority::load(&request.dir) {
        Ok(ca) => ca,
        Err(_) if !request.dir.join(proto::pki::CA_KEY_FILE).exists() => {
            CertificateAuthority::generate("Continuum CA")?
        }
        Err(error) => return Err(error),
    };
    let mut issued: Vec<IssuedIdentity> =
        vec![ca.issue(&spec(Role::Controller, &request.controller))?];
    for agent in &request.agents {
        issued.push(ca.issue(&spec(Role::Agent, agent))?);
    }
    for client in &request.clients {
        issued.push(ca.issue(&spec(Role::Client, client))?);
    }
    let overwrite = if request.replace {
        Overwrite::Replace
    } else {
        Overwrite::Refuse
    };
    write_pki(&request.dir, &ca, &issued, overwrite)?;
    let mut lines: Vec<String> = issued
        .iter()
        .map(|identity| describe(&request.dir, identity))
        .collect();
    // Identities added to an older PKI sit beside certificates (the CA's too) that may end
    // soon: say so now, not as a handshake error on a node.
    let ending = proto::pki::expiring_within(
        &request.dir,
        proto::pki::EXPIRY_WARNING,
        std::time::SystemTime::now(),
    )?;
    lines.extend(ending.iter().map(|expiring| format!("warning: {expiring}")));
    Ok(lines)
}

/// Logs a warning for every certificate in the PKI folder `dir` (the CA's, the controller's,
/// the agents' beside them) that has ended or ends within [`proto::pki::EXPIRY_WARNING`], in
/// the words `controller pki` uses; when a plan runs and when `controller serve` starts, so a
/// lapse is announced before it is a handshake error on a node. A folder that cannot be
/// checked is a warning too: the handshakes will say more.
pub fn warn_expiring(dir: &Path) {
    match proto::pki::expiring_within(
        dir,
        proto::pki::EXPIRY_WARNING,
        std::time::SystemTime::now(),
    ) {
        Ok(ending) => {
            for expiring in ending {
                tracing::warn!("{expiring}");
            }
        }
        Err(error) => tracing::warn!("certificate expiry not checked: {error}"),
    }
}

fn describe(dir: &Path, identity: &IssuedIdentity) -> String {
    format!(
        "{} {:<12} {}",
        identity.role,
        identity.name,
        proto::pki::cert_path(dir, &identity.name).display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_parse_names_ips_and_dns_names() {
        let arg: IdentityArg = "worker-1=198.18.0.3,worker-1.lab".parse().expect("parses");
        assert_eq!(arg.name, "worker-1");
        assert_eq!(arg.ips, vec!["198.18.0.3".parse::<IpAddr>().expect("ip")]);
        assert_eq!(arg.dns, vec!["worker-1.lab".to_string()]);
        assert!("=198.18.0.3".parse::<IdentityArg>().is_err());
    }

    #[test]
    fn writes_a_pki_that_mtls_loads_and_refuses_to_overwrite_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let request = PkiRequest {
            dir: dir.path().join("pki"),
            controller: "controller".parse().expect("arg"),
            agents: vec!["worker-1=127.0.0.1".parse().expect("arg")],
            clients: vec!["laptop".parse().expect("arg")],
            replace: false,
        };
        let written = create(&request).expect("written");
        assert_eq!(written.len(), 3);
        for name in ["controller", "worker-1", "laptop"] {
            let credentials = proto::mtls::Credentials::load(&request.dir, name).expect("loads");
            assert_eq!(credentials.identity().name, name);
        }
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(request.dir.join("worker-1.key"))
                .expect("key")
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            create(&request).is_err(),
            "existing keys are not overwritten"
        );
    }

    /// Every file's name and bytes, sorted by name.
    fn listing(dir: &Path) -> Vec<(std::ffi::OsString, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("listed")
            .map(|entry| {
                let entry = entry.expect("entry");
                let bytes = std::fs::read(entry.path()).expect("read");
                (entry.file_name(), bytes)
            })
            .collect();
        files.sort();
        files
    }

    /// A stray `.pem` that is no certificate fails the command in one line naming it, before
    /// anything is written: adding an identity to a PKI, and creating one in a folder that
    /// holds only the stray file, with and without --replace.
    #[test]
    fn a_stray_non_certificate_pem_fails_before_anything_is_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = dir.path().join("pki");
        let mut request = PkiRequest {
            dir: pki.clone(),
            controller: "controller".parse().expect("arg"),
            agents: vec!["worker-1=127.0.0.1".parse().expect("arg")],
            clients: Vec::new(),
            replace: false,
        };
        create(&request).expect("written");
        std::fs::write(pki.join("stray.pem"), "not a certificate\n").expect("stray");
        for replace in [false, true] {
            request.replace = replace;
            request.agents = vec!["worker-2".parse().expect("arg")];
            request.clients = vec!["laptop".parse().expect("arg")];
            let before = listing(&pki);
            let error = create(&request).expect_err("a stray file").to_string();
            assert!(error.contains("stray.pem"), "{error}");
            assert!(!error.contains('\n'), "one line: {error}");
            assert_eq!(
                listing(&pki),
                before,
                "the folder is unchanged (replace {replace})"
            );
        }

        let fresh = dir.path().join("fresh");
        std::fs::create_dir(&fresh).expect("folder");
        std::fs::write(fresh.join("stray.pem"), [0xff, 0x00, 0x42]).expect("stray");
        request.dir = fresh.clone();
        request.replace = false;
        let before = listing(&fresh);
        let error = create(&request).expect_err("a stray file").to_string();
        assert!(error.contains("stray.pem"), "{error}");
        assert_eq!(listing(&fresh), before, "nothing written beside it");
    }
}
