//! A multi-node testbed on one machine, built from Linux network namespaces.
//!
//! [`Testbed::build`] makes one namespace per node and one for a bridge:
//!
//! ```text
//!   node ns "…-a"            bridge ns "…-bridge"           node ns "…-b"
//!   eth0 198.18.X.1/24 ── veth ── n0 ┐            ┌ n1 ── veth ── eth0 198.18.X.2/24
//!                                    └─── br0 ────┘
//! ```
//!
//! Every node has `lo` and `eth0` up and one address in a /24 of
//! 198.18.0.0/15 that no other live testbed holds ([`Subnet`]). No namespace
//! has a default route, and nothing is configured in the root namespace (all
//! `ip` calls use `-n NS`, except the `netns add`/`netns del` that create and
//! delete the namespaces themselves), so testbed traffic has no way out.
//!
//! The test process itself runs in a namespace with only `lo`
//! ([`isolated_netns_test!`](crate::isolated_netns_test), see [`isolation`]);
//! [`Testbed::build`] refuses to run anywhere else. Code reaches a node by
//! [`Node::command`] (a program run under `ip netns exec`), [`Node::spawn`]
//! (a long-running one, killed on drop) or [`Node::run_in`] (async Rust on a
//! thread that entered the node's namespace: its sockets belong to the node).
//!
//! Dropping the testbed kills every process started through it and deletes
//! every namespace it made.
//!
//! # Layout
//! - this file: [`Testbed`]: building, naming, teardown.
//! - `node` (private): [`Node`] and [`NodeProcess`], reaching into a node.
//! - [`addr`]: the benchmark range, subnet leases, parsing `ip` output.
//! - [`isolation`]: the root-capability gate and the isolated test process.

pub mod addr;
pub mod isolation;
mod node;

pub use addr::{BENCHMARK_RANGE, Ipv4Prefix, Subnet};
pub use isolation::{
    IP_BINARY, ensure_thread_isolated, isolate_test, isolate_test_within, outer_netns_path,
    require_root,
};
pub use node::{Node, NodeProcess, established_to, link_bytes_received};

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

#[cfg(doc)]
use crate::process::INSTANCE_MARKER_VAR;
use crate::process::instance_marker;
use addr::SubnetLease;
use host::blocking::run_with_deadline;
use isolation::NETNS_DIR;

/// How long one `ip` invocation may take.
const IP_DEADLINE: Duration = Duration::from_secs(20);

/// How long teardown waits for killed processes to disappear.
const KILL_DEADLINE: Duration = Duration::from_secs(10);

/// Longest node name (it becomes part of a namespace name).
const MAX_NODE_NAME: usize = 32;

/// Name of the bridge inside the bridge namespace.
const BRIDGE: &str = "br0";

/// Name of each node's link to the bridge, inside the node namespace.
pub const NODE_LINK: &str = "eth0";

/// One node to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Short name, unique in the testbed: ASCII letters, digits, `_`, `-`.
    pub name: String,
}

impl NodeSpec {
    /// A node called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

impl From<&str> for NodeSpec {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

/// A set of node namespaces joined by a bridge; see the module docs.
#[derive(Debug)]
pub struct Testbed {
    id: String,
    lease: SubnetLease,
    bridge_netns: String,
    nodes: Vec<Node>,
    /// Namespaces this testbed (may have) created, deleted on drop.
    created: Vec<String>,
}

impl Testbed {
    /// Builds a testbed with the given nodes (at most 254).
    ///
    /// Namespace names are `{prefix}-{pid}-{n}-{node}` plus
    /// `{prefix}-{pid}-{n}-bridge`, unique per test process and testbed.
    /// Nodes get hosts 1, 2, … of the testbed's subnet, in `nodes` order.
    ///
    /// Fails unless the calling thread is isolated
    /// ([`ensure_thread_isolated`]). On failure, whatever was already
    /// created is removed again.
    pub fn build(name_prefix: &str, nodes: &[NodeSpec]) -> Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        ensure_thread_isolated().context("refusing to build a testbed")?;
        validate(name_prefix, nodes)?;
        let id = format!(
            "{name_prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let lease = SubnetLease::acquire(&addr::default_lock_dir())?;
        let subnet = lease.subnet();
        let nodes: Vec<Node> = nodes
            .iter()
            .zip(1u8..)
            .map(|(spec, host)| {
                Ok(Node {
                    name: spec.name.clone(),
                    netns: format!("{id}-{}", spec.name),
                    addr: subnet.host(host).context("more than 254 nodes")?,
                    subnet,
                    instance_id: id.clone(),
                })
            })
            .collect::<Result<_>>()?;
        let bridge_netns = format!("{id}-bridge");
        let created = nodes
            .iter()
            .map(|node| node.netns.clone())
            .chain([bridge_netns.clone()])
            .collect();
        // From here on, dropping `testbed` cleans up whatever exists.
        let testbed = Self {
            id,
            lease,
            bridge_netns,
            nodes,
            created,
        };
        testbed
            .create()
            .with_context(|| format!("building testbed {}", testbed.id))?;
        Ok(testbed)
    }

    fn create(&self) -> Result<()> {
        let mut add = String::new();
        for netns in &self.created {
            writeln!(add, "netns add {netns}")?;
        }
        ip(&[], Some(add))?;

        let mut bridge =
            format!("link set lo up\nlink add {BRIDGE} type bridge\nlink set {BRIDGE} up\n");
        for (index, node) in self.nodes.iter().enumerate() {
            let port = format!("n{index}");
            writeln!(
                bridge,
                "link add {port} type veth peer name {NODE_LINK} netns {}",
                node.netns
            )?;
            writeln!(bridge, "link set {port} master {BRIDGE}")?;
            writeln!(bridge, "link set {port} up")?;
        }
        ip(&["-n", &self.bridge_netns], Some(bridge))?;

        for node in &self.nodes {
            let config = format!(
                "link set lo up\naddr add {}/24 dev {NODE_LINK}\nlink set {NODE_LINK} up\n",
                node.addr
            );
            ip(&["-n", &node.netns], Some(config))?;
        }
        Ok(())
    }

    /// The node called `name`. Panics if there is none.
    pub fn node(&self, name: &str) -> &Node {
        self.try_node(name).unwrap_or_else(|| {
            let names: Vec<&str> = self.nodes.iter().map(Node::name).collect();
            panic!(
                "testbed {} has no node {name:?} (it has {names:?})",
                self.id
            )
        })
    }

    /// The node called `name`, if there is one.
    pub fn try_node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|node| node.name == name)
    }

    /// Every node, in the order given to [`Testbed::build`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// This testbed's /24.
    pub fn subnet(&self) -> Subnet {
        self.lease.subnet()
    }

    /// The testbed's unique id (`{prefix}-{pid}-{n}`), which prefixes its
    /// namespace names and tags its processes ([`INSTANCE_MARKER_VAR`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name of the namespace holding the bridge.
    pub fn bridge_netns_name(&self) -> &str {
        &self.bridge_netns
    }

    /// The names of all namespaces of this testbed: the nodes' and the
    /// bridge's.
    pub fn netns_names(&self) -> Vec<&str> {
        self.created.iter().map(String::as_str).collect()
    }

    /// Kills every process started through the testbed and deletes its
    /// namespaces; reports what could not be removed. Dropping the testbed
    /// does the same and prints the report.
    pub fn teardown(mut self) -> Result<()> {
        self.remove()
    }

    fn remove(&mut self) -> Result<()> {
        let mut problems = Vec::new();
        let survivors = instance_marker(&self.id).sweep_blocking(KILL_DEADLINE);
        if !survivors.is_empty() {
            problems.push(format!("processes {survivors:?} survived SIGKILL"));
        }
        let existing: Vec<&String> = self
            .created
            .iter()
            .filter(|netns| netns_path(netns).exists())
            .collect();
        if !existing.is_empty() {
            let delete: String = existing
                .iter()
                .map(|netns| format!("netns del {netns}\n"))
                .collect();
            // -force: go on deleting after one fails.
            if let Err(error) = ip(&["-force"], Some(delete)) {
                problems.push(format!("{error:#}"));
            }
        }
        let left: Vec<&String> = self
            .created
            .iter()
            .filter(|netns| netns_path(netns).exists())
            .collect();
        if !left.is_empty() {
            problems.push(format!("namespaces {left:?} are still there"));
        }
        self.created.clear();
        if !problems.is_empty() {
            bail!("tearing down testbed {}: {}", self.id, problems.join("; "));
        }
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(error) = self.remove() {
            eprintln!("{error:#}");
        }
    }
}

fn validate(name_prefix: &str, nodes: &[NodeSpec]) -> Result<()> {
    let is_name = |name: &str, max: usize| {
        !name.is_empty()
            && name.len() <= max
            && name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
    };
    ensure!(
        is_name(name_prefix, MAX_NODE_NAME),
        "testbed prefix {name_prefix:?} must be 1 to {MAX_NODE_NAME} ASCII letters, digits, '_' or '-'"
    );
    ensure!(!nodes.is_empty(), "a testbed needs at least one node");
    ensure!(nodes.len() <= 254, "a /24 holds at most 254 nodes");
    for (index, node) in nodes.iter().enumerate() {
        ensure!(
            is_name(&node.name, MAX_NODE_NAME),
            "node name {:?} must be 1 to {MAX_NODE_NAME} ASCII letters, digits, '_' or '-'",
            node.name
        );
        ensure!(
            node.name != "bridge",
            "\"bridge\" names the bridge namespace"
        );
        ensure!(
            nodes[..index].iter().all(|other| other.name != node.name),
            "node name {:?} is used twice",
            node.name
        );
    }
    Ok(())
}

/// Runs `ip OPTIONS -batch -` with `batch` as its commands (or `ip OPTIONS`
/// alone), failing with its stderr if it fails.
fn ip(options: &[&str], batch: Option<String>) -> Result<String> {
    let mut command = Command::new(IP_BINARY);
    command.args(options);
    if batch.is_some() {
        command.args(["-batch", "-"]);
    }
    let shown = format!(
        "ip {} {}",
        options.join(" "),
        batch.as_deref().unwrap_or_default()
    );
    let output = run_with_deadline(&mut command, batch.map(String::into_bytes), IP_DEADLINE)?;
    if !output.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            shown.trim(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).context("ip printed non-UTF-8 output")
}

/// The names `ip netns list` shows in this process's mount namespace.
pub fn list_netns() -> Result<Vec<String>> {
    let output = ip(&["netns", "list"], None)?;
    // Lines are `NAME` or `NAME (id: N)`.
    Ok(output
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

fn netns_path(netns: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(netns)
}

/// The inode number identifying the network namespace at `path` (a
/// `/run/netns` entry or a `/proc/PID/ns/net` link): two paths refer to the
/// same namespace exactly when their inodes (on nsfs) are equal.
pub fn netns_inode(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(names: &[&str]) -> Vec<NodeSpec> {
        names.iter().copied().map(NodeSpec::from).collect()
    }

    #[test]
    fn names_are_validated_before_anything_is_created() {
        assert!(validate("echo", &specs(&["a", "b-2", "c_3"])).is_ok());
        assert!(validate("", &specs(&["a"])).is_err());
        assert!(validate("has space", &specs(&["a"])).is_err());
        assert!(validate("echo", &[]).is_err());
        assert!(validate("echo", &specs(&["a", "a"])).is_err());
        assert!(validate("echo", &specs(&["bridge"])).is_err());
        assert!(validate("echo", &specs(&["a/b"])).is_err());
        assert!(validate("echo", &specs(&[&"x".repeat(33)])).is_err());
    }

    #[test]
    fn a_testbed_is_refused_outside_an_isolated_namespace() {
        // Unit tests run in the machine's namespace, which has more than lo.
        if ensure_thread_isolated().is_ok() {
            return;
        }
        let error = Testbed::build("refused", &specs(&["a"])).unwrap_err();
        assert!(
            format!("{error:#}").contains("isolated_netns_test"),
            "{error:#}"
        );
    }
}
