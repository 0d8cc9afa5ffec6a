//! Phases 2 and 3 of the study, before any broker is deployed: the Nebula overlay (the
//! headnode as lighthouse first, then every other node as a member, then each member checks
//! it reaches every other node through the tunnel) and the k3s cluster over it (the server on
//! the headnode, tainted so workloads stay off it, then an agent on every other broker
//! node, then the server must list them all Ready). Both installers are idempotent: on a
//! testbed that already has them this changes nothing, and they stay up after the run.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::agents::AgentHandle;
use super::error::RunError;
use super::events::{Events, RunEvent};
use super::testbed::{
    Agent, AgentError, ClusterInstall, ClusterRole, Lighthouse, OverlayInstall, OverlayInstalled,
};
use crate::plan::{NodeEntry, NodeRole, Orchestrator, Overlay, Plan};
use crate::results::{ClusterNode, ClusterRecord, OverlayPeer, OverlayRecord, TestbedRecord};
use domain::overlay::parse_overlay_cidr;

/// The k3s API port on the server.
const K3S_API_PORT: u16 = 6443;
/// The cluster token's file in the controller's PKI folder (mode 0600).
const TOKEN_FILE: &str = "k3s-token";

/// Runs the phases the plan asks for; `None` when it asks for neither.
pub(super) async fn prepare(
    plan: &Plan,
    agents: &HashMap<String, AgentHandle>,
    events: &Events,
) -> Result<Option<TestbedRecord>, RunError> {
    if plan.testbed.overlay == Overlay::None {
        return Ok(None);
    }
    let mut record = TestbedRecord {
        overlay: overlay(plan, agents, events).await?,
        cluster: None,
    };
    if plan.testbed.orchestrator == Orchestrator::K3s {
        record.cluster = Some(cluster(plan, agents, events).await?);
    }
    Ok(Some(record))
}

fn headnode(plan: &Plan) -> Result<&NodeEntry, RunError> {
    let name = plan.testbed.headnode.as_deref().unwrap_or_default();
    plan.nodes
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| RunError::Plan(format!("testbed.headnode = {name:?}: no such node")))
}

fn agent(agents: &HashMap<String, AgentHandle>, node: &str) -> Result<Agent, RunError> {
    agents
        .get(node)
        .map(|a| a.agent.clone())
        .ok_or_else(|| RunError::Agent {
            node: node.to_string(),
            problem: "no agent".into(),
        })
}

fn overlay_ip(node: &NodeEntry) -> String {
    node.overlay_ip
        .as_deref()
        .and_then(parse_overlay_cidr)
        .map(|(ip, _)| ip.to_string())
        .unwrap_or_default()
}

/// Time an agent may take to answer an install beyond the install's own deadline.
const ANSWER_MARGIN: Duration = Duration::from_secs(30);

/// An install call bounded by `limit` plus [`ANSWER_MARGIN`]: an agent that went silent fails
/// the phase, naming the node, instead of hanging the run.
async fn bounded<T>(
    node: &str,
    what: &str,
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, AgentError>>,
) -> Result<T, RunError> {
    let deadline = limit.saturating_add(ANSWER_MARGIN);
    match tokio::time::timeout(deadline, call).await {
        Ok(answer) => answer.map_err(|e| failed(node, what, &e)),
        Err(_) => Err(RunError::Agent {
            node: node.to_string(),
            problem: format!("{what}: no answer within {deadline:?}"),
        }),
    }
}

fn failed(node: &str, what: &str, error: &AgentError) -> RunError {
    RunError::Agent {
        node: node.to_string(),
        problem: format!("{what}: {error}"),
    }
}

async fn overlay(
    plan: &Plan,
    agents: &HashMap<String, AgentHandle>,
    events: &Events,
) -> Result<Vec<OverlayRecord>, RunError> {
    let testbed = &plan.testbed;
    let head = headnode(plan)?;
    let head_address = head.agent.to_string();
    let head_host = head.agent.remote_host().unwrap_or(&head_address);
    let lighthouse = Lighthouse {
        overlay_ip: overlay_ip(head),
        underlay_address: format!("{head_host}:{}", testbed.nebula_port),
    };
    let request = |node: &NodeEntry, check: Vec<String>| OverlayInstall {
        lighthouse: node.name == head.name,
        overlay_cidr: node.overlay_ip.clone().unwrap_or_default(),
        lighthouses: if node.name == head.name {
            Vec::new()
        } else {
            vec![lighthouse.clone()]
        },
        listen_port: testbed.nebula_port,
        interface: testbed.overlay_interface.clone(),
        check_reachable: check,
        timeout: testbed.install_timeout,
    };
    let mut order: Vec<&NodeEntry> = vec![head];
    order.extend(plan.nodes.iter().filter(|n| n.name != head.name));
    let mut records = Vec::new();
    for node in order {
        // A member proves the tunnel to every node brought up before it (the lighthouse
        // first); the last member thereby checks the whole overlay.
        let check: Vec<String> = records
            .iter()
            .map(|r: &OverlayRecord| {
                r.overlay_cidr
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        let client = agent(agents, &node.name)?;
        let install = request(node, check);
        let step = format!(
            "overlay: Nebula on {} ({})",
            node.name, install.overlay_cidr
        );
        events.emit(RunEvent::Testbed(step)).await;
        let status = bounded(
            &node.name,
            "installing Nebula",
            testbed.install_timeout,
            client.install_overlay(&install),
        )
        .await?;
        if let Some(peer) = status.peers.iter().find(|p| !p.reachable) {
            return Err(RunError::Agent {
                node: node.name.clone(),
                problem: format!(
                    "overlay peer {} unreachable: {}",
                    peer.overlay_ip, peer.detail
                ),
            });
        }
        let step = format!("overlay: {}: {}", node.name, status.detail);
        records.push(overlay_record(node, node.name == head.name, status));
        events.emit(RunEvent::Testbed(step)).await;
    }
    Ok(records)
}

fn overlay_record(node: &NodeEntry, lighthouse: bool, status: OverlayInstalled) -> OverlayRecord {
    OverlayRecord {
        node: node.name.clone(),
        lighthouse,
        overlay_cidr: status.overlay_cidr,
        detail: status.detail,
        peers: status
            .peers
            .into_iter()
            .map(|p| OverlayPeer {
                address: p.overlay_ip,
                reachable: p.reachable,
                detail: p.detail,
            })
            .collect(),
    }
}

async fn cluster(
    plan: &Plan,
    agents: &HashMap<String, AgentHandle>,
    events: &Events,
) -> Result<ClusterRecord, RunError> {
    let testbed = &plan.testbed;
    let head = headnode(plan)?;
    let token = cluster_token(plan.pki_dir.as_deref())?;
    let server_request = ClusterInstall {
        role: ClusterRole::Server {
            schedule_workloads: false,
        },
        token: token.clone(),
        node_ip: overlay_ip(head),
        flannel_interface: testbed.overlay_interface.clone(),
        node_name: head.name.clone(),
        timeout: testbed.install_timeout,
    };
    let server = agent(agents, &head.name)?;
    let step = format!("cluster: k3s server on {}", head.name);
    events.emit(RunEvent::Testbed(step)).await;
    let status = bounded(
        &head.name,
        "installing the k3s server",
        testbed.install_timeout,
        server.install_cluster(&server_request),
    )
    .await?;
    let step = format!("cluster: {}: {}", head.name, status.detail);
    events.emit(RunEvent::Testbed(step)).await;
    let workers: Vec<&NodeEntry> = plan
        .nodes
        .iter()
        .filter(|n| n.name != head.name && n.roles.contains(&NodeRole::Broker))
        .collect();
    for node in &workers {
        let request = ClusterInstall {
            role: ClusterRole::Agent {
                server_url: format!("https://{}:{K3S_API_PORT}", overlay_ip(head)),
            },
            token: token.clone(),
            node_ip: overlay_ip(node),
            flannel_interface: testbed.overlay_interface.clone(),
            node_name: node.name.clone(),
            timeout: testbed.install_timeout,
        };
        let step = format!("cluster: k3s agent on {}", node.name);
        events.emit(RunEvent::Testbed(step)).await;
        let client = agent(agents, &node.name)?;
        let status = bounded(
            &node.name,
            "installing the k3s agent",
            testbed.install_timeout,
            client.install_cluster(&request),
        )
        .await?;
        let step = format!("cluster: {}: {}", node.name, status.detail);
        events.emit(RunEvent::Testbed(step)).await;
    }
    all_ready(plan, &head.name, server, server_request, &workers).await
}

/// Asks the server again (a no-op install) until it lists every worker Ready.
async fn all_ready(
    plan: &Plan,
    head: &str,
    server: Agent,
    server_request: ClusterInstall,
    workers: &[&NodeEntry],
) -> Result<ClusterRecord, RunError> {
    let testbed = &plan.testbed;
    let started = Instant::now();
    loop {
        let status = bounded(
            head,
            "listing the cluster's nodes",
            testbed.install_timeout,
            server.install_cluster(&server_request),
        )
        .await?;
        let missing: Vec<&str> = workers
            .iter()
            .filter(|w| !status.nodes.iter().any(|n| n.name == w.name && n.ready))
            .map(|w| w.name.as_str())
            .collect();
        if missing.is_empty() {
            return Ok(ClusterRecord {
                server: head.to_string(),
                nodes: status
                    .nodes
                    .iter()
                    .map(|n| ClusterNode {
                        name: n.name.clone(),
                        ready: n.ready,
                        internal_ip: n.internal_ip.clone(),
                        taints: n.taints.clone(),
                    })
                    .collect(),
            });
        }
        if started.elapsed() > testbed.install_timeout {
            return Err(RunError::Agent {
                node: head.to_string(),
                problem: format!(
                    "the k3s server does not list {} as Ready within {:?}",
                    missing.join(", "),
                    testbed.install_timeout
                ),
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The cluster's shared secret: made once (32 random bytes, hex) and kept beside the
/// controller's identity, so later runs join the same cluster.
fn cluster_token(pki_dir: Option<&Path>) -> Result<String, RunError> {
    let dir =
        pki_dir.ok_or_else(|| RunError::Plan("pki_dir: k3s needs it for its token".into()))?;
    let path = dir.join(TOKEN_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        let token = text.trim().to_string();
        if !token.is_empty() {
            return Ok(token);
        }
    }
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|e| RunError::Plan(format!("reading /dev/urandom: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // Written beside, then renamed: an interrupted write never leaves an empty token.
    let temporary = dir.join(format!("{TOKEN_FILE}.new"));
    let _ = std::fs::remove_file(&temporary);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| {
            std::io::Write::write_all(&mut file, format!("{token}\n").as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, &path))
        .map_err(|e| RunError::Plan(format!("writing {}: {e}", path.display())))?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_cluster_token_is_made_once_private_and_reused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = cluster_token(Some(dir.path())).expect("made");
        assert_eq!(first.len(), 64, "32 random bytes in hex");
        let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
            .expect("token file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(cluster_token(Some(dir.path())).expect("read"), first);
        // An empty file (an interrupted write of an older version) is replaced.
        std::fs::write(dir.path().join(TOKEN_FILE), "").expect("emptied");
        let second = cluster_token(Some(dir.path())).expect("made again");
        assert!(second.len() == 64 && second != first);
        assert!(cluster_token(None).is_err(), "no pki_dir, no token");
    }
}
