//! A fake `k3s` executable for the k3s installer's tests: k3s cannot be downloaded or run
//! here, so [`Fake`] puts `fixtures/fake-k3s.sh` (and copies named as the official
//! uninstall scripts) in a folder of its own, where it records every call as a JSON line
//! ([`Call`]) and plays a cluster through files. The script's header says what it plays.
//! Used by the agent's installer tests and by the controller's phase-3 test.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use host::{Attempt, poll_until_blocking};
use serde::Deserialize;

use crate::process::{process_group, processes_mentioning, running_processes};

const FAKE_K3S: &str = include_str!("../fixtures/fake-k3s.sh");
/// The official installer's scripts, faked by copies of the fake that only record the call.
const SCRIPTS: [&str; 3] = [
    "k3s-killall.sh",
    "k3s-uninstall.sh",
    "k3s-agent-uninstall.sh",
];
/// How long the fake may take to start a pod, and processes to go after a stop.
const POD_DEADLINE: Duration = Duration::from_secs(10);
const REAP_DEADLINE: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The fake's text, recording into `dir` and keeping the node password under `rancher`
/// (`/etc/rancher` where it stands in for k3s on a real node).
pub fn script(dir: &str, rancher: &str) -> String {
    FAKE_K3S.replace("@DIR@", dir).replace("@RANCHER@", rancher)
}

/// One call of the fake, as it recorded it.
#[derive(Debug, Deserialize)]
pub struct Call {
    /// The name it was called by (`k3s`, `k3s-killall.sh`, ...).
    pub program: String,
    /// Its arguments.
    pub argv: Vec<String>,
    /// Its `K3S_*` variables.
    pub env: BTreeMap<String, String>,
    /// Its PID.
    pub pid: u32,
}

impl Call {
    /// The values following `flag`, in order.
    pub fn values(&self, flag: &str) -> Vec<&str> {
        self.argv
            .windows(2)
            .filter(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
            .collect()
    }
}

/// The fake `k3s` and its uninstall scripts in `dir/bin`, its records and nodes in `dir`.
/// Its methods panic on what a test would fail on anyway (files it cannot write or read).
#[derive(Debug)]
pub struct Fake {
    /// The fake's folder.
    pub dir: tempfile::TempDir,
}

impl Default for Fake {
    fn default() -> Self {
        Self::new()
    }
}

impl Fake {
    /// Writes the fake into a new temporary folder.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("fake dir");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("bin dir");
        let script = script(
            &dir.path().display().to_string(),
            &dir.path().join("rancher").display().to_string(),
        );
        for name in std::iter::once("k3s").chain(SCRIPTS) {
            let path = bin.join(name);
            std::fs::write(&path, &script).expect("fake written");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("fake made executable");
        }
        Fake { dir }
    }

    /// The fake `k3s`.
    pub fn binary(&self) -> PathBuf {
        self.dir.path().join("bin/k3s")
    }

    /// Takes the official scripts away, as bootstrap's offline set-up has none.
    pub fn remove_scripts(&self) {
        for name in SCRIPTS {
            std::fs::remove_file(self.dir.path().join("bin").join(name)).expect("script removed");
        }
    }

    /// From now on each k3s started runs a pod: a shim and a container (see the fake).
    pub fn with_pods(&self) {
        std::fs::write(self.dir.path().join("with-pods"), "").expect("with-pods");
    }

    /// From now on (`true`) a k3s started never registers its node, or again does.
    pub fn never_ready(&self, on: bool) {
        let flag = self.dir.path().join("never-ready");
        if on {
            std::fs::write(&flag, "").expect("never-ready");
        } else if flag.exists() {
            std::fs::remove_file(&flag).expect("never-ready removed");
        }
    }

    /// The (shim, container) PIDs of the pod the last k3s started, once both run; the
    /// records are taken, so the next call waits for the next pod.
    pub fn pod(&self) -> (u32, u32) {
        let read = |name: &str| -> Option<u32> {
            std::fs::read_to_string(self.dir.path().join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let pod = poll_until_blocking(POD_DEADLINE, POLL_INTERVAL, || {
            match (read("shim.pid"), read("container.pid")) {
                (Some(shim), Some(container)) if alive(shim) && alive(container) => {
                    Attempt::Done((shim, container))
                }
                _ => Attempt::Retry(()),
            }
        });
        let Ok(pod) = pod else {
            panic!("the fake started no pod within {POD_DEADLINE:?}");
        };
        for name in ["shim.pid", "container.pid"] {
            std::fs::remove_file(self.dir.path().join(name)).expect("pod record taken");
        }
        pod
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        match std::fs::read_to_string(self.dir.path().join("calls.jsonl")) {
            Ok(text) => text
                .lines()
                .map(|line| serde_json::from_str(line).expect("a JSON record"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("reading the fake's records: {e}"),
        }
    }

    /// The `k3s server` and `k3s agent` calls, in order.
    pub fn daemon_calls(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| {
                c.program == "k3s"
                    && matches!(c.argv.first().map(String::as_str), Some("server" | "agent"))
            })
            .collect()
    }

    /// The programs called after the first `skip` calls.
    pub fn programs_since(&self, skip: usize) -> Vec<String> {
        self.calls()
            .into_iter()
            .skip(skip)
            .map(|c| c.program)
            .collect()
    }

    /// No process of the daemons `pids` (nor their process groups, which hold the fake's
    /// `sleep`), nor any running the fake, is left (after a short grace for reaping).
    pub fn assert_no_process_left(&self, pids: &[u32]) {
        let needle = self.dir.path().display().to_string();
        let left = poll_until_blocking(REAP_DEADLINE, POLL_INTERVAL, || {
            let running_the_fake = processes_mentioning(&needle);
            let left: Vec<u32> = running_processes()
                .into_iter()
                .filter(|&pid| {
                    pids.contains(&pid)
                        || process_group(pid).is_some_and(|group| pids.contains(&group))
                        || running_the_fake.contains(&pid)
                })
                .collect();
            if left.is_empty() {
                Attempt::Done(())
            } else {
                Attempt::Retry(left)
            }
        });
        if let Err(left) = left {
            panic!("processes left behind: {left:?}");
        }
    }
}

/// True if `pid` runs (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    pid != 0 && host::is_running(pid)
}
