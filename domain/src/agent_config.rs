//! The agent's configuration file (`agent.toml`), written by bootstrap or by hand, and read
//! by the agent.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::file::{FileError, read_toml};
use crate::name::check_name;
use crate::role::NodeRole;

/// True when a metrics listener at `metrics` would take the control plane's socket
/// (`listen`): the same port on the same address, or on every address on either side.
pub fn shares_the_control_plane(metrics: SocketAddr, listen: SocketAddr) -> bool {
    metrics.port() == listen.port()
        && (metrics.ip() == listen.ip()
            || metrics.ip().is_unspecified()
            || listen.ip().is_unspecified())
}

/// Where the agent's identity and the CA are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The project's CA certificate (PEM).
    pub ca: PathBuf,
    /// This agent's certificate (PEM).
    pub cert: PathBuf,
    /// This agent's private key (PEM, mode 0600).
    pub key: PathBuf,
}

/// The agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Node name, as in the agent's certificate.
    pub name: String,
    /// Address the gRPC server listens on (the control plane, never the data plane).
    pub listen: SocketAddr,
    /// mTLS files.
    pub tls: TlsFiles,
    /// What this node may be asked to do.
    #[serde(default = "all_roles")]
    pub roles: Vec<NodeRole>,
    /// Interface netem applies to when a request names none (the overlay's, normally).
    #[serde(default)]
    pub data_plane_interface: Option<String>,
    /// Where brokers keep their files.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Nebula's certificates for this node (bootstrap writes them); without them the
    /// InstallOverlay RPC refuses.
    #[serde(default)]
    pub nebula: Option<NebulaFiles>,
    /// Where k3s is and where it keeps its data.
    #[serde(default)]
    pub k3s: K3sSettings,
    /// Where to serve this node's live metrics in Prometheus' text format (`GET /metrics`,
    /// plain HTTP, read-only); off when absent. Never the control plane's port: a loopback
    /// or management address, or the data plane's when a Prometheus scrapes over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
}

/// Nebula's files on this node: its CA, the host certificate and key `nebula-cert` made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NebulaFiles {
    /// Nebula's CA certificate (not the project's CA: Nebula has its own format).
    pub ca: PathBuf,
    /// This host's Nebula certificate (carries its overlay IP).
    pub cert: PathBuf,
    /// Its key (mode 0600).
    pub key: PathBuf,
    /// The `nebula` executable; a bare name is looked up on PATH.
    #[serde(default = "default_nebula_binary")]
    pub binary: PathBuf,
}

fn default_nebula_binary() -> PathBuf {
    PathBuf::from("nebula")
}

/// k3s on this node: the executable (from the official installer, or an offline binary the
/// controller or bootstrap pushed) and the folder its state goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct K3sSettings {
    /// The `k3s` executable; a bare name is looked up on PATH.
    pub binary: PathBuf,
    /// k3s's `--data-dir`; the kubeconfig is written beside it. Default: `<state_dir>/k3s`.
    pub data_dir: Option<PathBuf>,
}

impl Default for K3sSettings {
    fn default() -> Self {
        K3sSettings {
            binary: PathBuf::from("k3s"),
            data_dir: None,
        }
    }
}

fn all_roles() -> Vec<NodeRole> {
    vec![NodeRole::Loadgen, NodeRole::Broker, NodeRole::Netem]
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/continuum-agent")
}

impl AgentConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        let config: AgentConfig = read_toml(path)?;
        config
            .validate()
            .map_err(|error| error.in_file(&path.display().to_string()))?;
        Ok(config)
    }

    /// Checks the values serde cannot: the name rule, the interface name's length.
    pub fn validate(&self) -> Result<(), FileError> {
        if let Err(problem) = check_name(&self.name) {
            return Err(FileError::invalid(
                "name",
                format!("{:?}", self.name),
                problem.to_string(),
            ));
        }
        if let Some(interface) = &self.data_plane_interface
            && (interface.is_empty() || interface.len() > 15)
        {
            return Err(FileError::invalid(
                "data_plane_interface",
                format!("{interface:?}"),
                "an interface name has 1 to 15 characters",
            ));
        }
        if let Some(metrics) = self.metrics_listen
            && shares_the_control_plane(metrics, self.listen)
        {
            return Err(FileError::invalid(
                "metrics_listen",
                format!("{:?}", metrics.to_string()),
                format!(
                    "the control plane listens there (listen = {:?}); metrics get a port of \
                     their own",
                    self.listen.to_string()
                ),
            ));
        }
        Ok(())
    }

    /// k3s's data folder: the configured one, or `<state_dir>/k3s`.
    pub fn k3s_data_dir(&self) -> PathBuf {
        self.k3s
            .data_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("k3s"))
    }

    /// The kubeconfig the k3s server writes (`--write-kubeconfig`) and the kubernetes
    /// broker driver reads.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.k3s_data_dir().join("kubeconfig.yaml")
    }

    /// True when the node has `role`.
    pub fn has_role(&self, role: NodeRole) -> bool {
        self.roles.contains(&role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_config_parses_and_roles_default_to_all() {
        let config: AgentConfig = toml::from_str(
            r#"
            name = "worker-1"
            listen = "198.18.0.3:7100"
            data_plane_interface = "nebula1"
            [tls]
            ca = "/etc/continuum/ca.pem"
            cert = "/etc/continuum/worker-1.pem"
            key = "/etc/continuum/worker-1.key"
            "#,
        )
        .expect("parses");
        assert!(config.has_role(NodeRole::Loadgen) && config.has_role(NodeRole::Netem));
        config.validate().expect("valid");
    }

    #[test]
    fn bad_values_name_the_file_and_field() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("agent.toml");
        std::fs::write(
            &path,
            "name = \"bad name\"\nlisten = \"127.0.0.1:1\"\n[tls]\nca = \"a\"\ncert = \"b\"\nkey = \"c\"\n",
        )
        .expect("write");
        let error = AgentConfig::load(&path)
            .expect_err("invalid name")
            .to_string();
        assert!(error.contains("agent.toml: name = \"bad name\""), "{error}");
        std::fs::write(&path, "name = \"x\"\nlisten = \"127.0.0.1:1\"\nport = 3\n").expect("write");
        let error = AgentConfig::load(&path)
            .expect_err("unknown field")
            .to_string();
        assert!(error.contains("port"), "{error}");
    }

    #[test]
    fn metrics_never_share_the_control_planes_port() {
        let config = |metrics: &str| {
            toml::from_str::<AgentConfig>(&format!(
                "name = \"x\"\nlisten = \"198.18.0.3:7100\"\nmetrics_listen = \"{metrics}\"\n\
                 tls = {{ ca = \"a\", cert = \"b\", key = \"c\" }}\n"
            ))
            .expect("parses")
        };
        for clash in ["198.18.0.3:7100", "0.0.0.0:7100"] {
            let error = config(clash).validate().expect_err(clash).to_string();
            assert!(
                error.contains(&format!("metrics_listen = \"{clash}\""))
                    && error.contains("198.18.0.3:7100"),
                "{error}"
            );
        }
        for fine in ["198.18.0.3:9464", "127.0.0.1:7100"] {
            assert_eq!(config(fine).validate().ok(), Some(()), "{fine}");
        }
    }
}
