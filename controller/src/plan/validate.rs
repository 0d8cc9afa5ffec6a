//! Checking a plan before anything on any node changes: every error names the TOML path and
//! the value.

use std::collections::HashSet;
use std::time::Duration;

use domain::Product;

use super::error::{PlanError, invalid, quoted};
use super::presets::scenario_preset;
use super::types::{
    AgentAt, BrokerEntry, BrokerKind, Fallback, MAX_EMULATED_NODES, NodeRole, Orchestrator,
    Overlay, Plan,
};

/// Most repetitions of each cell; a study uses 3 to 30.
pub const MAX_REPETITIONS: u32 = 1_000;
/// Most cells one plan unrolls to (brokers x scenarios x points x repetitions), computed
/// before the cell list is built.
pub const MAX_CELLS: u64 = 100_000;
/// Longest any of `[timeouts]` may be: beyond a day a timeout no longer protects anything, and
/// deadlines computed from it stay far from overflowing. A day, not loadgen's hour: a cell's
/// deadline must hold a whole timed load (duration and warm-up, up to an hour each) or a
/// saturation search (its budget, up to a day) with room to connect and drain.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Longest the metrics listener may outlive its run.
pub const MAX_METRICS_LINGER: Duration = Duration::from_secs(600);

/// The products a plan may name, in the study's order.
fn known_products() -> String {
    let names: Vec<&str> = Product::ALL.iter().map(|p| p.as_str()).collect();
    names.join(", ")
}

impl Plan {
    /// Checks every field and cross-reference.
    pub fn validate(&self) -> Result<(), PlanError> {
        if let Err(problem) = domain::check_name(&self.name) {
            return Err(invalid("name", quoted(&self.name), problem.to_string()));
        }
        if self.repetitions == 0 {
            return Err(invalid("repetitions", 0, "at least one repetition"));
        }
        if self.repetitions > MAX_REPETITIONS {
            return Err(invalid(
                "repetitions",
                self.repetitions,
                format!("at most {MAX_REPETITIONS}"),
            ));
        }
        self.validate_timeouts()?;
        if let Some(metrics) = &self.metrics
            && metrics.linger > MAX_METRICS_LINGER
        {
            return Err(invalid(
                "metrics.linger",
                quoted(&humantime::format_duration(metrics.linger).to_string()),
                format!(
                    "at most {}: the controller waits that long after the run",
                    humantime::format_duration(MAX_METRICS_LINGER)
                ),
            ));
        }
        self.validate_names()?;
        self.validate_nodes()?;
        self.validate_brokers()?;
        self.validate_testbed()?;
        self.validate_scenarios()?;
        self.validate_tests()?;
        self.validate_websocket()?;
        self.validate_quic()?;
        self.validate_cell_count()
    }

    fn validate_timeouts(&self) -> Result<(), PlanError> {
        let timeouts = &self.timeouts;
        // Installs are deadlines like these (k3s pulls its images on a first start), not
        // loads, so they share the day's bound rather than loadgen's hour.
        for (field, value) in [
            ("timeouts.connect", timeouts.connect),
            ("timeouts.deploy", timeouts.deploy),
            ("timeouts.netem", timeouts.netem),
            ("timeouts.cell", timeouts.cell),
            ("testbed.install_timeout", self.testbed.install_timeout),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(invalid(
                    field,
                    quoted(&humantime::format_duration(value).to_string()),
                    format!(
                        "must lie between 1 ns and {}",
                        humantime::format_duration(MAX_TIMEOUT)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Node, broker and scenario names become ids and folder names: each follows the name
    /// rule and is unique ignoring case, since cell ids are lower-cased and a case-insensitive
    /// file system would give two such names one folder.
    fn validate_names(&self) -> Result<(), PlanError> {
        let groups: [(&str, &str, Vec<&str>); 3] = [
            (
                "nodes",
                "node",
                self.nodes.iter().map(|n| n.name.as_str()).collect(),
            ),
            (
                "brokers",
                "broker",
                self.brokers.iter().map(|b| b.name.as_str()).collect(),
            ),
            (
                "scenarios",
                "scenario",
                self.scenarios.iter().map(|s| s.name.as_str()).collect(),
            ),
        ];
        for (table, what, names) in groups {
            let mut seen = HashSet::new();
            for (i, name) in names.into_iter().enumerate() {
                let path = format!("{table}[{i}].name");
                // A node's name is its agent's certificate name, where '.' is allowed too
                // (never first, so never a path step like "..").
                let rule = if table == "nodes" {
                    domain::check_identity_name
                } else {
                    domain::check_name
                };
                if let Err(problem) = rule(name) {
                    return Err(invalid(path, quoted(name), problem.to_string()));
                }
                if !seen.insert(name.to_ascii_lowercase()) {
                    return Err(invalid(
                        path,
                        quoted(name),
                        format!(
                            "another {what} has this name (names are ids: they may not differ only in case)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The plan's cells counted without listing them, `None` past `u64`: a plan read back from
    /// a results folder (which may come from anywhere) is checked against [`MAX_CELLS`] with
    /// this before its cells are listed.
    pub fn checked_cell_count(&self) -> Option<u64> {
        (self.brokers.len() as u64)
            .checked_mul(self.scenarios.len() as u64)
            .and_then(|n| n.checked_mul(self.point_count() as u64))
            .and_then(|n| n.checked_mul(u64::from(self.repetitions)))
    }

    /// The number of cells, by arithmetic (checked), before anything builds the list.
    fn validate_cell_count(&self) -> Result<(), PlanError> {
        match self.checked_cell_count() {
            Some(cells) if cells <= MAX_CELLS => Ok(()),
            _ => Err(invalid(
                "repetitions",
                self.repetitions,
                format!(
                    "{} brokers x {} scenarios x {} test points x {} repetitions is more than {MAX_CELLS} cells",
                    self.brokers.len(),
                    self.scenarios.len(),
                    self.point_count(),
                    self.repetitions
                ),
            )),
        }
    }

    pub(super) fn node_has(&self, name: &str, role: NodeRole) -> Option<bool> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.roles.contains(&role))
    }

    fn validate_nodes(&self) -> Result<(), PlanError> {
        if self.nodes.is_empty() {
            return Err(invalid("nodes", "[]", "at least one node is needed"));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if let AgentAt::Remote(address) = &node.agent
                && address
                    .rsplit_once(':')
                    .is_none_or(|(_, port)| port.parse::<u16>().is_err())
            {
                return Err(invalid(
                    format!("nodes[{i}].agent"),
                    quoted(address),
                    "expected host:port, \"local\" or \"namespace\"",
                ));
            }
        }
        let emulated = self.nodes.iter().filter(|n| n.is_namespace()).count();
        if emulated > 0 {
            if let Some((i, other)) = self
                .nodes
                .iter()
                .enumerate()
                .find(|(_, n)| !n.is_namespace())
            {
                return Err(invalid(
                    format!("nodes[{i}].agent"),
                    quoted(&other.agent.to_string()),
                    "a plan with nodes emulated in namespaces (agent = \"namespace\") emulates \
                     all of them: the others cannot reach their private network",
                ));
            }
            if emulated > MAX_EMULATED_NODES {
                return Err(invalid(
                    "nodes",
                    format!("[{emulated} nodes]"),
                    format!(
                        "at most {} nodes are emulated on one machine",
                        MAX_EMULATED_NODES
                    ),
                ));
            }
            if let Some((i, node)) = self
                .nodes
                .iter()
                .enumerate()
                .find(|(_, n)| n.data_address.is_some() || n.overlay_ip.is_some())
            {
                return Err(invalid(
                    format!("nodes[{i}].data_address"),
                    quoted(
                        &node
                            .data_address
                            .map(|ip| ip.to_string())
                            .or(node.overlay_ip.clone())
                            .unwrap_or_default(),
                    ),
                    "an emulated node's addresses are given by its namespace's link: leave them out",
                ));
            }
            if self.testbed.overlay != Overlay::None
                || self.testbed.orchestrator != Orchestrator::None
            {
                return Err(invalid(
                    "testbed.overlay",
                    quoted(&format!("{:?}", self.testbed.overlay).to_lowercase()),
                    "emulated nodes share one private network: no overlay or cluster is installed on them",
                ));
            }
        } else if self.testbed.fallback != Fallback::None {
            return Err(invalid(
                "testbed.fallback",
                quoted("local"),
                "a fallback is for nodes emulated in namespaces (agent = \"namespace\"), and \
                 this plan has none",
            ));
        }
        Ok(())
    }

    fn validate_brokers(&self) -> Result<(), PlanError> {
        if self.brokers.is_empty() {
            return Err(invalid("brokers", "[]", "at least one broker is needed"));
        }
        for (i, broker) in self.brokers.iter().enumerate() {
            let path = |field: &str| format!("brokers[{i}].{field}");
            Self::validate_broker_kind(i, broker)?;
            // A kubernetes broker's node is the cluster node its pod is pinned to; the
            // headnode's agent deploys it (checked in testbed.rs).
            if broker.kind != BrokerKind::External && broker.kind != BrokerKind::Kubernetes {
                let node = broker
                    .node
                    .as_deref()
                    .ok_or_else(|| invalid(path("node"), "(absent)", "which node runs it?"))?;
                let problem = match self.node_has(node, NodeRole::Broker) {
                    None => Some("no such node in [[nodes]]"),
                    Some(false) => Some("that node does not have the broker role"),
                    Some(true) => None,
                };
                if let Some(problem) = problem {
                    return Err(invalid(path("node"), quoted(node), problem));
                }
            }
            // An external broker's node is optional: where it runs, so that node's agent
            // emulates the broker's end of the link (nothing is deployed there).
            if broker.kind == BrokerKind::External
                && let Some(node) = broker.node.as_deref()
                && self.node_has(node, NodeRole::Broker).is_none()
            {
                return Err(invalid(
                    path("node"),
                    quoted(node),
                    "no such node in [[nodes]]",
                ));
            }
            if let Some(entry) = broker.entry.as_deref() {
                self.validate_entry(broker, entry, &path("entry"))?;
            }
        }
        Ok(())
    }

    /// What broker `i`'s kind needs: a known product (native, kubernetes) or an address
    /// (external).
    fn validate_broker_kind(i: usize, broker: &BrokerEntry) -> Result<(), PlanError> {
        let path = |field: &str| format!("brokers[{i}].{field}");
        match broker.kind {
            BrokerKind::Native | BrokerKind::Kubernetes => match broker.product.as_deref() {
                None => Err(invalid(
                    path("product"),
                    "(absent)",
                    format!(
                        "a {} broker needs a product: {}",
                        if broker.kind == BrokerKind::Native {
                            "native"
                        } else {
                            "kubernetes"
                        },
                        known_products()
                    ),
                )),
                Some(product) => match product.parse::<Product>() {
                    Err(_) => Err(invalid(
                        path("product"),
                        quoted(product),
                        format!("unknown broker (known: {})", known_products()),
                    )),
                    Ok(known) if broker.kind == BrokerKind::Kubernetes => {
                        recipes::pod(known, &domain::BrokerOptions::default())
                            .map(drop)
                            .map_err(|reason| {
                                invalid(
                                    path("product"),
                                    quoted(product),
                                    format!("{known} {reason}"),
                                )
                            })
                    }
                    Ok(_) => Ok(()),
                },
            },
            BrokerKind::External
                if broker
                    .address
                    .as_deref()
                    .is_none_or(|a| a.rsplit_once(':').is_none()) =>
            {
                Err(invalid(
                    path("address"),
                    broker
                        .address
                        .as_deref()
                        .map_or("(absent)".to_string(), quoted),
                    "an external broker needs host:port",
                ))
            }
            BrokerKind::External | BrokerKind::Embedded => Ok(()),
        }
    }

    /// An entry node is a node of the plan where something forwards to the broker: kube-proxy
    /// on a node of the cluster for a kubernetes broker, the agent's forwarding hop (which
    /// needs the broker role) for a native or embedded one.
    fn validate_entry(
        &self,
        broker: &BrokerEntry,
        entry: &str,
        path: &str,
    ) -> Result<(), PlanError> {
        let Some(node) = self.nodes.iter().find(|n| n.name == entry) else {
            return Err(invalid(path, quoted(entry), "no such node in [[nodes]]"));
        };
        if broker.node.as_deref() == Some(entry) {
            return Ok(());
        }
        match broker.kind {
            BrokerKind::External => {
                return Err(invalid(
                    path,
                    quoted(entry),
                    "an external broker is dialled at its address; it has no entry node",
                ));
            }
            BrokerKind::Native | BrokerKind::Embedded => {
                if !node.roles.contains(&NodeRole::Broker) {
                    return Err(invalid(
                        path,
                        quoted(entry),
                        "the entry node needs the broker role: its agent runs the forwarding hop",
                    ));
                }
                return Ok(());
            }
            BrokerKind::Kubernetes => {}
        }
        let in_cluster = self.testbed.headnode.as_deref() == Some(entry)
            || node.roles.contains(&NodeRole::Broker);
        if !in_cluster {
            return Err(invalid(
                path,
                quoted(entry),
                "not a node of the cluster (the headnode, or a node with the broker role)",
            ));
        }
        Ok(())
    }

    fn validate_scenarios(&self) -> Result<(), PlanError> {
        if self.scenarios.is_empty() {
            return Err(invalid(
                "scenarios",
                "[]",
                "at least one scenario (e.g. name = \"local\")",
            ));
        }
        for (i, scenario) in self.scenarios.iter().enumerate() {
            let path = |field: &str| format!("scenarios[{i}].{field}");
            let complete = scenario.delay.is_some()
                && scenario.jitter.is_some()
                && (scenario.loss_percent.is_some() || scenario.gilbert_elliott.is_some());
            if scenario_preset(&scenario.name).is_none() && !complete {
                return Err(invalid(
                    path("name"),
                    quoted(&scenario.name),
                    "not a preset (local, edge, cloud): give delay, jitter and loss_percent \
                     (or gilbert_elliott)",
                ));
            }
            if let Some(model) = &scenario.gilbert_elliott {
                for (field, value) in model.fields() {
                    if !(0.0..=100.0).contains(&value) {
                        return Err(invalid(
                            path(field),
                            value,
                            "a percentage is between 0 and 100",
                        ));
                    }
                }
                if let Some(loss) = scenario.loss_percent
                    && loss != 0.0
                {
                    return Err(invalid(
                        path("loss_percent"),
                        loss,
                        "given with gilbert_elliott; netem applies one loss model, so give one",
                    ));
                }
                if model.r_percent == 0.0 && model.p_percent > 0.0 && model.bad_loss_percent > 0.0 {
                    return Err(invalid(
                        path("gilbert_elliott.r_percent"),
                        0,
                        "with p_percent above 0 the link, once bad, never recovers",
                    ));
                }
            }
            if let Some(loss) = scenario.loss_percent
                && !(0.0..=100.0).contains(&loss)
            {
                return Err(invalid(
                    path("loss_percent"),
                    loss,
                    "a percentage is between 0 and 100",
                ));
            }
            for (field, value) in [("delay", scenario.delay), ("jitter", scenario.jitter)] {
                if let Some(value) = value
                    && value > domain::netem::MAX_DELAY
                {
                    return Err(invalid(
                        path(field),
                        quoted(&humantime::format_duration(value).to_string()),
                        format!(
                            "longer than netem's maximum of {}",
                            humantime::format_duration(domain::netem::MAX_DELAY)
                        ),
                    ));
                }
            }
            if let (Some(delay), Some(jitter)) = (scenario.delay, scenario.jitter)
                && jitter > delay
            {
                return Err(invalid(
                    path("jitter"),
                    humantime::format_duration(jitter),
                    "larger than the delay",
                ));
            }
        }
        Ok(())
    }
}
