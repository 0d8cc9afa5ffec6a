//! Nodes emulated on this machine (`agent = "namespace"`): each node is a network namespace
//! of its own, joined to the others through a hub namespace that routes between them, with
//! an agent of its own running inside it (in this process, on threads that live in the
//! node's namespace). So the study's testbed fits on one Linux machine: brokers and load
//! run in the nodes, and netem goes on each node's link exactly as on a real node.
//!
//! - Addresses: node `i`'s link is the /30 `198.18.0.4i`, the hub's end `.4i+1`, the node's
//!   `.4i+2` (its data address), with a route to `198.18.0.0/24` through the hub. The hub
//!   has no other route: nothing from a node can leave the machine.
//! - Control: each agent listens on 127.0.0.1 inside its own namespace, and the controller
//!   reaches it over a socket made inside that namespace ([`host::netns::connect_in`]). No
//!   control traffic crosses an emulated link, and none is sent from the machine's own
//!   namespace to a testbed address.
//! - Identities: a PKI made for the run (a CA, the controller, one agent per node) in a
//!   private temporary folder.
//! - Nothing stays: the namespaces are held by descriptors only (no name under `/run/netns`),
//!   so they end with the run, on signals and with the process after a crash; the agents
//!   stop their brokers and clear their netem when the run ends, as every agent does. What a
//!   killed controller's native brokers keep is removed by the next run (`leftovers.rs`).
//!
//! Needs root; and sch_netem when a scenario impairs the links. Both are checked before
//! anything is made, each missing one named in a line of its own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use host::Netns;
use proto::mtls::{Credentials, TcpDial};
use proto::pki::{CertificateAuthority, IdentitySpec, Overwrite, Role, write_pki};
use tokio_util::sync::CancellationToken;

use crate::plan::{MAX_EMULATED_NODES, NodeEntry, Plan};
use crate::run::error::RunError;
use crate::run::impairment;
use crate::run::testbed::Agent;

mod leftovers;
mod wiring;

pub use leftovers::{EMULATED_ROOT, Leftover, remove_leftovers};
pub(super) use leftovers::{remove_leftovers_in, run_folder_in};

/// The port each agent listens on, on 127.0.0.1 of its own namespace.
pub const AGENT_PORT: u16 = 7100;
/// How long an agent thread may take to listen.
const AGENT_START: Duration = Duration::from_secs(30);

/// The emulated nodes of a run: their namespaces, links and agents, and the hub between them.
pub struct NamespaceTestbed {
    /// Held only to keep the hub alive while the nodes talk through it.
    _hub: Netns,
    nodes: Vec<EmulatedNode>,
    /// The controller's identity for the agents.
    credentials: Credentials,
    /// The CA, identities and the agents' state, removed with the testbed.
    files: tempfile::TempDir,
}

impl std::fmt::Debug for NamespaceTestbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceTestbed")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| &n.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One node: its namespace, its link's interface and address, its agent once started.
pub(super) struct EmulatedNode {
    pub(super) name: String,
    pub(super) netns: Arc<Netns>,
    pub(super) interface: String,
    pub(super) address: Ipv4Addr,
    agent: Option<NamespaceAgent>,
}

impl EmulatedNode {
    /// Its end of its link.
    fn link(&self) -> wiring::NodeLink<'_> {
        wiring::NodeLink {
            name: &self.name,
            netns: &self.netns,
            interface: &self.interface,
            address: self.address,
        }
    }
}

/// An agent running on a thread inside a node's namespace.
struct NamespaceAgent {
    stop: CancellationToken,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

/// What this machine lacks to emulate a plan's nodes in namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// Namespaces and links need root.
    Root,
    /// The plan's `scenarios` impair the links, and netem cannot here (`capability` says why).
    Netem {
        /// The scenarios that impair.
        scenarios: Vec<String>,
        /// What the netem check found.
        capability: String,
    },
}

impl Missing {
    /// The one line that stops a run which cannot fall back.
    pub fn stop_line(&self) -> String {
        match self {
            Missing::Root => "nodes with agent = \"namespace\" are emulated in network \
                              namespaces, which needs root: run the controller as root"
                .to_string(),
            Missing::Netem {
                scenarios,
                capability,
            } => format!(
                "scenarios {} emulate their links with netem, and this machine cannot: \
                 {capability} (load the sch_netem module, or keep only scenarios without \
                 delay, jitter and loss)",
                scenarios.join(", ")
            ),
        }
    }

    /// What is missing, in a few words, for a plan that falls back to local agents.
    pub fn short(&self) -> String {
        match self {
            Missing::Root => "the controller does not run as root".to_string(),
            Missing::Netem { capability, .. } => capability.clone(),
        }
    }
}

/// What a run needs before it may make namespaces: root, and netem when a scenario impairs
/// the links. `Some` names what is missing.
pub async fn emulation_lacks(plan: &Plan) -> Option<Missing> {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some(Missing::Root);
    }
    let impairing: Vec<String> = plan
        .scenarios
        .iter()
        .filter(|scenario| impairment::impairs(scenario))
        .map(|scenario| scenario.name.clone())
        .collect();
    if impairing.is_empty() {
        return None;
    }
    match agent::netem::netem_available().await {
        agent::netem::NetemCapability::Available => None,
        capability => Some(Missing::Netem {
            scenarios: impairing,
            capability: capability.to_string(),
        }),
    }
}

impl NamespaceTestbed {
    /// Makes a namespace and a link for each of `nodes`, the hub between them, and the run's
    /// PKI; no agent runs yet ([`Self::start_agent`]).
    pub async fn build(nodes: &[&NodeEntry]) -> Result<Self, RunError> {
        if nodes.len() > MAX_EMULATED_NODES {
            return Err(RunError::Plan(format!(
                "{} nodes with agent = \"namespace\": at most {MAX_EMULATED_NODES}",
                nodes.len()
            )));
        }
        // A killed controller's brokers keep their namespaces: stopped before anything new.
        leftovers::remove_leftovers().await;
        let hub = Netns::create().map_err(|e| making("a namespace for the hub", e))?;
        let mut emulated = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let netns = Netns::create()
                .map_err(|e| making(&format!("a namespace for node {}", node.name), e))?;
            let octet = u8::try_from(4 * i + 2).map_err(|e| making("addresses", e))?;
            emulated.push(EmulatedNode {
                name: node.name.clone(),
                netns: Arc::new(netns),
                interface: format!("d{i}"),
                address: Ipv4Addr::new(198, 18, 0, octet),
                agent: None,
            });
        }
        let links: Vec<wiring::NodeLink<'_>> = emulated.iter().map(EmulatedNode::link).collect();
        wiring::wire(&hub, &links).await?;
        let files = leftovers::run_folder()
            .map_err(|e| making(&format!("a folder for the run under {EMULATED_ROOT}"), e))?;
        let credentials =
            run_pki(files.path(), &emulated).map_err(|e| making("the run's PKI", e))?;
        Ok(NamespaceTestbed {
            _hub: hub,
            nodes: emulated,
            credentials,
            files,
        })
    }

    /// Starts `node`'s agent inside its namespace and connects to it; returns the client and
    /// the node's data address.
    pub async fn start_agent(&mut self, node: &NodeEntry) -> Result<(Agent, IpAddr), RunError> {
        let dir = self.files.path().to_path_buf();
        let Some(emulated) = self.nodes.iter_mut().find(|n| n.name == node.name) else {
            return Err(RunError::Local(format!(
                "node {} was not emulated",
                node.name
            )));
        };
        let failed = |e: &dyn std::fmt::Display| RunError::Agent {
            node: node.name.clone(),
            problem: format!("starting its agent in its namespace: {e}"),
        };
        let config = domain::AgentConfig {
            name: node.name.clone(),
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), AGENT_PORT),
            tls: domain::TlsFiles {
                ca: dir.join("ca.pem"),
                cert: dir.join(format!("{}.pem", node.name)),
                key: dir.join(format!("{}.key", node.name)),
            },
            roles: node.roles.clone(),
            data_plane_interface: Some(emulated.interface.clone()),
            state_dir: dir.join(format!("state-{}", node.name)),
            nebula: None,
            metrics_listen: None,
            k3s: Default::default(),
        };
        let agent_credentials = Credentials::load(&dir, &node.name).map_err(|e| failed(&e))?;
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let shutdown = stop.clone();
        let thread = emulated
            .netns
            .spawn(&format!("agent-{}", node.name), move || {
                serve_inside(config, agent_credentials, shutdown, ready_tx)
            })
            .map_err(|e| failed(&e))?;
        emulated.agent = Some(NamespaceAgent { stop, thread });
        match tokio::time::timeout(AGENT_START, ready_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(problem))) => return Err(failed(&problem)),
            Ok(Err(_)) => return Err(failed(&"its thread ended before it listened")),
            Err(_) => return Err(failed(&format!("not listening within {AGENT_START:?}"))),
        }
        let dial = dial_inside(emulated.netns.clone());
        let address = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), AGENT_PORT).to_string();
        let agent = crate::agent_client::connect(&address, &self.credentials, Some(dial))
            .await
            .map_err(|e| failed(&e))?;
        Ok((agent, IpAddr::V4(emulated.address)))
    }

    /// Stops every agent (each stops its brokers and clears its netem) and waits for them;
    /// the namespaces end when the testbed is dropped.
    pub async fn stop_agents(&mut self) {
        for node in &mut self.nodes {
            let Some(agent) = node.agent.take() else {
                continue;
            };
            agent.stop.cancel();
            let name = node.name.clone();
            match tokio::task::spawn_blocking(move || agent.thread.join()).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => tracing::warn!(node = %name, %error, "agent thread"),
                Ok(Err(_)) | Err(_) => tracing::warn!(node = %name, "agent thread panicked"),
            }
        }
    }

    /// Tells every agent to stop without waiting (the runtime is going away).
    pub fn abandon_agents(&mut self) {
        for node in &mut self.nodes {
            if let Some(agent) = node.agent.take() {
                agent.stop.cancel();
            }
        }
    }
}

/// A part of the testbed could not be made.
fn making(what: &str, error: impl std::fmt::Display) -> RunError {
    RunError::Local(format!("{what}: {error}"))
}

/// The agent's own runtime inside the namespace (every thread it makes stays there):
/// `lo` up, the listener bound, ready said, then served until `stop`.
fn serve_inside(
    config: domain::AgentConfig,
    credentials: Credentials,
    stop: CancellationToken,
    ready: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(format!("agent-{}", config.name))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(format!("its runtime: {error}")));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(listener) => listener,
            Err(error) => {
                let _ = ready.send(Err(format!("binding {}: {error}", config.listen)));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        let name = config.name.clone();
        let service = Arc::new(agent::service::AgentService::new(config).await);
        if let Err(error) =
            agent::server::serve(service, &credentials, listener, stop.cancelled_owned()).await
        {
            tracing::error!(node = %name, %error, "agent in its namespace");
        }
    });
}

/// Dials from inside `netns`: the agent's 127.0.0.1 there.
fn dial_inside(netns: Arc<Netns>) -> TcpDial {
    Arc::new(move |address: String| {
        let netns = netns.clone();
        Box::pin(async move {
            let address: SocketAddr = address.parse().map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{address}: {e}"))
            })?;
            let stream = tokio::task::spawn_blocking(move || {
                host::netns::connect_in(&netns, address, Duration::from_secs(5))
            })
            .await
            .map_err(std::io::Error::other)??;
            stream.set_nonblocking(true)?;
            tokio::net::TcpStream::from_std(stream)
        })
    })
}

/// A CA, the controller and one agent per node (valid for 127.0.0.1, named as the node).
fn run_pki(
    dir: &std::path::Path,
    nodes: &[EmulatedNode],
) -> Result<Credentials, Box<dyn std::error::Error>> {
    let ca = CertificateAuthority::generate("Continuum namespace testbed CA")?;
    let mut identities = vec![ca.issue(&IdentitySpec::new(Role::Controller, "controller"))?];
    for node in nodes {
        identities.push(
            ca.issue(
                &IdentitySpec::new(Role::Agent, &node.name)
                    .with_ip_address(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            )?,
        );
    }
    write_pki(dir, &ca, &identities, Overwrite::Refuse)?;
    Ok(Credentials::load(dir, "controller")?)
}
