//! Applying a network scenario on the nodes a broker's tests involve, holding it under
//! renewed leases while the cells run, and clearing it afterwards.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::NetemParams;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::agents::AgentHandle;
use super::events::{Events, RunEvent};
use super::guard::{Undo, spawn_detached};
use super::impairment;
use super::testbed::InForce;
use crate::plan::{BrokerEntry, Plan, ScenarioEntry};
use crate::results::AppliedNetem;

/// netem leases: a controller that dies leaves the links impaired at most this long.
const LEASE: Duration = Duration::from_secs(30);
/// A renewal that takes longer has failed: the agent is silent.
const RENEW_WITHIN: Duration = Duration::from_secs(5);
/// A clear that takes longer is left to the lease.
const UNDO_WITHIN: Duration = Duration::from_secs(10);

/// What became of a scenario.
#[derive(Debug)]
pub enum ScenarioOutcome {
    /// Nothing to emulate (all totals zero).
    Unimpaired,
    /// Applied and verified on these nodes; renewed until the [`Netem`] guard is undone.
    Applied(Vec<AppliedNetem>),
    /// Cannot be emulated on this testbed (the reason says why).
    Skipped(String),
}

/// Why a scenario's emulation is no longer assured: the first renewal that failed. Cells
/// that end after it cannot be recorded as emulated.
#[derive(Debug, Clone, Default)]
pub(super) struct Lapse {
    reason: Arc<Mutex<Option<String>>>,
    /// The nodes whose leases are renewed, once netem is applied on them all.
    nodes: Arc<Mutex<Vec<AgentHandle>>>,
}

impl Lapse {
    /// The failed renewal, once one failed.
    pub(super) fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Renews every lease once more, now (all nodes at once), and then says whether the
    /// emulation lapsed: a cell checks this as it ends, so a lapse in its last second fails
    /// it too. Once it has lapsed it stays so, and a silent agent is not waited for again.
    pub(super) async fn confirm(&self) -> Option<String> {
        if let Some(reason) = self.reason() {
            return Some(reason);
        }
        renew_all(self).await;
        self.reason()
    }

    fn record(&self, reason: String) {
        let mut first = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(reason);
        }
    }
}

/// netem of one scenario on the nodes it was applied to (or is being applied to), renewed
/// until undone: the run's netem guard.
#[derive(Debug)]
pub(super) struct Netem {
    scenario: String,
    nodes: Vec<AgentHandle>,
    renewing: Option<(CancellationToken, JoinHandle<()>)>,
    renew_every: Duration,
    lapse: Lapse,
    events: Events,
}

impl Netem {
    /// Nothing applied yet; once applied, leases are renewed every `renew_every`.
    pub(super) fn new(scenario: &str, events: Events, renew_every: Duration) -> Self {
        Netem {
            scenario: scenario.to_string(),
            nodes: Vec::new(),
            renewing: None,
            renew_every,
            lapse: Lapse::default(),
            events,
        }
    }

    /// Whether (and why) the emulation lapsed; the handle stays valid after `self` is gone.
    pub(super) fn lapse(&self) -> Lapse {
        self.lapse.clone()
    }
}

impl Undo for Netem {
    fn describe(&self) -> String {
        let nodes: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        format!(
            "netem of scenario {} on {}",
            self.scenario,
            nodes.join(", ")
        )
    }

    /// Stops renewing and clears netem on every node (errors logged: the leases clear it
    /// anyway within their time).
    async fn undo(&mut self) {
        if let Some((stop, renewer)) = self.renewing.take() {
            stop.cancel();
            let _ = renewer.await;
        }
        if self.nodes.is_empty() {
            return;
        }
        let mut cleared = Vec::new();
        // One at a time, each taken off the list once cleared: an abandoned undo leaves the
        // rest to `abandon`.
        while let Some(node) = self.nodes.last().cloned() {
            cleared.push(node.name.clone());
            clear_on(node).await;
            self.nodes.pop();
        }
        let scenario = self.scenario.clone();
        self.events
            .emit(RunEvent::NetemCleared {
                scenario,
                nodes: cleared,
            })
            .await;
    }

    fn abandon(&mut self) {
        if let Some((stop, _)) = self.renewing.take() {
            stop.cancel();
        }
        let what = self.describe();
        let nodes = std::mem::take(&mut self.nodes);
        spawn_detached(&what, async move {
            for node in nodes {
                clear_on(node).await;
            }
        });
    }
}

/// The nodes a scenario for `broker` involves: the broker's node, its entry node and the
/// loadgen nodes of the plan's tests.
fn involved<'a>(plan: &'a Plan, broker: &'a BrokerEntry) -> BTreeSet<&'a str> {
    let mut involved: BTreeSet<&str> = plan
        .tests
        .iter()
        .flat_map(|t| t.loadgen.iter().map(String::as_str))
        .collect();
    involved.extend(broker.node.as_deref());
    involved.extend(broker.entry.as_deref());
    involved
}

/// Why `scenario` cannot be emulated on `involved`, if it cannot.
fn not_emulable(
    scenario: &ScenarioEntry,
    involved: &BTreeSet<&str>,
    agents: &HashMap<String, AgentHandle>,
) -> Result<Option<String>, String> {
    // Nodes that fell back to agents on loopback have no link, whatever netem could do there:
    // it would go on the machine's own loopback.
    if let Some(reason) = involved
        .iter()
        .find_map(|name| agents.get(*name)?.unlinked.as_deref())
    {
        return Ok(Some(format!("scenario {}: {reason}", scenario.name)));
    }
    if involved.len() < 2 {
        let only = involved.iter().next().copied().unwrap_or("?");
        return Ok(Some(format!(
            "scenario {}: load and broker share node {only}, so there is no link to emulate",
            scenario.name
        )));
    }
    for name in involved {
        let node = agents
            .get(*name)
            .ok_or_else(|| format!("node {name} has no agent"))?;
        if !node.netem_available() {
            return Ok(Some(format!(
                "scenario {}: node {name} cannot emulate ({})",
                scenario.name,
                node.netem_detail()
            )));
        }
    }
    Ok(None)
}

/// Why `scenario` cannot be emulated for `broker` on this testbed, known before anything is
/// applied; `None` when it can (or needs no emulation).
pub(super) fn cannot_emulate(
    plan: &Plan,
    scenario: &ScenarioEntry,
    broker: &BrokerEntry,
    agents: &HashMap<String, AgentHandle>,
) -> Option<String> {
    if !impairment::impairs(scenario) {
        return None;
    }
    not_emulable(scenario, &involved(plan, broker), agents).unwrap_or(None)
}

/// Applies `scenario` for `broker` on the nodes involved, each node added to `netem` before
/// it is asked (a request that times out may still have been carried out).
pub(super) async fn apply(
    plan: &Plan,
    scenario: &ScenarioEntry,
    broker: &BrokerEntry,
    agents: &HashMap<String, AgentHandle>,
    netem: &mut Netem,
) -> Result<ScenarioOutcome, String> {
    if !impairment::impairs(scenario) {
        return Ok(ScenarioOutcome::Unimpaired);
    }
    let broker_node = broker.node.as_deref();
    let involved = involved(plan, broker);
    if let Some(reason) = not_emulable(scenario, &involved, agents)? {
        return Ok(ScenarioOutcome::Skipped(reason));
    }
    let mut applied = Vec::new();
    for name in involved {
        let node = agents
            .get(name)
            .cloned()
            .ok_or_else(|| format!("node {name} has no agent"))?;
        let Some(params) = impairment::on_node(scenario, name, broker_node) else {
            continue;
        };
        netem.nodes.push(node.clone());
        let state = apply_on(node, &params, plan.timeouts.netem).await?;
        applied.push(AppliedNetem {
            broker: broker.name.clone(),
            scenario: scenario.name.clone(),
            node: name.to_string(),
            interface: state.interface,
            asked: impairment::asked_record(&params),
            read_back: state.read_back,
        });
    }
    *netem.lapse.nodes.lock().unwrap_or_else(|p| p.into_inner()) = netem.nodes.clone();
    let stop = CancellationToken::new();
    let renewer = tokio::spawn(renew(netem.renew_every, stop.clone(), netem.lapse.clone()));
    netem.renewing = Some((stop, renewer));
    Ok(ScenarioOutcome::Applied(applied))
}

/// ApplyNetem on `node` under a lease, within `timeout`.
async fn apply_on(
    node: AgentHandle,
    params: &NetemParams,
    timeout: Duration,
) -> Result<InForce, String> {
    let name = &node.name;
    tokio::time::timeout(timeout, node.agent.apply_netem(params, LEASE))
        .await
        .map_err(|_| format!("node {name}: applying netem took longer than {timeout:?}"))?
        .map_err(|error| format!("node {name}: {}", error.message()))
}

/// ClearNetem on `node` (errors logged: its lease clears it anyway within its time).
async fn clear_on(node: AgentHandle) {
    match tokio::time::timeout(UNDO_WITHIN, node.agent.clear_netem()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::warn!(node = %node.name, %error, "clearing netem; its lease will");
        }
        Err(_) => tracing::warn!(node = %node.name, "clearing netem timed out; its lease will"),
    }
}

/// Renews the lease of every node in `lapse` each `every` until `stop`; the first renewal
/// that fails or times out is recorded in `lapse` (the agent went silent or lost the
/// lease), and renewing goes on.
async fn renew(every: Duration, stop: CancellationToken, lapse: Lapse) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        renew_all(&lapse).await;
    }
}

/// Renews the lease of every node in `lapse` at once, so one silent agent delays the others'
/// renewals by nothing and a check by at most [`RENEW_WITHIN`].
async fn renew_all(lapse: &Lapse) {
    let nodes = lapse
        .nodes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    futures_util::future::join_all(nodes.iter().map(|node| renew_on(node, lapse))).await;
}

/// RenewNetem on `node`, within [`RENEW_WITHIN`]; a failure is recorded in `lapse`.
async fn renew_on(node: &AgentHandle, lapse: &Lapse) {
    let failure = match tokio::time::timeout(RENEW_WITHIN, node.agent.renew_netem()).await {
        Ok(Ok(())) => return,
        Ok(Err(error)) => error.message().to_string(),
        Err(_) => format!("no answer within {RENEW_WITHIN:?}"),
    };
    tracing::error!(node = %node.name, problem = %failure, "renewing the netem lease failed");
    lapse.record(format!(
        "the netem lease on node {} could not be renewed ({failure}), so the link was no \
         longer assured to be emulated",
        node.name
    ));
}
