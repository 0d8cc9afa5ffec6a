//! What a controller killed mid-run (SIGKILL, a crash) leaves of its emulated nodes, and its
//! removal by the next run that emulates nodes, before that run makes anything.
//!
//! The namespaces and their links end with the process that held them. What can outlive it:
//! the native brokers the nodes' agents started (a process of its own, which keeps its node's
//! namespace, links and netem alive while it runs), and the run's folder (the PKI and the
//! agents' state). Each run's folder is under [`EMULATED_ROOT`], with its controller's PID and
//! start time in it; the agents record there the marker every process of each broker carries
//! (as every agent does, for its own restart). So a later run stops the brokers of every
//! folder whose controller no longer runs, which ends their namespaces too, and removes the
//! folder. The in-process agents of `agent = "local"` keep their folders the same way under a
//! root of their own (`local_agent.rs`), swept by the same functions.

use std::io;
use std::path::{Path, PathBuf};

/// Where emulated runs keep their folders: on tmpfs, as namespaces do not outlive a boot.
pub const EMULATED_ROOT: &str = "/run/continuum/emulated";
/// The file naming a folder's controller: `<pid> <start time in clock ticks>`.
const OWNER_FILE: &str = "owner";
/// How long a folder without a readable owner is taken for one being made (its owner is
/// written just after it is created) rather than one whose controller died making it.
const MAKING_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a dead controller had left, and was removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The run's folder (now removed).
    pub folder: PathBuf,
    /// The brokers that were still running, as `<node>/<broker>`.
    pub brokers: Vec<String>,
}

/// A new folder for this run, its owner written before anything uses it.
pub(super) fn run_folder() -> io::Result<tempfile::TempDir> {
    run_folder_in(Path::new(EMULATED_ROOT))
}

/// A new folder for a run under `root` (which must exist), its owner written before anything
/// uses it.
pub(in crate::run) fn run_folder_in(root: &Path) -> io::Result<tempfile::TempDir> {
    std::fs::create_dir_all(root)?;
    let folder = tempfile::Builder::new().prefix("run-").tempdir_in(root)?;
    let pid = std::process::id();
    let started = host::start_time(pid)
        .ok_or_else(|| io::Error::other("cannot read this process's start time"))?;
    std::fs::write(folder.path().join(OWNER_FILE), format!("{pid} {started}\n"))?;
    Ok(folder)
}

/// Stops the brokers of every folder under [`EMULATED_ROOT`] whose controller is gone and
/// removes the folder; returns what it found. A folder it cannot read or remove is logged
/// and left.
pub async fn remove_leftovers() -> Vec<Leftover> {
    remove_leftovers_in(Path::new(EMULATED_ROOT)).await
}

/// [`remove_leftovers`] for the run folders under `root`.
pub(in crate::run) async fn remove_leftovers_in(root: &Path) -> Vec<Leftover> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return removed;
    };
    for folder in entries.flatten().map(|entry| entry.path()) {
        if owner_alive(&folder) || being_made(&folder) {
            continue;
        }
        let mut brokers = Vec::new();
        for state in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let name = state.file_name().to_string_lossy().into_owned();
            let Some(node) = name.strip_prefix("state-") else {
                continue;
            };
            let driver = agent::broker::NativeDriver::new(
                agent::broker::InstallPaths::default(),
                state.path().join("brokers"),
            );
            for broker in driver.stop_leftovers().await {
                brokers.push(format!("{node}/{broker}"));
            }
        }
        match std::fs::remove_dir_all(&folder) {
            Ok(()) => {
                tracing::warn!(folder = %folder.display(), ?brokers, "removed what a killed controller's emulated nodes left");
                removed.push(Leftover { folder, brokers });
            }
            Err(error) => {
                tracing::error!(folder = %folder.display(), %error, "cannot remove a killed controller's emulated run");
            }
        }
    }
    removed
}

/// Whether `folder` has no readable owner yet but was made moments ago: its controller may be
/// about to write it.
fn being_made(folder: &Path) -> bool {
    std::fs::read_to_string(folder.join(OWNER_FILE)).is_err()
        && std::fs::symlink_metadata(folder)
            .and_then(|meta| meta.modified())
            .is_ok_and(|made| made.elapsed().is_ok_and(|age| age < MAKING_GRACE))
}

/// Whether the controller named in `folder` still runs (the same PID with the same start
/// time: a PID alone may have been reused). A folder without a readable owner is one whose
/// controller died while making it.
fn owner_alive(folder: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(folder.join(OWNER_FILE)) else {
        return false;
    };
    let mut fields = text.split_whitespace();
    let (Some(pid), Some(started)) = (
        fields.next().and_then(|f| f.parse::<u32>().ok()),
        fields.next().and_then(|f| f.parse::<u64>().ok()),
    ) else {
        return false;
    };
    host::start_time(pid) == Some(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_belongs_to_a_live_controller_only_with_its_pid_and_start_time() {
        let folder = tempfile::tempdir().expect("folder");
        assert!(!owner_alive(folder.path()), "no owner file");
        let me = std::process::id();
        let started = host::start_time(me).expect("own start time");
        std::fs::write(folder.path().join(OWNER_FILE), format!("{me} {started}\n")).expect("owner");
        assert!(owner_alive(folder.path()));
        // The same PID started at another time is another process.
        std::fs::write(
            folder.path().join(OWNER_FILE),
            format!("{me} {}\n", started + 1),
        )
        .expect("owner");
        assert!(!owner_alive(folder.path()));
        std::fs::write(folder.path().join(OWNER_FILE), "garbage").expect("owner");
        assert!(!owner_alive(folder.path()));
    }

    #[tokio::test]
    async fn a_dead_controllers_folder_is_removed_and_a_live_or_new_one_kept() {
        let root = tempfile::tempdir().expect("root");
        let mine = run_folder_in(root.path()).expect("a run folder");
        let dead = root.path().join("run-dead");
        std::fs::create_dir(&dead).expect("folder");
        // PID 1 started at boot, long before this clock tick count: a controller gone.
        std::fs::write(dead.join(OWNER_FILE), format!("1 {}\n", u64::MAX)).expect("owner");
        let new = root.path().join("run-new");
        std::fs::create_dir(&new).expect("folder");
        let removed = remove_leftovers_in(root.path()).await;
        assert_eq!(
            removed,
            vec![Leftover {
                folder: dead.clone(),
                brokers: Vec::new()
            }]
        );
        assert!(mine.path().exists() && new.exists() && !dead.exists());
    }
}
