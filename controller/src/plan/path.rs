//! The path a message takes through the testbed's nodes, from publisher to subscriber: the
//! publisher's node, the broker's entry node, the broker's node, the entry again, the
//! subscriber's node. The entry is where clients dial: the broker's own node unless the plan
//! names another (`entry = "headnode"` for a kubernetes broker reached through the
//! headnode's NodePort, as the study's tests were, so kube-proxy forwards each message to the
//! pod and back).
//!
//! Each hop between two different nodes leaves the sending node through its egress, where
//! netem sits; a hop inside one node is not delayed. So what a scenario adds one way is the
//! sum, over the hops, of the sending node's egress delay: the study's path (tester ->
//! headnode -> worker -> headnode -> tester, half the scenario's total per egress) adds
//! 4 x 1.25 = 5.0 ms in edge, the direct path (tester -> worker -> tester) 2 x 1.25 = 2.5 ms.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Plan;

/// The nodes one message visits, in order, and the hops between them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessagePath {
    /// publisher node, entry node (when not the broker's), broker node, entry node again,
    /// subscriber node.
    pub nodes: Vec<String>,
}

impl MessagePath {
    /// The path of `broker`'s messages under test `test`'s load; `None` for a broker on no
    /// node of the plan (an external one that names none).
    pub fn of(plan: &Plan, broker: usize, test: usize) -> Option<Self> {
        let entry = &plan.brokers[broker];
        let broker_node = entry.node.clone()?;
        let test_entry = plan.tests.get(test)?;
        // Modelled on the message from publisher 0 to subscriber 0 at the test's first point:
        // with the load spread over several nodes, others may take other nodes' egresses.
        let spec = plan.first_workload(test).ok()?;
        let (publisher, subscriber) =
            test_entry.first_clients_nodes(spec.publishers, spec.subscribers)?;
        let mut nodes = vec![publisher];
        let via = entry.entry.as_ref().filter(|via| **via != broker_node);
        nodes.extend(via.cloned());
        nodes.push(broker_node);
        nodes.extend(via.cloned());
        nodes.push(subscriber);
        Some(Self { nodes })
    }

    /// The entry node, when it is not the broker's own.
    pub fn entry(&self) -> Option<&str> {
        (self.nodes.len() == 5).then(|| self.nodes[1].as_str())
    }

    /// The hops between two different nodes, `(from, to)`: those that leave `from` through
    /// its egress.
    pub fn hops(&self) -> impl Iterator<Item = (&str, &str)> {
        self.nodes
            .windows(2)
            .map(|pair| (pair[0].as_str(), pair[1].as_str()))
            .filter(|(from, to)| from != to)
    }

    /// What the path adds one way when each node's egress delays by `egress(node)`.
    pub fn added_delay(&self, egress: impl Fn(&str) -> Duration) -> Duration {
        self.hops()
            .map(|(from, _)| egress(from))
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// `tester -> headnode -> worker -> headnode -> tester`.
    pub fn describe(&self) -> String {
        self.nodes.join(" -> ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DelaySplit, NodeRole, scenario_preset};

    /// Each node's egress under `scenario` as the plan asks: half the total per end (or all
    /// of it on the broker's node), on nodes with the netem role.
    fn egress_of<'a>(
        plan: &'a Plan,
        broker: usize,
        scenario: usize,
    ) -> impl Fn(&str) -> Duration + 'a {
        move |node| {
            let entry = &plan.scenarios[scenario];
            let delay = entry
                .delay
                .or_else(|| scenario_preset(&entry.name).map(|(delay, _, _)| delay))
                .unwrap_or_default();
            let netem = plan
                .nodes
                .iter()
                .any(|n| n.name == node && n.roles.contains(&NodeRole::Netem));
            match entry.split {
                DelaySplit::HalfEachEnd if netem => delay / 2,
                DelaySplit::BrokerSide if plan.brokers[broker].node.as_deref() == Some(node) => {
                    delay
                }
                _ => Duration::ZERO,
            }
        }
    }

    fn example(file: &str) -> Plan {
        let path = format!("{}/../examples/{file}", env!("CARGO_MANIFEST_DIR"));
        Plan::load(std::path::Path::new(&path)).expect("the example is a valid plan")
    }

    fn scenario(plan: &Plan, name: &str) -> usize {
        plan.scenarios
            .iter()
            .position(|s| s.name == name)
            .expect("the scenario")
    }

    /// The study's 3-node layout with half of Table II on every node's egress: entering
    /// through the headnode crosses four egresses, dialling the worker two.
    #[test]
    fn the_study_path_adds_twice_what_the_direct_path_adds() {
        for (file, entry, edge_ms, cloud_ms) in [
            ("study.toml", Some("headnode"), 5.0, 12.5),
            ("study-direct.toml", None, 2.5, 6.25),
        ] {
            let plan = example(file);
            let path = MessagePath::of(&plan, 0, 0).expect("a path");
            assert_eq!(path.entry(), entry, "{file}: {}", path.describe());
            for (name, expected_ms) in [("local", 0.0), ("edge", edge_ms), ("cloud", cloud_ms)] {
                let added = path.added_delay(egress_of(&plan, 0, scenario(&plan, name)));
                assert!(
                    (added.as_secs_f64() * 1e3 - expected_ms).abs() < 1e-9,
                    "{file} {name}: {} adds {added:?}, expected {expected_ms} ms",
                    path.describe()
                );
            }
        }
        let plan = example("study.toml");
        assert_eq!(
            MessagePath::of(&plan, 0, 0).expect("a path").describe(),
            "tester -> headnode -> worker -> headnode -> tester"
        );
    }

    #[test]
    fn hops_inside_one_node_add_nothing() {
        let path = MessagePath {
            nodes: ["a", "a", "b", "a", "a"].map(String::from).to_vec(),
        };
        assert_eq!(path.hops().collect::<Vec<_>>(), [("a", "b"), ("b", "a")]);
        let egress = |node: &str| Duration::from_millis(if node == "a" { 1 } else { 3 });
        assert_eq!(path.added_delay(egress), Duration::from_millis(4));
    }
}
