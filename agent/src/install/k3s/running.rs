//! What runs now and whether it is ready: the running role and PID, the server's node
//! list polled until this node is Ready, how a k3s that stopped ended.

use std::time::Duration;

use proto::agent::v1 as pb;
use tokio::time::Instant;

use super::daemon::Supervised;
use super::request::ClusterRole;
use super::state::Applied;
use super::{K3s, Supervision, UNITS, command, nodes};
use crate::install::InstallError;
use host::log_tail;

/// How often readiness is re-checked.
const POLL: Duration = Duration::from_millis(250);
/// How long a freshly started agent must stay up to count as running (a bad flag or an
/// unreadable data dir makes k3s exit within a second).
const AGENT_SETTLE: Duration = Duration::from_secs(2);
/// One `kubectl get nodes` call.
const KUBECTL_LIMIT: Duration = Duration::from_secs(10);
/// Said of every agent, whose own process cannot tell whether it joined.
pub(super) const AGENT_JOIN_NOTE: &str = "joining is verified by the server's node list";

impl K3s {
    /// The role of the k3s daemon that runs now, if any.
    pub(super) async fn running_role(
        &self,
        child: &mut Option<Supervised>,
    ) -> Option<&'static str> {
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

    pub(super) async fn pid(&self, child: &Option<Supervised>, role: &ClusterRole) -> u32 {
        match self.supervision {
            Supervision::Child => child.as_ref().map_or(0, Supervised::pid),
            Supervision::Systemd => self.systemd.main_pid(command::unit_name(role)).await,
        }
    }

    /// On the server, waits until this node is listed Ready and returns the node list; on
    /// an agent just started, waits [`AGENT_SETTLE`] and checks it is still up.
    pub(super) async fn wait_ready(
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
            // retrying (its log says which), so the status claims no more than "started"
            // ([`AGENT_JOIN_NOTE`]).
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

    pub(super) async fn log_tail(&self, role: &ClusterRole) -> String {
        match self.supervision {
            Supervision::Child => log_tail(&self.log_path(), 20),
            Supervision::Systemd => self.systemd.journal_tail(command::unit_name(role)).await,
        }
    }
}
