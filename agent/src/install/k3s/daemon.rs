//! Running the k3s daemon: as a child of the agent ([`Supervised`]) where systemd is not
//! PID 1, or as a unit ([`Systemd`]) where it is. Only the child can run on the machines
//! the tests run on; the unit side is kept to writing two files and calling `systemctl`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::command::UNIT_MARK;
use super::state::write_with_mode;
use crate::install::InstallError;
use crate::process::{CommandLine, GroupChild, log_tail, new_marker, run_bounded, sweep};

/// How long k3s may take to stop on SIGTERM before its group is killed (a server flushes
/// its datastore first).
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long one `systemctl` or `journalctl` call may take.
const SYSTEMCTL_LIMIT: Duration = Duration::from_secs(60);
/// Lines of log quoted in an error.
const LOG_LINES: usize = 20;

/// k3s running as the agent's child, in its own process group, output to a log file.
#[derive(Debug)]
pub(super) struct Supervised {
    child: GroupChild,
    /// Tags every process k3s starts (containerd, shims), so a stop leaves none behind.
    marker: String,
    log: PathBuf,
    role: &'static str,
}

impl Supervised {
    /// Starts `line` in `dir`, its output in `log` (truncated: an error quotes this start).
    pub(super) fn start(
        role: &'static str,
        line: &CommandLine,
        dir: &Path,
        log: &Path,
    ) -> Result<Self, InstallError> {
        match std::fs::remove_file(log) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(InstallError::Failed(format!(
                    "removing the old log {}: {e}",
                    log.display()
                )));
            }
        }
        let marker = new_marker("k3s");
        let child = GroupChild::spawn(&format!("k3s {role}"), line, &marker, dir, log)
            .map_err(|e| InstallError::Failed(format!("starting k3s {role}: {e}")))?;
        tracing::info!(role, pid = child.pid(), log = %log.display(), "k3s started as a child");
        Ok(Supervised {
            child,
            marker,
            log: log.to_path_buf(),
            role,
        })
    }

    /// The daemon's PID.
    pub(super) fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// "server" or "agent".
    pub(super) fn role(&self) -> &'static str {
        self.role
    }

    /// None while it runs; once it has exited, how, with the end of its log.
    pub(super) fn exit_report(&mut self) -> Option<String> {
        let status = self.child.exited()?;
        Some(format!(
            "k3s {} exited ({status}); the end of {}:\n{}",
            self.role,
            self.log.display(),
            log_tail(&self.log, LOG_LINES)
        ))
    }

    /// SIGTERM, then SIGKILL to the group after [`STOP_GRACE`], then every process it
    /// started; returns what was done, for the status detail.
    pub(super) async fn stop(mut self) -> String {
        let pid = self.pid();
        let mut how = if self.child.exited().is_some() {
            format!("k3s {} (pid {pid}) had exited", self.role)
        } else {
            self.child.signal(libc::SIGTERM);
            if self.child.wait_exit(STOP_GRACE).await.is_some() {
                format!("stopped k3s {} (pid {pid})", self.role)
            } else {
                self.child.kill().await;
                format!(
                    "killed k3s {} (pid {pid}): still running {STOP_GRACE:?} after SIGTERM",
                    self.role
                )
            }
        };
        let left = sweep(&self.marker, Duration::from_secs(5)).await;
        if !left.is_empty() {
            tracing::warn!(?left, "k3s processes survived SIGKILL");
            how.push_str(&format!("; processes {left:?} survived SIGKILL"));
        }
        how
    }
}

/// k3s as a systemd unit in `unit_dir` (normally `/etc/systemd/system`).
#[derive(Debug, Clone)]
pub(super) struct Systemd {
    unit_dir: PathBuf,
}

impl Systemd {
    /// Units go to `unit_dir`.
    pub(super) fn new(unit_dir: PathBuf) -> Self {
        Systemd { unit_dir }
    }

    /// The unit file of `unit`.
    pub(super) fn unit_path(&self, unit: &str) -> PathBuf {
        self.unit_dir.join(unit)
    }

    /// Its EnvironmentFile (the official installer's name for it).
    pub(super) fn env_path(&self, unit: &str) -> PathBuf {
        self.unit_dir.join(format!("{unit}.env"))
    }

    /// True when `unit`'s file exists and this installer wrote it.
    pub(super) fn is_ours(&self, unit: &str) -> bool {
        std::fs::read_to_string(self.unit_path(unit)).is_ok_and(|text| text.starts_with(UNIT_MARK))
    }

    /// Writes the env file (0600: it holds the token) and the unit, then enables and starts it.
    pub(super) async fn install(
        &self,
        unit: &str,
        unit_text: &str,
        env_text: &str,
    ) -> Result<(), InstallError> {
        let env_path = self.env_path(unit);
        write_with_mode(&env_path, env_text, 0o600)
            .map_err(|e| InstallError::Failed(format!("writing {}: {e}", env_path.display())))?;
        let unit_path = self.unit_path(unit);
        write_with_mode(&unit_path, unit_text, 0o644)
            .map_err(|e| InstallError::Failed(format!("writing {}: {e}", unit_path.display())))?;
        systemctl(&["daemon-reload"]).await?;
        // --no-block: a server unit is Type=notify with no start timeout; readiness is polled.
        systemctl(&["enable", "--now", "--no-block", unit]).await?;
        Ok(())
    }

    /// True when `unit` is active (or activating: a restarting k3s counts as running).
    pub(super) async fn is_active(&self, unit: &str) -> bool {
        matches!(
            systemctl(&["is-active", unit])
                .await
                .as_deref()
                .map(str::trim),
            Ok("active" | "activating" | "reloading")
        )
    }

    /// The unit's main PID, 0 when it has none.
    pub(super) async fn main_pid(&self, unit: &str) -> u32 {
        systemctl(&["show", "--property", "MainPID", "--value", unit])
            .await
            .ok()
            .and_then(|pid| pid.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Stops `unit`, keeping it installed.
    pub(super) async fn stop(&self, unit: &str) -> Result<(), InstallError> {
        systemctl(&["stop", unit]).await.map(drop)
    }

    /// Disables and stops `unit` and removes its files if this installer wrote them;
    /// returns the files removed.
    pub(super) async fn remove(&self, unit: &str) -> Result<Vec<PathBuf>, InstallError> {
        if !self.is_ours(unit) {
            return Ok(Vec::new());
        }
        systemctl(&["disable", "--now", unit]).await?;
        let mut removed = Vec::new();
        for path in [self.unit_path(unit), self.env_path(unit)] {
            if remove_file(&path)? {
                removed.push(path);
            }
        }
        systemctl(&["daemon-reload"]).await?;
        Ok(removed)
    }

    /// The end of the unit's journal, for errors.
    pub(super) async fn journal_tail(&self, unit: &str) -> String {
        let mut line = CommandLine::new("journalctl");
        let lines = LOG_LINES.to_string();
        line.args = ["--unit", unit, "--lines", &lines, "--no-pager"]
            .map(String::from)
            .to_vec();
        match run_bounded(&line, &new_marker("journalctl"), SYSTEMCTL_LIMIT).await {
            Ok((_, output)) => output,
            Err(error) => format!("(no journal: {error})"),
        }
    }
}

/// Runs `systemctl args`; its output, or a failure quoting it. `is-active` exits non-zero
/// for an inactive unit, so its output is returned whatever the status.
async fn systemctl(args: &[&str]) -> Result<String, InstallError> {
    let mut line = CommandLine::new("systemctl");
    line.args = args.iter().map(|a| a.to_string()).collect();
    let shown = format!("systemctl {}", args.join(" "));
    let (status, output) = run_bounded(&line, &new_marker("systemctl"), SYSTEMCTL_LIMIT)
        .await
        .map_err(|e| InstallError::Failed(format!("{shown}: {e}")))?;
    if status.success() || args.first() == Some(&"is-active") {
        Ok(output)
    } else {
        Err(InstallError::Failed(format!(
            "{shown}: {status}: {}",
            output.trim()
        )))
    }
}

/// Removes a file; false if it was not there.
pub(super) fn remove_file(path: &Path) -> Result<bool, InstallError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(InstallError::Failed(format!(
            "removing {}: {e}",
            path.display()
        ))),
    }
}
