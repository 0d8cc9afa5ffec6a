//! What this agent has applied, on disk: one file per interface under `<state_dir>/netem/`,
//! written before a qdisc is replaced and removed once it is cleared. An agent that died
//! without clearing (SIGKILL, OOM, power loss) leaves its file behind, and the next agent on
//! the node clears that interface's netem before it serves anything: the leases live in
//! memory, so without this record nothing would.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The record folder under an agent's state directory.
pub const FOLDER: &str = "netem";

/// The interfaces with netem applied by this node's agent, as files.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// Records in `<state_dir>/netem/`.
    pub fn new(state_dir: &Path) -> Self {
        Records {
            dir: state_dir.join(FOLDER),
        }
    }

    /// Notes that netem `what` is about to be applied on `interface`; on disk (synced) before
    /// it returns, so a crash right after the kernel took it still leaves the record.
    pub fn note(&self, interface: &str, what: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(interface)?;
        let partial = path.with_extension("partial");
        let mut file = std::fs::File::create(&partial)?;
        writeln!(file, "{what}")?;
        file.sync_all()?;
        std::fs::rename(&partial, &path)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Forgets `interface` (its netem was cleared); a missing record is fine.
    pub fn forget(&self, interface: &str) {
        if let Ok(path) = self.path(interface)
            && let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(%interface, %error, "removing the netem record");
        }
    }

    /// The interfaces recorded, with what was applied there, in name order.
    pub fn recorded(&self) -> Vec<(String, String)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut recorded: Vec<(String, String)> = entries
            .flatten()
            .filter_map(|entry| {
                let name = entry
                    .file_name()
                    .to_str()?
                    .strip_suffix(".applied")?
                    .to_string();
                let what = std::fs::read_to_string(entry.path()).unwrap_or_default();
                Some((name, what.trim().to_string()))
            })
            .collect();
        recorded.sort();
        recorded
    }

    /// An interface's record file; interface names never hold `/` (the kernel refuses them),
    /// but one from a request is checked all the same.
    fn path(&self, interface: &str) -> std::io::Result<PathBuf> {
        if interface.is_empty() || interface.contains(['/', '\0']) || interface.starts_with('.') {
            return Err(std::io::Error::other(format!(
                "{interface:?} is not an interface name"
            )));
        }
        Ok(self.dir.join(format!("{interface}.applied")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_noted_listed_and_forgotten() {
        let state = tempfile::tempdir().expect("temp dir");
        let records = Records::new(state.path());
        assert!(records.recorded().is_empty(), "no folder yet");
        records.note("eth1", "delay 5ms").expect("noted");
        records.note("eth0", "delay 1ms").expect("noted");
        records.note("eth1", "delay 6ms").expect("replaced");
        assert_eq!(
            records.recorded(),
            [
                ("eth0".to_string(), "delay 1ms".to_string()),
                ("eth1".to_string(), "delay 6ms".to_string())
            ]
        );
        records.forget("eth1");
        records.forget("eth1"); // twice: nothing to remove, no error
        assert_eq!(records.recorded().len(), 1);
        assert!(records.note("../escape", "x").is_err());
        assert!(!state.path().join("escape.applied").exists());
    }
}
