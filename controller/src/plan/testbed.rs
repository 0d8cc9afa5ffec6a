//! Checks of `[testbed]` (phases 2 and 3) and of the brokers that depend on it: Nebula needs
//! a headnode and an overlay address on every node, in one network and each its own; k3s
//! needs the overlay; a kubernetes broker needs k3s and is pinned to a node that is not the
//! headnode (workloads are kept off the control plane, as in the study).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use domain::broker::NODE_PORTS;
use domain::overlay::{overlay_network, parse_overlay_cidr};

use super::error::{PlanError, invalid, quoted};
use super::{BrokerKind, NodeRole, Orchestrator, Overlay, Plan};

impl Plan {
    pub(super) fn validate_testbed(&self) -> Result<(), PlanError> {
        let testbed = &self.testbed;
        let headnode = match testbed.headnode.as_deref() {
            Some(name) => {
                let Some(node) = self.nodes.iter().find(|n| n.name == name) else {
                    return Err(invalid(
                        "testbed.headnode",
                        quoted(name),
                        "no such node in [[nodes]]",
                    ));
                };
                if node.is_local() {
                    return Err(invalid(
                        "testbed.headnode",
                        quoted(name),
                        "the headnode must be a remote agent (host:port), not \"local\"",
                    ));
                }
                Some(node)
            }
            None => None,
        };
        if testbed.orchestrator == Orchestrator::K3s && testbed.overlay != Overlay::Nebula {
            return Err(invalid(
                "testbed.orchestrator",
                quoted("k3s"),
                "k3s runs over the overlay: set testbed.overlay = \"nebula\" too",
            ));
        }
        if testbed.overlay == Overlay::Nebula {
            if headnode.is_none() {
                return Err(invalid(
                    "testbed.headnode",
                    "(absent)",
                    "the Nebula overlay needs a headnode (its lighthouse)",
                ));
            }
            if testbed.overlay_interface.is_empty() || testbed.overlay_interface.len() > 15 {
                return Err(invalid(
                    "testbed.overlay_interface",
                    quoted(&testbed.overlay_interface),
                    "an interface name has 1 to 15 characters",
                ));
            }
            let mut seen: HashMap<Ipv4Addr, &str> = HashMap::new();
            let mut first: Option<(Ipv4Addr, u8)> = None;
            for (i, node) in self.nodes.iter().enumerate() {
                let path = format!("nodes[{i}].overlay_ip");
                let Some(text) = node.overlay_ip.as_deref() else {
                    return Err(invalid(
                        path,
                        "(absent)",
                        format!(
                            "node {} needs its overlay address (testbed.overlay = \"nebula\")",
                            node.name
                        ),
                    ));
                };
                let (ip, len) = parse_overlay_cidr(text).ok_or_else(|| {
                    invalid(
                        &path,
                        quoted(text),
                        "an IPv4 address with prefix, like 198.19.0.2/24",
                    )
                })?;
                if let Some(other) = seen.insert(ip, &node.name) {
                    return Err(invalid(
                        path,
                        quoted(text),
                        format!("node {} has the overlay address of node {other}", node.name),
                    ));
                }
                match first {
                    Some((ip0, len0))
                        if len0 != len
                            || overlay_network(ip0, len0) != overlay_network(ip, len) =>
                    {
                        return Err(invalid(
                            path,
                            quoted(text),
                            format!("not in the overlay network of nodes[0] ({ip0}/{len0})"),
                        ));
                    }
                    Some(_) => {}
                    None => first = Some((ip, len)),
                }
            }
        } else if let Some((i, _)) = self
            .nodes
            .iter()
            .enumerate()
            .find(|(_, n)| n.overlay_ip.is_some())
        {
            return Err(invalid(
                format!("nodes[{i}].overlay_ip"),
                quoted(self.nodes[i].overlay_ip.as_deref().unwrap_or_default()),
                "set testbed.overlay = \"nebula\" to use overlay addresses",
            ));
        }
        for (i, broker) in self.brokers.iter().enumerate() {
            if broker.kind != BrokerKind::Kubernetes {
                continue;
            }
            let path = |field: &str| format!("brokers[{i}].{field}");
            if testbed.orchestrator != Orchestrator::K3s {
                return Err(invalid(
                    path("kind"),
                    quoted("kubernetes"),
                    "a kubernetes broker needs testbed.orchestrator = \"k3s\"",
                ));
            }
            let node = broker
                .node
                .as_deref()
                .ok_or_else(|| invalid(path("node"), "(absent)", "which cluster node runs it?"))?;
            if !self.nodes.iter().any(|n| n.name == node) {
                return Err(invalid(
                    path("node"),
                    quoted(node),
                    "no such node in [[nodes]]",
                ));
            }
            if Some(node) == testbed.headnode.as_deref() {
                return Err(invalid(
                    path("node"),
                    quoted(node),
                    "workloads are kept off the headnode (k3s control plane): pin it to a worker",
                ));
            }
            if broker.port != 0 && !NODE_PORTS.contains(&broker.port) {
                return Err(invalid(
                    path("port"),
                    broker.port,
                    "a NodePort is in 30000-32767 (0 = the product's default)",
                ));
            }
            if let Some(head) = headnode
                && !head.roles.contains(&NodeRole::Broker)
            {
                return Err(invalid(
                    "testbed.headnode",
                    quoted(&head.name),
                    "kubernetes brokers are deployed through the headnode's agent: give it the broker role",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::Plan;

    fn study() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/study.toml");
        std::fs::read_to_string(path).expect("study.toml")
    }

    fn error_of(text: &str) -> String {
        Plan::parse(text, "plan.toml")
            .expect_err("invalid")
            .to_string()
    }

    #[test]
    fn the_study_runs_on_nebula_and_k3s_with_kubernetes_brokers() {
        let plan = Plan::parse(&study(), "study.toml").expect("valid");
        assert_eq!(plan.testbed.headnode.as_deref(), Some("headnode"));
        assert!(
            plan.brokers
                .iter()
                .all(|b| b.kind == crate::plan::BrokerKind::Kubernetes)
        );
    }

    #[test]
    fn an_emqx_pod_is_reached_over_quic_when_entered_at_its_own_node() {
        let study = study();
        let (head, rest) = study.split_once("[[brokers]]").expect("brokers");
        let (_, tail) = rest.split_once("# Table II").expect("scenarios");
        let over_quic_entered_at = |entry: &str| {
            format!(
                "{head}[[brokers]]\nname = \"emqx\"\nkind = \"kubernetes\"\nproduct = \"emqx\"\n\
                 node = \"worker\"\nentry = \"{entry}\"\n\n# Table II{tail}"
            )
            .replace(
                "warmup = 2\n",
                "warmup = 2\n[tests.workload.broker]\ntransport = \"quic\"\n",
            )
        };
        let plan = Plan::parse(&over_quic_entered_at("worker"), "study.toml").expect("valid");
        assert_eq!(plan.quic_tests(), [0]);
        assert_eq!(
            plan.quic_port_of(&plan.brokers[0]),
            Some(0),
            "the product's default UDP NodePort"
        );
        let error = error_of(
            &over_quic_entered_at("worker")
                .replace("entry = \"worker\"", "entry = \"worker\"\nport = 32484"),
        );
        assert!(
            error.contains(
                "brokers[0].port = 32484: is the UDP NodePort of emqx's QUIC listener in a plan \
                 that speaks QUIC (its default NodePort + 600); choose another"
            ),
            "{error}"
        );
        let error = error_of(&over_quic_entered_at("headnode"));
        assert!(
            error.contains(
                "tests[0].workload.broker.transport = \"quic\": brokers[0] (emqx): entered \
                 through node \"headnode\" (entry), but the pod's QUIC certificate names its own \
                 node's address only: set entry = \"worker\""
            ),
            "{error}"
        );
    }

    #[test]
    fn testbed_mistakes_name_the_toml_path() {
        let study = study();
        let cases = [
            (
                study.replace(
                    "overlay_ip = \"198.19.0.3/24\"",
                    "overlay_ip = \"198.19.0.2/24\"",
                ),
                "nodes[2].overlay_ip = \"198.19.0.2/24\": node worker has the overlay address of node headnode",
            ),
            (
                study.replace("overlay_ip = \"198.19.0.3/24\"\n", ""),
                "nodes[2].overlay_ip = (absent)",
            ),
            (
                study.replace(
                    "overlay_ip = \"198.19.0.3/24\"",
                    "overlay_ip = \"203.0.113.3/24\"",
                ),
                "not in the overlay network",
            ),
            (
                study.replace("headnode = \"headnode\"", "headnode = \"nobody\""),
                "testbed.headnode = \"nobody\": no such node",
            ),
            (
                study.replace("overlay = \"nebula\"", "overlay = \"none\""),
                "k3s runs over the overlay",
            ),
            (
                study.replace(
                    "warmup = 2\n",
                    "warmup = 2\n[tests.workload.broker]\ntransport = \"quic\"\ntls_ca_file = \"/ca.pem\"\n",
                ),
                "tests[0].workload.broker.transport = \"quic\": brokers[0] (mosquitto): \
                 mosquitto: its pod opens no QUIC listener; EMQX's does",
            ),
            (
                study.replace("orchestrator = \"k3s\"", "orchestrator = \"none\""),
                "brokers[0].kind = \"kubernetes\": a kubernetes broker needs",
            ),
            (
                study.replacen("node = \"worker\"", "node = \"headnode\"", 1),
                "brokers[0].node = \"headnode\": workloads are kept off the headnode",
            ),
            (
                study.replacen("node = \"worker\"", "node = \"worker\"\nport = 1883", 1),
                "brokers[0].port = 1883: a NodePort",
            ),
            (
                study.replace(
                    "roles = [\"broker\", \"netem\"]\noverlay_ip = \"198.19.0.2/24\"",
                    "roles = [\"netem\"]\noverlay_ip = \"198.19.0.2/24\"",
                ),
                "give it the broker role",
            ),
            (
                study.replacen("product = \"mosquitto\"", "product = \"mqttv5\"", 1),
                "brokers[0].product = \"mqttv5\": mqttv5 has no official container image",
            ),
        ];
        for (text, expected) in cases {
            let error = error_of(&text);
            assert!(
                error.contains(expected),
                "expected {expected:?} in: {error}"
            );
        }
    }
}
