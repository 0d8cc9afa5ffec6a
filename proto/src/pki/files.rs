//! The PKI on disk. One directory holds `ca.pem` (and, on the machine that issues
//! identities, `ca.key`) plus `<name>.pem` and `<name>.key` per identity. Keys are written
//! 0600 and a directory created here is 0700; certificates are 0644. Keys are written
//! without ever being readable by others, even for a moment (created with their mode, or
//! written to a 0600 temporary file that is renamed over the old one).

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{CertificateAuthority, IssuedIdentity, PkiError};

/// File name of the CA certificate in a PKI directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA key in a PKI directory.
pub const CA_KEY_FILE: &str = "ca.key";

const KEY_MODE: u32 = 0o600;
const CERT_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o700;

/// What to do when a file about to be written already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    /// Fail with [`PkiError::AlreadyExists`] before writing anything.
    Refuse,
    /// Replace the existing files.
    Replace,
}

/// Path of an identity's certificate: `<dir>/<name>.pem`.
pub fn cert_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pem"))
}

/// Path of an identity's private key: `<dir>/<name>.key`.
pub fn key_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.key"))
}

/// Writes a whole PKI into `dir`: `ca.pem`, `ca.key` and each identity's `<name>.pem` and
/// `<name>.key`. With [`Overwrite::Refuse`], nothing is written if any of these files exists.
pub fn write_pki(
    dir: &Path,
    ca: &CertificateAuthority,
    identities: &[IssuedIdentity],
    overwrite: Overwrite,
) -> Result<(), PkiError> {
    let mut files = vec![
        (dir.join(CA_CERT_FILE), ca.cert_pem().to_owned(), CERT_MODE),
        (dir.join(CA_KEY_FILE), ca.key_pem(), KEY_MODE),
    ];
    for identity in identities {
        files.extend(identity_files(dir, identity));
    }
    write_all(dir, &files, overwrite)
}

impl CertificateAuthority {
    /// Loads the CA from `dir/ca.pem` and `dir/ca.key`.
    pub fn load(dir: &Path) -> Result<Self, PkiError> {
        let cert = dir.join(CA_CERT_FILE);
        let key = dir.join(CA_KEY_FILE);
        Self::from_pem(
            &read_pem(&cert)?,
            &read_pem(&key)?,
            &cert.display().to_string(),
            &key.display().to_string(),
        )
    }

    /// Writes `dir/ca.pem` and `dir/ca.key`.
    pub fn write(&self, dir: &Path, overwrite: Overwrite) -> Result<(), PkiError> {
        write_pki(dir, self, &[], overwrite)
    }

    /// Writes only `dir/ca.pem`: what a node needs to check its peers.
    pub fn write_cert(&self, dir: &Path, overwrite: Overwrite) -> Result<(), PkiError> {
        let files = [(dir.join(CA_CERT_FILE), self.cert_pem.clone(), CERT_MODE)];
        write_all(dir, &files, overwrite)
    }
}

impl IssuedIdentity {
    /// Loads the identity `name` from `dir/<name>.pem` and `dir/<name>.key`; the name found
    /// in the certificate must be `name`.
    pub fn load(dir: &Path, name: &str) -> Result<Self, PkiError> {
        let cert = cert_path(dir, name);
        let key = key_path(dir, name);
        let cert_origin = cert.display().to_string();
        let identity = Self::from_pem(
            &read_pem(&cert)?,
            &read_pem(&key)?,
            &cert_origin,
            &key.display().to_string(),
        )?;
        if identity.name != name {
            return Err(PkiError::BadCertificate {
                origin: cert_origin,
                reason: format!(
                    "it holds the identity {}, not {name:?}",
                    identity.identity()
                ),
            });
        }
        Ok(identity)
    }

    /// Writes `dir/<name>.pem` and `dir/<name>.key`.
    pub fn write(&self, dir: &Path, overwrite: Overwrite) -> Result<(), PkiError> {
        write_all(dir, &identity_files(dir, self), overwrite)
    }
}

/// Reads a PEM file to a string; the error names the file.
pub(crate) fn read_pem(path: &Path) -> Result<String, PkiError> {
    fs::read_to_string(path).map_err(|source| io_error(path, source))
}

fn identity_files(dir: &Path, identity: &IssuedIdentity) -> [(PathBuf, String, u32); 2] {
    [
        (
            cert_path(dir, &identity.name),
            identity.cert_pem.clone(),
            CERT_MODE,
        ),
        (
            key_path(dir, &identity.name),
            identity.key_pem.clone(),
            KEY_MODE,
        ),
    ]
}

fn write_all(
    dir: &Path,
    files: &[(PathBuf, String, u32)],
    overwrite: Overwrite,
) -> Result<(), PkiError> {
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(|source| io_error(dir, source))?;
    }
    if overwrite == Overwrite::Refuse
        && let Some((path, _, _)) = files.iter().find(|(path, _, _)| path.exists())
    {
        return Err(PkiError::AlreadyExists {
            path: path.display().to_string(),
        });
    }
    for (path, contents, mode) in files {
        match overwrite {
            Overwrite::Refuse => write_new(path, contents, *mode),
            Overwrite::Replace => replace(path, contents, *mode),
        }?;
    }
    Ok(())
}

/// Creates `path` (failing if it exists) with exactly `mode` and writes `contents`.
fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => PkiError::AlreadyExists {
                path: path.display().to_string(),
            },
            _ => io_error(path, source),
        })?;
    fill(file, path, contents, mode)
}

/// Writes `contents` to a fresh temporary file beside `path`, then renames it over `path`.
fn replace(path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    // A stale temporary file from a crashed run would make create_new fail.
    match fs::remove_file(&temporary) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_error(&temporary, e)),
        _ => {}
    }
    write_new(&temporary, contents, mode)?;
    fs::rename(&temporary, path).map_err(|source| io_error(path, source))
}

fn fill(mut file: File, path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    // The mode given to open() is reduced by the umask; set it exactly.
    file.set_permissions(Permissions::from_mode(mode))
        .and_then(|()| file.write_all(contents.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|source| io_error(path, source))
}

fn io_error(path: &Path, source: io::Error) -> PkiError {
    PkiError::Io {
        path: path.display().to_string(),
        source,
    }
}
