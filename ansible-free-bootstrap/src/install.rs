//! `bootstrap inventory.toml`: make the state, check every node before touching any, then
//! bring each node to the wanted files and a running agent, copying only what differs.
//!
//! Order matters for "nothing half-installed without saying so": every node is reached and
//! checked (SSH, key, host key, architecture) before anything is written anywhere; a node
//! that fails after that is reported as partially installed, next to the nodes that were
//! installed, with the command that removes it all.

use std::collections::BTreeSet;

use futures_util::future::join_all;

use crate::inventory::{Loaded, Node};
use crate::layout::{self, RemoteFile};
use crate::remote::{self, Facts};
use crate::ssh::{Ssh, SshError};
use crate::state::State;
use crate::{BootstrapError, Options};

/// What happened on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeChange {
    /// Every file was already in place and the agent running.
    Unchanged,
    /// Files were written (listed) and/or the agent (re)started.
    Changed {
        /// Files written.
        files: Vec<String>,
        /// How the agent was started ("systemd unit", "detached: no systemd as PID 1").
        started: String,
    },
    /// Installing failed part-way; what was written stays listed in the node's record.
    Failed(String),
}

/// One node's outcome.
#[derive(Debug, Clone)]
pub struct NodeOutcome {
    /// The node.
    pub node: Node,
    /// What changed.
    pub change: NodeChange,
}

/// Installs on every node; see the module doc for the order.
pub async fn install(
    loaded: &Loaded,
    options: &Options,
) -> Result<Vec<NodeOutcome>, BootstrapError> {
    let state = State::new(loaded.state_dir.clone());
    for line in state.ensure(loaded)? {
        println!("made {line}");
    }
    let mut planned = Vec::new();
    for node in &loaded.nodes {
        let files = layout::files_for(loaded, &state, node)?;
        let ssh = Ssh::new(
            node,
            &loaded.inventory.ssh,
            state.ssh_dir(),
            options.accept_new_host_keys,
        );
        planned.push((node, ssh, files));
    }
    let checks = join_all(
        planned
            .iter()
            .map(|(node, ssh, files)| preflight(node, ssh, files)),
    )
    .await;
    let mut facts = Vec::new();
    let mut problems = Vec::new();
    for check in checks {
        match check {
            Ok(found) => facts.push(found),
            Err(problem) => problems.push(problem),
        }
    }
    tracing::info!("every node reached and checked");
    if !problems.is_empty() {
        close_all(planned.iter().map(|(_, ssh, _)| ssh)).await;
        return Err(BootstrapError::Preflight(problems));
    }
    let results = join_all(
        planned
            .iter()
            .zip(facts)
            .map(|((node, ssh, files), facts)| install_node(node, ssh, files, facts)),
    )
    .await;
    tracing::info!("installed");
    close_all(planned.iter().map(|(_, ssh, _)| ssh)).await;
    tracing::info!("connections closed");
    Ok(results)
}

async fn close_all<'a>(connections: impl Iterator<Item = &'a Ssh>) {
    join_all(connections.map(Ssh::close)).await;
}

/// Reaches the node and checks it can take the install; nothing is written.
async fn preflight(node: &Node, ssh: &Ssh, files: &[RemoteFile]) -> Result<Facts, String> {
    let facts = remote::facts(ssh, files).await.map_err(|e| e.to_string())?;
    if facts.arch != node.arch {
        return Err(format!(
            "node {}: nodes[{}].arch = {:?} in the inventory, but the node is {:?}",
            node.name, node.index, node.arch, facts.arch
        ));
    }
    // A file bootstrap would overwrite but did not put there (a k3s from the official
    // installer, an agent installed by hand) is refused: uninstall would delete it.
    for file in files {
        if foreign(file, &facts) && facts.hashes.get(file.path) != Some(&file.sha256) {
            return Err(format!(
                "node {}: {} is already there and bootstrap did not install it; remove it, or \
                 the inventory setting that asks for it, and run again",
                node.name, file.path
            ));
        }
    }
    Ok(facts)
}

/// True when `file` was on the node before bootstrap and is not in its record.
fn foreign(file: &RemoteFile, facts: &Facts) -> bool {
    facts.hashes.contains_key(file.path) && !facts.record.files.contains(file.path)
}

async fn install_node(node: &Node, ssh: &Ssh, files: &[RemoteFile], facts: Facts) -> NodeOutcome {
    let change = match apply(ssh, files, &facts).await {
        Ok(change) => change,
        Err(error) => NodeChange::Failed(error.to_string()),
    };
    NodeOutcome {
        node: node.clone(),
        change,
    }
}

async fn apply(ssh: &Ssh, files: &[RemoteFile], facts: &Facts) -> Result<NodeChange, SshError> {
    let stale: Vec<&RemoteFile> = files
        .iter()
        .filter(|f| facts.hashes.get(f.path) != Some(&f.sha256))
        .collect();
    let wanted_record = wanted_record(files, facts);
    // Files an earlier run wrote that this inventory no longer asks for (a k3s binary, the
    // Nebula key of a node that left the overlay): removed, not forgotten.
    let obsolete: Vec<&String> = facts
        .record
        .files
        .difference(&wanted_record.files)
        .collect();
    if stale.is_empty()
        && obsolete.is_empty()
        && facts.agent_running
        && wanted_record == facts.record
    {
        return Ok(NodeChange::Unchanged);
    }
    let missing_dirs: Vec<&str> = layout::DIRS
        .iter()
        .copied()
        .filter(|dir| !facts.dirs.contains(*dir))
        .collect();
    remote::create_dirs(ssh, &missing_dirs).await?;
    // The record first: if an upload fails, uninstall still knows every path it may touch.
    remote::write_record(ssh, &wanted_record).await?;
    for file in &stale {
        remote::upload(ssh, file).await?;
    }
    remote::remove_files(ssh, &obsolete).await?;
    remote::restart_agent(ssh, facts.systemd).await?;
    let started = if facts.systemd {
        "systemd unit enabled and restarted".to_string()
    } else {
        "started detached (no systemd as PID 1)".to_string()
    };
    let mut changed: Vec<String> = stale.iter().map(|f| f.path.to_string()).collect();
    changed.extend(obsolete.iter().map(|path| format!("removed {path}")));
    Ok(NodeChange::Changed {
        files: changed,
        started,
    })
}

/// The record after this run: every file bootstrap writes (not one that was there, identical,
/// before it came), and the folders it created now or in an earlier run.
fn wanted_record(files: &[RemoteFile], facts: &Facts) -> remote::Record {
    let mut dirs: BTreeSet<String> = facts.record.dirs.clone();
    dirs.extend(
        layout::DIRS
            .iter()
            .filter(|dir| !facts.dirs.contains(**dir))
            .map(|dir| dir.to_string()),
    );
    let mut recorded: BTreeSet<String> = files
        .iter()
        .filter(|f| !foreign(f, facts))
        .map(|f| f.path.to_string())
        .collect();
    recorded.insert(layout::PID_FILE.to_string());
    recorded.insert(layout::LOG_FILE.to_string());
    remote::Record {
        files: recorded,
        dirs,
    }
}
