//! The InstallCluster request checked in full, before anything on the node is touched, into
//! a [`ClusterPlan`]: the typed form the rest of the installer works from and remembers.
//! Every error names the request field (`token`, `role.agent.server_url`, `labels["x"]`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use proto::agent::v1 as pb;
use serde::{Deserialize, Serialize};

use super::labels::{check_label, is_dns_subdomain};
use crate::install::InstallError;

/// How long the server may take to list its node Ready when the request does not say.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// A wait longer than this is a typo, not a slow Raspberry Pi.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// k3s's secure token format (`K10<hash>::server:<secret>`) is about 100 characters.
const MAX_TOKEN_LEN: usize = 512;
/// Characters refused in a token besides whitespace: they would need quoting in the systemd
/// EnvironmentFile, whose quoting rules differ between systemd versions.
const TOKEN_FORBIDDEN: &[char] = &['"', '\'', '\\', '$', '`'];
/// The label this installer sets from the role; a request may not set it.
pub(super) const ROLE_LABEL: &str = "continuum.io/role";

/// What this node is in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub(super) enum ClusterRole {
    /// `k3s server`: the control plane, on the headnode.
    Server {
        /// False (the study): the server is tainted so workloads stay off it.
        schedule_workloads: bool,
    },
    /// `k3s agent`: a worker joining the server at `server_url`.
    Agent {
        /// `https://host:port`.
        server_url: String,
    },
}

impl ClusterRole {
    /// "server" or "agent", as in ClusterStatus.role and k3s's subcommand.
    pub(super) fn name(&self) -> &'static str {
        match self {
            ClusterRole::Server { .. } => "server",
            ClusterRole::Agent { .. } => "agent",
        }
    }

    /// The value of the [`ROLE_LABEL`] node label: the study's names for the nodes.
    pub(super) fn label(&self) -> &'static str {
        match self {
            ClusterRole::Server { .. } => "headnode",
            ClusterRole::Agent { .. } => "worker",
        }
    }
}

/// A checked request. Its `Debug` hides the token: plans end up in logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ClusterPlan {
    pub(super) role: ClusterRole,
    pub(super) token: String,
    pub(super) node_ip: IpAddr,
    pub(super) flannel_interface: String,
    pub(super) node_name: String,
    pub(super) labels: BTreeMap<String, String>,
}

impl std::fmt::Debug for ClusterPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPlan")
            .field("role", &self.role)
            .field("token", &"<redacted>")
            .field("node_ip", &self.node_ip)
            .field("flannel_interface", &self.flannel_interface)
            .field("node_name", &self.node_name)
            .field("labels", &self.labels)
            .finish()
    }
}

impl ClusterPlan {
    /// The request fields that differ from `before`, for the status detail (names only:
    /// the token's value is never shown).
    pub(super) fn changes_from(&self, before: &ClusterPlan) -> Vec<&'static str> {
        let mut changed = Vec::new();
        if self.role.name() != before.role.name() {
            changed.push("role");
        } else if self.role != before.role {
            changed.push(match self.role {
                ClusterRole::Server { .. } => "role.server.schedule_workloads",
                ClusterRole::Agent { .. } => "role.agent.server_url",
            });
        }
        let fields = [
            ("token", self.token != before.token),
            ("node_ip", self.node_ip != before.node_ip),
            (
                "flannel_interface",
                self.flannel_interface != before.flannel_interface,
            ),
            ("node_name", self.node_name != before.node_name),
            ("labels", self.labels != before.labels),
        ];
        changed.extend(
            fields
                .iter()
                .filter(|(_, differs)| *differs)
                .map(|(f, _)| *f),
        );
        changed
    }
}

/// Checks `request` in full; `agent_name` is the node name when the request gives none.
/// Returns the plan and how long to wait for the node to be Ready.
pub(super) fn validate(
    request: &pb::InstallClusterRequest,
    agent_name: &str,
) -> Result<(ClusterPlan, Duration), InstallError> {
    let role = match &request.role {
        None => {
            return Err(InstallError::invalid(
                "role",
                "required: server (the headnode) or agent (a worker)",
            ));
        }
        Some(pb::install_cluster_request::Role::Server(server)) => ClusterRole::Server {
            schedule_workloads: server.schedule_workloads,
        },
        Some(pb::install_cluster_request::Role::Agent(agent)) => {
            check_server_url(&agent.server_url)
                .map_err(|problem| InstallError::invalid("role.agent.server_url", problem))?;
            ClusterRole::Agent {
                server_url: agent.server_url.clone(),
            }
        }
    };
    check_token(&request.token).map_err(|problem| InstallError::invalid("token", problem))?;
    let node_ip = check_node_ip(&request.node_ip)
        .map_err(|problem| InstallError::invalid("node_ip", problem))?;
    check_interface(&request.flannel_interface)
        .map_err(|problem| InstallError::invalid("flannel_interface", problem))?;
    let node_name = node_name(&request.node_name, agent_name)
        .map_err(|problem| InstallError::invalid("node_name", problem))?;
    for (key, value) in &request.labels {
        let field = format!("labels[{key:?}]");
        if key == ROLE_LABEL {
            return Err(InstallError::invalid(
                field,
                "set by the installer from the role (headnode or worker)",
            ));
        }
        check_label(key, value).map_err(|problem| InstallError::invalid(field, problem))?;
    }
    let timeout = match request.timeout {
        None => DEFAULT_TIMEOUT,
        Some(timeout) => Duration::try_from(timeout)
            .ok()
            .filter(|t| !t.is_zero() && *t <= MAX_TIMEOUT)
            .ok_or_else(|| {
                InstallError::invalid(
                    "timeout",
                    format!("{timeout:?}: give a positive duration of at most 1 h, or none"),
                )
            })?,
    };
    let plan = ClusterPlan {
        role,
        token: request.token.clone(),
        node_ip,
        flannel_interface: request.flannel_interface.clone(),
        node_name,
        labels: request.labels.clone().into_iter().collect(),
    };
    Ok((plan, timeout))
}

fn check_token(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err("required: the cluster's shared secret, the same on every node".into());
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(format!("longer than {MAX_TOKEN_LEN} characters"));
    }
    // The value itself is never echoed: it is a secret.
    if let Some(bad) = token
        .chars()
        .find(|c| !c.is_ascii_graphic() || TOKEN_FORBIDDEN.contains(c))
    {
        let what = if bad.is_whitespace() {
            "whitespace".to_string()
        } else if bad.is_control() {
            "a control character".to_string()
        } else {
            format!("{bad:?}")
        };
        return Err(format!(
            "contains {what}; use printable ASCII without spaces, quotes, '\\', '$' or '`'"
        ));
    }
    Ok(())
}

fn check_node_ip(text: &str) -> Result<IpAddr, String> {
    if text.is_empty() {
        return Err("required: this node's address in the cluster (its overlay IP)".into());
    }
    let ip: IpAddr = text
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address"))?;
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(format!("{text:?} cannot be a node's own address"));
    }
    Ok(ip)
}

/// Linux's own rule (`dev_valid_name`): 1 to 15 bytes, not `.` or `..`, no `/`, `:` or
/// whitespace.
fn check_interface(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("required: the interface flannel uses (the overlay's, e.g. nebula1)".into());
    }
    if name.len() > 15 {
        return Err(format!(
            "{name:?}: an interface name has 1 to 15 characters"
        ));
    }
    if name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!("{name:?} is not a valid interface name"));
    }
    Ok(())
}

/// The request's node name, or the agent's name made into one (Kubernetes node names are
/// lowercase DNS names; agent names may hold `_` and capitals).
fn node_name(requested: &str, agent_name: &str) -> Result<String, String> {
    if requested.is_empty() {
        let derived = agent_name.to_ascii_lowercase().replace('_', "-");
        return if is_dns_subdomain(&derived) {
            Ok(derived)
        } else {
            Err(format!(
                "empty, and the agent's name {agent_name:?} does not make a Kubernetes node \
                 name; give one (lowercase letters, digits, '-' and '.')"
            ))
        };
    }
    if is_dns_subdomain(requested) {
        Ok(requested.to_string())
    } else {
        Err(format!(
            "{requested:?}: a node name is a lowercase DNS name (letters, digits, '-' and '.', \
             at most 253 characters)"
        ))
    }
}

/// `https://host:port`, host a DNS name, an IPv4 address or a bracketed IPv6 address.
fn check_server_url(url: &str) -> Result<(), String> {
    let expected = || {
        format!(
            "{url:?}: expected https://<server overlay ip>:<port>, e.g. https://198.19.0.1:6443"
        )
    };
    if url.is_empty() {
        return Err("required: the server's URL, https://<server overlay ip>:6443".into());
    }
    let authority = url.strip_prefix("https://").ok_or_else(expected)?;
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, port) = rest.split_once("]:").ok_or_else(expected)?;
        v6.parse::<Ipv6Addr>().map_err(|_| expected())?;
        ("", port)
    } else {
        let (host, port) = authority.rsplit_once(':').ok_or_else(expected)?;
        (host, port)
    };
    if !host.is_empty() && host.parse::<std::net::Ipv4Addr>().is_err() && !is_hostname(host) {
        return Err(expected());
    }
    // All digits: u16's parser would also take a leading '+'.
    match port.parse::<u16>() {
        Ok(number) if number > 0 && port.chars().all(|c| c.is_ascii_digit()) => Ok(()),
        _ => Err(expected()),
    }
}

/// A DNS host name: labels of letters, digits and '-', not starting or ending with '-'.
fn is_hostname(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_request() -> pb::InstallClusterRequest {
        pb::InstallClusterRequest {
            role: Some(pb::install_cluster_request::Role::Server(pb::K3sServer {
                schedule_workloads: false,
            })),
            token: "K10abc::server:s3cret".into(),
            node_ip: "198.19.0.1".into(),
            flannel_interface: "nebula1".into(),
            node_name: String::new(),
            labels: [(
                "topology.kubernetes.io/zone".to_string(),
                "edge".to_string(),
            )]
            .into(),
            timeout: None,
        }
    }

    /// Spoils one field of a good request.
    type Spoil = Box<dyn Fn(&mut pb::InstallClusterRequest)>;

    fn field_of(request: &pb::InstallClusterRequest) -> String {
        match validate(request, "Head_Node") {
            Err(InstallError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_good_request_becomes_a_plan_with_defaults() {
        let (plan, timeout) = validate(&server_request(), "Head_Node").expect("valid");
        assert_eq!(plan.node_name, "head-node");
        assert_eq!(plan.node_ip, IpAddr::from([198, 19, 0, 1]));
        assert_eq!(timeout, DEFAULT_TIMEOUT);
        assert!(
            !format!("{plan:?}").contains("s3cret"),
            "Debug hides the token"
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(&str, Spoil)> = vec![
            ("role", Box::new(|r| r.role = None)),
            ("token", Box::new(|r| r.token.clear())),
            ("token", Box::new(|r| r.token = "two words".into())),
            ("token", Box::new(|r| r.token = "tab\there".into())),
            ("token", Box::new(|r| r.token = "dollar$sign".into())),
            ("node_ip", Box::new(|r| r.node_ip = "198.19.0".into())),
            ("node_ip", Box::new(|r| r.node_ip = "0.0.0.0".into())),
            (
                "flannel_interface",
                Box::new(|r| r.flannel_interface.clear()),
            ),
            (
                "flannel_interface",
                Box::new(|r| r.flannel_interface = "a-very-long-name0".into()),
            ),
            (
                "flannel_interface",
                Box::new(|r| r.flannel_interface = "eth0:1".into()),
            ),
            ("node_name", Box::new(|r| r.node_name = "Head_Node".into())),
            (
                "timeout",
                Box::new(|r| r.timeout = Some(prost_types::Duration::default())),
            ),
            (
                "labels[\"bad key!\"]",
                Box::new(|r| {
                    r.labels.insert("bad key!".into(), "x".into());
                }),
            ),
            (
                "labels[\"ok\"]",
                Box::new(|r| {
                    r.labels.insert("ok".into(), "-starts-with-dash".into());
                }),
            ),
            (
                "labels[\"continuum.io/role\"]",
                Box::new(|r| {
                    r.labels.insert(ROLE_LABEL.into(), "worker".into());
                }),
            ),
            (
                "labels[\"kubernetes.io/made-up\"]",
                Box::new(|r| {
                    r.labels.insert("kubernetes.io/made-up".into(), "x".into());
                }),
            ),
        ];
        for (field, spoil) in cases {
            let mut request = server_request();
            spoil(&mut request);
            assert_eq!(field_of(&request), field, "{request:?}");
        }
    }

    #[test]
    fn server_urls_must_be_https_host_port() {
        for good in [
            "https://198.19.0.1:6443",
            "https://headnode.lab:6443",
            "https://[fd00::1]:6443",
        ] {
            assert_eq!(check_server_url(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "http://198.19.0.1:6443",
            "https://198.19.0.1",
            "https://198.19.0.1:0",
            "https://198.19.0.1:6443/path",
            "https://user@198.19.0.1:6443",
            "https://[fd00::1:6443",
            "https://-bad-.host:6443",
        ] {
            assert!(check_server_url(bad).is_err(), "{bad:?} accepted");
        }
        let mut request = server_request();
        request.role = Some(pb::install_cluster_request::Role::Agent(pb::K3sAgent {
            server_url: "198.19.0.1:6443".into(),
        }));
        assert_eq!(field_of(&request), "role.agent.server_url");
    }

    #[test]
    fn changes_are_named_without_values() {
        let (before, _) = validate(&server_request(), "h").expect("valid");
        let mut after = before.clone();
        after.token = "other".into();
        after.labels.insert("a".into(), "b".into());
        assert_eq!(after.changes_from(&before), ["token", "labels"]);
        after.role = ClusterRole::Agent {
            server_url: "https://198.19.0.1:6443".into(),
        };
        assert_eq!(after.changes_from(&before)[0], "role");
        assert!(before.changes_from(&before).is_empty());
    }
}
