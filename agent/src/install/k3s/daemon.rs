//! Running the k3s daemon: as a child of the agent ([`Supervised`]) where systemd is not
//! PID 1, or as a unit ([`Systemd`]) where it is. Only the child can run on the machines
//! the tests run on; the unit side is kept to writing two files and calling `systemctl`.

use std::path::{Path, PathBuf};

use super::command::UNIT_MARK;
use super::leftovers::{Record, STOP_GRACE, SWEEP_LIMIT, sweep_tree};
use crate::install::InstallError;
use crate::install::system::{journal_tail, remove_file, systemctl, write_atomic, write_private};
use crate::new_marker;
use host::{CommandLine, GroupChild, log_tail};

/// Lines of log quoted in an error.
const LOG_LINES: usize = 20;

/// k3s running as the agent's child, in its own process group, output to a log file.
#[derive(Debug)]
pub(super) struct Supervised {
    child: GroupChild,
    /// Tags every process k3s starts (containerd, shims), so a stop leaves none behind.
    marker: String,
    log: PathBuf,
    /// Where its PID and marker are recorded for a later agent (see `leftovers.rs`).
    record: PathBuf,
    role: &'static str,
}

impl Supervised {
    /// Starts `line` in `dir`, its output in `log` (truncated: an error quotes this start),
    /// and records its PID and marker at `record`.
    pub(super) fn start(
        role: &'static str,
        line: &CommandLine,
        dir: &Path,
        log: &Path,
        record: &Path,
    ) -> Result<Self, InstallError> {
        remove_file(log)?;
        let marker = new_marker("k3s");
        let child = GroupChild::spawn(&format!("k3s {role}"), line, &marker, dir, log)
            .map_err(|e| InstallError::Failed(format!("starting k3s {role}: {e}")))?;
        tracing::info!(role, pid = child.pid(), log = %log.display(), "k3s started as a child");
        let started = Supervised {
            child,
            marker: marker.value().to_owned(),
            log: log.to_path_buf(),
            record: record.to_path_buf(),
            role,
        };
        // Dropping `started` on error kills the group: no k3s runs unrecorded.
        Record {
            pid: started.pid(),
            marker: started.marker.clone(),
        }
        .save(record)?;
        Ok(started)
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
    /// started and their descendants (shims, containers), then its record; returns what was
    /// done, for the status detail. At most 30 s (see [`crate::install::K3S_SHUTDOWN_BOUND`]).
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
        let swept = sweep_tree(&self.marker, &[], SWEEP_LIMIT).await;
        if !swept.killed.is_empty() {
            how.push_str(&format!(
                "; killed {} process(es) it had started",
                swept.killed.len()
            ));
        }
        how.push_str(&swept.survivors_note());
        if swept.survivors.is_empty()
            && let Err(error) = remove_file(&self.record)
        {
            how.push_str(&format!("; {error}"));
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
        write_private(&self.env_path(unit), env_text.as_bytes())?;
        write_atomic(&self.unit_path(unit), unit_text.as_bytes(), 0o644)?;
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
        journal_tail(unit, LOG_LINES).await
    }
}
