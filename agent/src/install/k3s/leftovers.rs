//! Processes that outlive k3s: the record of the running child (PID and marker, kept in the
//! installer's own folder so a fresh agent finds a k3s an earlier one left running), and the
//! sweep that kills whole process trees.
//!
//! k3s's containerd starts one shim per pod and the shims start the containers. A shim
//! inherits k3s's environment (so the child's marker), a container does not (its
//! environment is the pod's), and when the shim dies the container is reparented away.
//! So a sweep collects the descendants of every tagged process before it kills anything,
//! as `k3s-killall.sh`'s `killtree` does.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::MARKER_VAR;
use crate::install::InstallError;
use crate::install::system::{remove_file, write_private};
use host::poll::{Attempt, poll_until};
use host::{Marker, is_running, send_signal};

/// How long k3s may take to stop on SIGTERM before its group is killed (a server flushes
/// its datastore first). Part of [`crate::install::K3S_SHUTDOWN_BOUND`].
pub(super) const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long a sweep keeps killing what it finds.
pub(super) const SWEEP_LIMIT: Duration = Duration::from_secs(5);
/// How often waits re-check.
const POLL: Duration = Duration::from_millis(25);

/// The k3s child this installer started: enough to recognise it from another process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Record {
    /// Its PID, also its process group.
    pub(super) pid: u32,
    /// The value of [`crate::MARKER_VAR`] every process it started carries.
    pub(super) marker: String,
}

impl Record {
    /// Writes the record (0600, atomically) at `path`.
    pub(super) fn save(&self, path: &Path) -> Result<(), InstallError> {
        let text = serde_json::to_string(self)
            .map_err(|e| InstallError::Failed(format!("recording the k3s child: {e}")))?;
        write_private(path, text.as_bytes())
    }

    /// The record at `path`, if there is a readable one.
    pub(super) fn load(path: &Path) -> Option<Record> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// True while the recorded PID runs and is still that k3s: a recycled PID lacks the
    /// marker in its environment.
    pub(super) fn is_alive(&self) -> bool {
        is_running(self.pid)
            && Marker::new(MARKER_VAR, self.marker.as_str())
                .live_processes()
                .contains(&self.pid)
    }
}

/// Stops what the record at `path` names, if anything is left of it (a k3s an earlier
/// agent left running, or its shims and containers), and removes the record. Returns what
/// was done, for the status detail; None when nothing was left.
pub(super) async fn stop_recorded(path: &Path) -> Option<String> {
    let record = Record::load(path);
    let done = match &record {
        Some(record) if record.is_alive() => Some(stop_orphan(record).await),
        Some(record) => {
            let left = sweep_tree(&record.marker, &[], SWEEP_LIMIT).await;
            (!left.killed.is_empty() || !left.survivors.is_empty()).then(|| {
                format!(
                    "killed {} process(es) left by an earlier k3s{}",
                    left.killed.len(),
                    left.survivors_note()
                )
            })
        }
        None => None,
    };
    if let Err(error) = remove_file(path) {
        tracing::warn!(%error, "removing the k3s child's record");
    }
    done
}

/// SIGTERM to a k3s that is not (or no longer) this agent's child, SIGKILL to its group
/// after [`STOP_GRACE`], then the sweep of everything it started.
async fn stop_orphan(record: &Record) -> String {
    let pid = record.pid;
    send_signal(pid, libc::SIGTERM);
    // Whether it exits within the grace period is read again below.
    let _ = poll_until(STOP_GRACE, POLL, || {
        std::future::ready(if is_running(pid) {
            Attempt::Retry(())
        } else {
            Attempt::Done(())
        })
    })
    .await;
    let how = if is_running(pid) {
        kill_group(pid);
        format!(
            "killed k3s (pid {pid}) left running by an earlier agent: still running \
             {STOP_GRACE:?} after SIGTERM"
        )
    } else {
        format!("stopped k3s (pid {pid}) left running by an earlier agent")
    };
    let swept = sweep_tree(&record.marker, &[pid], SWEEP_LIMIT).await;
    format!("{how}{}", swept.survivors_note())
}

/// SIGKILLs the process group `pgid` (the k3s child leads its own group).
fn kill_group(pgid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pgid)
        && pgid > 1
    {
        // SAFETY: plain syscall on a negative id, i.e. a process group; ESRCH if empty.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// What a sweep did.
#[derive(Debug, Default)]
pub(super) struct Swept {
    /// Every process it sent SIGKILL to.
    pub(super) killed: BTreeSet<u32>,
    /// Those still alive when it gave up.
    pub(super) survivors: Vec<u32>,
}

impl Swept {
    /// "; processes [..] survived SIGKILL", or nothing.
    pub(super) fn survivors_note(&self) -> String {
        if self.survivors.is_empty() {
            String::new()
        } else {
            format!("; processes {:?} survived SIGKILL", self.survivors)
        }
    }
}

/// SIGKILLs every process tagged with `marker`, the processes `roots`, and all their
/// descendants, until none is left or `limit` passes.
pub(super) async fn sweep_tree(marker: &str, roots: &[u32], limit: Duration) -> Swept {
    sweep(
        || {
            let mut found = Marker::new(MARKER_VAR, marker).live_processes();
            found.extend(roots.iter().copied().filter(|&pid| is_running(pid)));
            found
        },
        limit,
    )
    .await
}

/// SIGKILLs what `roots()` finds and every descendant, again and again (a dying shim's
/// children were collected before it died; new ones are found next round) until a round
/// finds nothing or `limit` passes.
pub(super) async fn sweep(roots: impl Fn() -> Vec<u32>, limit: Duration) -> Swept {
    let end = Instant::now() + limit;
    let own = std::process::id();
    let mut swept = Swept::default();
    loop {
        let alive: Vec<u32> = with_descendants(&roots())
            .into_iter()
            .filter(|&pid| pid != own && pid > 1 && is_running(pid))
            .collect();
        if alive.is_empty() {
            return swept;
        }
        if Instant::now() >= end {
            tracing::warn!(?alive, "k3s processes survived SIGKILL");
            swept.survivors = alive;
            return swept;
        }
        for &pid in &alive {
            send_signal(pid, libc::SIGKILL);
            swept.killed.insert(pid);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `roots` and every process below them, from the parent PIDs in `/proc/*/stat`.
fn with_descendants(roots: &[u32]) -> BTreeSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in host::running_processes() {
        if let Some(parent) = host::parent_of(pid) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found: BTreeSet<u32> = BTreeSet::new();
    let mut queue: Vec<u32> = roots.to_vec();
    while let Some(pid) = queue.pop() {
        if found.insert(pid) {
            queue.extend(children.get(&pid).into_iter().flatten());
        }
    }
    found
}

/// Processes in the cgroup of `unit` (or below it: k3s is `Delegate=yes`), from
/// `/proc/*/cgroup`: what a KillMode=process stop leaves of the unit.
pub(super) fn in_unit_cgroup(unit: &str) -> Vec<u32> {
    host::running_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|text| cgroup_is_in_unit(&text, unit))
        })
        .collect()
}

/// True when a `/proc/PID/cgroup` text puts the process in `unit`'s cgroup or below it.
fn cgroup_is_in_unit(text: &str, unit: &str) -> bool {
    text.lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .any(|path| path.split('/').any(|segment| segment == unit))
}

/// containerd shims run from `data_dir` (`<data_dir>/data/<hash>/bin/containerd-shim-*`),
/// found by their command line as `k3s-killall.sh` finds them: whoever started them.
pub(super) fn shims_under(data_dir: &Path) -> Vec<u32> {
    let prefix = format!("{}/data/", data_dir.display());
    host::running_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let program = cmdline.split(|&b| b == 0).next().unwrap_or_default();
                let program = String::from_utf8_lossy(program);
                program.starts_with(&prefix) && program.contains("/bin/containerd-shim")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_membership_is_read_from_any_hierarchy() {
        let v2 = "0::/system.slice/k3s.service\n";
        assert!(cgroup_is_in_unit(v2, "k3s.service"));
        assert!(!cgroup_is_in_unit(v2, "k3s-agent.service"));
        let below = "0::/system.slice/k3s.service/kubepods\n";
        assert!(cgroup_is_in_unit(below, "k3s.service"));
        let v1 =
            "12:pids:/system.slice/ssh.service\n1:name=systemd:/system.slice/k3s-agent.service\n";
        assert!(cgroup_is_in_unit(v1, "k3s-agent.service"));
        assert!(!cgroup_is_in_unit(
            "0::/user.slice/k3s.service.d\n",
            "k3s.service"
        ));
    }

    #[tokio::test]
    async fn a_sweep_kills_the_tree_below_a_root_even_without_the_marker() {
        // A "shim" whose "container" has a clean environment, in a session of its own.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "env -i /bin/sleep 30 & exec /bin/sleep 30"])
            .spawn()
            .expect("spawned");
        let shim = child.id();
        let container = host::poll_until(Duration::from_secs(5), POLL, || {
            let below: Vec<u32> = with_descendants(&[shim])
                .into_iter()
                .filter(|&pid| pid != shim)
                .collect();
            std::future::ready(match below[..] {
                [container] => host::Attempt::Done(container),
                _ => host::Attempt::Retry(()),
            })
        })
        .await
        .unwrap_or_else(|()| panic!("no container below {shim}"));
        let swept = sweep_tree("no-such-marker", &[shim], SWEEP_LIMIT).await;
        assert!(swept.survivors.is_empty(), "{swept:?}");
        assert!(swept.killed.contains(&shim) && swept.killed.contains(&container));
        let _ = child.wait();
        assert!(!is_running(container));
    }

    #[test]
    fn a_record_of_a_process_without_the_marker_is_not_alive() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("k3s.json");
        let record = Record {
            pid: std::process::id(),
            marker: "not-ours".into(),
        };
        record.save(&path).expect("saved");
        assert_eq!(Record::load(&path), Some(record.clone()));
        assert!(!record.is_alive(), "this test process is no k3s");
    }
}
