//! `inventory.toml`: the nodes of a testbed and how to reach them, checked in full before
//! anything is made or copied. Every error names the file, the TOML path and the value.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::NodeRole;
// The plan's overlay checks are the inventory's: one parser for both files.
use domain::overlay::{overlay_network, parse_overlay_cidr};
use serde::{Deserialize, Serialize};

/// The port agents listen on unless the inventory says otherwise.
pub const DEFAULT_AGENT_PORT: u16 = 7100;

/// The whole inventory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Where bootstrap keeps the PKI, Nebula's certificates and SSH control sockets;
    /// relative paths are relative to the inventory file; default `~/.continuum/<file stem>`.
    /// Refused inside a git work tree: it holds private keys.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// How to reach the nodes over SSH (defaults for every node).
    #[serde(default)]
    pub ssh: SshDefaults,
    /// The agent: its port and the binary for each architecture.
    #[serde(default)]
    pub agent: AgentSettings,
    /// k3s as an offline binary (for nodes without the official installer or a network).
    #[serde(default)]
    pub k3s: K3sSettings,
    /// The testbed's machines.
    pub nodes: Vec<NodeEntry>,
}

/// SSH settings shared by every node unless a node overrides them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SshDefaults {
    /// Login user (root, or a user with passwordless sudo: commands are run through
    /// `sudo -n` when it is not root).
    pub user: String,
    /// SSH port.
    pub port: u16,
    /// Private key for key authentication; none = ssh's own defaults and agent.
    pub key: Option<PathBuf>,
    /// known_hosts file; none = ssh's own (`~/.ssh/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// How long to wait for a TCP connection to a node.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
}

impl Default for SshDefaults {
    fn default() -> Self {
        SshDefaults {
            user: "root".into(),
            port: 22,
            key: None,
            known_hosts: None,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// The agent as bootstrap installs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    /// The port agents listen on (control plane).
    pub port: u16,
    /// The `continuum-agent` binary per architecture (`x86_64`, `aarch64`, `armv7`);
    /// the host's own architecture defaults to the binary beside `bootstrap`.
    pub binaries: BTreeMap<String, PathBuf>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            port: DEFAULT_AGENT_PORT,
            binaries: BTreeMap::new(),
        }
    }
}

/// `[k3s]`: offline k3s binaries that bootstrap copies to the headnode and the workers
/// (`/usr/local/bin/k3s`, named in their agent.toml). Without one, the agent uses a `k3s`
/// on the node's PATH (the official installer's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct K3sSettings {
    /// The `k3s` binary per architecture, relative to the inventory file.
    pub binaries: BTreeMap<String, PathBuf>,
}

/// What a node is in the study's testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// Runs the load (the study's tester PC).
    Tester,
    /// The overlay's lighthouse and the cluster's control plane.
    Headnode,
    /// Runs the brokers.
    Worker,
}

impl NodeKind {
    /// As written in the inventory.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Tester => "tester",
            NodeKind::Headnode => "headnode",
            NodeKind::Worker => "worker",
        }
    }

    /// Whether k3s runs here (server on the headnode, agents on workers).
    pub fn runs_k3s(self) -> bool {
        self != NodeKind::Tester
    }

    /// What the agent on such a node may be asked to do. The headnode deploys brokers on
    /// the cluster (kubectl lives there), so it has the broker role too.
    pub fn agent_roles(self) -> Vec<NodeRole> {
        match self {
            NodeKind::Tester => vec![NodeRole::Loadgen, NodeRole::Netem],
            NodeKind::Headnode => vec![NodeRole::Broker, NodeRole::Netem],
            NodeKind::Worker => vec![NodeRole::Broker, NodeRole::Netem],
        }
    }
}

/// Architectures an agent binary can be built for.
pub const ARCHES: [&str; 3] = ["x86_64", "aarch64", "armv7"];

/// One machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// Node name (agent identity, Nebula host name, Kubernetes node name).
    pub name: String,
    /// SSH address: host name or IP.
    pub address: String,
    /// SSH user, overriding `[ssh] user`.
    #[serde(default)]
    pub user: Option<String>,
    /// SSH port, overriding `[ssh] port`.
    #[serde(default)]
    pub port: Option<u16>,
    /// `x86_64`, `aarch64` or `armv7` (checked against `uname -m` on the node).
    pub arch: String,
    /// tester, headnode or worker.
    pub role: NodeKind,
    /// The interface netem is applied to (the data plane: the overlay's tun device once
    /// Nebula runs, or the physical link).
    pub data_interface: String,
    /// The node's overlay address with prefix (`198.19.0.2/24`); with none on any node,
    /// no Nebula certificates are made.
    #[serde(default)]
    pub overlay_ip: Option<String>,
    /// Address the agent listens on and is reached at; default: `address` if it is an IP.
    #[serde(default)]
    pub agent_address: Option<IpAddr>,
    /// Where the agent serves its metrics for Prometheus (`metrics_listen` in its
    /// agent.toml); off when absent.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
}

/// A node with its settings resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Its place in the inventory's `[[nodes]]`, for messages.
    pub index: usize,
    /// Name.
    pub name: String,
    /// SSH host.
    pub host: String,
    /// SSH user.
    pub user: String,
    /// SSH port.
    pub port: u16,
    /// Architecture.
    pub arch: String,
    /// Role in the testbed.
    pub kind: NodeKind,
    /// netem's interface.
    pub data_interface: String,
    /// Overlay address and prefix length.
    pub overlay: Option<(Ipv4Addr, u8)>,
    /// Where the agent listens and is reached.
    pub agent: SocketAddr,
    /// Where the agent serves its metrics, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
}

/// An inventory that cannot be used: the file, the TOML path and the value.
pub type InventoryError = domain::FileError;

/// A loaded inventory: the resolved nodes and where the file was.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file as written.
    pub inventory: Inventory,
    /// Its nodes, resolved, in file order.
    pub nodes: Vec<Node>,
    /// The state folder, resolved against the file's folder.
    pub state_dir: PathBuf,
    /// The file, for messages.
    pub path: PathBuf,
}

impl Loaded {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, InventoryError> {
        let shown = path.display().to_string();
        let mut inventory: Inventory = domain::read_toml(path)?;
        let nodes = resolve(&inventory, &shown)?;
        let base = path.parent().unwrap_or(Path::new("."));
        // Paths in the file are relative to the file; `~` is left for ssh to expand.
        for file in [&mut inventory.ssh.key, &mut inventory.ssh.known_hosts]
            .into_iter()
            .flatten()
        {
            if file.is_relative() && !file.starts_with("~") {
                *file = base.join(&*file);
            }
        }
        let state_dir = match &inventory.state_dir {
            Some(dir) => base.join(dir),
            None => {
                let stem = path
                    .file_stem()
                    .map_or("inventory".into(), |s| s.to_string_lossy());
                let home = std::env::var_os("HOME").map_or(PathBuf::from("/root"), PathBuf::from);
                home.join(".continuum").join(stem.as_ref())
            }
        };
        Ok(Loaded {
            state_dir,
            inventory,
            nodes,
            path: path.to_path_buf(),
        })
    }

    /// The headnode (validation guarantees exactly one).
    pub fn headnode(&self) -> Option<&Node> {
        self.nodes.iter().find(|n| n.kind == NodeKind::Headnode)
    }

    /// True when the nodes have overlay addresses, so Nebula's certificates are made.
    pub fn has_overlay(&self) -> bool {
        self.nodes.iter().any(|n| n.overlay.is_some())
    }
}

/// Checks every node and resolves its settings.
pub fn resolve(inventory: &Inventory, path: &str) -> Result<Vec<Node>, InventoryError> {
    let invalid =
        |field: String, value: &dyn std::fmt::Debug, problem: String| InventoryError::Invalid {
            path: path.to_owned(),
            field: domain::FieldError::new(field, format!("{value:?}"), problem),
        };
    if inventory.nodes.is_empty() {
        return Err(invalid(
            "nodes".into(),
            &"[]",
            "list at least one node".into(),
        ));
    }
    for arch in inventory.agent.binaries.keys() {
        if !ARCHES.contains(&arch.as_str()) {
            return Err(invalid(
                format!("agent.binaries.{arch}"),
                arch,
                format!("unknown architecture; use one of {ARCHES:?}"),
            ));
        }
    }
    for arch in inventory.k3s.binaries.keys() {
        if !ARCHES.contains(&arch.as_str()) {
            return Err(invalid(
                format!("k3s.binaries.{arch}"),
                arch,
                format!("unknown architecture; use one of {ARCHES:?}"),
            ));
        }
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut overlays: HashMap<Ipv4Addr, &str> = HashMap::new();
    let mut agents: HashMap<SocketAddr, &str> = HashMap::new();
    let mut headnode: Option<&str> = None;
    let mut nodes = Vec::new();
    for (index, entry) in inventory.nodes.iter().enumerate() {
        let at = |key: &str| format!("nodes[{index}].{key}");
        if let Err(error) = proto::pki::validate_name(&entry.name) {
            return Err(invalid(at("name"), &entry.name, error.to_string()));
        }
        if let Some(first) = names.insert(&entry.name, index) {
            return Err(invalid(
                at("name"),
                &entry.name,
                format!("nodes[{first}] has the same name"),
            ));
        }
        if entry.role == NodeKind::Headnode {
            if let Some(other) = headnode {
                return Err(invalid(
                    at("role"),
                    &"headnode",
                    format!(
                        "node {} is a second headnode ({other} is one already); a testbed has one",
                        entry.name
                    ),
                ));
            }
            headnode = Some(&entry.name);
        }
        if !ARCHES.contains(&entry.arch.as_str()) {
            return Err(invalid(
                at("arch"),
                &entry.arch,
                format!("node {}: use one of {ARCHES:?}", entry.name),
            ));
        }
        if !ssh_word(&entry.address) || entry.address.contains('@') {
            return Err(invalid(
                at("address"),
                &entry.address,
                format!("node {}: a host name or an IP address", entry.name),
            ));
        }
        let user = entry.user.as_deref().unwrap_or(&inventory.ssh.user);
        if !ssh_word(user) || user.contains('@') {
            return Err(invalid(
                if entry.user.is_some() {
                    at("user")
                } else {
                    "ssh.user".into()
                },
                &user,
                format!("node {}: a login name", entry.name),
            ));
        }
        if !interface_name(&entry.data_interface) {
            return Err(invalid(
                at("data_interface"),
                &entry.data_interface,
                format!(
                    "node {}: an interface name has 1 to 15 characters, none of them '/', ':' or blank",
                    entry.name
                ),
            ));
        }
        let overlay = match &entry.overlay_ip {
            None => None,
            Some(text) => {
                let parsed = parse_overlay_cidr(text).ok_or_else(|| {
                    invalid(
                        at("overlay_ip"),
                        text,
                        format!(
                            "node {}: an IPv4 address with prefix, like 198.19.0.2/24",
                            entry.name
                        ),
                    )
                })?;
                if let Some(other) = overlays.insert(parsed.0, &entry.name) {
                    return Err(invalid(
                        at("overlay_ip"),
                        text,
                        format!(
                            "node {} has the overlay address of node {other}",
                            entry.name
                        ),
                    ));
                }
                Some(parsed)
            }
        };
        let agent_ip = match (entry.agent_address, entry.address.parse::<IpAddr>()) {
            (Some(ip), _) | (None, Ok(ip)) => ip,
            (None, Err(_)) => {
                return Err(invalid(
                    at("agent_address"),
                    &"",
                    format!(
                        "node {}: its SSH address is a host name; give the IP the agent listens on",
                        entry.name
                    ),
                ));
            }
        };
        let agent = SocketAddr::new(agent_ip, inventory.agent.port);
        if let Some(other) = agents.insert(agent, &entry.name) {
            return Err(invalid(
                at("agent_address"),
                &agent_ip,
                format!(
                    "node {} would share its agent address with node {other}",
                    entry.name
                ),
            ));
        }
        if let Some(metrics) = entry.metrics_listen
            && domain::shares_the_control_plane(metrics, agent)
        {
            return Err(invalid(
                at("metrics_listen"),
                &metrics,
                format!(
                    "node {}: the agent's control plane listens there ({agent}); metrics get a \
                     port of their own",
                    entry.name
                ),
            ));
        }
        nodes.push(Node {
            index,
            name: entry.name.clone(),
            host: entry.address.clone(),
            user: entry
                .user
                .clone()
                .unwrap_or_else(|| inventory.ssh.user.clone()),
            port: entry.port.unwrap_or(inventory.ssh.port),
            arch: entry.arch.clone(),
            kind: entry.role,
            data_interface: entry.data_interface.clone(),
            overlay,
            agent,
            metrics_listen: entry.metrics_listen,
        });
    }
    if !overlays.is_empty() && overlays.len() != nodes.len() {
        let missing = nodes.iter().position(|n| n.overlay.is_none()).unwrap_or(0);
        return Err(invalid(
            format!("nodes[{missing}].overlay_ip"),
            &"",
            format!(
                "node {} has no overlay address but others do: give every node one, or none",
                nodes[missing].name
            ),
        ));
    }
    if let Some(first) = nodes.first().and_then(|n| n.overlay) {
        for (index, node) in nodes.iter().enumerate() {
            if let Some((ip, len)) = node.overlay
                && (len != first.1 || overlay_network(ip, len) != overlay_network(first.0, len))
            {
                return Err(invalid(
                    format!("nodes[{index}].overlay_ip"),
                    &format!("{ip}/{len}"),
                    format!(
                        "node {} is not in the overlay network of node {} ({}/{})",
                        node.name, nodes[0].name, first.0, first.1
                    ),
                ));
            }
        }
    }
    if !overlays.is_empty() && headnode.is_none() {
        return Err(invalid(
            "nodes".into(),
            &"",
            "the overlay needs a headnode (its lighthouse): give one node role = \"headnode\""
                .into(),
        ));
    }
    Ok(nodes)
}

/// A name Linux accepts for a network interface.
fn interface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// A word that ssh takes as a host or user and nothing else: not empty, no whitespace or
/// control characters, and no leading `-` (which ssh would read as an option).
fn ssh_word(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('-')
        && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests;
