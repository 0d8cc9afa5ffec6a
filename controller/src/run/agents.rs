//! The run's agents: remote ones reached over mTLS with the controller's identity, and the
//! local one the controller starts itself (on loopback, with a throwaway PKI) when a node
//! says `agent = "local"` — so the quickstart needs nothing installed and nothing set up.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use proto::mtls::Credentials;

use super::error::RunError;
use super::events::{Events, RunEvent};
use super::local_agent::{LocalAgents, start_local_agent};
use super::testbed::{Agent, NodeInfo, Testbed};
use crate::clock::ClockOffset;
use crate::plan::{NodeEntry, Plan};

/// An agent that does not describe itself within this is not used.
const INFO_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// One node's agent, connected.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    /// Node name.
    pub name: String,
    /// Its agent.
    pub agent: Agent,
    /// What the node reported.
    pub info: NodeInfo,
    /// Its clock against ours.
    pub clock: ClockOffset,
    /// Address brokers on this node listen on and clients dial.
    pub data_address: IpAddr,
    /// Why no link of this node can be emulated, whatever its agent says of netem: it was to
    /// be emulated in a namespace and fell back to an agent on loopback (`testbed.fallback`).
    pub unlinked: Option<String>,
}

impl AgentHandle {
    /// Whether netem can be applied on this node.
    pub fn netem_available(&self) -> bool {
        self.info.netem.as_ref().is_some_and(|c| c.available)
    }

    /// Why netem is not available, as the agent said.
    pub fn netem_detail(&self) -> String {
        self.info
            .netem
            .as_ref()
            .map_or_else(|| "not reported".to_string(), |c| c.detail.clone())
    }
}

/// Connects to every node of the plan (starting local agents into `locals`, the run's
/// guard of them), reads Info and measures clocks; an unreachable agent fails the run
/// before anything changes.
pub(super) async fn connect_all(
    plan: &Plan,
    testbed: &dyn Testbed,
    locals: &mut LocalAgents,
    events: &Events,
) -> Result<HashMap<String, AgentHandle>, RunError> {
    let mut agents = HashMap::new();
    let remote_credentials = if plan.nodes.iter().any(NodeEntry::is_remote) {
        let dir = plan
            .pki_dir
            .as_deref()
            .ok_or_else(|| RunError::Plan("pki_dir: needed to reach remote agents".to_string()))?;
        Some(Credentials::load(dir, "controller").map_err(|e| {
            RunError::Plan(format!("pki_dir = {:?}: {e}", dir.display().to_string()))
        })?)
    } else {
        None
    };
    let unlinked = emulate_nodes(plan, locals, events).await?;
    for node in &plan.nodes {
        let (agent, data_address) = if node.is_namespace() && unlinked.is_none() {
            start_emulated(node, locals).await?
        } else if node.is_local() || node.is_namespace() {
            let (local, agent) = start_local_agent(node).await?;
            let address = local.address();
            locals.agents.push(local);
            let name = node.name.clone();
            events
                .emit(RunEvent::LocalAgent {
                    node: name,
                    address,
                })
                .await;
            (
                agent,
                node_data_address(node, IpAddr::V4(Ipv4Addr::LOCALHOST)),
            )
        } else {
            let credentials = remote_credentials
                .as_ref()
                .ok_or_else(|| RunError::Plan("pki_dir missing".to_string()))?;
            let address = node.agent.to_string();
            let connect = crate::agent_client::connect(&address, credentials, None);
            let agent = tokio::time::timeout(plan.timeouts.connect, connect)
                .await
                .map_err(|_| RunError::Agent {
                    node: node.name.clone(),
                    problem: format!(
                        "no answer from {} within {:?}",
                        node.agent, plan.timeouts.connect
                    ),
                })?
                .map_err(|e| RunError::Agent {
                    node: node.name.clone(),
                    problem: e.to_string(),
                })?;
            let host = node.agent.remote_host().unwrap_or(&address);
            let fallback = host
                .trim_matches(['[', ']'])
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
            (agent, node_data_address(node, fallback))
        };
        let agent = testbed.agent(&node.name, agent);
        let mut handle = describe(node, agent, data_address).await?;
        if node.is_namespace() {
            handle.unlinked.clone_from(&unlinked);
        }
        agents.insert(node.name.clone(), handle);
    }
    Ok(agents)
}

/// Makes the namespaces of the nodes this machine emulates (after checking it can), when
/// the plan has any. Where it cannot and the plan falls back to local agents
/// (`testbed.fallback = "local"`), says so once and returns why the nodes have no links.
#[cfg(feature = "local-agent")]
async fn emulate_nodes(
    plan: &Plan,
    locals: &mut LocalAgents,
    events: &Events,
) -> Result<Option<String>, RunError> {
    let nodes: Vec<&NodeEntry> = plan.nodes.iter().filter(|n| n.is_namespace()).collect();
    if nodes.is_empty() {
        return Ok(None);
    }
    if let Some(missing) = super::namespaces::emulation_lacks(plan).await {
        if plan.testbed.fallback == crate::plan::Fallback::None {
            return Err(RunError::Plan(missing.stop_line()));
        }
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let unlinked = format!(
            "emulated links need root and sch_netem ({}): nodes {} run on agents on this \
             machine's loopback, so there is no link to emulate (testbed.fallback = \"local\")",
            missing.short(),
            names.join(", ")
        );
        events.emit(RunEvent::Testbed(unlinked.clone())).await;
        return Ok(Some(unlinked));
    }
    locals.emulated = Some(super::namespaces::NamespaceTestbed::build(&nodes).await?);
    Ok(None)
}

/// Starts an emulated node's agent in its namespace.
#[cfg(feature = "local-agent")]
async fn start_emulated(
    node: &NodeEntry,
    locals: &mut LocalAgents,
) -> Result<(Agent, IpAddr), RunError> {
    match locals.emulated.as_mut() {
        Some(emulated) => emulated.start_agent(node).await,
        None => Err(RunError::Local(format!(
            "node {}: its namespace was not made",
            node.name
        ))),
    }
}

#[cfg(not(feature = "local-agent"))]
async fn emulate_nodes(
    plan: &Plan,
    _locals: &mut LocalAgents,
    _events: &Events,
) -> Result<Option<String>, RunError> {
    match plan.nodes.iter().find(|n| n.is_namespace()) {
        Some(node) => Err(RunError::Plan(format!(
            "node {}: agent = \"namespace\" needs a controller built with the local-agent \
             feature (the default)",
            node.name
        ))),
        None => Ok(None),
    }
}

#[cfg(not(feature = "local-agent"))]
async fn start_emulated(
    node: &NodeEntry,
    _locals: &mut LocalAgents,
) -> Result<(Agent, IpAddr), RunError> {
    Err(RunError::Plan(format!(
        "node {}: agent = \"namespace\" needs the local-agent feature",
        node.name
    )))
}

/// Where brokers on `node` listen and clients dial: `data_address`, else the overlay address
/// (phase 2 puts the data plane on it), else the agent's host.
fn node_data_address(node: &NodeEntry, fallback: IpAddr) -> IpAddr {
    let overlay = node
        .overlay_ip
        .as_deref()
        .and_then(domain::overlay::parse_overlay_cidr)
        .map(|(ip, _)| IpAddr::V4(ip));
    node.data_address.or(overlay).unwrap_or(fallback)
}

/// Reads the agent's Info and measures its clock; the agent must be the node the plan
/// names (a local one answers to any name) with every role the plan uses it as.
async fn describe(
    node: &NodeEntry,
    agent: Agent,
    data_address: IpAddr,
) -> Result<AgentHandle, RunError> {
    let failed = |problem: String| RunError::Agent {
        node: node.name.clone(),
        problem,
    };
    let info = tokio::time::timeout(INFO_WITHIN, agent.info())
        .await
        .map_err(|_| failed(format!("no answer to Info within {INFO_WITHIN:?}")))?
        .map_err(|e| failed(e.message().to_string()))?;
    if !node.is_local() && info.name != node.name {
        return Err(failed(format!(
            "the agent at {} is {:?}, not {:?}",
            node.agent, info.name, node.name
        )));
    }
    if let Some(missing) = node.roles.iter().find(|r| !info.roles.contains(r)) {
        return Err(failed(format!(
            "the plan uses it as {missing}, but its agent does not have that role"
        )));
    }
    let clock: ClockOffset = agent
        .clock(16)
        .await
        .map_err(|e| failed(e.message().to_string()))?;
    Ok(AgentHandle {
        name: node.name.clone(),
        agent,
        info,
        clock,
        data_address,
        unlinked: None,
    })
}
