//! Starting a broker for a run and removing it after: native and embedded on their node,
//! kubernetes through the headnode's agent (which has the cluster's kubectl) pinned to its
//! node, external only resolved. A broker entered through another node gets its entry hop
//! there: kube-proxy for a kubernetes broker, a forwarding hop the entry node's agent runs
//! (under the same lease) for a native or embedded one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use domain::broker::DEFAULT_NAMESPACE;
use domain::{BrokerKind, BrokerOptions, BrokerSpec};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::agents::AgentHandle;
use super::events::{Events, RunEvent};
use super::guard::{Undo, spawn_detached};
use super::testbed::{AgentError, Started};
use crate::plan::{BrokerEntry, BrokerKind as PlanKind, BrokerSetup, Plan};

/// A broker that does not stop within this is left to its agent (which stops its brokers
/// when it stops); generous, as removing a kubernetes broker waits for its pod.
const UNDO_WITHIN: std::time::Duration = std::time::Duration::from_secs(300);
/// Brokers run under a lease the run renews: a controller that dies (SIGKILL) leaves its
/// broker running at most this long.
pub const BROKER_LEASE: Duration = Duration::from_secs(30);
/// The lease is renewed this often.
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// A renewal that takes longer failed.
const RENEW_WITHIN: Duration = Duration::from_secs(5);

/// The node whose agent deploys `broker` and whose Metrics watch it: its own node, or the
/// headnode for a kubernetes broker; none for an external one.
pub(super) fn deploying_node<'a>(plan: &'a Plan, broker: &'a BrokerEntry) -> Option<&'a str> {
    match broker.setup()? {
        BrokerSetup::External { .. } => None,
        BrokerSetup::Kubernetes { .. } => plan.testbed.headnode.as_deref(),
        BrokerSetup::Native { node, .. } | BrokerSetup::Embedded { node } => Some(node),
    }
}

/// A broker ready for its cells: where clients dial it, and what the agent said it runs
/// (product, process or image, node) for the manifest.
#[derive(Debug, Clone)]
pub(super) struct Deployed {
    pub address: SocketAddr,
    /// Where WebSocket clients dial it, when it has such a listener.
    pub websocket: Option<SocketAddr>,
    /// Where QUIC clients dial it, when it has such a listener.
    pub quic: Option<SocketAddr>,
    /// The CA of the QUIC listener's certificate, when its agent made it (a deployed
    /// broker); `None` for an external broker, whose CA the test names.
    pub quic_ca_pem: Option<String>,
    pub detail: String,
    /// What the broker supports, as probed when it was started (none for an external one).
    pub capabilities: Option<loadgen::capabilities::Capabilities>,
}

impl From<Started> for Deployed {
    fn from(started: Started) -> Self {
        Deployed {
            address: started.address,
            websocket: started.websocket,
            quic: started.quic.as_ref().map(|(address, _)| *address),
            quic_ca_pem: started.quic.map(|(_, pem)| pem),
            detail: started.detail,
            capabilities: started.capabilities,
        }
    }
}

impl Deployed {
    /// Where a cell's clients dial it.
    pub fn endpoints(&self) -> Endpoints<'_> {
        Endpoints {
            mqtt: self.address,
            websocket: self.websocket,
            quic: self.quic,
            quic_ca_pem: self.quic_ca_pem.as_deref(),
        }
    }
}

/// A deployed broker's listeners, as a cell's workload dials them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Endpoints<'a> {
    /// MQTT over TCP.
    pub mqtt: SocketAddr,
    /// MQTT over WebSocket, when the broker has such a listener.
    pub websocket: Option<SocketAddr>,
    /// MQTT over QUIC (UDP), when the broker has such a listener.
    pub quic: Option<SocketAddr>,
    /// The CA a deployed broker's QUIC listener presents (its agent made it).
    pub quic_ca_pem: Option<&'a str>,
}

/// The first address `host:port` resolves to.
async fn resolve(address: &str) -> Option<SocketAddr> {
    tokio::net::lookup_host(address)
        .await
        .ok()
        .and_then(|mut addresses| addresses.next())
}

/// Why a broker could not be deployed, which says what becomes of its cells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DeployError {
    /// An optional broker whose product is not installed on its node: its cells are skipped.
    NotInstalled(String),
    /// Deploying failed: its cells fail.
    Failed(String),
}

impl DeployError {
    /// Why.
    pub(super) fn reason(&self) -> &str {
        match self {
            DeployError::NotInstalled(reason) | DeployError::Failed(reason) => reason,
        }
    }
}

/// Starts the broker on its node (or records an external one).
pub(super) async fn deploy(
    plan: &Plan,
    broker: &BrokerEntry,
    agents: &HashMap<String, AgentHandle>,
) -> Result<Deployed, DeployError> {
    let setup = broker
        .setup()
        .ok_or_else(|| DeployError::Failed(format!("broker {}: not a valid entry", broker.name)))?;
    if let BrokerSetup::External {
        address,
        websocket,
        quic,
    } = setup
    {
        return external(address, websocket, quic).await;
    }
    let node = deploying_node(plan, broker).unwrap_or_default();
    let agent = agents
        .get(node)
        .ok_or_else(|| DeployError::Failed(format!("node {node} has no agent")))?;
    let spec = broker_spec(plan, broker, setup, agent.data_address)?;
    let started = start_on(plan, agent, &spec, broker.optional).await?;
    let Some(entry) = entered_elsewhere(broker) else {
        return Ok(Deployed::from(started));
    };
    let via = agents
        .get(entry)
        .ok_or_else(|| DeployError::Failed(format!("entry node {entry} has no agent")))?;
    if hop_node(broker).is_none() {
        // kube-proxy forwards the same NodePort on the entry node (the Service is asked to
        // answer on every node).
        return Ok(Deployed {
            address: SocketAddr::new(via.data_address, started.address.port()),
            websocket: started
                .websocket
                .map(|ws| SocketAddr::new(via.data_address, ws.port())),
            quic: None,
            quic_ca_pem: None,
            detail: started.detail,
            capabilities: started.capabilities,
        });
    }
    enter_through(plan, broker, agent, via, entry, started).await
}

/// An external broker: only its addresses resolved.
async fn external(
    address: &str,
    websocket: Option<&str>,
    quic: Option<&str>,
) -> Result<Deployed, DeployError> {
    let resolved = resolve(address).await.ok_or_else(|| {
        DeployError::Failed(format!("external address {address:?} does not resolve"))
    })?;
    let websocket = match websocket {
        None => None,
        Some(ws) => Some(resolve(ws).await.ok_or_else(|| {
            DeployError::Failed(format!(
                "external WebSocket address {ws:?} does not resolve"
            ))
        })?),
    };
    let quic = match quic {
        None => None,
        Some(address) => Some(resolve(address).await.ok_or_else(|| {
            DeployError::Failed(format!(
                "external QUIC address {address:?} does not resolve"
            ))
        })?),
    };
    Ok(Deployed {
        address: resolved,
        websocket,
        quic,
        quic_ca_pem: None,
        detail: "external: run by someone else".to_string(),
        capabilities: None,
    })
}

/// The forwarding hop to the `started` broker (on `agent`) on its entry node `entry`
/// (`via`); the broker is stopped again when the hop cannot start.
async fn enter_through(
    plan: &Plan,
    broker: &BrokerEntry,
    agent: &AgentHandle,
    via: &AgentHandle,
    entry: &str,
    started: Started,
) -> Result<Deployed, DeployError> {
    let hop = BrokerSpec {
        name: entry_hop_name(broker),
        kind: BrokerKind::Forward {
            target: started.address,
        },
        bind: via.data_address,
        port: 0,
        options: BrokerOptions::default(),
    };
    match start_on(plan, via, &hop, false).await {
        // The hop relays the MQTT port only (a plan with WebSocket or QUIC tests refuses such
        // an entry at validation).
        Ok(hop_started) => Ok(Deployed {
            address: hop_started.address,
            websocket: None,
            quic: None,
            quic_ca_pem: None,
            detail: format!(
                "{}; entered through {entry}: {}",
                started.detail, hop_started.detail
            ),
            // Probed on the broker's own node: the hop relays the same broker.
            capabilities: started.capabilities,
        }),
        Err(error) => {
            // Not guarded yet: stopped here, so the broker does not wait for its lease.
            stop_broker(agent.clone(), broker.name.clone()).await;
            Err(DeployError::Failed(format!(
                "the entry hop on {entry}: {}",
                error.reason()
            )))
        }
    }
}

/// The name of `broker`'s forwarding hop on its entry node.
pub(super) fn entry_hop_name(broker: &BrokerEntry) -> String {
    format!("{}-entry", broker.name)
}

/// StartBroker of `spec` on `agent` under a lease. A product that is not installed skips an
/// `optional` broker's cells; every other error fails them.
async fn start_on(
    plan: &Plan,
    agent: &AgentHandle,
    spec: &BrokerSpec,
    optional: bool,
) -> Result<Started, DeployError> {
    let started = tokio::time::timeout(
        // Saturating: a plan's timeout may be as long as a Duration holds. Beyond it: the
        // agent's capability probe, bounded at 20 s, and 5 s for the reply.
        plan.timeouts
            .deploy
            .saturating_add(std::time::Duration::from_secs(25)),
        agent.agent.start_broker(spec, BROKER_LEASE),
    )
    .await
    .map_err(|_| DeployError::Failed(format!("not ready within {:?}", plan.timeouts.deploy)))?;
    started.map_err(|error| match error {
        AgentError::Unmet(reason) if optional => DeployError::NotInstalled(reason),
        error => DeployError::Failed(error.message().to_string()),
    })
}

/// A deployed broker, its lease renewed until it is removed when undone: the run's deploy
/// guard.
#[derive(Debug)]
pub(super) struct Deployment {
    broker: String,
    /// What runs for it, each on its agent (the broker, and its forwarding hop when it is
    /// entered through another node); empty for an external broker, or once removed.
    instances: Vec<(AgentHandle, String)>,
    renewing: Vec<(CancellationToken, JoinHandle<()>)>,
    events: Events,
}

impl Deployment {
    /// `broker`, just deployed by the agent of its deploying node (and its forwarding hop,
    /// by the entry node's).
    pub(super) fn new(
        plan: &Plan,
        broker: &BrokerEntry,
        agents: &HashMap<String, AgentHandle>,
        events: Events,
    ) -> Self {
        let mut instances: Vec<(AgentHandle, String)> = deploying_node(plan, broker)
            .and_then(|n| agents.get(n))
            .map(|agent| (agent.clone(), broker.name.clone()))
            .into_iter()
            .collect();
        if let Some(agent) = hop_node(broker).and_then(|n| agents.get(n)) {
            instances.push((agent.clone(), entry_hop_name(broker)));
        }
        let renewing = instances
            .iter()
            .map(|(agent, name)| {
                let stop = CancellationToken::new();
                let renewer = tokio::spawn(renew(agent.clone(), name.clone(), stop.clone()));
                (stop, renewer)
            })
            .collect();
        Deployment {
            broker: broker.name.clone(),
            instances,
            renewing,
            events,
        }
    }

    fn stop_renewing(&mut self) -> Vec<JoinHandle<()>> {
        self.renewing
            .drain(..)
            .map(|(stop, renewer)| {
                stop.cancel();
                renewer
            })
            .collect()
    }
}

/// Renews `broker`'s lease on `agent` until `stop`; a failed renewal is logged (the agent
/// stops the broker when its lease runs out, and the cells then fail on their own).
async fn renew(agent: AgentHandle, broker: String, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RENEW_EVERY) => {}
        }
        match tokio::time::timeout(RENEW_WITHIN, agent.agent.renew_broker(&broker)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(broker = %broker, %error, "renewing the broker's lease failed")
            }
            Err(_) => tracing::error!(broker = %broker, "renewing the broker's lease timed out"),
        }
    }
}

impl Undo for Deployment {
    fn describe(&self) -> String {
        format!("broker {}", self.broker)
    }

    async fn undo(&mut self) {
        for renewer in self.stop_renewing() {
            let _ = renewer.await;
        }
        if self.instances.is_empty() {
            return;
        }
        // The entry hop first, so no client reaches a broker that is going away through it.
        let mut stopped = true;
        for (agent, name) in self.instances.drain(..).rev() {
            stopped &= stop_broker(agent, name).await;
        }
        if stopped {
            let broker = self.broker.clone();
            self.events.emit(RunEvent::BrokerRemoved { broker }).await;
        }
    }

    fn abandon(&mut self) {
        self.stop_renewing();
        let what = self.describe();
        for (agent, name) in self.instances.drain(..) {
            let stopping = stop_broker(agent, name);
            spawn_detached(&what, async {
                stopping.await;
            });
        }
    }
}

/// StopBroker on `agent`; false when it failed (logged: there is nobody left to return the
/// error to).
async fn stop_broker(agent: AgentHandle, broker: String) -> bool {
    match tokio::time::timeout(UNDO_WITHIN, agent.agent.stop_broker(&broker)).await {
        Ok(Ok(())) => return true,
        Ok(Err(error)) => tracing::warn!(broker = %broker, %error, "stopping the broker"),
        Err(_) => tracing::warn!(broker = %broker, "stopping the broker timed out"),
    }
    false
}

/// The entry node of `broker` when it is not the broker's own node.
fn entered_elsewhere(broker: &BrokerEntry) -> Option<&str> {
    broker
        .entry
        .as_deref()
        .filter(|entry| broker.node.as_deref() != Some(*entry))
}

/// The node whose agent runs `broker`'s forwarding hop: its entry node when that is another
/// node and nothing else forwards there (kube-proxy does for a kubernetes broker).
fn hop_node(broker: &BrokerEntry) -> Option<&str> {
    entered_elsewhere(broker).filter(|_| broker.kind != PlanKind::Kubernetes)
}

/// What the agent is asked to run for `broker` (set up as `setup`), listening on its node's
/// `bind` address.
fn broker_spec(
    plan: &Plan,
    broker: &BrokerEntry,
    setup: BrokerSetup<'_>,
    bind: IpAddr,
) -> Result<BrokerSpec, DeployError> {
    let kind = match setup {
        BrokerSetup::Embedded { .. } => BrokerKind::Embedded,
        // The pod is pinned to the broker's node; the headnode's agent applies it.
        BrokerSetup::Kubernetes { product, node } => BrokerKind::Kubernetes {
            product,
            node: node.to_owned(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            node_port: (broker.port != 0).then_some(broker.port),
            on_every_node: entered_elsewhere(broker).is_some(),
        },
        BrokerSetup::Native { product, .. } => BrokerKind::Native { product },
        BrokerSetup::External { .. } => {
            return Err(DeployError::Failed(format!(
                "broker {}: an external broker is not deployed",
                broker.name
            )));
        }
    };
    Ok(BrokerSpec {
        name: broker.name.clone(),
        kind,
        bind,
        port: broker.port,
        options: BrokerOptions {
            start_deadline: Some(plan.timeouts.deploy),
            websocket_port: plan.websocket_port_of(broker),
            quic_port: plan.quic_port_of(broker),
            quic_delivery: plan
                .quic_port_of(broker)
                .and(broker.quic_delivery)
                .unwrap_or_default(),
            ..BrokerOptions::default()
        },
    })
}
