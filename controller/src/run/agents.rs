//! The run's agents: remote ones reached over mTLS with the controller's identity, and the
//! local one the controller starts itself (on loopback, with a throwaway PKI) when a node
//! says `agent = "local"` — so the quickstart needs nothing installed and nothing set up.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use proto::mtls::Credentials;
use proto::pki::{CertificateAuthority, IdentitySpec, Overwrite, Role, write_pki};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::RunError;
use crate::clock::{ClockOffset, measure};
use crate::connect::connect_agent;
use crate::plan::{NodeEntry, Plan};

/// One node's agent, connected.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    /// Node name.
    pub name: String,
    /// The gRPC client (cheap to clone).
    pub client: AgentClient<Channel>,
    /// What the node reported.
    pub info: pb::NodeInfo,
    /// Its clock against ours.
    pub clock: ClockOffset,
    /// Address brokers on this node listen on and clients dial.
    pub data_address: IpAddr,
}

impl AgentHandle {
    /// Whether netem can be applied on this node.
    pub fn netem_available(&self) -> bool {
        self.info
            .capabilities
            .as_ref()
            .and_then(|c| c.netem.as_ref())
            .is_some_and(|c| c.available)
    }

    /// Why netem is not available, as the agent said.
    pub fn netem_detail(&self) -> String {
        self.info
            .capabilities
            .as_ref()
            .and_then(|c| c.netem.as_ref())
            .map_or_else(|| "not reported".to_string(), |c| c.detail.clone())
    }
}

/// An agent running inside this process, stopped (netem cleared, brokers stopped) on drop of
/// its token and join of its task.
#[derive(Debug)]
pub struct LocalAgent {
    stop: CancellationToken,
    task: JoinHandle<()>,
    _files: tempfile::TempDir,
}

impl LocalAgent {
    /// Stops the agent and waits until it has undone everything.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Connects to every node of the plan (starting local agents), reads Info and measures
/// clocks; an unreachable agent fails the run before anything changes.
pub async fn connect_all(
    plan: &Plan,
) -> Result<(HashMap<String, AgentHandle>, Vec<LocalAgent>), RunError> {
    let mut agents = HashMap::new();
    let mut locals = Vec::new();
    let remote_credentials = if plan.nodes.iter().any(|n| !n.is_local()) {
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
    for node in &plan.nodes {
        let (client, data_address) = if node.is_local() {
            let (local, client) = start_local_agent(node).await?;
            locals.push(local);
            (
                client,
                node_data_address(node, IpAddr::V4(Ipv4Addr::LOCALHOST))?,
            )
        } else {
            let credentials = remote_credentials
                .as_ref()
                .ok_or_else(|| RunError::Plan("pki_dir missing".to_string()))?;
            let connect = connect_agent(&node.agent, None, credentials);
            let client = tokio::time::timeout(plan.timeouts.connect, connect)
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
            let host = node
                .agent
                .rsplit_once(':')
                .map(|(host, _)| host)
                .unwrap_or(&node.agent);
            let fallback = host
                .trim_matches(['[', ']'])
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
            (client, node_data_address(node, fallback)?)
        };
        let handle = describe(node, client, data_address).await?;
        agents.insert(node.name.clone(), handle);
    }
    Ok((agents, locals))
}

/// Where brokers on `node` listen and clients dial: `data_address`, else the overlay address
/// (phase 2 puts the data plane on it), else the agent's host.
fn node_data_address(node: &NodeEntry, fallback: IpAddr) -> Result<IpAddr, RunError> {
    let overlay = node
        .overlay_ip
        .as_deref()
        .and_then(crate::plan::parse_overlay_cidr)
        .map(|(ip, _)| IpAddr::V4(ip));
    match &node.data_address {
        None => Ok(overlay.unwrap_or(fallback)),
        Some(text) => text.parse().map_err(|_| {
            RunError::Plan(format!(
                "nodes.{}.data_address = {text:?}: not an IP address",
                node.name
            ))
        }),
    }
}

async fn describe(
    node: &NodeEntry,
    mut client: AgentClient<Channel>,
    data_address: IpAddr,
) -> Result<AgentHandle, RunError> {
    let failed = |problem: String| RunError::Agent {
        node: node.name.clone(),
        problem,
    };
    let info = client
        .info(pb::InfoRequest {})
        .await
        .map_err(|s| failed(s.message().to_string()))?
        .into_inner();
    if !node.is_local() && info.name != node.name {
        return Err(failed(format!(
            "the agent at {} is {:?}, not {:?}",
            node.agent, info.name, node.name
        )));
    }
    for role in &node.roles {
        let name = role.as_str();
        if !info.roles.iter().any(|r| r == name) {
            return Err(failed(format!(
                "the plan uses it as {name}, but its agent does not have that role"
            )));
        }
    }
    let clock = measure(&mut client, 16)
        .await
        .map_err(|s| failed(s.message().to_string()))?;
    Ok(AgentHandle {
        name: node.name.clone(),
        client,
        info,
        clock,
        data_address,
    })
}

/// Starts an agent in this process on 127.0.0.1 with a PKI of its own.
async fn start_local_agent(
    node: &NodeEntry,
) -> Result<(LocalAgent, AgentClient<Channel>), RunError> {
    let files = tempfile::tempdir().map_err(|e| RunError::Local(e.to_string()))?;
    let credentials = local_pki(files.path()).map_err(|e| RunError::Local(e.to_string()))?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
            .await
            .map_err(|e| RunError::Local(format!("binding 127.0.0.1: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| RunError::Local(e.to_string()))?;
    let config = agent::config::AgentConfig {
        name: node.name.clone(),
        listen: address,
        tls: agent::config::TlsFiles {
            ca: files.path().join("ca.pem"),
            cert: files.path().join("local.pem"),
            key: files.path().join("local.key"),
        },
        roles: node.roles.clone(),
        data_plane_interface: None,
        state_dir: files.path().join("state"),
        nebula: None,
        k3s: Default::default(),
    };
    let agent_credentials =
        Credentials::load(files.path(), "local").map_err(|e| RunError::Local(e.to_string()))?;
    let service = Arc::new(agent::service::AgentService::new(config).await);
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    let task = tokio::spawn(async move {
        if let Err(error) = agent::server::serve(
            service,
            &agent_credentials,
            listener,
            shutdown.cancelled_owned(),
        )
        .await
        {
            tracing::error!(%error, "local agent");
        }
    });
    let client = connect_agent(&address.to_string(), None, &credentials)
        .await
        .map_err(|e| RunError::Local(e.to_string()))?;
    Ok((
        LocalAgent {
            stop,
            task,
            _files: files,
        },
        client,
    ))
}

/// A CA, the controller and one agent ("local", valid for 127.0.0.1), written into `dir`.
fn local_pki(dir: &Path) -> Result<Credentials, Box<dyn std::error::Error>> {
    let ca = CertificateAuthority::generate("Continuum local CA")?;
    let controller = ca.issue(&IdentitySpec::new(Role::Controller, "controller"))?;
    let agent = ca.issue(
        &IdentitySpec::new(Role::Agent, "local").with_ip_address(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    )?;
    write_pki(dir, &ca, &[controller, agent], Overwrite::Refuse)?;
    Ok(Credentials::load(dir, "controller")?)
}
