//! Running Nebula: the `continuum-nebula.service` unit where systemd is PID 1, so the overlay
//! outlives agent restarts as an installed service should; a supervised child of the agent
//! elsewhere (containers, the test namespaces), stopped at agent shutdown.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::InstallError;
use super::super::system::{
    journal_tail, remove_file, systemctl, systemd_quote, write_atomic, write_private,
};
use host::poll::{Attempt, poll_until};
use host::{CommandLine, GroupChild};

/// The unit's name.
pub(super) const UNIT_NAME: &str = "continuum-nebula.service";
/// Where units written by the agent go.
const UNITS_DIR: &str = "/etc/systemd/system";
/// How long Nebula gets to close its tunnels after SIGTERM before it is killed (part of
/// [`crate::install::NEBULA_SHUTDOWN_BOUND`]).
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The installer's files under `<state_dir>/nebula/`, and the unit file under systemd.
#[derive(Debug, Clone)]
pub(super) struct Paths {
    /// `<state_dir>/nebula`.
    pub dir: PathBuf,
    /// Nebula's configuration (0600: it names the key).
    pub config: PathBuf,
    /// The child's stdout and stderr (child mode).
    pub log: PathBuf,
    /// The child's PID, to find a Nebula left by an agent that died (child mode).
    pub pid_file: PathBuf,
    /// The unit file, when systemd runs this node.
    pub unit: Option<PathBuf>,
}

impl Paths {
    /// The files under `state_dir`; `systemd` says whether a unit is used.
    pub fn new(state_dir: &Path, systemd: bool) -> Self {
        let dir = state_dir.join("nebula");
        Paths {
            config: dir.join("config.yml"),
            log: dir.join("nebula.log"),
            pid_file: dir.join("nebula.pid"),
            unit: systemd.then(|| Path::new(UNITS_DIR).join(UNIT_NAME)),
            dir,
        }
    }
}

/// Starts, watches and stops the one Nebula of this node.
#[derive(Debug)]
pub(super) struct Supervisor {
    pub paths: Paths,
    child: Option<GroupChild>,
}

impl Supervisor {
    /// Nothing running yet.
    pub fn new(paths: Paths) -> Self {
        Supervisor { paths, child: None }
    }

    /// The PID of the Nebula this installer runs, if it is alive.
    pub async fn pid(&mut self) -> Option<u32> {
        if self.paths.unit.is_some() {
            return self.unit_pid().await;
        }
        let child = self.child.as_mut()?;
        child.exited().is_none().then(|| child.pid())
    }

    /// How the child exited, if it did (child mode; a unit is restarted by systemd).
    pub fn exit_status(&mut self) -> Option<String> {
        let status = self.child.as_mut()?.exited()?;
        Some(status.to_string())
    }

    /// Starts Nebula with the configuration at `paths.config`; returns its PID.
    pub async fn start(&mut self, binary: &Path) -> Result<u32, InstallError> {
        let Some(unit) = self.paths.unit.clone() else {
            let mut line = CommandLine::new(binary);
            line.args = vec!["-config".into(), self.paths.config.display().to_string()];
            let child = GroupChild::spawn(
                "nebula",
                &line,
                &crate::new_marker("nebula"),
                &self.paths.dir,
                &self.paths.log,
            )
            .map_err(|e| InstallError::Failed(e.to_string()))?;
            let pid = child.pid();
            self.child = Some(child);
            write_private(&self.paths.pid_file, format!("{pid}\n").as_bytes())?;
            return Ok(pid);
        };
        write_atomic(
            &unit,
            unit_text(binary, &self.paths.config).as_bytes(),
            0o644,
        )?;
        systemctl(&["daemon-reload"]).await?;
        systemctl(&["enable", UNIT_NAME]).await?;
        // restart starts a stopped unit and reloads a running one from scratch.
        systemctl(&["restart", UNIT_NAME]).await?;
        let this = &*self;
        let started = poll_until(
            Duration::from_secs(10),
            Duration::from_millis(100),
            || async {
                match this.unit_pid().await {
                    Some(pid) => Attempt::Done(pid),
                    None => Attempt::Retry(()),
                }
            },
        )
        .await;
        match started {
            Ok(pid) => Ok(pid),
            Err(()) => Err(InstallError::Failed(format!(
                "{UNIT_NAME} did not start: {}",
                self.log_tail().await
            ))),
        }
    }

    /// Stops Nebula (the child, a Nebula an earlier agent left behind, or the unit, which
    /// is also disabled); returns the PID that was stopped, if one ran.
    pub async fn stop(&mut self) -> Result<Option<u32>, InstallError> {
        if self.paths.unit.is_some() {
            let pid = self.unit_pid().await;
            if self.unit_installed() {
                systemctl(&["disable", "--now", UNIT_NAME]).await?;
            }
            return Ok(pid);
        }
        let mut stopped = None;
        if let Some(mut child) = self.child.take() {
            if child.exited().is_none() {
                stopped = Some(child.pid());
            }
            // SIGTERM lets Nebula tell its peers the tunnels are closing.
            child.signal(libc::SIGTERM);
            if child.wait_exit(STOP_GRACE).await.is_none() {
                child.kill().await;
            }
        }
        if let Some(pid) = self.stale_pid() {
            stop_stray(pid).await?;
            stopped = stopped.or(Some(pid));
        }
        remove_file(&self.paths.pid_file)?;
        Ok(stopped)
    }

    /// A Nebula started by an earlier agent on this config (child mode), still running.
    pub fn stale_pid(&self) -> Option<u32> {
        let own = self.child.as_ref().map(GroupChild::pid);
        recorded_pid(&self.paths).filter(|&pid| own != Some(pid))
    }

    /// True if the unit file is there (systemd mode).
    pub fn unit_installed(&self) -> bool {
        self.paths.unit.as_ref().is_some_and(|unit| unit.exists())
    }

    /// Removes the unit file and tells systemd; returns whether there was one.
    pub async fn remove_unit(&self) -> Result<bool, InstallError> {
        let Some(unit) = self.paths.unit.as_ref().filter(|unit| unit.exists()) else {
            return Ok(false);
        };
        remove_file(unit)?;
        systemctl(&["daemon-reload"]).await?;
        // A unit that failed stays listed until this; harmless if it did not.
        let _ = systemctl(&["reset-failed", UNIT_NAME]).await;
        Ok(true)
    }

    /// The last lines Nebula logged, for error messages.
    pub async fn log_tail(&self) -> String {
        if self.paths.unit.is_none() {
            return host::log_tail(&self.paths.log, 20);
        }
        journal_tail(UNIT_NAME, 20).await
    }

    async fn unit_pid(&self) -> Option<u32> {
        if !self.unit_installed() {
            return None;
        }
        let output = systemctl(&["show", "--property", "MainPID", "--value", UNIT_NAME])
            .await
            .ok()?;
        output
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&pid| pid != 0 && host::is_running(pid))
    }
}

/// The unit file: Nebula with the generated configuration, restarted if it dies.
pub(super) fn unit_text(binary: &Path, config: &Path) -> String {
    format!(
        "# Written by continuum-agent (InstallOverlay); UninstallOverlay removes it.\n\
         [Unit]\n\
         Description=Nebula overlay of the Continuum testbed\n\
         Documentation=https://github.com/slackhq/nebula\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={} {} {}\n\
         ExecReload=/bin/kill -HUP $MAINPID\n\
         Restart=always\n\
         RestartSec=2\n\
         SyslogIdentifier=continuum-nebula\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        systemd_quote(&binary.display().to_string()),
        systemd_quote("-config"),
        systemd_quote(&config.display().to_string()),
    )
}

/// SIGTERM, then SIGKILL after the grace period, for a Nebula that is not our child.
async fn stop_stray(pid: u32) -> Result<(), InstallError> {
    host::send_signal(pid, libc::SIGTERM);
    let exited = || {
        std::future::ready(if host::is_running(pid) {
            Attempt::Retry(())
        } else {
            Attempt::Done(())
        })
    };
    let interval = Duration::from_millis(25);
    if poll_until(STOP_GRACE, interval, exited).await.is_ok() {
        return Ok(());
    }
    host::kill(pid);
    poll_until(STOP_GRACE, interval, exited)
        .await
        .map_err(|()| {
            InstallError::Failed(format!(
                "nebula (pid {pid}, left by an earlier agent) survived SIGKILL"
            ))
        })
}

/// The PID in the installer's PID file, if that process still runs Nebula on this
/// installer's configuration (its command line names the config: a recycled PID does not).
pub(super) fn recorded_pid(paths: &Paths) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(&paths.pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let config = paths.config.display().to_string();
    let ours = cmdline
        .split(|&b| b == 0)
        .any(|arg| arg == config.as_bytes());
    (ours && host::is_running(pid)).then_some(pid)
}

/// Stops the Nebula the PID file names, without the supervisor: what shutdown does when a
/// cancelled install does not let go of the supervisor in time.
pub(super) async fn stop_recorded(paths: &Paths) -> Result<Option<u32>, InstallError> {
    let Some(pid) = recorded_pid(paths) else {
        return Ok(None);
    };
    stop_stray(pid).await?;
    remove_file(&paths.pid_file)?;
    Ok(Some(pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_nebula_with_the_generated_config_and_restarts_it() {
        let text = unit_text(
            Path::new("/usr/bin/nebula"),
            Path::new("/var/lib/continuum-agent/nebula/config.yml"),
        );
        for needed in [
            "ExecStart=\"/usr/bin/nebula\" \"-config\" \"/var/lib/continuum-agent/nebula/config.yml\"\n",
            "Restart=always\n",
            "After=network-online.target\n",
            "WantedBy=multi-user.target\n",
            "ExecReload=/bin/kill -HUP $MAINPID\n",
        ] {
            assert!(text.contains(needed), "{needed:?} missing from\n{text}");
        }
        let odd = unit_text(
            Path::new("/opt/my nebula/nebula"),
            Path::new("/s/100%/c.yml"),
        );
        assert!(
            odd.contains("ExecStart=\"/opt/my nebula/nebula\" \"-config\" \"/s/100%%/c.yml\"\n"),
            "{odd}"
        );
    }

    #[test]
    fn systemd_accepts_the_unit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config.yml");
        std::fs::write(&config, "").expect("config");
        // verify checks that ExecStart's program exists: any executable stands in.
        let unit = dir.path().join(UNIT_NAME);
        std::fs::write(&unit, unit_text(Path::new("/bin/sh"), &config)).expect("unit");
        crate::install::system::assert_systemd_accepts(&unit);
    }
}
