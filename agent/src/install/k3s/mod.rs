//! k3s, phase 3 of the study: the server on the headnode (control plane only, tainted so
//! brokers run elsewhere), agents on the workers joining it with the cluster's token over the
//! overlay. The executable comes from the official installer or is an offline binary the
//! controller pushed; this installer never downloads anything.
//!
//! [`K3s::install`] checks the request in full, then starts k3s as a unit (systemd is PID 1)
//! or as a supervised child, and on the server waits until the node is listed Ready. It is
//! idempotent: the applied request is remembered, the same one again restarts nothing, a
//! different one restarts k3s and says what changed. [`K3s::uninstall`] stops k3s, runs the
//! official uninstall scripts where present (else does `k3s-killall.sh`'s essential work
//! itself, see `host_paths.rs`) and removes every file it wrote.
//!
//! A child's PID and marker are recorded in the installer's folder, so a k3s left running
//! by an agent that was killed is found and stopped by the next install or uninstall
//! (`continuum-agent uninstall` included) instead of running twice or losing its data dir.
//! [`K3s::shutdown`] cancels an install or uninstall in flight and stops a child within
//! [`crate::install::K3S_SHUTDOWN_BOUND`].
//!
//! # Layout
//! - this file: [`K3s`], install and shutdown; `uninstall.rs`: the uninstall steps.
//! - `request.rs`: the request checked into a plan; `labels.rs`: label syntax.
//! - `command.rs`: the k3s and kubectl command lines, the unit and its EnvironmentFile.
//! - `daemon.rs`: k3s as a child or as a unit; `running.rs`: what runs, readiness;
//!   `nodes.rs`: the node list.
//! - `leftovers.rs`: the child's record, orphans, process-tree sweeps; `host_paths.rs`: mounts,
//!   links and folders k3s leaves ([`HostPaths`]).
//! - `state.rs`: the remembered request.

mod command;
mod daemon;
mod host_paths;
mod labels;
mod leftovers;
mod nodes;
mod request;
mod running;
mod state;
mod uninstall;

use std::path::{Path, PathBuf};

use proto::agent::v1 as pb;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use self::daemon::{Supervised, Systemd};
pub use self::host_paths::HostPaths;
use self::state::{Applied, Remembered};
use super::system::{find_executable, is_bare_name, private_dir};
use super::{InstallError, RELEASE_WAIT};
use domain::AgentConfig;

/// Where systemd units go.
const UNIT_DIR: &str = "/etc/systemd/system";
/// Both units, server's first.
const UNITS: [&str; 2] = ["k3s.service", "k3s-agent.service"];

/// How k3s is kept running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Supervision {
    /// As a systemd unit (`k3s.service` / `k3s-agent.service`): it outlives the agent.
    Systemd,
    /// As the agent's child, stopped at agent shutdown.
    Child,
}

impl Supervision {
    /// Systemd where [`crate::install::use_systemd`] says so (systemd is PID 1 and the
    /// agent is in its network namespace), a child elsewhere.
    pub fn detect() -> Self {
        if super::use_systemd() {
            Supervision::Systemd
        } else {
            Supervision::Child
        }
    }
}

/// This node's k3s.
#[derive(Debug)]
pub struct K3s {
    configured_binary: PathBuf,
    agent_name: String,
    data_dir: PathBuf,
    kubeconfig: PathBuf,
    /// `<state_dir>/cluster`: the remembered request, the child's log and record.
    own_dir: PathBuf,
    supervision: Supervision,
    systemd: Systemd,
    /// Where k3s leaves mounts, links and folders, cleaned at uninstall without killall.
    host: HostPaths,
    /// The child, in child mode. The lock also makes installs and uninstalls take turns.
    child: Mutex<Option<Supervised>>,
    /// Cancelled by [`K3s::shutdown`]: an install or uninstall in flight gives way.
    shutting_down: CancellationToken,
}

impl K3s {
    /// From the agent's configuration (its `[k3s]` settings and state folder); runs k3s as
    /// [`Supervision::detect`] says.
    pub fn new(config: &AgentConfig) -> Self {
        Self::with_supervision(config, Supervision::detect())
    }

    /// As [`K3s::new`], with the supervision chosen by the caller (tests use
    /// [`Supervision::Child`] whatever PID 1 is).
    pub fn with_supervision(config: &AgentConfig, supervision: Supervision) -> Self {
        K3s {
            configured_binary: config.k3s.binary.clone(),
            agent_name: config.name.clone(),
            data_dir: config.k3s_data_dir(),
            kubeconfig: config.kubeconfig_path(),
            own_dir: config.state_dir.join("cluster"),
            supervision,
            systemd: Systemd::new(PathBuf::from(UNIT_DIR)),
            host: HostPaths::host(),
            child: Mutex::new(None),
            shutting_down: CancellationToken::new(),
        }
    }

    /// The same installer with k3s's host paths (mounts, links, folders cleaned at
    /// uninstall) set to `host`: tests point them into a folder of their own.
    pub fn with_host_paths(mut self, host: HostPaths) -> Self {
        self.host = host;
        self
    }

    /// Brings k3s up as the request says and, on the server, waits until this node is
    /// listed Ready. The same request again, with k3s running, restarts nothing.
    pub async fn install(
        &self,
        request: pb::InstallClusterRequest,
    ) -> Result<pb::ClusterStatus, InstallError> {
        let (plan, timeout) = request::validate(&request, &self.agent_name)?;
        let binary = locate_binary(&self.configured_binary)?;
        let wanted = Applied {
            plan,
            binary,
            supervision: self.supervision,
        };
        super::unless_shutting_down(&self.shutting_down, self.install_locked(wanted, timeout)).await
    }

    async fn install_locked(
        &self,
        wanted: Applied,
        timeout: std::time::Duration,
    ) -> Result<pb::ClusterStatus, InstallError> {
        let role = wanted.plan.role.name();
        let agent_note = match wanted.plan.role {
            request::ClusterRole::Agent { .. } => format!("; {}", running::AGENT_JOIN_NOTE),
            request::ClusterRole::Server { .. } => String::new(),
        };
        let mut child = self.child.lock().await;
        let remembered = state::load(&self.request_path());
        let running = self.running_role(&mut child).await;
        if remembered.applied() == Some(&wanted) && running == Some(role) {
            let pid = self.pid(&child, &wanted.plan.role).await;
            let nodes = self.wait_ready(&mut child, &wanted, timeout, false).await?;
            tracing::info!(role, pid, "k3s already running with this request");
            return Ok(status(
                role,
                pid,
                format!(
                    "already running with this request (pid {pid}); nothing restarted{agent_note}"
                ),
                nodes,
            ));
        }
        let mut detail = why_restart(&remembered, running, &wanted);
        if let Some(stopped) = self.stop_daemon(&mut child, Some(&wanted)).await? {
            detail.push(stopped);
        }
        private_dir(&self.own_dir)?;
        private_dir(&self.data_dir)?;
        state::save(&self.request_path(), &wanted)?;
        self.start(&mut child, &wanted).await?;
        let nodes = self.wait_ready(&mut child, &wanted, timeout, true).await?;
        // Read once ready: a unit started without blocking may not have its process yet (a
        // real node reported pid 0).
        let pid = self.pid(&child, &wanted.plan.role).await;
        detail.push(format!("started k3s {role} (pid {pid}){agent_note}"));
        tracing::info!(role, pid, node = %wanted.plan.node_name, "k3s up");
        Ok(status(role, pid, detail.join("; "), nodes))
    }

    /// Stops a k3s child at agent shutdown (a unit keeps running: it is installed), within
    /// [`crate::install::K3S_SHUTDOWN_BOUND`]: an install or uninstall in flight is
    /// cancelled first, and later calls are refused. The remembered request stays, so the
    /// same request after a restart starts k3s again.
    pub async fn shutdown(&self) {
        self.shutting_down.cancel();
        if self.supervision == Supervision::Systemd {
            return;
        }
        let child = match tokio::time::timeout(RELEASE_WAIT, self.child.lock()).await {
            Ok(mut child) => child.take(),
            Err(_) => {
                tracing::warn!(
                    "a cancelled k3s call did not let go within {RELEASE_WAIT:?}; stopping \
                     k3s from its record"
                );
                None
            }
        };
        // Without a child, the record still names a k3s whose stop the cancelled call had
        // begun (its child was killed when the call was dropped), or one an earlier agent
        // left: what it started is swept.
        let how = match child {
            Some(running) => Some(running.stop().await),
            None => leftovers::stop_recorded(&self.record_path()).await,
        };
        if let Some(how) = how {
            tracing::info!(%how, "k3s stopped at agent shutdown");
        }
    }

    fn request_path(&self) -> PathBuf {
        self.own_dir.join("request.json")
    }

    fn log_path(&self) -> PathBuf {
        self.own_dir.join("k3s.log")
    }

    /// The running child's PID and marker (see `leftovers.rs`).
    fn record_path(&self) -> PathBuf {
        self.own_dir.join("k3s.pid.json")
    }

    /// Stops whatever k3s runs (this agent's child, a child an earlier agent left running,
    /// the units), keeping the unit `wanted` will use and removing the other one (a role
    /// change); None when nothing ran.
    async fn stop_daemon(
        &self,
        child: &mut Option<Supervised>,
        wanted: Option<&Applied>,
    ) -> Result<Option<String>, InstallError> {
        let mut done = Vec::new();
        if let Some(running) = child.take() {
            done.push(running.stop().await);
        }
        if let Some(orphan) = leftovers::stop_recorded(&self.record_path()).await {
            done.push(orphan);
        }
        if self.supervision == Supervision::Systemd {
            let keep = wanted.map(|w| command::unit_name(&w.plan.role));
            for unit in UNITS {
                if keep == Some(unit) {
                    if self.systemd.is_active(unit).await {
                        self.systemd.stop(unit).await?;
                        done.push(format!("stopped {unit}"));
                    }
                } else if self.systemd.is_ours(unit) {
                    self.systemd.remove(unit).await?;
                    done.push(format!("removed {unit}"));
                } else if self.systemd.is_active(unit).await {
                    // Written by someone else (the official installer): stopped, not removed.
                    self.systemd.stop(unit).await?;
                    done.push(format!("stopped {unit} (not written by this agent)"));
                }
            }
        }
        Ok((!done.is_empty()).then(|| done.join("; ")))
    }

    /// Starts k3s for `wanted`.
    async fn start(
        &self,
        child: &mut Option<Supervised>,
        wanted: &Applied,
    ) -> Result<(), InstallError> {
        let role = &wanted.plan.role;
        let line = command::daemon_line(
            &wanted.binary,
            &wanted.plan,
            &self.data_dir,
            &self.kubeconfig,
        );
        match self.supervision {
            Supervision::Child => {
                let started = Supervised::start(
                    role.name(),
                    &line,
                    &self.own_dir,
                    &self.log_path(),
                    &self.record_path(),
                )?;
                *child = Some(started);
                Ok(())
            }
            Supervision::Systemd => {
                let unit = command::unit_name(role);
                let env_path = self.systemd.env_path(unit);
                let unit_text = command::unit_text(role, &line, &env_path);
                self.systemd
                    .install(unit, &unit_text, &command::env_file_text(&line))
                    .await
            }
        }
    }
}

/// Why k3s is (re)started, as the first words of the status detail.
fn why_restart(remembered: &Remembered, running: Option<&str>, wanted: &Applied) -> Vec<String> {
    let role = wanted.plan.role.name();
    let reason = match (remembered, running) {
        (Remembered::Nothing, None) => return Vec::new(),
        (Remembered::Nothing, Some(other)) => format!(
            "k3s {other} was running without a request this agent remembers (started by hand \
             or by the official installer)"
        ),
        (Remembered::Unreadable(why), _) => {
            format!("the remembered request could not be read ({why})")
        }
        (Remembered::Applied(before), running) if before == wanted => format!(
            "k3s {role} was not running{} (it had exited, or the agent restarted)",
            running.map_or(String::new(), |r| format!(" (k3s {r} was)"))
        ),
        (Remembered::Applied(before), running) => {
            let mut changed = wanted.plan.changes_from(&before.plan);
            if before.binary != wanted.binary {
                changed.push("the k3s binary");
            }
            if before.supervision != wanted.supervision {
                changed.push("the supervision (systemd or child)");
            }
            let when = if running.is_some() {
                ""
            } else {
                " while k3s was not running"
            };
            format!("the request changed ({}){when}", changed.join(", "))
        }
    };
    vec![reason]
}

fn status(role: &str, pid: u32, detail: String, nodes: Vec<pb::ClusterNode>) -> pb::ClusterStatus {
    pb::ClusterStatus {
        running: true,
        role: role.to_string(),
        pid,
        detail,
        nodes,
    }
}

/// The k3s executable: a bare name is looked up on PATH, a path must be executable.
fn locate_binary(configured: &Path) -> Result<PathBuf, InstallError> {
    if let Some(found) = find_executable(configured) {
        return Ok(found);
    }
    let bare = is_bare_name(configured);
    let looked = if bare {
        format!("{} is not on PATH", configured.display())
    } else {
        format!("no executable at {}", configured.display())
    };
    let asset = match std::env::consts::ARCH {
        "aarch64" => "k3s-arm64",
        "arm" => "k3s-armhf",
        _ => "k3s",
    };
    let place = if bare {
        Path::new("/usr/local/bin/k3s")
    } else {
        configured
    };
    Err(InstallError::Missing(format!(
        "k3s is not installed: {looked}. Install it with the official installer \
         (curl -sfL https://get.k3s.io | INSTALL_K3S_SKIP_START=true INSTALL_K3S_SKIP_ENABLE=true sh -), \
         or place the offline binary {asset} from https://github.com/k3s-io/k3s/releases at {} \
         (mode 0755; set [k3s] binary in agent.toml if it lives elsewhere)",
        place.display()
    )))
}
