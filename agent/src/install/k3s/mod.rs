//! k3s, phase 3 of the study: the server on the headnode (control plane only, tainted so
//! brokers run elsewhere), agents on the workers joining it with the cluster's token over the
//! overlay. The executable comes from the official installer or is an offline binary the
//! controller pushed; this installer never downloads anything.
//!
//! [`K3s::install`] checks the request in full, then starts k3s as a unit (systemd is PID 1)
//! or as a supervised child, and on the server waits until the node is listed Ready. It is
//! idempotent: the applied request is remembered, the same one again restarts nothing, a
//! different one restarts k3s and says what changed. [`K3s::uninstall`] stops k3s, runs the
//! official uninstall scripts where present and removes every file it wrote.
//!
//! # Layout
//! - this file: [`K3s`], install and shutdown; `uninstall.rs`: the uninstall steps.
//! - `request.rs`: the request checked into a plan; `labels.rs`: label syntax.
//! - `command.rs`: the k3s and kubectl command lines, the unit and its EnvironmentFile.
//! - `daemon.rs`: k3s as a child or as a unit; `nodes.rs`: the node list.
//! - `state.rs`: the remembered request.

mod command;
mod daemon;
mod labels;
mod nodes;
mod request;
mod state;
mod uninstall;

use std::path::{Path, PathBuf};
use std::time::Duration;

use proto::agent::v1 as pb;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use self::daemon::{Supervised, Systemd};
use self::request::ClusterRole;
use self::state::{Applied, Remembered};
use super::InstallError;
use crate::config::AgentConfig;
use crate::process::log_tail;

/// How often readiness is re-checked.
const POLL: Duration = Duration::from_millis(250);
/// How long a freshly started agent must stay up to count as running (a bad flag or an
/// unreadable data dir makes k3s exit within a second).
const AGENT_SETTLE: Duration = Duration::from_secs(2);
/// One `kubectl get nodes` call.
const KUBECTL_LIMIT: Duration = Duration::from_secs(10);
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
    /// Systemd where it is PID 1, a child elsewhere.
    pub fn detect() -> Self {
        if super::systemd_is_pid1() {
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
    /// `<state_dir>/cluster`: the remembered request and the child's log.
    own_dir: PathBuf,
    supervision: Supervision,
    systemd: Systemd,
    /// The child, in child mode. The lock also makes installs and uninstalls take turns.
    child: Mutex<Option<Supervised>>,
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
            child: Mutex::new(None),
        }
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
        let role = wanted.plan.role.name();
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
                format!("already running with this request (pid {pid}); nothing restarted"),
                nodes,
            ));
        }
        let mut detail = why_restart(&remembered, running, &wanted);
        if let Some(stopped) = self.stop_daemon(&mut child, Some(&wanted)).await? {
            detail.push(stopped);
        }
        state::private_dir(&self.own_dir)?;
        state::private_dir(&self.data_dir)?;
        state::save(&self.request_path(), &wanted)?;
        let pid = self.start(&mut child, &wanted).await?;
        detail.push(format!("started k3s {role} (pid {pid})"));
        let nodes = self.wait_ready(&mut child, &wanted, timeout, true).await?;
        tracing::info!(role, pid, node = %wanted.plan.node_name, "k3s up");
        Ok(status(role, pid, detail.join("; "), nodes))
    }

    /// Stops a k3s child at agent shutdown (a unit keeps running: it is installed). The
    /// remembered request stays, so the same request after a restart starts it again.
    pub async fn shutdown(&self) {
        if let Some(child) = self.child.lock().await.take() {
            let how = child.stop().await;
            tracing::info!(%how, "k3s child stopped at agent shutdown");
        }
    }

    fn request_path(&self) -> PathBuf {
        self.own_dir.join("request.json")
    }

    fn log_path(&self) -> PathBuf {
        self.own_dir.join("k3s.log")
    }

    /// The role of the k3s daemon that runs now, if any.
    async fn running_role(&self, child: &mut Option<Supervised>) -> Option<&'static str> {
        match self.supervision {
            Supervision::Child => {
                let running = child.as_mut()?;
                running.exit_report().is_none().then(|| running.role())
            }
            Supervision::Systemd => {
                for (unit, role) in UNITS.into_iter().zip(["server", "agent"]) {
                    if self.systemd.is_active(unit).await {
                        return Some(role);
                    }
                }
                None
            }
        }
    }

    async fn pid(&self, child: &Option<Supervised>, role: &ClusterRole) -> u32 {
        match self.supervision {
            Supervision::Child => child.as_ref().map_or(0, Supervised::pid),
            Supervision::Systemd => self.systemd.main_pid(command::unit_name(role)).await,
        }
    }

    /// Stops whatever k3s runs, keeping the unit `wanted` will use and removing the other
    /// one (a role change); None when nothing ran.
    async fn stop_daemon(
        &self,
        child: &mut Option<Supervised>,
        wanted: Option<&Applied>,
    ) -> Result<Option<String>, InstallError> {
        let mut done = Vec::new();
        if let Some(running) = child.take() {
            done.push(running.stop().await);
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

    /// Starts k3s for `wanted`; returns its PID.
    async fn start(
        &self,
        child: &mut Option<Supervised>,
        wanted: &Applied,
    ) -> Result<u32, InstallError> {
        let role = &wanted.plan.role;
        let line = command::daemon_line(
            &wanted.binary,
            &wanted.plan,
            &self.data_dir,
            &self.kubeconfig,
        );
        match self.supervision {
            Supervision::Child => {
                let started =
                    Supervised::start(role.name(), &line, &self.own_dir, &self.log_path())?;
                let pid = started.pid();
                *child = Some(started);
                Ok(pid)
            }
            Supervision::Systemd => {
                let unit = command::unit_name(role);
                let env_path = self.systemd.env_path(unit);
                let unit_text = command::unit_text(role, &line, &env_path);
                self.systemd
                    .install(unit, &unit_text, &command::env_file_text(&line))
                    .await?;
                Ok(self.systemd.main_pid(unit).await)
            }
        }
    }

    /// On the server, waits until this node is listed Ready and returns the node list; on
    /// an agent just started, waits [`AGENT_SETTLE`] and checks it is still up.
    async fn wait_ready(
        &self,
        child: &mut Option<Supervised>,
        wanted: &Applied,
        timeout: Duration,
        just_started: bool,
    ) -> Result<Vec<pb::ClusterNode>, InstallError> {
        let role = wanted.plan.role.name();
        let name = &wanted.plan.node_name;
        let started = Instant::now();
        if let ClusterRole::Agent { .. } = wanted.plan.role {
            // Only the server can list nodes; an agent that stays up has joined or keeps
            // retrying (its log says which).
            while just_started && started.elapsed() < AGENT_SETTLE {
                if let Some(report) = self.exit_report(child, &wanted.plan.role).await {
                    return Err(InstallError::Failed(format!(
                        "k3s agent did not stay up: {report}"
                    )));
                }
                tokio::time::sleep(POLL).await;
            }
            return Ok(Vec::new());
        }
        let kubectl = command::kubectl_get_nodes(&wanted.binary, &self.kubeconfig);
        loop {
            if let Some(report) = self.exit_report(child, &wanted.plan.role).await {
                return Err(InstallError::Failed(format!(
                    "k3s {role} stopped before node {name} was Ready: {report}"
                )));
            }
            let left = timeout.saturating_sub(started.elapsed());
            let last = match nodes::list(&kubectl, left.clamp(POLL, KUBECTL_LIMIT)).await {
                Ok(nodes) => match nodes::not_ready_reason(&nodes, name) {
                    None => return Ok(nodes),
                    Some(why) => why,
                },
                Err(why) => why,
            };
            if started.elapsed() >= timeout {
                let tail = self.log_tail(&wanted.plan.role).await;
                return Err(InstallError::Failed(format!(
                    "k3s {role} did not list node {name} Ready within {timeout:?} (it is left \
                     running; the same request waits again); last check: {last}; the end of \
                     its log:\n{tail}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// None while k3s runs; how it ended otherwise.
    async fn exit_report(
        &self,
        child: &mut Option<Supervised>,
        role: &ClusterRole,
    ) -> Option<String> {
        match self.supervision {
            Supervision::Child => match child.as_mut() {
                Some(running) => running.exit_report(),
                None => Some("k3s is not running".into()),
            },
            Supervision::Systemd => {
                let unit = command::unit_name(role);
                if self.systemd.is_active(unit).await {
                    None
                } else {
                    let journal = self.systemd.journal_tail(unit).await;
                    Some(format!("{unit} is not active; its journal:\n{journal}"))
                }
            }
        }
    }

    async fn log_tail(&self, role: &ClusterRole) -> String {
        match self.supervision {
            Supervision::Child => log_tail(&self.log_path(), 20),
            Supervision::Systemd => self.systemd.journal_tail(command::unit_name(role)).await,
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
    let bare = configured.components().count() == 1 && !configured.to_string_lossy().contains('/');
    let found = if bare {
        std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .map(|dir| dir.join(configured))
            .find(|candidate| is_executable(candidate))
    } else {
        Some(configured.to_path_buf()).filter(|path| is_executable(path))
    };
    if let Some(found) = found {
        return std::path::absolute(&found)
            .map_err(|e| InstallError::Failed(format!("{}: {e}", found.display())));
    }
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

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
