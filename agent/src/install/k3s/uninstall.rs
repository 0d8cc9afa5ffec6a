//! UninstallCluster: stop k3s, run the official installer's scripts where they exist
//! (`k3s-killall.sh` stops the pods' containers, unmounts and removes the CNI interfaces;
//! `k3s-uninstall.sh` / `k3s-agent-uninstall.sh` remove what that installer put in place),
//! or without `k3s-killall.sh` do its essential work here (`leftovers.rs`, `host_paths.rs`),
//! then remove every file this installer wrote. A second call finds nothing and says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proto::agent::v1 as pb;

use super::daemon::Supervised;
use super::host_paths;
use super::leftovers::{SWEEP_LIMIT, in_unit_cgroup, shims_under, sweep};
use super::state::{self, Remembered};
use super::{K3s, Supervision, UNITS, locate_binary};
use crate::install::InstallError;
use crate::install::system::{remove_dir, remove_file};
use crate::new_marker;
use host::{CommandLine, run_bounded};

/// Where the official installer puts its scripts, when they are not beside the binary.
const SCRIPT_DIR: &str = "/usr/local/bin";
/// Stops every k3s process and container, unmounts, deletes the CNI interfaces.
const KILLALL: &str = "k3s-killall.sh";
/// killall unmounts every pod volume and waits for containers: minutes on a Raspberry Pi.
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);
/// Said whenever the agent stood in for `k3s-killall.sh`: what it left undone.
const NO_IPTABLES_CLEANUP: &str = "k3s-killall.sh was not found, so the agent did its work \
     except one part: kube-proxy's and flannel's iptables rules (KUBE-*, CNI-*, FLANNEL \
     chains) are left in place until a reboot or a run of the official k3s-killall.sh";

impl K3s {
    /// Stops k3s, runs its uninstall steps and removes its data, kubeconfig, unit, env
    /// file and remembered request. Idempotent: "not installed" when nothing is left.
    /// Every step is tried; if one fails the error lists it with what was done, and the
    /// remembered request stays so that a retry does the steps again.
    ///
    /// Without `k3s-killall.sh`, cleaning what k3s left on the host (processes, mounts,
    /// links, folders) is best effort: whatever could not be cleaned is listed in the
    /// detail, and the iptables rules are left (the detail says so).
    pub async fn uninstall(&self) -> Result<pb::ClusterStatus, InstallError> {
        crate::install::unless_shutting_down(&self.shutting_down, self.uninstall_locked()).await
    }

    async fn uninstall_locked(&self) -> Result<pb::ClusterStatus, InstallError> {
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
        let scripts = self.scripts(role, &remembered);
        let has_killall = scripts
            .iter()
            .any(|script| script.file_name().is_some_and(|name| name == KILLALL));
        for script in scripts {
            match run_script(&script).await {
                Ok(()) => done.push(format!("ran {}", script.display())),
                Err(error) => failed.push(error),
            }
        }
        // Host debris is cleaned best effort: what fails is said, not fatal.
        let mut not_cleaned = Vec::new();
        if !has_killall {
            let cleaned = self.clean_like_killall().await;
            done.extend(cleaned.done);
            not_cleaned = cleaned.failed;
        }
        let kubeconfig = remove_file(&self.kubeconfig);
        note_removal(&mut done, &mut failed, &self.kubeconfig, kubeconfig);
        // A mount left below the data dir would have its own files removed through it.
        let data = if host_paths::nothing_mounted_below(&self.data_dir) {
            remove_dir(&self.data_dir)
        } else {
            Err(InstallError::Failed(format!(
                "{} kept: something is still mounted below it",
                self.data_dir.display()
            )))
        };
        note_removal(&mut done, &mut failed, &self.data_dir, data);
        if failed.is_empty() {
            let removed = remove_dir(&self.own_dir);
            note_removal(&mut done, &mut failed, &self.own_dir, removed);
        }
        if failed.is_empty() {
            tracing::info!(?role, "k3s uninstalled");
            let mut detail = format!("uninstalled: {}", done.join("; "));
            if !not_cleaned.is_empty() {
                detail.push_str(&format!("; could not clean: {}", not_cleaned.join("; ")));
            }
            if !has_killall {
                detail.push_str(&format!("; {NO_IPTABLES_CLEANUP}"));
            }
            Ok(stopped(role, detail))
        } else {
            failed.extend(not_cleaned);
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

    /// What `k3s-killall.sh` does, but its iptables cleanup (see `host_paths.rs`): every process
    /// k3s left (shims, containers; under systemd whatever is left in its units' cgroups,
    /// which KillMode=process does not stop), then mounts, links and folders. The cgroups
    /// are read from /proc rather than `systemctl kill --kill-whom=all`: by now our unit
    /// is disabled and its file removed, and /proc answers whether or not it is loaded.
    async fn clean_like_killall(&self) -> host_paths::Cleaned {
        let systemd = self.supervision == Supervision::Systemd;
        let swept = sweep(
            || {
                let mut roots = shims_under(&self.data_dir);
                if systemd {
                    for unit in UNITS {
                        roots.extend(in_unit_cgroup(unit));
                    }
                }
                roots
            },
            SWEEP_LIMIT,
        )
        .await;
        let mut processes = host_paths::Cleaned::default();
        if !swept.killed.is_empty() {
            processes.done.push(format!(
                "killed {} process(es) k3s had left (shims, containers)",
                swept.killed.len()
            ));
        }
        if !swept.survivors.is_empty() {
            processes
                .failed
                .push(format!("processes {:?} survived SIGKILL", swept.survivors));
        }
        let mut cleaned = host_paths::clean(&self.host, &self.data_dir).await;
        processes.done.append(&mut cleaned.done);
        processes.failed.append(&mut cleaned.failed);
        processes
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

fn stopped(role: Option<&str>, detail: String) -> pb::ClusterStatus {
    pb::ClusterStatus {
        running: false,
        role: role.unwrap_or_default().to_string(),
        pid: 0,
        detail,
        nodes: Vec::new(),
    }
}
