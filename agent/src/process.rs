//! Child processes (brokers, Nebula, k3s): command lines, children in their own process group, and the sweep that
//! proves a stopped broker left nothing running.
//!
//! Every process a native driver starts carries [`MARKER_VAR`] set to the instance's marker.
//! Descendants inherit it, including ones that detach (Erlang's port helpers, an epmd), so
//! [`live_processes_of`] finds the whole tree by reading `/proc/*/environ`, and teardown
//! kills by PID whatever is still alive. This mirrors the test harness's
//! `tests/src/process.rs`, in async form for the agent.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::broker::BrokerError;

/// Environment variable tagging every process of one broker instance.
pub const MARKER_VAR: &str = "CONTINUUM_BROKER_INSTANCE";

/// How often waits in this module re-check their condition.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// A program with its arguments and environment, as a driver plans it. Plain data, so the
/// plan of a product that is not installed can still be checked by a unit test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it, in order.
    pub env: Vec<(String, String)>,
    /// Prefixes of inherited variables to remove first (`RABBITMQ_`, `ERL_`), so the
    /// agent's own environment cannot redirect the broker to the system instance.
    pub env_remove_prefixes: Vec<&'static str>,
}

impl CommandLine {
    /// A command line for `program` with no arguments or environment.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove_prefixes: Vec::new(),
        }
    }

    /// The value this command line sets for `name`, if any.
    #[cfg(test)]
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// A tokio command in its own process group, tagged with `marker`.
    fn command(&self, marker: &str) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        for (name, _) in std::env::vars_os() {
            let inherited = name.to_string_lossy();
            if self
                .env_remove_prefixes
                .iter()
                .any(|prefix| inherited.starts_with(prefix))
            {
                command.env_remove(&name);
            }
        }
        command
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(MARKER_VAR, marker)
            .stdin(Stdio::null())
            // Its own group, so a forced stop reaches every helper it forks.
            .process_group(0)
            .kill_on_drop(false);
        command
    }
}

/// A fresh marker for one instance: `<agent pid>-<name>-<n>`.
pub fn new_marker(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{name}-{n}", std::process::id())
}

/// A child process leading its own process group. Dropping it SIGKILLs the group: the
/// guard behind the explicit, graceful stop of the drivers.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
    pid: u32,
    what: String,
    reaped: Option<ExitStatus>,
}

impl GroupChild {
    /// Spawns `line` tagged with `marker`, in `cwd`, stdout and stderr appended to `log`.
    pub fn spawn(
        what: &str,
        line: &CommandLine,
        marker: &str,
        cwd: &Path,
        log: &Path,
    ) -> Result<Self, BrokerError> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| BrokerError::io(format!("opening {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| BrokerError::io(format!("duplicating {}", log.display()), e))?;
        let child = line
            .command(marker)
            .current_dir(cwd)
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| BrokerError::io(format!("spawning {}", line.program.display()), e))?;
        let pid = child.id().ok_or_else(|| {
            BrokerError::io(
                format!("spawning {}", line.program.display()),
                std::io::Error::other("the child exited before its PID was read"),
            )
        })?;
        tracing::debug!(what, pid, program = %line.program.display(), "spawned");
        Ok(Self {
            child,
            pid,
            what: what.to_owned(),
            reaped: None,
        })
    }

    /// The child's PID (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// How the child exited, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.reaped.is_none() {
            self.reaped = self.child.try_wait().ok().flatten();
        }
        self.reaped
    }

    /// Sends `signal` to the child alone (a start script relays SIGTERM itself).
    pub fn signal(&mut self, signal: libc::c_int) {
        if self.exited().is_none() {
            send_signal(self.pid, signal);
        }
    }

    /// Waits up to `limit` for the child to exit.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.exited() {
            return Some(status);
        }
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.reaped = Some(status);
                Some(status)
            }
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// SIGKILLs the whole process group and reaps the child.
    pub async fn kill(&mut self) {
        kill_group(self.pid);
        if self.wait_exit(Duration::from_secs(5)).await.is_none() {
            tracing::warn!(what = %self.what, pid = self.pid, "not reaped 5 s after SIGKILL");
        }
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        // Members of the group keep the id reserved, so this cannot hit a stranger.
        kill_group(self.pid);
    }
}

/// Sends `signal` to one process. A process that is already gone is fine.
pub fn send_signal(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: plain syscall; a stale PID only yields ESRCH.
        unsafe { libc::kill(pid, signal) };
    }
}

/// SIGKILLs the process group `pgid`.
fn kill_group(pgid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pgid)
        && pgid > 1
    {
        // SAFETY: plain syscall on a negative id, i.e. a process group; ESRCH if empty.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// True if `pid` exists and is not a zombie.
pub fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| process_state(&stat))
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// The state letter of a `/proc/PID/stat` line, read after the last `)` because the
/// command name may itself hold parentheses.
fn process_state(stat: &str) -> Option<char> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

/// PIDs of the running (non-zombie) processes tagged with `marker`. Processes this user
/// cannot inspect are skipped.
pub fn live_processes_of(marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| environ_contains(pid, &needle))
        .filter(|&pid| is_running(pid))
        .collect();
    pids.sort_unstable();
    pids
}

fn environ_contains(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|&byte| byte == 0)
            .any(|entry| entry == needle.as_bytes())
    })
}

/// Among the processes tagged with `marker`, the first whose command name is one of
/// `names` (e.g. `beam.smp` under RabbitMQ's start script): the process whose CPU and
/// memory are the broker's.
pub fn find_process_named(marker: &str, names: &[&str]) -> Option<u32> {
    live_processes_of(marker).into_iter().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| names.contains(&comm.trim_end()))
    })
}

/// SIGKILLs every process tagged with `marker` until none is left or `limit` passes;
/// returns the PIDs still alive.
pub async fn sweep(marker: &str, limit: Duration) -> Vec<u32> {
    let end = Instant::now() + limit;
    loop {
        let alive = live_processes_of(marker);
        if alive.is_empty() || Instant::now() >= end {
            return alive;
        }
        for pid in &alive {
            send_signal(*pid, libc::SIGKILL);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Runs `line` to completion within `limit` (killing its group after that); returns its
/// exit status and combined output, or why it could not be run.
pub async fn run_bounded(
    line: &CommandLine,
    marker: &str,
    limit: Duration,
) -> Result<(ExitStatus, String), String> {
    let mut command = line.command(marker);
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .map_err(|e| format!("spawning {}: {e}", line.program.display()))?;
    let pid = child.id();
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(Ok(output)) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            Ok((output.status, text))
        }
        Ok(Err(error)) => Err(format!("waiting for {}: {error}", line.program.display())),
        Err(_) => {
            if let Some(pid) = pid {
                kill_group(pid);
            }
            Err(format!(
                "{} did not finish within {limit:?}",
                line.program.display()
            ))
        }
    }
}

/// The last `max_lines` lines of the file at `path` (at most 8 KiB), for error messages.
pub fn log_tail(path: &Path, max_lines: usize) -> String {
    const MAX_BYTES: usize = 8 * 1024;
    match std::fs::read(path) {
        Ok(bytes) => {
            let start = bytes.len().saturating_sub(MAX_BYTES);
            let text = String::from_utf8_lossy(&bytes[start..]);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(max_lines)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_read_after_a_command_name_with_parentheses() {
        assert_eq!(process_state("42 (we(ird) name) S 1 42"), Some('S'));
        assert_eq!(process_state("42 (x) Z 1"), Some('Z'));
        assert_eq!(process_state("garbage"), None);
    }

    #[test]
    fn the_log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert!(log_tail(&dir.path().join("none"), 2).starts_with("(cannot read"));
    }

    #[tokio::test]
    async fn a_tagged_tree_is_found_and_swept() {
        let dir = tempfile::tempdir().unwrap();
        let marker = new_marker("unit");
        // A shell that forks a grandchild: both carry the marker.
        let mut line = CommandLine::new("/bin/sh");
        line.args = vec!["-c".into(), "sleep 30 & exec sleep 30".into()];
        let mut child =
            GroupChild::spawn("test", &line, &marker, dir.path(), &dir.path().join("log")).unwrap();
        // Both are found once both have exec'ed sleep (until then they show as `sh`).
        let named_sleep = |pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == "sleep")
        };
        let end = Instant::now() + Duration::from_secs(5);
        while live_processes_of(&marker)
            .iter()
            .filter(|pid| named_sleep(pid))
            .count()
            < 2
            && Instant::now() < end
        {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        assert_eq!(live_processes_of(&marker).len(), 2);
        assert!(find_process_named(&marker, &["sleep"]).is_some());
        child.kill().await;
        assert!(sweep(&marker, Duration::from_secs(5)).await.is_empty());
        assert!(!is_running(child.pid()));
    }

    #[tokio::test]
    async fn a_slow_command_is_cut_off() {
        let mut line = CommandLine::new("/bin/sleep");
        line.args = vec!["30".into()];
        let started = std::time::Instant::now();
        let error = run_bounded(&line, "unit-slow", Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(error.contains("did not finish"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
