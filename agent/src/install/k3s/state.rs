//! What the installer remembers between requests and agent restarts: the last applied
//! request ([`Applied`], a JSON file of mode 0600 because it holds the token), so the same
//! request twice changes nothing and a different one is recognised as a change.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Supervision;
use super::request::ClusterPlan;
use crate::install::InstallError;
use crate::install::system::write_private;

/// The request in force, with what ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Applied {
    /// The checked request.
    pub(super) plan: ClusterPlan,
    /// The k3s executable, resolved (a new binary is a change too).
    pub(super) binary: PathBuf,
    /// A unit or a child.
    pub(super) supervision: Supervision,
}

/// What the state file says.
#[derive(Debug)]
pub(super) enum Remembered {
    /// No file: nothing applied (or uninstalled).
    Nothing,
    /// The last applied request.
    Applied(Applied),
    /// A file that cannot be read back; treated as a different request.
    Unreadable(String),
}

impl Remembered {
    /// The applied request, if readable.
    pub(super) fn applied(&self) -> Option<&Applied> {
        match self {
            Remembered::Applied(applied) => Some(applied),
            Remembered::Nothing | Remembered::Unreadable(_) => None,
        }
    }
}

/// Reads the state file at `path`.
pub(super) fn load(path: &Path) -> Remembered {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Remembered::Nothing,
        Err(e) => Remembered::Unreadable(format!("{}: {e}", path.display())),
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(applied) => Remembered::Applied(applied),
            Err(e) => Remembered::Unreadable(format!("{}: {e}", path.display())),
        },
    }
}

/// Writes the state file at `path` (mode 0600, atomically).
pub(super) fn save(path: &Path, applied: &Applied) -> Result<(), InstallError> {
    let text = serde_json::to_string_pretty(applied).map_err(|e| {
        InstallError::Failed(format!(
            "remembering the request in {}: {e}",
            path.display()
        ))
    })?;
    write_private(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::install::k3s::request::ClusterRole;

    #[test]
    fn the_request_is_remembered_privately_and_read_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("request.json");
        assert!(matches!(load(&path), Remembered::Nothing));
        let applied = Applied {
            plan: ClusterPlan {
                role: ClusterRole::Agent {
                    server_url: "https://198.19.0.1:6443".into(),
                },
                token: "secret".into(),
                node_ip: [198, 19, 0, 2].into(),
                flannel_interface: "nebula1".into(),
                node_name: "worker".into(),
                labels: Default::default(),
            },
            binary: "/usr/local/bin/k3s".into(),
            supervision: Supervision::Child,
        };
        save(&path, &applied).expect("saved");
        let mode = std::fs::metadata(&path)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load(&path).applied(), Some(&applied));
        std::fs::write(&path, "{").expect("spoilt");
        assert!(matches!(load(&path), Remembered::Unreadable(_)));
    }
}
