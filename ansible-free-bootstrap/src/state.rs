//! The local state folder: the project's PKI (`pki/`: CA, controller, one identity per
//! node) and Nebula's (`nebula/`: its CA and one host certificate per node, by
//! `nebula-cert`). Made once and reused: a second run issues nothing unless a node's
//! addresses changed. Keys are 0600 in 0700 folders; the folder is the user's to keep out of
//! git (bootstrap refuses to use one inside a git work tree).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use proto::pki::{CertificateAuthority, IdentitySpec, IssuedIdentity, Overwrite, Role};

use crate::inventory::{Loaded, Node};

/// The controller identity's name in the PKI bootstrap makes.
pub const CONTROLLER_NAME: &str = "controller";

/// What went wrong making or reading the local state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file or folder could not be written or read.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The project's PKI could not be made or loaded.
    #[error("PKI in {dir}: {source}")]
    Pki {
        /// The folder.
        dir: String,
        /// Why.
        source: proto::pki::PkiError,
    },
    /// `nebula-cert` is missing or failed.
    #[error("nebula-cert: {0}")]
    NebulaCert(String),
    /// The state folder would end up in a git work tree.
    #[error(
        "the state folder {0} is inside a git work tree: it holds private keys; set state_dir in the inventory to a folder outside it"
    )]
    InGitTree(String),
}

/// The local state folder and what is in it.
#[derive(Debug, Clone)]
pub struct State {
    dir: PathBuf,
}

impl State {
    /// The folder (not created yet).
    pub fn new(dir: PathBuf) -> Self {
        State { dir }
    }

    /// The project's PKI folder.
    pub fn pki_dir(&self) -> PathBuf {
        self.dir.join("pki")
    }

    /// Nebula's certificates.
    pub fn nebula_dir(&self) -> PathBuf {
        self.dir.join("nebula")
    }

    /// SSH control sockets (one connection per node, reused by every command).
    pub fn ssh_dir(&self) -> PathBuf {
        self.dir.join("ssh")
    }

    /// Nebula's CA certificate.
    pub fn nebula_ca(&self) -> PathBuf {
        self.nebula_dir().join("ca.crt")
    }

    /// A node's Nebula certificate and key.
    pub fn nebula_host(&self, node: &str) -> (PathBuf, PathBuf) {
        let dir = self.nebula_dir();
        (
            dir.join(format!("{node}.crt")),
            dir.join(format!("{node}.key")),
        )
    }

    /// Makes whatever is missing or stale; returns one line per thing made.
    pub fn ensure(&self, loaded: &Loaded) -> Result<Vec<String>, StateError> {
        refuse_git_tree(&self.dir)?;
        for dir in [
            self.dir.clone(),
            self.pki_dir(),
            self.nebula_dir(),
            self.ssh_dir(),
        ] {
            private_dir(&dir)?;
        }
        let mut made = self.ensure_pki(&loaded.nodes)?;
        if loaded.has_overlay() {
            made.extend(self.ensure_nebula(&loaded.nodes)?);
        }
        Ok(made)
    }

    fn ensure_pki(&self, nodes: &[Node]) -> Result<Vec<String>, StateError> {
        let dir = self.pki_dir();
        let pki = |source| StateError::Pki {
            dir: dir.display().to_string(),
            source,
        };
        let mut made = Vec::new();
        let ca = if dir.join(proto::pki::CA_KEY_FILE).exists() {
            CertificateAuthority::load(&dir).map_err(pki)?
        } else {
            let ca = CertificateAuthority::generate("Continuum CA").map_err(pki)?;
            ca.write(&dir, Overwrite::Refuse).map_err(pki)?;
            made.push(format!(
                "project CA {}",
                dir.join(proto::pki::CA_CERT_FILE).display()
            ));
            ca
        };
        // The label names the CA too: a certificate from a CA made anew is stale.
        let ca_print = fingerprint(ca.cert_pem().as_bytes());
        let mut wanted = vec![(
            IdentitySpec::new(Role::Controller, CONTROLLER_NAME),
            format!("controller by CA {ca_print}"),
        )];
        for node in nodes {
            let spec =
                IdentitySpec::new(Role::Agent, node.name.clone()).with_ip_address(node.agent.ip());
            wanted.push((
                spec,
                format!("agent {} ({}) by CA {ca_print}", node.name, node.agent.ip()),
            ));
        }
        for (spec, label) in wanted {
            let name = spec.name.clone();
            if self.is_current(&dir, &name, &label) {
                continue;
            }
            let issued: IssuedIdentity = ca.issue(&spec).map_err(pki)?;
            issued.write(&dir, Overwrite::Replace).map_err(pki)?;
            self.remember(&dir, &name, &label)?;
            made.push(format!("certificate for {label}"));
        }
        Ok(made)
    }

    fn ensure_nebula(&self, nodes: &[Node]) -> Result<Vec<String>, StateError> {
        let dir = self.nebula_dir();
        let mut made = Vec::new();
        let ca_key = dir.join("ca.key");
        if !ca_key.exists() {
            nebula_cert(
                "the overlay's CA",
                &[
                    "ca",
                    "-name",
                    "Continuum overlay",
                    "-out-crt",
                    &path_text(&self.nebula_ca()),
                    "-out-key",
                    &path_text(&ca_key),
                ],
            )?;
            private_file(&ca_key)?;
            made.push(format!("Nebula CA {}", self.nebula_ca().display()));
        }
        for node in nodes {
            let Some((ip, len)) = node.overlay else {
                continue;
            };
            let label = format!("{ip}/{len}");
            if self.is_current(&dir, &node.name, &label) {
                continue;
            }
            let (crt, key) = self.nebula_host(&node.name);
            for old in [&crt, &key] {
                if old.exists() {
                    fs::remove_file(old).map_err(|source| io("removing", old, source))?;
                }
            }
            nebula_cert(
                &node.name,
                &[
                    "sign",
                    "-ca-crt",
                    &path_text(&self.nebula_ca()),
                    "-ca-key",
                    &path_text(&ca_key),
                    "-name",
                    &node.name,
                    "-ip",
                    &format!("{ip}/{len}"),
                    "-out-crt",
                    &path_text(&crt),
                    "-out-key",
                    &path_text(&key),
                ],
            )?;
            private_file(&key)?;
            self.remember(&dir, &node.name, &label)?;
            made.push(format!("Nebula certificate for {} ({ip}/{len})", node.name));
        }
        Ok(made)
    }

    /// True when `name`'s certificate was issued for exactly `label` (its addresses).
    fn is_current(&self, dir: &Path, name: &str, label: &str) -> bool {
        fs::read_to_string(dir.join(format!("{name}.issued-for")))
            .is_ok_and(|text| text.trim() == label)
    }

    fn remember(&self, dir: &Path, name: &str, label: &str) -> Result<(), StateError> {
        let path = dir.join(format!("{name}.issued-for"));
        fs::write(&path, format!("{label}\n")).map_err(|source| io("writing", &path, source))
    }
}

/// The first 16 hex digits of a SHA-256: enough to tell two CAs apart.
fn fingerprint(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))[..16].to_string()
}

/// Runs `nebula-cert args` for `what` (a node's name, or the CA).
fn nebula_cert(what: &str, args: &[&str]) -> Result<(), StateError> {
    let output = Command::new("nebula-cert").args(args).output().map_err(|e| {
        StateError::NebulaCert(format!(
            "cannot run it ({e}); install Nebula (Debian: apt install nebula) or drop overlay_ip from the inventory"
        ))
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(StateError::NebulaCert(format!(
            "{} for {what} {}: {}",
            args.first().copied().unwrap_or_default(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

fn io(what: &'static str, path: &Path, source: std::io::Error) -> StateError {
    StateError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

fn private_dir(dir: &Path) -> Result<(), StateError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| io("creating", dir, source))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|source| io("restricting", dir, source))
}

fn private_file(path: &Path) -> Result<(), StateError> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|source| io("restricting", path, source))
}

/// Refuses a state folder inside a git work tree (keys must never be committed).
fn refuse_git_tree(dir: &Path) -> Result<(), StateError> {
    let absolute = std::path::absolute(dir).map_err(|source| io("resolving", dir, source))?;
    for ancestor in absolute.ancestors() {
        if ancestor.join(".git").exists() {
            return Err(StateError::InGitTree(absolute.display().to_string()));
        }
    }
    Ok(())
}
