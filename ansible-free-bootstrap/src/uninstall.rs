//! `bootstrap uninstall inventory.toml`: on every node, stop the agent (which clears netem
//! and stops its brokers), let it remove what its installers put there (Nebula, k3s), then
//! remove exactly what bootstrap's record lists: its files, the agent's state folder and the
//! folders bootstrap created. Nodes are independent: one unreachable node is reported and
//! the others are still cleaned.

use futures_util::future::join_all;

use crate::inventory::{Loaded, Node};
use crate::layout;
use crate::remote;
use crate::ssh::{Ssh, SshError, quote};
use crate::state::State;
use crate::{BootstrapError, Options};

/// How long one node's uninstall may take (agent stop, k3s and Nebula teardown).
const UNINSTALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// What uninstall did on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The node had no record: bootstrap had installed nothing there.
    NothingInstalled,
    /// Removed, with what the agent's own uninstall said.
    Removed {
        /// Files and folders removed.
        removed: usize,
        /// The agent's uninstall output (Nebula, k3s).
        installers: String,
    },
    /// Could not reach or clean the node.
    Failed(String),
}

/// Uninstalls from every node.
pub async fn uninstall(
    loaded: &Loaded,
    options: &Options,
) -> Result<Vec<(Node, Removal)>, BootstrapError> {
    let state = State::new(loaded.state_dir.clone());
    let connections: Vec<(Node, Ssh)> = loaded
        .nodes
        .iter()
        .map(|node| {
            let ssh = Ssh::new(
                node,
                &loaded.inventory.ssh,
                state.ssh_dir(),
                options.accept_new_host_keys,
            );
            (node.clone(), ssh)
        })
        .collect();
    if !state.ssh_dir().is_dir() {
        std::fs::create_dir_all(state.ssh_dir()).map_err(|source| {
            crate::state::StateError::Io {
                what: "creating",
                path: state.ssh_dir().display().to_string(),
                source,
            }
        })?;
    }
    let results = join_all(connections.iter().map(|(node, ssh)| async move {
        let removal = match remove(ssh).await {
            Ok(removal) => removal,
            Err(error) => Removal::Failed(error.to_string()),
        };
        ssh.close().await;
        (node.clone(), removal)
    }))
    .await;
    Ok(results)
}

async fn remove(ssh: &Ssh) -> Result<Removal, SshError> {
    let facts = remote::facts(ssh, &[]).await?;
    if facts.record.files.is_empty() && facts.record.dirs.is_empty() {
        return Ok(Removal::NothingInstalled);
    }
    let mut script = String::new();
    if facts.systemd {
        script.push_str(&format!(
            "systemctl disable --now {} 2>/dev/null || true\n",
            layout::UNIT_NAME
        ));
    }
    script.push_str(&remote::stop_detached_script());
    // The agent's own uninstall removes what its installers made (units, configs, k3s data).
    // If it fails, nothing else is removed: the record and the binary stay for a retry.
    script.push_str(&format!(
        "if [ -x {binary} ]; then\n\
         if ! RUST_LOG=warn {binary} --config {config} uninstall 2>&1; then\n\
         echo 'the agent could not remove Nebula/k3s (above); nothing else was removed and the agent is stopped: fix it and run bootstrap uninstall again'\n\
         exit 3\nfi\nfi\n",
        binary = layout::AGENT_BINARY,
        config = layout::AGENT_CONFIG,
    ));
    for file in &facts.record.files {
        script.push_str(&format!("rm -f {}\n", quote(file)));
    }
    script.push_str(&format!("rm -f {}\n", quote(layout::RECORD)));
    if facts.record.dirs.contains(layout::STATE_DIR) {
        script.push_str(&format!("rm -rf {}\n", quote(layout::STATE_DIR)));
    }
    // Deepest first; a folder someone else put files in stays, and is named.
    let mut dirs: Vec<&String> = facts.record.dirs.iter().collect();
    dirs.sort_by_key(|dir| std::cmp::Reverse(dir.len()));
    for dir in &dirs {
        script.push_str(&format!(
            "if [ -d {d} ]; then rmdir {d} 2>/dev/null || echo 'kept {dir}: it holds files bootstrap did not write'; fi\n",
            d = quote(dir),
        ));
    }
    if facts.systemd {
        script.push_str("systemctl daemon-reload\n");
    }
    // Stopping the agent and k3s may take minutes on a small node.
    let output = ssh
        .run_within("removing the agent", &script, b"", UNINSTALL_LIMIT)
        .await?;
    Ok(Removal::Removed {
        removed: facts.record.files.len() + facts.record.dirs.len(),
        installers: output.trim().to_string(),
    })
}
