//! The cluster's nodes as the server lists them (`k3s kubectl get nodes -o json`), read into
//! the typed Kubernetes `Node` and summarised as [`pb::ClusterNode`]s.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use proto::agent::v1 as pb;
use serde::Deserialize;

use crate::new_marker;
use host::{CommandLine, run_bounded};

/// `kubectl get -o json` prints a `List` (not a `NodeList`), so only its items are typed.
#[derive(Deserialize)]
struct Listed {
    items: Vec<Node>,
}

/// Runs `kubectl` (a `get nodes -o json` line) within `limit` and parses what it prints.
/// The error says why there is no list yet (the API server not up is normal at start).
pub(super) async fn list(
    kubectl: &CommandLine,
    limit: Duration,
) -> Result<Vec<pb::ClusterNode>, String> {
    let (status, output) = run_bounded(kubectl, &new_marker("kubectl"), limit).await?;
    if !status.success() {
        return Err(format!("kubectl get nodes: {status}: {}", output.trim()));
    }
    parse(&output)
}

/// The nodes in kubectl's JSON.
pub(super) fn parse(json: &str) -> Result<Vec<pb::ClusterNode>, String> {
    let listed: Listed = serde_json::from_str(json)
        .map_err(|e| format!("kubectl printed no node list ({e}): {}", first_line(json)))?;
    Ok(listed.items.iter().map(summarise).collect())
}

fn summarise(node: &Node) -> pb::ClusterNode {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|ready| ready.status == "True");
    let internal_ip = status
        .and_then(|s| s.addresses.as_ref())
        .and_then(|addresses| addresses.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .map(|taints| {
            taints
                .iter()
                .map(|taint| match taint.value.as_deref() {
                    Some(value) if !value.is_empty() => {
                        format!("{}={value}:{}", taint.key, taint.effect)
                    }
                    _ => format!("{}:{}", taint.key, taint.effect),
                })
                .collect()
        })
        .unwrap_or_default();
    pb::ClusterNode {
        name: node.metadata.name.clone().unwrap_or_default(),
        ready,
        internal_ip,
        labels: node
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        taints,
    }
}

/// Why `name` does not count as Ready in `nodes`, or None when it does.
pub(super) fn not_ready_reason(nodes: &[pb::ClusterNode], name: &str) -> Option<String> {
    match nodes.iter().find(|node| node.name == name) {
        Some(node) if node.ready => None,
        Some(_) => Some(format!("node {name} is listed but not Ready yet")),
        None => {
            let names: Vec<&str> = nodes.iter().map(|node| node.name.as_str()).collect();
            Some(format!(
                "node {name} is not listed yet (nodes: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from a real `k3s kubectl get nodes -o json` (k3s v1.33, two nodes).
    const TWO_NODES: &str = r#"{
      "apiVersion": "v1",
      "items": [
        {
          "apiVersion": "v1",
          "kind": "Node",
          "metadata": {
            "name": "headnode",
            "labels": {"continuum.io/role": "headnode", "node-role.kubernetes.io/control-plane": "true"}
          },
          "spec": {
            "podCIDR": "198.18.200.0/24",
            "taints": [{"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "value": "true"}]
          },
          "status": {
            "addresses": [{"address": "198.19.0.1", "type": "InternalIP"}, {"address": "headnode", "type": "Hostname"}],
            "conditions": [
              {"type": "MemoryPressure", "status": "False"},
              {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ]
          }
        },
        {
          "apiVersion": "v1",
          "kind": "Node",
          "metadata": {"name": "worker", "labels": {"continuum.io/role": "worker"}},
          "spec": {"taints": [{"effect": "NoSchedule", "key": "node.kubernetes.io/not-ready"}]},
          "status": {
            "addresses": [{"address": "198.19.0.2", "type": "InternalIP"}],
            "conditions": [{"type": "Ready", "status": "False"}]
          }
        }
      ],
      "kind": "List",
      "metadata": {"resourceVersion": ""}
    }"#;

    #[test]
    fn nodes_are_summarised() {
        let nodes = parse(TWO_NODES).expect("parses");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].name, "headnode");
        assert!(nodes[0].ready);
        assert_eq!(nodes[0].internal_ip, "198.19.0.1");
        assert_eq!(nodes[0].labels["continuum.io/role"], "headnode");
        assert_eq!(
            nodes[0].taints,
            ["node-role.kubernetes.io/control-plane=true:NoSchedule"]
        );
        assert!(!nodes[1].ready);
        assert_eq!(nodes[1].taints, ["node.kubernetes.io/not-ready:NoSchedule"]);
        assert_eq!(not_ready_reason(&nodes, "headnode"), None);
        assert!(not_ready_reason(&nodes, "worker").is_some_and(|r| r.contains("not Ready")));
        assert!(not_ready_reason(&nodes, "other").is_some_and(|r| r.contains("headnode, worker")));
    }

    #[test]
    fn garbage_is_an_error_not_an_empty_list() {
        let error = parse("The connection to the server was refused\n").expect_err("not JSON");
        assert!(error.contains("The connection to the server"), "{error}");
        assert!(parse(r#"{"items": [{"kind": "Pod"}]}"#).is_err());
    }
}
