//! The run's types to and from the agent's messages: requests with `From`, replies with
//! `From` or, where a reply may not make a value (an address that is not host:port),
//! `TryFrom` with the agent's answer named in the error.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use domain::NodeRole;
use proto::agent::v1 as pb;
use proto::client::status_text;

use crate::results::NetemRecord;
use crate::run::testbed::{
    AgentError, Capability, ClusterInstall, ClusterInstalled, ClusterMember, ClusterRole, InForce,
    Load, MetricsSample, NodeInfo, OverlayInstall, OverlayInstalled, Peer, ProcessSample, Started,
};

/// A precondition the node does not meet is [`AgentError::Unmet`]; the rest failed.
impl From<tonic::Status> for AgentError {
    fn from(status: tonic::Status) -> Self {
        if status.code() == tonic::Code::FailedPrecondition {
            return AgentError::Unmet(status.message().to_string());
        }
        let text = status_text(&status);
        let message = status.message().to_string();
        let cause = text
            .strip_prefix(&message)
            .and_then(|rest| rest.strip_prefix(": "))
            .map(str::to_string);
        AgentError::Failed { message, cause }
    }
}

/// A role as the agent names it (the names `NodeRole` is configured with); None for one
/// this controller does not know (a newer agent's).
fn role(name: &str) -> Option<NodeRole> {
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    let name: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        name.into_deserializer();
    NodeRole::deserialize(name).ok()
}

impl From<pb::NodeInfo> for NodeInfo {
    fn from(info: pb::NodeInfo) -> Self {
        let roles: BTreeSet<NodeRole> = info.roles.iter().filter_map(|r| role(r)).collect();
        let installed_brokers = info.capabilities.as_ref().map(|c| {
            c.brokers
                .iter()
                .filter_map(|broker| proto::convert::known_product(broker.product))
                .collect()
        });
        let netem = info.capabilities.and_then(|c| c.netem).map(|c| Capability {
            available: c.available,
            detail: c.detail,
        });
        NodeInfo {
            name: info.name,
            arch: info.arch,
            cores: info.cores,
            memory_bytes: info.memory_bytes,
            kernel: info.kernel,
            os: info.os,
            agent_version: info.agent_version,
            roles,
            netem,
            installed_brokers,
        }
    }
}

/// A started broker: its address must be host:port; an empty WebSocket address means it
/// has no such listener.
impl TryFrom<pb::BrokerStatus> for Started {
    type Error = AgentError;

    fn try_from(status: pb::BrokerStatus) -> Result<Self, AgentError> {
        let address = status
            .address
            .parse()
            .map_err(|_| AgentError::Reply("the agent reported no address".to_string()))?;
        let websocket = match status.websocket_address.as_str() {
            "" => None,
            ws => Some(ws.parse::<SocketAddr>().map_err(|_| {
                AgentError::Reply(format!(
                    "the agent reported WebSocket address {ws:?}, not host:port"
                ))
            })?),
        };
        let quic = match (status.quic_address.as_str(), status.quic_ca_pem) {
            ("", _) => None,
            (_, pem) if pem.is_empty() => {
                return Err(AgentError::Reply(
                    "the agent reported a QUIC listener without its CA".to_string(),
                ));
            }
            (quic, pem) => Some((
                quic.parse::<SocketAddr>().map_err(|_| {
                    AgentError::Reply(format!(
                        "the agent reported QUIC address {quic:?}, not host:port"
                    ))
                })?,
                pem,
            )),
        };
        Ok(Started {
            address,
            websocket,
            quic,
            detail: status.detail,
            capabilities: status.capabilities.map(Into::into),
        })
    }
}

impl From<pb::NetemState> for InForce {
    fn from(state: pb::NetemState) -> Self {
        InForce {
            interface: state.interface,
            read_back: state.netem.as_ref().map(NetemRecord::of),
        }
    }
}

impl From<&Load> for pb::RunLoadRequest {
    fn from(load: &Load) -> Self {
        pb::RunLoadRequest {
            spec: Some((&load.spec).into()),
            origin_unix_ns: load.origin_unix_ns,
            start_at_ns: load.start_at_ns,
            labels: load.labels.clone(),
        }
    }
}

impl From<pb::MetricsSample> for MetricsSample {
    fn from(sample: pb::MetricsSample) -> Self {
        MetricsSample {
            unix_ns: sample.unix_ns,
            cpu_percent: sample.cpu_percent,
            memory_used_bytes: sample.memory_used_bytes,
            processes: sample
                .processes
                .into_iter()
                .map(|p| ProcessSample {
                    label: p.label,
                    cpu_percent: p.cpu_percent,
                    rss_bytes: p.rss_bytes,
                    alive: p.alive,
                })
                .collect(),
        }
    }
}

fn proto_duration(value: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(value.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(value.subsec_nanos()).unwrap_or(0),
    }
}

impl From<&OverlayInstall> for pb::InstallOverlayRequest {
    fn from(install: &OverlayInstall) -> Self {
        pb::InstallOverlayRequest {
            lighthouse: install.lighthouse,
            overlay_cidr: install.overlay_cidr.clone(),
            lighthouses: install
                .lighthouses
                .iter()
                .map(|l| pb::OverlayLighthouse {
                    overlay_ip: l.overlay_ip.clone(),
                    underlay_address: l.underlay_address.clone(),
                })
                .collect(),
            listen_port: u32::from(install.listen_port),
            interface: install.interface.clone(),
            check_reachable: install.check_reachable.clone(),
            timeout: Some(proto_duration(install.timeout)),
        }
    }
}

impl From<pb::OverlayStatus> for OverlayInstalled {
    fn from(status: pb::OverlayStatus) -> Self {
        OverlayInstalled {
            overlay_cidr: status.overlay_cidr,
            detail: status.detail,
            peers: status
                .peers
                .into_iter()
                .map(|p| Peer {
                    overlay_ip: p.overlay_ip,
                    reachable: p.reachable,
                    detail: p.detail,
                })
                .collect(),
        }
    }
}

impl From<&ClusterInstall> for pb::InstallClusterRequest {
    fn from(install: &ClusterInstall) -> Self {
        let role = match &install.role {
            ClusterRole::Server { schedule_workloads } => {
                pb::install_cluster_request::Role::Server(pb::K3sServer {
                    schedule_workloads: *schedule_workloads,
                })
            }
            ClusterRole::Agent { server_url } => {
                pb::install_cluster_request::Role::Agent(pb::K3sAgent {
                    server_url: server_url.clone(),
                })
            }
        };
        pb::InstallClusterRequest {
            role: Some(role),
            token: install.token.clone(),
            node_ip: install.node_ip.clone(),
            flannel_interface: install.flannel_interface.clone(),
            node_name: install.node_name.clone(),
            labels: Default::default(),
            timeout: Some(proto_duration(install.timeout)),
        }
    }
}

impl From<pb::ClusterStatus> for ClusterInstalled {
    fn from(status: pb::ClusterStatus) -> Self {
        ClusterInstalled {
            detail: status.detail,
            nodes: status
                .nodes
                .into_iter()
                .map(|n| ClusterMember {
                    name: n.name,
                    ready: n.ready,
                    internal_ip: n.internal_ip,
                    taints: n.taints,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_status_converts_only_with_usable_addresses() {
        let status = |address: &str, websocket: &str| pb::BrokerStatus {
            address: address.into(),
            websocket_address: websocket.into(),
            detail: "mosquitto".into(),
            ..Default::default()
        };
        let started = Started::try_from(status("127.0.0.1:1883", "")).expect("valid");
        assert_eq!(started.websocket, None, "empty means no WebSocket listener");
        let started = Started::try_from(status("127.0.0.1:1883", "127.0.0.1:8080")).expect("ws");
        assert_eq!(
            started.websocket,
            Some("127.0.0.1:8080".parse().expect("addr"))
        );
        assert_eq!(
            Started::try_from(status("", "")),
            Err(AgentError::Reply("the agent reported no address".into()))
        );
        let error = Started::try_from(status("127.0.0.1:1883", "nowhere")).expect_err("bad ws");
        assert!(
            error.to_string().contains("\"nowhere\", not host:port"),
            "{error}"
        );
    }

    #[test]
    fn a_quic_listener_converts_only_with_its_ca_and_a_usable_address() {
        let status = |quic: &str, pem: &str| pb::BrokerStatus {
            address: "127.0.0.1:1883".into(),
            quic_address: quic.into(),
            quic_ca_pem: pem.into(),
            ..Default::default()
        };
        assert_eq!(Started::try_from(status("", "")).expect("none").quic, None);
        let started = Started::try_from(status("127.0.0.1:14567", "PEM")).expect("quic");
        assert_eq!(
            started.quic,
            Some(("127.0.0.1:14567".parse().expect("addr"), "PEM".to_string()))
        );
        assert_eq!(
            Started::try_from(status("127.0.0.1:14567", "")),
            Err(AgentError::Reply(
                "the agent reported a QUIC listener without its CA".into()
            ))
        );
        let error = Started::try_from(status("udp", "PEM")).expect_err("bad address");
        assert!(
            error.to_string().contains("\"udp\", not host:port"),
            "{error}"
        );
    }

    #[test]
    fn a_refused_precondition_is_unmet_and_other_errors_failed() {
        let unmet = AgentError::from(tonic::Status::failed_precondition("not installed"));
        assert_eq!(unmet, AgentError::Unmet("not installed".into()));
        let failed = AgentError::from(tonic::Status::unavailable("gone"));
        assert_eq!(failed.message(), "gone");
        assert_eq!(failed.to_string(), "gone");
    }

    #[test]
    fn unknown_roles_are_left_out_and_missing_capabilities_are_none() {
        let info = NodeInfo::from(pb::NodeInfo {
            roles: vec!["broker".into(), "quantum".into()],
            ..Default::default()
        });
        assert_eq!(info.roles, BTreeSet::from([NodeRole::Broker]));
        assert_eq!(info.netem, None);
    }
}
