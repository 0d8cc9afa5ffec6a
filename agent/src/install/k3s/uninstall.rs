//! UninstallCluster: stop k3s, run the official installer's scripts where they exist
//! (`k3s-killall.sh` stops the pods' containers, unmounts and removes the CNI interfaces;
//! `k3s-uninstall.sh` / `k3s-agent-uninstall.sh` remove what that installer put in place),
//! then remove every file this installer wrote. A second call finds nothing and says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proto::agent::v1 as pb;

use super::daemon::{Supervised, remove_file};
use super::state::{self, Remembered};
use super::{K3s, Supervision, UNITS, locate_binary};
use crate::install::InstallError;
use crate::process::{CommandLine, new_marker, run_bounded};

/// Where the official installer puts its scripts, when they are not beside the binary.
const SCRIPT_DIR: &str = "/usr/local/bin";
/// Stops every k3s process and container, unmounts, deletes the CNI interfaces.
const KILLALL: &str = "k3s-killall.sh";
/// killall unmounts every pod volume and waits for containers: minutes on a Raspberry Pi.
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

impl K3s {
    /// Stops k3s, runs its uninstall steps and removes its data, kubeconfig, unit, env
    /// file and remembered request. Idempotent: "not installed" when nothing is left.
    /// Every step is tried; if one fails the error lists it with what was done, and the
    /// remembered request stays so that a retry does the steps again.
    pub async fn uninstall(&self) -> Result<pb::ClusterStatus, InstallError> {
        let mut child = self.child.lock().await;
        let remembered = state::load(&self.request_path());
        let role = remembered
            .applied()
            .map(|applied| applied.plan.role.name())
            .or_else(|| child.as_ref().map(Supervised::role));
        if !self.anything_installed(child.is_some(), &remembered).await {
            return Ok(stopped(role, "not installed".into()));
        }
        let mut done = Vec::new();
        let mut failed = Vec::new();
        match self.stop_daemon(&mut child, None).await {
            Ok(Some(stopped)) => done.push(stopped),
            Ok(None) => {}
            Err(error) => failed.push(error.to_string()),
        }
        for script in self.scripts(role, &remembered) {
            match run_script(&script).await {
                Ok(()) => done.push(format!("ran {}", script.display())),
                Err(error) => failed.push(error),
            }
        }
        for (path, removed) in [
            (&self.kubeconfig, remove_file(&self.kubeconfig)),
            (&self.data_dir, remove_dir(&self.data_dir)),
        ] {
            note_removal(&mut done, &mut failed, path, removed);
        }
        if failed.is_empty() {
            let removed = remove_dir(&self.own_dir);
            note_removal(&mut done, &mut failed, &self.own_dir, removed);
        }
        if failed.is_empty() {
            tracing::info!(?role, "k3s uninstalled");
            Ok(stopped(role, format!("uninstalled: {}", done.join("; "))))
        } else {
            Err(InstallError::Failed(format!(
                "uninstall incomplete: {}; done: {}",
                failed.join("; "),
                if done.is_empty() {
                    "nothing".to_string()
                } else {
                    done.join("; ")
                }
            )))
        }
    }

    /// True when anything of k3s is on the node: a child, a remembered request, our files,
    /// or (under systemd) a k3s unit that is ours or running.
    async fn anything_installed(&self, has_child: bool, remembered: &Remembered) -> bool {
        if has_child
            || !matches!(remembered, Remembered::Nothing)
            || [&self.own_dir, &self.data_dir, &self.kubeconfig]
                .iter()
                .any(|path| path.exists())
        {
            return true;
        }
        if self.supervision == Supervision::Systemd {
            for unit in UNITS {
                if self.systemd.is_ours(unit) || self.systemd.is_active(unit).await {
                    return true;
                }
            }
        }
        false
    }

    /// The official scripts present for `role` (both roles' when it is unknown), killall
    /// first, each looked for beside the binary, then in [`SCRIPT_DIR`].
    fn scripts(&self, role: Option<&str>, remembered: &Remembered) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let binaries = [
            remembered.applied().map(|applied| applied.binary.clone()),
            locate_binary(&self.configured_binary).ok(),
        ];
        for binary in binaries.into_iter().flatten() {
            if let Some(dir) = binary.parent() {
                dirs.push(dir.to_path_buf());
            }
        }
        dirs.push(PathBuf::from(SCRIPT_DIR));
        dirs.dedup();
        let names: &[&str] = match role {
            Some("server") => &[KILLALL, "k3s-uninstall.sh"],
            Some(_) => &[KILLALL, "k3s-agent-uninstall.sh"],
            None => &[KILLALL, "k3s-uninstall.sh", "k3s-agent-uninstall.sh"],
        };
        names
            .iter()
            .filter_map(|name| dirs.iter().map(|dir| dir.join(name)).find(|p| p.is_file()))
            .collect()
    }
}

/// Runs one uninstall script to its end.
async fn run_script(script: &Path) -> Result<(), String> {
    let mut line = CommandLine::new(script);
    line.env_remove_prefixes = vec!["K3S_"];
    match run_bounded(&line, &new_marker("k3s-uninstall"), SCRIPT_LIMIT).await {
        Ok((status, _)) if status.success() => Ok(()),
        Ok((status, output)) => Err(format!(
            "{} failed ({status}): {}",
            script.display(),
            output.trim()
        )),
        Err(error) => Err(error),
    }
}

fn note_removal(
    done: &mut Vec<String>,
    failed: &mut Vec<String>,
    path: &Path,
    removed: Result<bool, InstallError>,
) {
    match removed {
        Ok(true) => done.push(format!("removed {}", path.display())),
        Ok(false) => {}
        Err(error) => failed.push(error.to_string()),
    }
}

/// Removes a folder and everything in it; false if it was not there.
fn remove_dir(path: &Path) -> Result<bool, InstallError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(InstallError::Failed(format!(
            "removing {}: {e}",
            path.display()
        ))),
    }
}

fn stopped(role: Option<&str>, detail: String) -> pb::ClusterStatus {
    pb::ClusterStatus {
        running: false,
        role: role.unwrap_or_default().to_string(),
        pid: 0,
        detail,
        nodes: Vec::new(),
    }
}
