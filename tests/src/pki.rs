//! The test PKI: one CA, the controller's identity and one identity per agent naming the
//! address it serves on, as bootstrap makes them. Every test that needs mTLS makes its PKI
//! here, on files ([`TestPki::create`]: what agents and the controller load) or in memory
//! ([`TestPki::in_memory`]: in-process agents that need no files).

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use domain::TlsFiles;
use proto::mtls::Credentials;
use proto::pki::{
    CA_CERT_FILE, CertificateAuthority, IdentitySpec, Overwrite, Role, cert_path, key_path,
    write_pki,
};

/// The name of the controller's identity in every test PKI.
pub const CONTROLLER: &str = "controller";

/// A test PKI; see the module docs.
pub struct TestPki {
    ca: CertificateAuthority,
    /// Where its files are, if it has any.
    dir: Option<PathBuf>,
}

impl fmt::Debug for TestPki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestPki").field("dir", &self.dir).finish()
    }
}

impl TestPki {
    /// Writes `ca.pem`, `ca.key`, the controller's identity and one agent identity per
    /// `(name, address)` into `dir` (keys 0600), refusing to overwrite anything there.
    pub fn create(dir: &Path, agents: &[(&str, IpAddr)]) -> Result<Self> {
        let ca = CertificateAuthority::generate("Continuum test CA")?;
        let mut identities = vec![ca.issue(&IdentitySpec::new(Role::Controller, CONTROLLER))?];
        for (name, address) in agents {
            identities
                .push(ca.issue(&IdentitySpec::new(Role::Agent, *name).with_ip_address(*address))?);
        }
        write_pki(dir, &ca, &identities, Overwrite::Refuse)
            .with_context(|| format!("writing the test PKI to {}", dir.display()))?;
        Ok(TestPki {
            ca,
            dir: Some(dir.to_path_buf()),
        })
    }

    /// A CA whose identities live in memory only ([`TestPki::issue`]).
    pub fn in_memory() -> Result<Self> {
        Ok(TestPki {
            ca: CertificateAuthority::generate("Continuum test CA")?,
            dir: None,
        })
    }

    /// Credentials for a new identity `spec`, issued by this CA and kept in memory.
    pub fn issue(&self, spec: &IdentitySpec) -> Result<Credentials> {
        let issued = self.ca.issue(spec)?;
        Ok(Credentials::new(
            self.ca.cert_pem().to_string(),
            issued,
            "the test CA",
        )?)
    }

    /// The CA, to issue unusual certificates (expired ones, say).
    pub fn ca(&self) -> &CertificateAuthority {
        &self.ca
    }

    /// The folder holding the files; fails for an in-memory PKI.
    pub fn dir(&self) -> Result<&Path> {
        self.dir
            .as_deref()
            .context("this test PKI was made in memory and has no files")
    }

    /// The identity `name` (the controller or an agent), loaded from the files.
    pub fn credentials(&self, name: &str) -> Result<Credentials> {
        let dir = self.dir()?;
        Credentials::load(dir, name)
            .with_context(|| format!("identity {name} from {}", dir.display()))
    }

    /// The files an agent called `name` is configured with.
    pub fn tls_files(&self, name: &str) -> Result<TlsFiles> {
        let dir = self.dir()?;
        Ok(TlsFiles {
            ca: dir.join(CA_CERT_FILE),
            cert: cert_path(dir, name),
            key: key_path(dir, name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_load_as_credentials_and_tls_paths() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let pki = TestPki::create(dir.path(), &[("worker", [198, 18, 0, 2].into())])?;
        let worker = pki.credentials("worker")?.identity();
        assert_eq!((worker.role, worker.name.as_str()), (Role::Agent, "worker"));
        pki.credentials(CONTROLLER)?;
        let files = pki.tls_files("worker")?;
        assert!(files.ca.is_file() && files.cert.is_file() && files.key.is_file());
        assert!(
            TestPki::create(dir.path(), &[]).is_err(),
            "an existing PKI is never overwritten"
        );
        Ok(())
    }

    #[test]
    fn an_in_memory_pki_issues_but_has_no_files() -> Result<()> {
        let pki = TestPki::in_memory()?;
        pki.issue(&IdentitySpec::new(Role::Controller, CONTROLLER))?;
        assert!(pki.credentials(CONTROLLER).is_err());
        Ok(())
    }
}
