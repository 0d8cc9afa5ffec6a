//! `bootstrap` (crate ansible-free-bootstrap): from bare nodes to a testbed of Continuum
//! agents over SSH, and back. It replaces the study's Ansible playbooks.
//!
//! `bootstrap inventory.toml` makes the project's PKI and Nebula's certificates in a local
//! state folder (keys 0600, refused inside a git work tree), checks every node over SSH
//! before writing anywhere, copies the agent binary for each node's architecture, its
//! certificates, `agent.toml` and the systemd unit, starts the agent (as a unit where systemd
//! is PID 1, detached otherwise, and says which), then asks every agent for Info over mTLS
//! and prints a table. A second run copies nothing and says so. `bootstrap uninstall
//! inventory.toml` removes everything it installed, Nebula and k3s included.
//!
//! # Layout
//! - [`inventory`]: `inventory.toml`, its checks (one headnode, unique names, overlay and
//!   agent addresses), resolved [`inventory::Node`]s.
//! - [`state`]: the local PKI and `nebula-cert`.
//! - [`ssh`]: the system `ssh`, multiplexed, failures sorted (unreachable, key, host key).
//! - [`layout`]: the files a node gets and where (`/usr/local/bin/continuum-agent`, `/etc/continuum`).
//! - [`remote`]: the scripts run on a node (facts, atomic upload, start/stop) and its record.
//! - [`install`], [`uninstall`]: the two commands; [`check`]: mTLS answers and the table.

pub mod check;
pub mod install;
pub mod inventory;
pub mod layout;
pub mod remote;
pub mod ssh;
pub mod state;
pub mod uninstall;

use std::path::PathBuf;

pub use install::{NodeChange, NodeOutcome};
pub use uninstall::Removal;

/// Command-line choices that are not in the inventory.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Accept host keys of nodes seen for the first time (`StrictHostKeyChecking=accept-new`);
    /// a changed key is still refused.
    pub accept_new_host_keys: bool,
}

/// Why bootstrap stopped.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The inventory is unusable.
    #[error(transparent)]
    Inventory(#[from] inventory::InventoryError),
    /// The local state could not be made.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// A node's files could not be put together.
    #[error(transparent)]
    Layout(#[from] layout::LayoutError),
    /// Nodes failed the checks before install; nothing was written on any node.
    #[error("{}\nnothing was installed on any node", .0.join("\n"))]
    Preflight(Vec<String>),
}

/// Runs `bootstrap INVENTORY`: returns the printed table and whether every node is up.
pub async fn run_install(
    inventory: PathBuf,
    options: &Options,
) -> Result<(String, bool), BootstrapError> {
    let loaded = inventory::Loaded::load(&inventory)?;
    let outcomes = install::install(&loaded, options).await?;
    let state = state::State::new(loaded.state_dir.clone());
    let answers = check::check_agents(&state, &outcomes).await;
    tracing::info!("agents checked");
    let mut text = check::table(&outcomes, &answers);
    let all_ok = answers.iter().all(Result::is_ok);
    if outcomes.iter().all(|o| o.change == NodeChange::Unchanged) {
        text.push_str("nothing changed: every node already had this install\n");
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| matches!(o.change, NodeChange::Failed(_)))
        .map(|o| o.node.name.as_str())
        .collect();
    if !failed.is_empty() {
        text.push_str(&format!(
            "partially installed on {}; the other nodes are installed. `bootstrap uninstall {}` removes it all\n",
            failed.join(", "),
            inventory.display()
        ));
    }
    text.push_str(&format!(
        "controller identity and CA: {} (pki_dir for the plan)\n",
        state.pki_dir().display()
    ));
    text.push_str(&expiry_warnings(&state.pki_dir()));
    Ok((text, all_ok && failed.is_empty()))
}

/// One line per certificate of the PKI that ends within [`proto::pki::EXPIRY_WARNING`].
fn expiry_warnings(pki_dir: &std::path::Path) -> String {
    let now = std::time::SystemTime::now();
    match proto::pki::expiring_within(pki_dir, proto::pki::EXPIRY_WARNING, now) {
        Ok(ending) => ending
            .iter()
            .map(|expiring| format!("warning: {expiring}\n"))
            .collect(),
        Err(error) => format!("warning: could not check certificate expiry: {error}\n"),
    }
}

/// Runs `bootstrap uninstall INVENTORY`: returns the report and whether every node is clean.
pub async fn run_uninstall(
    inventory: PathBuf,
    options: &Options,
) -> Result<(String, bool), BootstrapError> {
    let loaded = inventory::Loaded::load(&inventory)?;
    let results = uninstall::uninstall(&loaded, options).await?;
    let mut text = String::new();
    let mut all_ok = true;
    for (node, removal) in results {
        let line = match removal {
            Removal::NothingInstalled => "nothing installed by bootstrap".to_string(),
            Removal::Removed {
                removed,
                installers,
            } if installers.is_empty() => {
                format!("removed ({removed} recorded paths)")
            }
            Removal::Removed {
                removed,
                installers,
            } => {
                format!(
                    "removed ({removed} recorded paths); {}",
                    installers.replace('\n', "; ")
                )
            }
            Removal::Failed(error) => {
                all_ok = false;
                format!("FAILED: {error}")
            }
        };
        text.push_str(&format!("{}: {line}\n", node.name));
    }
    Ok((text, all_ok))
}
