//! Child processes a service starts and must be able to stop for certain: [`CommandLine`]
//! (plain data, so a plan for a program that is not installed can still be checked),
//! [`GroupChild`] (a tagged child leading its own process group), [`run_bounded`], and
//! [`Watchdog`], which cleans up after this process however it ends.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::account::Account;
use crate::marker::{Marker, kill_group, send_signal};

/// A child could not be started.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct SpawnError {
    /// What was being done (`spawning /usr/sbin/mosquitto`, `opening <log>`).
    pub context: String,
    /// Why it failed.
    pub source: std::io::Error,
}

/// A program with its arguments and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it, in order.
    pub env: Vec<(String, String)>,
    /// Prefixes of inherited variables to remove first (`RABBITMQ_`, `ERL_`), so the
    /// caller's own environment cannot redirect the program to a system instance.
    pub env_remove_prefixes: Vec<&'static str>,
    /// The user it runs as (set only by a root caller); this process's user when `None`.
    /// Supplementary groups are dropped with the switch.
    pub account: Option<Account>,
}

impl CommandLine {
    /// A command line for `program` with no arguments or environment.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove_prefixes: Vec::new(),
            account: None,
        }
    }

    /// The value this command line sets for `name`, if any (the last one set wins).
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// A tokio command in its own session (so its own process group), tagged with `marker`.
    fn command(&self, marker: &Marker) -> Command {
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
            .env(marker.var(), marker.value())
            .stdin(Stdio::null())
            .kill_on_drop(false);
        // Its own session, which makes it the leader of its own process group too: a forced
        // stop reaches every helper it forks. The session also gives it a scheduler autogroup
        // of its own, apart from the agent's: a broker sharing the autogroup of the agent whose
        // loadgen drives it spent twice the CPU per QoS 1 message at 400 msg/s (36-42 µs
        // against 16-18) and added 40 µs to every delivery (p50 66-77 µs against 25-29 µs,
        // Mosquitto 2.0.11 on loopback, 2026-12-03), as a daemon in its own session does not.
        // SAFETY: setsid is async-signal-safe and touches no memory of the forked child.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if let Some(account) = self.account {
            // std drops root's supplementary groups when it switches the user id.
            command.uid(account.uid).gid(account.gid);
        }
        command
    }
}

/// A child process leading its own process group. Dropping it SIGKILLs the group: the
/// guard behind an explicit, graceful stop.
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
        marker: &Marker,
        cwd: &Path,
        log: &Path,
    ) -> Result<Self, SpawnError> {
        let failed = |context: String| move |source| SpawnError { context, source };
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(failed(format!("opening {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(failed(format!("duplicating {}", log.display())))?;
        let spawning = format!("spawning {}", line.program.display());
        let child = line
            .command(marker)
            .current_dir(cwd)
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(failed(spawning.clone()))?;
        let pid = child.id().ok_or_else(|| SpawnError {
            context: spawning,
            source: std::io::Error::other("the child exited before its PID was read"),
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

/// What a [`Watchdog`] runs: waits for the end of its standard input (this process holds the
/// only writing end, which the kernel closes when this process exits, SIGKILL included), then
/// SIGKILLs every process whose environment holds `$var=<content of a file matching
/// $folder/$pattern>` until none is left (a dying tree may still fork), and removes `$folder`.
/// A shell script, since nothing of this program runs once it is gone; `grep -z` reads each
/// `/proc/PID/environ` as NUL-separated entries, as [`Marker::live_processes`] does.
const WATCHDOG_SCRIPT: &str = r#"folder=$1 var=$2 pattern=$3
trap '' HUP INT TERM PIPE
while read -r _; do :; done
sweep() {
    alive=
    for file in "$folder"/$pattern; do
        [ -f "$file" ] || continue
        value=$(cat "$file") || continue
        [ -n "$value" ] || continue
        for environ in $(grep -lsxzF -e "$var=$value" /proc/[0-9]*/environ); do
            pid=${environ#/proc/}
            kill -KILL "${pid%/environ}" 2>/dev/null && alive=1
        done
    done
    [ -z "$alive" ]
}
tries=0
until sweep || [ "$tries" -ge 400 ]; do tries=$((tries + 1)); sleep 0.025; done
rm -rf -- "$folder"
"#;

/// The shell that runs [`WATCHDOG_SCRIPT`].
const WATCHDOG_SHELL: &str = "/bin/sh";

/// A process that outlives this one to clean up after it: when this process lets go of it
/// ([`Watchdog::release`], or dropping it, which does not wait) or exits in any way, SIGKILL
/// included, it kills every process
/// tagged with a marker recorded under its folder and removes the folder. So what an
/// in-process agent started (a broker, its helpers, the run's keys on disk) does not outlive
/// a controller that was killed. It runs in a session of its own, so a signal to this
/// process's group or terminal (Ctrl-C, a `kill -- -PGID`) does not take it along.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    folder: PathBuf,
}

impl Watchdog {
    /// Starts a watchdog for `folder`: processes carrying `marker_var=<value>`, for each
    /// `value` held by a file matching the shell pattern `marker_files` under `folder`
    /// (e.g. `state-*/brokers/*/marker`), are killed and `folder` removed once this process
    /// lets go of it.
    pub fn spawn(folder: &Path, marker_var: &str, marker_files: &str) -> Result<Self, SpawnError> {
        let mut command = Command::new(WATCHDOG_SHELL);
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("continuum-watchdog")
            .arg(folder)
            .arg(marker_var)
            .arg(marker_files)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(false);
        // SAFETY: setsid is async-signal-safe and touches no memory of the forked child.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // The pipe's writing end is close-on-exec here, so no other child (a broker) holds
        // it open: it ends exactly when this process lets go of it.
        let child = command.spawn().map_err(|source| SpawnError {
            context: format!(
                "spawning {WATCHDOG_SHELL} as the watchdog of {}",
                folder.display()
            ),
            source,
        })?;
        tracing::debug!(pid = child.id(), folder = %folder.display(), "watchdog armed");
        Ok(Self {
            child,
            folder: folder.to_owned(),
        })
    }

    /// The watchdog's PID (also its session and process group id).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Lets the watchdog act now (this process is done with the folder) and waits up to
    /// `limit` for it to finish; false if it did not.
    pub async fn release(mut self, limit: Duration) -> bool {
        drop(self.child.stdin.take());
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(_)) => true,
            Ok(Err(error)) => {
                tracing::warn!(folder = %self.folder.display(), %error, "waiting for the watchdog");
                false
            }
            Err(_) => {
                tracing::warn!(folder = %self.folder.display(), ?limit, "the watchdog did not finish in time");
                false
            }
        }
    }
}

/// Runs `line` to completion within `limit` (killing its group after that); returns its
/// exit status and combined output, or why it could not be run.
pub async fn run_bounded(
    line: &CommandLine,
    marker: &Marker,
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
    use crate::poll::{Attempt, poll_until};

    #[test]
    fn the_log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\nd\n").expect("write");
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert!(log_tail(&dir.path().join("none"), 2).starts_with("(cannot read"));
    }

    #[tokio::test]
    async fn a_tagged_tree_is_found_and_swept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let marker = Marker::unique("CONTINUUM_HOST_UNIT", "tree");
        // A shell that forks a grandchild: both carry the marker.
        let mut line = CommandLine::new("/bin/sh");
        line.args = vec!["-c".into(), "sleep 30 & exec sleep 30".into()];
        let mut child =
            GroupChild::spawn("test", &line, &marker, dir.path(), &dir.path().join("log"))
                .expect("spawns");
        // Both are found once both have exec'ed sleep (until then they show as `sh`).
        let named_sleep = |pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == "sleep")
        };
        let both = poll_until(
            Duration::from_secs(5),
            Duration::from_millis(25),
            || async {
                match marker
                    .live_processes()
                    .iter()
                    .filter(|pid| named_sleep(pid))
                    .count()
                {
                    2 => Attempt::Done(()),
                    _ => Attempt::Retry(()),
                }
            },
        )
        .await;
        assert!(both.is_ok());
        assert_eq!(marker.live_processes().len(), 2);
        assert!(marker.find_process_named(&["sleep"]).is_some());
        child.kill().await;
        assert!(marker.sweep(Duration::from_secs(5)).await.is_empty());
        assert!(!crate::marker::is_running(child.pid()));
    }

    #[tokio::test]
    async fn a_child_leads_its_own_session_and_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let marker = Marker::unique("CONTINUUM_HOST_UNIT", "session");
        let mut line = CommandLine::new("/bin/sleep");
        line.args = vec!["30".into()];
        let mut child =
            GroupChild::spawn("test", &line, &marker, dir.path(), &dir.path().join("log"))
                .expect("spawns");
        let pid = child.pid();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        // After the command's name: state, ppid, pgrp, session.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .expect("a name")
            .1
            .split_whitespace()
            .collect();
        let own = pid.to_string();
        assert_eq!(
            (fields[2], fields[3]),
            (own.as_str(), own.as_str()),
            "{stat}"
        );
        // SAFETY: getsid has no preconditions.
        let ours = unsafe { libc::getsid(0) };
        assert_ne!(ours.to_string(), own, "the test's own session differs");
        child.kill().await;
        assert!(!crate::marker::is_running(pid));
    }

    #[tokio::test]
    async fn a_released_watchdog_kills_the_marked_tree_and_removes_its_folder() {
        let folder = tempfile::tempdir().expect("temp dir").keep();
        let instance = folder.join("state-node/brokers/b");
        std::fs::create_dir_all(&instance).expect("instance dir");
        let marker = Marker::unique("CONTINUUM_HOST_UNIT", "watched");
        std::fs::write(instance.join("marker"), marker.value()).expect("marker file");
        // A tree that left its group: the watchdog finds both by their marker.
        let mut line = CommandLine::new("/bin/sh");
        line.args = vec!["-c".into(), "setsid sleep 30 & exec sleep 30".into()];
        let mut child = GroupChild::spawn("test", &line, &marker, &instance, &instance.join("log"))
            .expect("spawns");
        let watchdog = Watchdog::spawn(&folder, marker.var(), "state-*/brokers/*/marker")
            .expect("the watchdog starts");
        let both = poll_until(
            Duration::from_secs(5),
            Duration::from_millis(25),
            || async {
                match marker.live_processes().len() {
                    2 => Attempt::Done(()),
                    _ => Attempt::Retry(()),
                }
            },
        )
        .await;
        assert!(both.is_ok(), "{:?}", marker.live_processes());
        // Armed, it waits: nothing is touched while its owner holds on.
        assert!(folder.exists());
        assert!(
            watchdog.release(Duration::from_secs(20)).await,
            "it finishes"
        );
        assert!(child.wait_exit(Duration::from_secs(5)).await.is_some());
        assert_eq!(marker.live_processes(), Vec::<u32>::new());
        assert!(!folder.exists(), "{} removed", folder.display());
    }

    #[tokio::test]
    async fn a_watchdog_leaves_its_owners_group_and_session() {
        let folder = tempfile::tempdir().expect("temp dir").keep();
        let watchdog = Watchdog::spawn(&folder, "CONTINUUM_HOST_UNIT", "*/marker")
            .expect("the watchdog starts");
        let pid = watchdog.pid().expect("a pid");
        assert_eq!(crate::marker::process_group(pid), Some(pid));
        let pid = libc::pid_t::try_from(pid).expect("pid");
        // SAFETY: getsid has no preconditions.
        assert_eq!(unsafe { libc::getsid(pid) }, pid, "a session of its own");
        assert!(watchdog.release(Duration::from_secs(20)).await);
        assert!(!folder.exists());
    }

    #[tokio::test]
    async fn a_slow_command_is_cut_off() {
        let mut line = CommandLine::new("/bin/sleep");
        line.args = vec!["30".into()];
        let started = std::time::Instant::now();
        let error = run_bounded(
            &line,
            &Marker::unique("CONTINUUM_HOST_UNIT", "slow"),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert!(error.contains("did not finish"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
