//! Nebula, phase 2 of the study: a lighthouse on the headnode, members elsewhere, brought up
//! from an InstallOverlayRequest and proven by traffic through the tunnel.
//!
//! [`Nebula::install`] checks the whole request and the node's prerequisites (the `[nebula]`
//! files bootstrap copies, the executable) before touching anything, writes the
//! configuration under `<state_dir>/nebula/` (0600: it names the key), has `nebula -test`
//! check it, runs Nebula (a systemd unit or a supervised child), waits for the tun device to
//! carry the overlay address, then checks every `check_reachable` peer within the timeout.
//!
//! - The same request while Nebula runs restarts nothing ("already running"), but the peers
//!   are checked again; a different one restarts Nebula with the new configuration. "The
//!   same" covers what the YAML does not show: the overlay address asked for and the
//!   contents of the certificate files (both in the config's header), and the tun device
//!   must still carry the address; otherwise Nebula is restarted and the detail says why.
//! - A failure before Nebula is up leaves nothing behind: it is stopped and its files removed,
//!   and the error carries the tail of its log.
//! - An unreachable peer is an error naming it, but Nebula is left running: a peer that comes
//!   up later is then found by repeating the same request, which restarts nothing.
//! - [`Nebula::uninstall`] stops it and removes every file the installer wrote (not the
//!   certificates: bootstrap copied them and removes them); "not installed" when there was
//!   nothing to remove.
//! - [`Nebula::shutdown`] cancels an install or uninstall in flight and stops a child within
//!   [`crate::install::NEBULA_SHUTDOWN_BOUND`].
//!
//! # Layout
//! - this file: [`Nebula`], the install and uninstall sequences.
//! - `plan.rs`: request validation.
//! - `config.rs`: the YAML configuration.
//! - `bringup.rs`: config written and tested, Nebula started, the tun device awaited.
//! - `daemon.rs`: the unit or the child, the installer's paths.
//! - `tun.rs`: the tun device and its addresses, through rtnetlink.
//! - `reach.rs`: the reachability check (TCP connects through the tunnel).

mod bringup;
mod config;
mod daemon;
mod plan;
mod reach;
mod tun;

use std::path::PathBuf;

use proto::agent::v1 as pb;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::system::{find_executable, is_bare_name, remove_dir};
use super::{InstallError, RELEASE_WAIT};
use bringup::{start, tun_mismatch};
use daemon::{Paths, Supervisor};
use domain::{AgentConfig, NebulaFiles};
use plan::Plan;

/// This node's Nebula: installs, checks and removes it. Calls are serialised.
#[derive(Debug)]
pub struct Nebula {
    files: Option<NebulaFiles>,
    /// A copy of the supervisor's paths, for a shutdown that cannot get the supervisor.
    paths: Paths,
    supervisor: Mutex<Supervisor>,
    /// Cancelled by [`Nebula::shutdown`]: an install or uninstall in flight gives way.
    shutting_down: CancellationToken,
}

impl Nebula {
    /// From the agent's configuration (its `[nebula]` files and state folder). Nebula runs as
    /// a systemd unit where [`crate::install::use_systemd`] says so, as a child of the agent
    /// elsewhere.
    pub fn new(config: &AgentConfig) -> Self {
        Self::with_paths(
            config.nebula.clone(),
            Paths::new(&config.state_dir, super::use_systemd()),
        )
    }

    fn with_paths(files: Option<NebulaFiles>, paths: Paths) -> Self {
        Nebula {
            files,
            paths: paths.clone(),
            supervisor: Mutex::new(Supervisor::new(paths)),
            shutting_down: CancellationToken::new(),
        }
    }

    /// Brings Nebula up as the request says and checks the requested peers through the
    /// tunnel; see the module docs for what is left behind on each kind of failure.
    pub async fn install(
        &self,
        request: pb::InstallOverlayRequest,
    ) -> Result<pb::OverlayStatus, InstallError> {
        let plan = Plan::from_request(&request)?;
        let (files, binary) = self.prerequisites()?;
        let text = config::render(&plan, &files, &config::pki_digest(&files)?, &binary)?;
        super::unless_shutting_down(
            &self.shutting_down,
            self.install_locked(plan, files, binary, text),
        )
        .await
    }

    async fn install_locked(
        &self,
        plan: Plan,
        files: NebulaFiles,
        binary: PathBuf,
        text: String,
    ) -> Result<pb::OverlayStatus, InstallError> {
        let mut supervisor = self.supervisor.lock().await;
        let running = supervisor.pid().await;
        let installed = std::fs::read_to_string(&supervisor.paths.config).ok();
        let same_config = installed.as_deref() == Some(text.as_str());
        let (pid, detail) = match (running, same_config) {
            (Some(old), true) => match tun_mismatch(&plan).await {
                None => (old, "already running".to_string()),
                Some(found) => {
                    supervisor.stop().await?;
                    let pid = start(&mut supervisor, &plan, &text, &binary, &files).await?;
                    let detail = format!(
                        "restarted: nebula (pid {old}) ran this configuration but {} did not \
                         carry {} ({found}); it was stopped",
                        plan.interface,
                        plan.cidr(),
                    );
                    (pid, detail)
                }
            },
            _ => {
                let detail = if let Some(old) = running {
                    format!(
                        "restarted with a new configuration (the previous nebula, pid {old}, \
                         was stopped)"
                    )
                } else if let Some(stale) = supervisor.stale_pid() {
                    format!(
                        "started (a nebula left by an earlier agent, pid {stale}, was stopped \
                         first)"
                    )
                } else {
                    "started".to_string()
                };
                supervisor.stop().await?;
                let pid = start(&mut supervisor, &plan, &text, &binary, &files).await?;
                (pid, detail)
            }
        };
        tracing::info!(pid, interface = %plan.interface, cidr = %plan.cidr(), %detail, "nebula up");
        let peers = reach::check(&plan.check_reachable, Instant::now() + plan.timeout).await;
        let unreachable: Vec<String> = peers
            .iter()
            .filter(|peer| !peer.reachable)
            .map(|peer| format!("{}: {}", peer.overlay_ip, peer.detail))
            .collect();
        if !unreachable.is_empty() {
            return Err(InstallError::Unreachable(format!(
                "through {}, overlay peer {}; nebula is left running (pid {pid}, {detail}): \
                 repeat the same request once the peer is up. Nebula's log:\n{}",
                plan.interface,
                unreachable.join("; "),
                supervisor.log_tail().await
            )));
        }
        Ok(pb::OverlayStatus {
            running: true,
            interface: plan.interface.clone(),
            overlay_cidr: plan.cidr(),
            pid,
            detail,
            peers,
        })
    }

    /// Stops Nebula and removes its configuration, unit, log and PID file (bootstrap's
    /// certificate files stay); "not installed" when there was nothing.
    pub async fn uninstall(&self) -> Result<pb::OverlayStatus, InstallError> {
        super::unless_shutting_down(&self.shutting_down, self.uninstall_locked()).await
    }

    async fn uninstall_locked(&self) -> Result<pb::OverlayStatus, InstallError> {
        let mut supervisor = self.supervisor.lock().await;
        let interface = std::fs::read_to_string(&supervisor.paths.config)
            .ok()
            .and_then(|text| config::interface_of(&text));
        let had_files = supervisor.paths.dir.exists();
        let stopped = supervisor.stop().await?;
        let had_unit = supervisor.remove_unit().await?;
        remove_dir(&supervisor.paths.dir)?;
        if let Some(interface) = &interface {
            tun::wait_gone(interface).await?;
        }
        let mut done = Vec::new();
        if let Some(pid) = stopped {
            done.push(format!("stopped nebula (pid {pid})"));
        }
        if had_unit {
            done.push(format!("removed {}", daemon::UNIT_NAME));
        }
        if had_files {
            done.push(format!("removed {}", supervisor.paths.dir.display()));
        }
        let detail = if done.is_empty() {
            "not installed".to_string()
        } else {
            done.join(", ")
        };
        tracing::info!(%detail, "nebula uninstalled");
        Ok(pb::OverlayStatus {
            running: false,
            interface: interface.unwrap_or_default(),
            detail,
            ..Default::default()
        })
    }

    /// Stops a Nebula child at agent shutdown (a unit stays: it is installed), within
    /// [`crate::install::NEBULA_SHUTDOWN_BOUND`]: an install or uninstall in flight is
    /// cancelled first, and later calls are refused.
    pub async fn shutdown(&self) {
        self.shutting_down.cancel();
        if self.paths.unit.is_some() {
            return;
        }
        let stopped = match tokio::time::timeout(RELEASE_WAIT, self.supervisor.lock()).await {
            Ok(mut supervisor) => supervisor.stop().await,
            Err(_) => {
                tracing::warn!(
                    "a cancelled nebula call did not let go within {RELEASE_WAIT:?}; stopping \
                     nebula from its PID file"
                );
                daemon::stop_recorded(&self.paths).await
            }
        };
        match stopped {
            Ok(Some(pid)) => tracing::info!(pid, "nebula stopped at shutdown"),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "stopping nebula at shutdown"),
        }
    }

    /// The `[nebula]` files and the executable, or what bootstrap should have provided.
    fn prerequisites(&self) -> Result<(NebulaFiles, PathBuf), InstallError> {
        let files = self.files.clone().ok_or_else(|| {
            InstallError::Missing(
                "agent.toml has no [nebula] section: bootstrap copies Nebula's CA, this host's \
                 certificate and key to the node and names them there (ca, cert, key)"
                    .into(),
            )
        })?;
        for (key, path, what) in [
            ("ca", &files.ca, "Nebula's CA certificate"),
            ("cert", &files.cert, "this host's Nebula certificate"),
            ("key", &files.key, "this host's Nebula key"),
        ] {
            if !path.is_file() {
                return Err(InstallError::Missing(format!(
                    "[nebula] {key} = {}: no such file (bootstrap copies {what} there)",
                    path.display()
                )));
            }
        }
        let binary = find_executable(&files.binary).ok_or_else(|| {
            InstallError::Missing(format!(
                "[nebula] binary = {}: no such executable{} (install Nebula, e.g. Debian's \
                 `nebula` package, or point binary at it)",
                files.binary.display(),
                if is_bare_name(&files.binary) {
                    " on PATH"
                } else {
                    ""
                }
            ))
        })?;
        Ok((files, binary))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    /// A Nebula supervising a child, whatever runs this machine: a unit test must never
    /// touch the machine's systemd.
    fn child_mode(dir: &Path, files: Option<NebulaFiles>) -> Nebula {
        Nebula::with_paths(files, Paths::new(dir, false))
    }

    /// Bootstrap's three files in `dir`, and `binary`.
    fn files_in(dir: &Path, binary: PathBuf) -> NebulaFiles {
        let files = NebulaFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join("host.crt"),
            key: dir.join("host.key"),
            binary,
        };
        for file in [&files.ca, &files.cert, &files.key] {
            std::fs::write(file, "x").expect("write");
        }
        files
    }

    /// An executable shell script standing in for `nebula`.
    fn fake_nebula(dir: &Path, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fake-nebula");
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn lighthouse_request() -> pb::InstallOverlayRequest {
        pb::InstallOverlayRequest {
            lighthouse: true,
            overlay_cidr: "198.19.0.1/24".into(),
            // Not a name the machine's own overlay would use.
            interface: "cntm-fake0".into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn missing_prerequisites_say_what_bootstrap_should_have_put_where() {
        let dir = tempfile::tempdir().expect("temp dir");
        let nebula = child_mode(dir.path(), None);
        let error = nebula
            .install(lighthouse_request())
            .await
            .expect_err("no files");
        assert!(
            matches!(&error, InstallError::Missing(m) if m.contains("[nebula]")),
            "{error}"
        );
        let files = NebulaFiles {
            ca: dir.path().join("ca.crt"),
            cert: dir.path().join("host.crt"),
            key: dir.path().join("host.key"),
            binary: "no-such-nebula-binary".into(),
        };
        let nebula = child_mode(dir.path(), Some(files.clone()));
        let error = nebula
            .install(lighthouse_request())
            .await
            .expect_err("no ca");
        assert!(error.to_string().contains("ca.crt"), "{error}");
        let nebula = child_mode(dir.path(), Some(files_in(dir.path(), files.binary)));
        let error = nebula
            .install(lighthouse_request())
            .await
            .expect_err("no binary");
        assert!(matches!(&error, InstallError::Missing(_)), "{error}");
        assert!(
            error.to_string().contains("no-such-nebula-binary"),
            "{error}"
        );
        // A bad request is refused before the prerequisites are even looked at.
        let mut bad = lighthouse_request();
        bad.overlay_cidr = "nope".into();
        let error = nebula.install(bad).await.expect_err("invalid");
        assert!(matches!(error, InstallError::Invalid { .. }), "{error}");
        assert!(!dir.path().join("nebula").exists(), "nothing was written");
        let status = nebula.uninstall().await.expect("uninstall");
        assert_eq!(status.detail, "not installed");
    }

    #[tokio::test]
    async fn a_config_nebula_refuses_leaves_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let binary = fake_nebula(
            dir.path(),
            "[ \"$1\" = -test ] && echo 'simulated: bad pki.key' >&2 && exit 1\nexit 0",
        );
        let nebula = child_mode(dir.path(), Some(files_in(dir.path(), binary)));
        let error = nebula
            .install(lighthouse_request())
            .await
            .expect_err("refused");
        let message = error.to_string();
        assert!(message.contains("nebula -test refused"), "{message}");
        assert!(message.contains("simulated: bad pki.key"), "{message}");
        assert!(
            !dir.path().join("nebula").exists(),
            "nothing half-installed"
        );
        assert_eq!(
            nebula.uninstall().await.expect("uninstall").detail,
            "not installed"
        );
    }

    #[tokio::test]
    async fn a_nebula_that_dies_at_start_is_reported_with_its_log() {
        let dir = tempfile::tempdir().expect("temp dir");
        let binary = fake_nebula(
            dir.path(),
            "[ \"$1\" = -test ] && exit 0\necho 'simulated: failed to get tun device' >&2\nexit 3",
        );
        let nebula = child_mode(dir.path(), Some(files_in(dir.path(), binary)));
        let error = nebula
            .install(lighthouse_request())
            .await
            .expect_err("died");
        let message = error.to_string();
        assert!(
            message.contains("nebula exited (exit status: 3)"),
            "{message}"
        );
        assert!(
            message.contains("simulated: failed to get tun device"),
            "{message}"
        );
        assert!(
            !dir.path().join("nebula").exists(),
            "nothing half-installed"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn shutdown_cancels_an_install_in_flight_and_stops_the_child() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Passes the config test, then runs without ever bringing a tun device up: the
        // install waits for it (20 s) unless shutdown cuts in.
        let binary = fake_nebula(dir.path(), "[ \"$1\" = -test ] && exit 0\nexec sleep 60");
        let nebula =
            std::sync::Arc::new(child_mode(dir.path(), Some(files_in(dir.path(), binary))));
        let installing = tokio::spawn({
            let nebula = nebula.clone();
            async move { nebula.install(lighthouse_request()).await }
        });
        let pid_file = dir.path().join("nebula/nebula.pid");
        let pid: u32 = host::poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
            let pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|text| text.trim().parse().ok());
            std::future::ready(pid.map_or(host::Attempt::Retry(()), host::Attempt::Done))
        })
        .await
        .expect("nebula was not started");
        let started = Instant::now();
        nebula.shutdown().await;
        assert!(
            started.elapsed() < crate::install::NEBULA_SHUTDOWN_BOUND,
            "{:?}",
            started.elapsed()
        );
        let cancelled = installing.await.expect("joined").expect_err("cancelled");
        assert!(
            cancelled.to_string().contains("shutting down"),
            "{cancelled}"
        );
        assert!(!host::is_running(pid), "the child was stopped");
        let refused = nebula
            .install(lighthouse_request())
            .await
            .expect_err("refused");
        assert!(refused.to_string().contains("shutting down"), "{refused}");
    }
}
