//! What bootstrap puts on a node and where: the agent binary, its configuration, the
//! project's and Nebula's certificates, and the systemd unit. Contents are computed locally
//! so a second run can compare hashes and copy nothing when nothing changed.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use domain::{AgentConfig, K3sSettings, NebulaFiles, TlsFiles};

use crate::inventory::{Loaded, Node};
use crate::state::State;

/// The agent binary on a node (the unit's ExecStart).
pub const AGENT_BINARY: &str = "/usr/local/bin/continuum-agent";
/// The agent's configuration (the unit's `--config`).
pub const AGENT_CONFIG: &str = "/etc/continuum/agent.toml";
/// Where an offline k3s binary goes (`[k3s] binaries`).
pub const K3S_BINARY: &str = "/usr/local/bin/k3s";
/// The unit file.
pub const AGENT_UNIT: &str = "/etc/systemd/system/continuum-agent.service";
/// The unit's name.
pub const UNIT_NAME: &str = "continuum-agent.service";
/// The agent's state folder (the unit's StateDirectory): brokers, installers, and
/// bootstrap's own record of what it installed.
pub const STATE_DIR: &str = "/var/lib/continuum-agent";
/// Where bootstrap lists what it installed, for `bootstrap uninstall`.
pub const RECORD: &str = "/var/lib/continuum-agent/bootstrap.record";
/// PID of an agent started without systemd.
pub const PID_FILE: &str = "/var/lib/continuum-agent/agent.pid";
/// Log of an agent started without systemd.
pub const LOG_FILE: &str = "/var/lib/continuum-agent/agent.log";

/// Folders bootstrap may have to create, parents first. Only those it created are removed
/// by uninstall.
pub const DIRS: [&str; 7] = [
    "/etc/continuum",
    "/etc/continuum/tls",
    "/etc/continuum/nebula",
    "/usr/local/bin",
    "/etc/systemd",
    "/etc/systemd/system",
    STATE_DIR,
];

/// Bootstrap's own folders: any file directly in one of them may be bootstrap's.
const OWN_DIRS: [&str; 4] = [
    "/etc/continuum",
    "/etc/continuum/tls",
    "/etc/continuum/nebula",
    STATE_DIR,
];

/// The files bootstrap writes into folders other software shares: nothing else there is its.
const SHARED_FILES: [&str; 3] = [AGENT_BINARY, K3S_BINARY, AGENT_UNIT];

/// A path in a node's install record that bootstrap did not install and so never removes:
/// the record lives on the node, and whoever can edit it must not get bootstrap to delete
/// (or run) something else as root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused {path:?} from the node's install record: {reason}; left in place")]
pub struct ForeignPath {
    /// The path as the record has it.
    pub path: String,
    /// Why it is not bootstrap's.
    pub reason: &'static str,
}

/// Checks a `file` entry of a node's record: one of the files bootstrap writes in shared
/// folders, or a plain name directly in one of bootstrap's own folders. Judged by name
/// only: `.`/`..` components, doubled or trailing slashes and relative paths are refused,
/// so a name cannot walk out of the folder; links along the way are the removal script's
/// to check (see [`own_dirs_above`]).
pub fn recorded_file(path: &str) -> Result<(), ForeignPath> {
    if SHARED_FILES.contains(&path) {
        return Ok(());
    }
    let refuse = |reason| {
        Err(ForeignPath {
            path: path.to_string(),
            reason,
        })
    };
    if let Some(reason) = malformed(path) {
        return refuse(reason);
    }
    match path.rsplit_once('/') {
        Some((parent, _)) if OWN_DIRS.contains(&parent) => Ok(()),
        _ => refuse(
            "not a file bootstrap installs (those are directly in /etc/continuum, its tls and \
             nebula folders or /var/lib/continuum-agent, and the agent binary, the k3s binary \
             and the agent's unit)",
        ),
    }
}

/// Checks a `dir` entry of a node's record: only the folders in [`DIRS`] are bootstrap's.
pub fn recorded_dir(path: &str) -> Result<(), ForeignPath> {
    if DIRS.contains(&path) {
        return Ok(());
    }
    Err(ForeignPath {
        path: path.to_string(),
        reason: malformed(path).unwrap_or("not a folder bootstrap creates"),
    })
}

/// Bootstrap's own folders that `path` lies in, outermost first: if one of them is a link,
/// removing `path` would reach outside them.
pub fn own_dirs_above(path: &str) -> Vec<&'static str> {
    OWN_DIRS
        .iter()
        .copied()
        .filter(|dir| {
            path.strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/'))
        })
        .collect()
}

/// Why `path` is not a plain absolute path, if it is not.
fn malformed(path: &str) -> Option<&'static str> {
    let Some(relative) = path.strip_prefix('/') else {
        return Some("not an absolute path");
    };
    if path.chars().any(char::is_control) {
        return Some("it holds control characters");
    }
    if relative
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Some("it has an empty, `.` or `..` component");
    }
    None
}

const UNIT_TEXT: &str = include_str!("../../agent/systemd/continuum-agent.service");

/// One file to have on a node.
#[derive(Debug, Clone)]
pub struct RemoteFile {
    /// Absolute path on the node.
    pub path: &'static str,
    /// Its mode.
    pub mode: u32,
    /// Its content.
    pub content: Vec<u8>,
    /// SHA-256 of the content, hex.
    pub sha256: String,
}

impl RemoteFile {
    fn new(path: &'static str, mode: u32, content: Vec<u8>) -> Self {
        let sha256 = hex::encode(Sha256::digest(&content));
        RemoteFile {
            path,
            mode,
            content,
            sha256,
        }
    }
}

/// Why a node's files could not be put together.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A local file is missing or unreadable.
    #[error("node {node}: {what} {path}: {source}{hint}")]
    Read {
        /// The node it is for.
        node: String,
        /// Which file.
        what: &'static str,
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
        /// What to do about it.
        hint: String,
    },
}

/// Every file `node` should have, in install order: certificates and configuration first,
/// the agent binary last.
pub fn files_for(
    loaded: &Loaded,
    state: &State,
    node: &Node,
) -> Result<Vec<RemoteFile>, LayoutError> {
    let read = |what: &'static str, path: &Path, hint: &str| {
        std::fs::read(path).map_err(|source| LayoutError::Read {
            node: node.name.clone(),
            what,
            path: path.display().to_string(),
            source,
            hint: hint.to_string(),
        })
    };
    let pki = state.pki_dir();
    let mut files = vec![
        RemoteFile::new(
            "/etc/continuum/tls/ca.pem",
            0o644,
            read("project CA", &pki.join(proto::pki::CA_CERT_FILE), "")?,
        ),
        RemoteFile::new(
            "/etc/continuum/tls/agent.pem",
            0o644,
            read(
                "agent certificate",
                &proto::pki::cert_path(&pki, &node.name),
                "",
            )?,
        ),
        RemoteFile::new(
            "/etc/continuum/tls/agent.key",
            0o600,
            read("agent key", &proto::pki::key_path(&pki, &node.name), "")?,
        ),
    ];
    if node.overlay.is_some() {
        let (crt, key) = state.nebula_host(&node.name);
        files.push(RemoteFile::new(
            "/etc/continuum/nebula/ca.crt",
            0o644,
            read("Nebula CA", &state.nebula_ca(), "")?,
        ));
        files.push(RemoteFile::new(
            "/etc/continuum/nebula/host.crt",
            0o644,
            read("Nebula certificate", &crt, "")?,
        ));
        files.push(RemoteFile::new(
            "/etc/continuum/nebula/host.key",
            0o600,
            read("Nebula key", &key, "")?,
        ));
    }
    let k3s = k3s_binary(loaded, node);
    if let Some(path) = &k3s {
        files.push(RemoteFile::new(
            K3S_BINARY,
            0o755,
            read("k3s binary", path, "; set [k3s] binaries in the inventory")?,
        ));
    }
    files.push(RemoteFile::new(
        AGENT_CONFIG,
        0o644,
        agent_config(node, k3s.is_some()).into_bytes(),
    ));
    files.push(RemoteFile::new(
        AGENT_UNIT,
        0o644,
        UNIT_TEXT.as_bytes().to_vec(),
    ));
    let binary = agent_binary(loaded, &node.arch);
    let hint = format!(
        "; build it with scripts/build-agents.sh {} (it says what to install for {}; \
         alone: cargo build --release -p agent{}) or set [agent] binaries = {{ {} = \"PATH\" }} \
         in the inventory",
        loaded.path.display(),
        node.arch,
        target_flag(&node.arch),
        node.arch
    );
    files.push(RemoteFile::new(
        AGENT_BINARY,
        0o755,
        read("agent binary", &binary, &hint)?,
    ));
    Ok(files)
}

/// The agent binary for `arch`: the inventory's, or for this machine's own architecture the
/// `continuum-agent` beside the running `bootstrap` (both come out of one cargo build).
pub fn agent_binary(loaded: &Loaded, arch: &str) -> PathBuf {
    if let Some(path) = loaded.inventory.agent.binaries.get(arch) {
        let base = loaded.path.parent().unwrap_or(Path::new("."));
        return base.join(path);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("continuum-agent")));
    match beside {
        Some(path) if arch == std::env::consts::ARCH => path,
        _ => PathBuf::from(format!(
            "target/{}/release/continuum-agent",
            target_triple(arch)
        )),
    }
}

fn target_triple(arch: &str) -> &'static str {
    match arch {
        "aarch64" => "aarch64-unknown-linux-gnu",
        "armv7" => "armv7-unknown-linux-gnueabihf",
        _ => "x86_64-unknown-linux-gnu",
    }
}

fn target_flag(arch: &str) -> String {
    if arch == std::env::consts::ARCH {
        String::new()
    } else {
        format!(" --target {}", target_triple(arch))
    }
}

/// The offline k3s binary `node` gets, if the inventory has one for its architecture.
fn k3s_binary(loaded: &Loaded, node: &Node) -> Option<PathBuf> {
    if !node.kind.runs_k3s() {
        return None;
    }
    let path = loaded.inventory.k3s.binaries.get(&node.arch)?;
    Some(loaded.path.parent().unwrap_or(Path::new(".")).join(path))
}

/// The agent's `agent.toml` for `node`; `k3s_pushed`: bootstrap copies k3s to
/// [`K3S_BINARY`]. Serialised from the agent's own configuration type, so the agent reads
/// exactly what is written here.
pub fn agent_config(node: &Node, k3s_pushed: bool) -> String {
    let config = AgentConfig {
        name: node.name.clone(),
        listen: node.agent,
        tls: TlsFiles {
            ca: "/etc/continuum/tls/ca.pem".into(),
            cert: "/etc/continuum/tls/agent.pem".into(),
            key: "/etc/continuum/tls/agent.key".into(),
        },
        roles: node.kind.agent_roles(),
        data_plane_interface: Some(node.data_interface.clone()),
        state_dir: STATE_DIR.into(),
        nebula: node.overlay.map(|_| NebulaFiles {
            ca: "/etc/continuum/nebula/ca.crt".into(),
            cert: "/etc/continuum/nebula/host.crt".into(),
            key: "/etc/continuum/nebula/host.key".into(),
            binary: "nebula".into(),
        }),
        metrics_listen: node.metrics_listen,
        k3s: K3sSettings {
            binary: if k3s_pushed {
                K3S_BINARY.into()
            } else {
                "k3s".into()
            },
            data_dir: None,
        },
    };
    let body = toml::to_string(&config).unwrap_or_else(|error| {
        // Every field is a plain string, path or address: serialising cannot fail.
        format!("# bootstrap could not write this configuration: {error}\n")
    });
    format!(
        "# Written by bootstrap for node {} ({}); bootstrap rewrites it on every run.\n{body}",
        node.name,
        node.kind.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::NodeKind;

    #[test]
    fn the_agent_loads_the_configuration_bootstrap_writes() {
        let node = Node {
            index: 2,
            name: "worker".into(),
            host: "198.18.0.3".into(),
            user: "root".into(),
            port: 22,
            arch: "x86_64".into(),
            kind: NodeKind::Worker,
            data_interface: "nebula1".into(),
            overlay: Some(("198.19.0.3".parse().expect("ip"), 24)),
            agent: "198.18.0.3:7100".parse().expect("address"),
            metrics_listen: Some("127.0.0.1:9464".parse().expect("address")),
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, agent_config(&node, true)).expect("write");
        let loaded = AgentConfig::load(&path).expect("the agent accepts it");
        assert_eq!(loaded.name, "worker");
        assert_eq!(loaded.roles, NodeKind::Worker.agent_roles());
        assert_eq!(loaded.k3s.binary, std::path::PathBuf::from(K3S_BINARY));
        assert!(loaded.nebula.is_some());
        assert_eq!(loaded.data_plane_interface.as_deref(), Some("nebula1"));
        assert_eq!(loaded.metrics_listen, node.metrics_listen);
    }
}

#[cfg(test)]
mod missing_binary_tests {
    use super::*;
    use crate::state::State;

    /// A Pi's agent that was never cross-built: the error says how to get one.
    #[test]
    fn a_missing_agent_binary_says_how_to_build_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("lab.toml");
        std::fs::write(
            &path,
            "state_dir = \"state\"\n[[nodes]]\nname = \"pi\"\naddress = \"198.18.0.2\"\n\
             arch = \"aarch64\"\nrole = \"tester\"\ndata_interface = \"eth0\"\n",
        )
        .expect("write");
        let loaded = Loaded::load(&path).expect("a valid inventory");
        let state = State::new(loaded.state_dir.clone());
        state.ensure(&loaded).expect("the PKI is made");
        let error = files_for(&loaded, &state, &loaded.nodes[0])
            .expect_err("no aarch64 agent was built")
            .to_string();
        for expected in [
            "node pi: agent binary ",
            "target/aarch64-unknown-linux-gnu/release/continuum-agent",
            "scripts/build-agents.sh ",
            "cargo build --release -p agent --target aarch64-unknown-linux-gnu",
            "[agent] binaries = { aarch64 = \"PATH\" }",
        ] {
            assert!(error.contains(expected), "{expected:?} not in: {error}");
        }
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    #[test]
    fn only_bootstraps_own_paths_pass_by_name() {
        for path in [
            AGENT_BINARY,
            K3S_BINARY,
            AGENT_UNIT,
            AGENT_CONFIG,
            RECORD,
            PID_FILE,
            "/etc/continuum/tls/agent.key",
            "/etc/continuum/nebula/host.key",
        ] {
            assert_eq!(recorded_file(path), Ok(()), "{path}");
        }
        for (path, reason) in [
            ("/etc/shadow", "not a file bootstrap installs"),
            ("/usr/local/bin/sudo", "not a file bootstrap installs"),
            ("/etc/continuum/tls/x/y", "not a file bootstrap installs"),
            ("etc/continuum/agent.toml", "not an absolute path"),
            ("../../etc/shadow", "not an absolute path"),
            ("/etc/continuum/../shadow", "`..`"),
            ("/etc/continuum/..", "`..`"),
            ("/etc/continuum/./agent.toml", "`.`"),
            ("/etc/continuum//agent.toml", "empty"),
            ("/etc/continuum/", "empty"),
            ("/etc/continuum/a\nb", "control characters"),
        ] {
            let refused = recorded_file(path).expect_err(path);
            assert!(refused.reason.contains(reason), "{path}: {refused}");
        }
        for dir in DIRS {
            assert_eq!(recorded_dir(dir), Ok(()), "{dir}");
        }
        for dir in [
            "/",
            "/etc",
            "/etc/continuum/tls/..",
            "/var/lib",
            "etc/continuum",
        ] {
            assert!(recorded_dir(dir).is_err(), "{dir}");
        }
        assert_eq!(
            own_dirs_above("/etc/continuum/tls/ca.pem"),
            ["/etc/continuum", "/etc/continuum/tls"]
        );
        assert_eq!(own_dirs_above(PID_FILE), [STATE_DIR]);
        assert!(own_dirs_above(AGENT_BINARY).is_empty());
        assert!(own_dirs_above("/etc/continuumx/a").is_empty());
    }
}
