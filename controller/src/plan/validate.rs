//! Checking a plan before anything on any node changes: every error names the TOML path and
//! the value.

use std::collections::HashSet;
use std::time::Duration;

use domain::Product;
use loadgen::spec::MAX_DURATION;

use super::error::{PlanError, invalid, quoted};
use super::kinds::{Sweep, TestKind, Timing, kind_names, kinds_named};
use super::presets::scenario_preset;
use super::spread::{MAX_LOADGEN_NODES, MAX_WEIGHT};
use super::types::Spread;
use super::types::{
    AgentAt, BrokerEntry, BrokerKind, Fallback, MAX_EMULATED_NODES, NodeRole, Orchestrator,
    Overlay, Plan, TestEntry, WarmupEntry,
};

/// `only throughput does`: which kinds have a trait, as a parenthesis says it.
fn only_kinds(having: impl Fn(TestKind) -> bool) -> String {
    let names = kind_names(having);
    let verb = if names.len() == 1 { "does" } else { "do" };
    format!("only {} {verb}", super::kinds::sentence(&names))
}

/// Time a timed cell needs beyond its load: connecting, the start barrier, the drain.
const CELL_MARGIN: Duration = Duration::from_secs(30);
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

/// What a custom test's workload table must set: the fields without a default in loadgen's
/// spec (the broker's address is the run's).
const CUSTOM_REQUIRED: [&str; 5] = ["publishers", "subscribers", "qos", "payload", "pacing"];

/// Where a plan shorthand lives in loadgen's spec.
fn workload_field(shorthand: &str) -> &str {
    match shorthand {
        "messages" => "messages_per_publisher",
        "warmup" => "warmup (a time) or warmup_messages",
        "rate" => "pacing = { mode = \"rate\", rate = N }",
        "interval" => "pacing = { mode = \"open-loop\", interval = \"...\" }",
        "payloads" | "clients" | "search" => "one custom test per point",
        other => other,
    }
}

/// The products a plan may name, in the study's order.
fn known_products() -> String {
    let names: Vec<&str> = Product::ALL.iter().map(|p| p.as_str()).collect();
    names.join(", ")
}

/// A workload's broker password comes from at most one place (`password`, `password_file`,
/// `password_env`), each a non-empty string, and goes with a username. The file and the
/// variable are not read here: validation never reads what a plan names (a plan submitted to
/// `controller serve` is validated before it is admitted); [`Plan::read_credentials`] does.
fn validate_password_source(i: usize, table: &toml::Table) -> Result<(), PlanError> {
    let Some(broker) = table.get("broker").and_then(toml::Value::as_table) else {
        return Ok(());
    };
    let path = |key: &str| format!("tests[{i}].workload.broker.{key}");
    let named: Vec<&str> = super::presets::PASSWORD_SOURCES
        .into_iter()
        .filter(|key| broker.contains_key(*key))
        .collect();
    if let [_, second, ..] = named.as_slice() {
        return Err(invalid(
            path(second),
            "(set)",
            format!(
                "give the password one way: {} are both set",
                named.join(" and ")
            ),
        ));
    }
    let Some(key) = named.first() else {
        return Ok(());
    };
    // An inline password's type and its username are loadgen's checks, made on the spec.
    if *key == "password" {
        return Ok(());
    }
    let value = broker.get(*key).and_then(toml::Value::as_str);
    // No NUL in a path or a variable's name, and no `=` in a name (a path may hold one).
    let forbidden: &[char] = if *key == "password_file" {
        &['\0']
    } else {
        &['=', '\0']
    };
    match value {
        Some(value) if !value.is_empty() && !value.contains(forbidden) => {}
        _ => {
            let shown = value.map_or("(not a string)".to_string(), quoted);
            let problem = if *key == "password_file" {
                "the path of a file holding the password"
            } else {
                "the name of an environment variable holding the password"
            };
            return Err(invalid(path(key), shown, problem));
        }
    }
    if !broker.contains_key("username") {
        return Err(invalid(
            path(key),
            quoted(value.unwrap_or_default()),
            "a password needs broker.username",
        ));
    }
    Ok(())
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
        self.validate_names()?;
        self.validate_nodes()?;
        self.validate_brokers()?;
        self.validate_testbed()?;
        self.validate_scenarios()?;
        self.validate_tests()?;
        self.validate_websocket()?;
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

    /// The number of cells, by arithmetic (checked), before anything builds the list.
    fn validate_cell_count(&self) -> Result<(), PlanError> {
        let points: u64 = (0..self.tests.len())
            .map(|i| self.points(i).len() as u64)
            .sum();
        let cells = (self.brokers.len() as u64)
            .checked_mul(self.scenarios.len() as u64)
            .and_then(|n| n.checked_mul(points))
            .and_then(|n| n.checked_mul(u64::from(self.repetitions)));
        match cells {
            Some(cells) if cells <= MAX_CELLS => Ok(()),
            _ => Err(invalid(
                "repetitions",
                self.repetitions,
                format!(
                    "{} brokers x {} scenarios x {points} test points x {} repetitions is more than {MAX_CELLS} cells",
                    self.brokers.len(),
                    self.scenarios.len(),
                    self.repetitions
                ),
            )),
        }
    }

    fn node_has(&self, name: &str, role: NodeRole) -> Option<bool> {
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
                Some(product) if product.parse::<Product>().is_err() => Err(invalid(
                    path("product"),
                    quoted(product),
                    format!("unknown broker (known: {})", known_products()),
                )),
                Some(_) => Ok(()),
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
                && scenario.loss_percent.is_some();
            if scenario_preset(&scenario.name).is_none() && !complete {
                return Err(invalid(
                    path("name"),
                    quoted(&scenario.name),
                    "not a preset (local, edge, cloud): give delay, jitter and loss_percent",
                ));
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

    /// Counted tests take messages and a warm-up count; timed ones a duration and a warm-up
    /// time; the saturation search its own settings; and a cell's deadline must leave room.
    /// A custom test: its whole workload in `[tests.workload]`, none of the preset's
    /// shorthands beside it.
    fn validate_custom(&self, i: usize, test: &TestEntry) -> Result<(), PlanError> {
        let shorthands = [
            ("publishers", test.publishers.is_some()),
            ("subscribers", test.subscribers.is_some()),
            ("messages", test.messages.is_some()),
            ("warmup", test.warmup.is_some()),
            ("duration", test.duration.is_some()),
            ("rate", test.rate.is_some()),
            ("interval", test.interval.is_some()),
            ("qos", test.qos.is_some()),
            ("payload", test.payload.is_some()),
            ("payloads", test.payloads.is_some()),
            ("clients", test.clients.is_some()),
            ("search", test.search.is_some()),
        ];
        if let Some((field, _)) = shorthands.iter().find(|(_, set)| *set) {
            return Err(invalid(
                format!("tests[{i}].{field}"),
                "(set)",
                format!(
                    "a custom test takes its whole workload from [tests.workload]: set {} there",
                    workload_field(field)
                ),
            ));
        }
        let Some(table) = &test.workload else {
            return Err(invalid(
                format!("tests[{i}].workload"),
                "(absent)",
                "a custom test needs its workload: publishers, subscribers, qos, payload, pacing and the fields loadgen's SPEC.toml takes",
            ));
        };
        let missing: Vec<&str> = CUSTOM_REQUIRED
            .iter()
            .copied()
            .filter(|field| !table.contains_key(*field))
            .collect();
        if !missing.is_empty() {
            return Err(invalid(
                format!("tests[{i}].workload"),
                "{..}",
                format!(
                    "a custom test sets its whole workload; missing: {}",
                    missing.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// `interval`, `duration` and a warm-up time of test `i` are bounded: checked first, so
    /// that a huge value is named by its own path rather than by the cell deadline it would
    /// overrun.
    fn validate_durations(i: usize, test: &TestEntry) -> Result<(), PlanError> {
        let warmup_time = match test.warmup {
            Some(WarmupEntry::Time(time)) => Some(time),
            _ => None,
        };
        for (field, value) in [
            ("interval", test.interval),
            ("duration", test.duration),
            ("warmup", warmup_time),
        ] {
            if let Some(value) = value
                && value > MAX_DURATION
            {
                return Err(invalid(
                    format!("tests[{i}].{field}"),
                    quoted(&humantime::format_duration(value).to_string()),
                    format!("at most {}", humantime::format_duration(MAX_DURATION)),
                ));
            }
        }
        Ok(())
    }

    /// `messages`, `duration`, `rate`, `warmup` and `search` of test `i`, as its kind's
    /// [`Timing`] allows them.
    fn validate_timing_fields(i: usize, test: &TestEntry) -> Result<(), PlanError> {
        let path = |field: &str| format!("tests[{i}].{field}");
        let kind = test.kind.name();
        let timing = test.kind.timing();
        if timing != Timing::Counted && test.messages.is_some() {
            return Err(invalid(
                path("messages"),
                test.messages.unwrap_or(0),
                format!(
                    "a {kind} test runs for a time, not a count (the study's counted burst is kind = \"burst\")"
                ),
            ));
        }
        if timing != Timing::Timed {
            let only = only_kinds(|k| k.timing() == Timing::Timed);
            if let Some(duration) = test.duration {
                return Err(invalid(
                    path("duration"),
                    humantime::format_duration(duration),
                    format!("a {kind} test has no duration ({only})"),
                ));
            }
            if let Some(rate) = test.rate {
                return Err(invalid(
                    path("rate"),
                    rate,
                    format!("a {kind} test has no offered rate ({only})"),
                ));
            }
        }
        match (timing, test.warmup) {
            (Timing::Timed, Some(WarmupEntry::Messages(count))) => {
                return Err(invalid(
                    path("warmup"),
                    count,
                    format!("a {kind} test warms up for a time, e.g. warmup = \"2s\""),
                ));
            }
            (Timing::Searched, Some(warmup)) => {
                return Err(invalid(
                    path("warmup"),
                    format!("{warmup:?}"),
                    "a saturation search warms each probe up as [tests.search] probe_warmup says",
                ));
            }
            (Timing::Counted, Some(WarmupEntry::Time(time))) => {
                return Err(invalid(
                    path("warmup"),
                    format!("\"{}\"", humantime::format_duration(time)),
                    format!("a {kind} test warms up by a number of messages"),
                ));
            }
            _ => {}
        }
        if test.search.is_some() && timing != Timing::Searched {
            let searched: Vec<&str> = kind_names(|k| k.timing() == Timing::Searched);
            return Err(invalid(
                path("search"),
                "{..}",
                format!("only a {} test has search settings", searched.join(" or ")),
            ));
        }
        Ok(())
    }

    /// The time test `i`'s load needs: its search budget, or its workload's duration and
    /// warm-up (none for a counted load). A workload that is not valid is refused later with
    /// its own path.
    fn load_time(&self, i: usize, test: &TestEntry) -> Result<Option<Duration>, PlanError> {
        if test.kind.timing() == Timing::Searched {
            let search = test.search.clone().unwrap_or_default();
            search
                .validate(&format!("tests[{i}].search."))
                .map_err(|e| invalid(e.path, e.value, e.problem))?;
            return Ok(Some(search.budget));
        }
        Ok(self
            .first_workload(i)
            .ok()
            .filter(|spec| spec.validate().is_ok())
            .and_then(|spec| {
                Some(
                    spec.duration?
                        .saturating_add(spec.warmup.unwrap_or_default()),
                )
            }))
    }

    fn validate_timing(&self, i: usize, test: &TestEntry) -> Result<(), PlanError> {
        Self::validate_durations(i, test)?;
        Self::validate_timing_fields(i, test)?;
        // Connecting, draining and reporting take time beyond the load itself.
        if let Some(needs) = self.load_time(i, test)?
            && self.timeouts.cell < needs.saturating_add(CELL_MARGIN)
        {
            return Err(invalid(
                "timeouts.cell",
                humantime::format_duration(self.timeouts.cell),
                format!(
                    "tests[{i}] ({}) needs {} and {} more to connect and drain",
                    test.kind.name(),
                    humantime::format_duration(needs),
                    humantime::format_duration(CELL_MARGIN)
                ),
            ));
        }
        Ok(())
    }

    fn validate_tests(&self) -> Result<(), PlanError> {
        if self.tests.is_empty() {
            return Err(invalid("tests", "[]", "at least one test"));
        }
        for (i, test) in self.tests.iter().enumerate() {
            self.validate_spread(i, test)?;
            self.validate_loadgen_nodes(i, test)?;
            Self::validate_sweep(i, test)?;
            self.validate_points(i)?;
            if test.kind.writes_whole_workload() {
                self.validate_custom(i, test)?;
            }
            self.validate_timing(i, test)?;
            if let Some(table) = &test.workload {
                let (preset, _, _) = super::presets::test_preset(test.kind);
                super::presets::overlay_workload(preset, table).map_err(|error| {
                    invalid(
                        format!("tests[{i}].workload.{}", error.path),
                        error.value,
                        error.problem,
                    )
                })?;
                validate_password_source(i, table)?;
            }
            self.validate_workloads(i, test)?;
        }
        Ok(())
    }

    /// Test `i`'s loadgen nodes exist and have the loadgen role.
    fn validate_loadgen_nodes(&self, i: usize, test: &TestEntry) -> Result<(), PlanError> {
        for node in &test.loadgen {
            let problem = match self.node_has(node, NodeRole::Loadgen) {
                None => "no such node in [[nodes]]",
                Some(false) => "that node does not have the loadgen role",
                Some(true) => continue,
            };
            return Err(invalid(
                format!("tests[{i}].loadgen"),
                quoted(node),
                problem,
            ));
        }
        Ok(())
    }

    /// Test `i` gives a list of points only when its kind sweeps that list.
    fn validate_sweep(i: usize, test: &TestEntry) -> Result<(), PlanError> {
        for (field, given, sweep) in [
            ("payloads", test.payloads.is_some(), Sweep::Payloads),
            ("clients", test.clients.is_some(), Sweep::Clients),
        ] {
            if given && test.kind.sweep() != sweep {
                let sweeping = |k: TestKind| k.sweep() == sweep;
                let verb = if kind_names(sweeping).len() == 1 {
                    "sweeps"
                } else {
                    "sweep"
                };
                return Err(invalid(
                    format!("tests[{i}].{field}"),
                    "[..]",
                    format!("only {} {verb} {field}", kinds_named(sweeping)),
                ));
            }
        }
        Ok(())
    }

    /// Test `i`'s workload at every point is one loadgen accepts, each error named by the
    /// plan field that set the value, and leaves none of its loadgen nodes without a client.
    fn validate_workloads(&self, i: usize, test: &TestEntry) -> Result<(), PlanError> {
        let path = |field: &str| format!("tests[{i}].{field}");
        let workloads = self
            .workloads_of(i)
            .map_err(|problem| invalid(path("workload"), "{..}", problem))?;
        for (point, spec) in workloads {
            let (payload, clients) = point.overrides();
            if let Err(error) = spec.validate() {
                let in_table = test
                    .workload
                    .as_ref()
                    .is_some_and(|table| super::presets::sets(table, &error.path));
                if in_table {
                    let field = format!("workload.{}", error.path);
                    return Err(invalid(path(&field), error.value, error.problem));
                }
                let field = match error.path.as_str() {
                    "messages_per_publisher" => "messages",
                    "warmup_messages" => "warmup",
                    "pacing.interval" => "interval",
                    "pacing.rate" => "rate",
                    "publishers" if clients.is_some() => "clients",
                    "payload" if payload.is_some() => "payloads",
                    other => other,
                };
                return Err(invalid(path(field), error.value, error.problem));
            }
            let placed = test.placements(spec.publishers, spec.subscribers);
            if let Some(idle) = test
                .loadgen
                .iter()
                .find(|node| !placed.iter().any(|p| p.node == **node))
            {
                return Err(invalid(
                    path("loadgen"),
                    quoted(idle),
                    format!(
                        "{} publishers and {} subscribers{} leave this node without a \
                         client: name fewer nodes or give it a smaller weight",
                        spec.publishers,
                        spec.subscribers,
                        match point {
                            super::CellPoint::Single => String::new(),
                            point => format!(" (at {})", point.label()),
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The sweep points of test `i` are distinct: each is one cell of the test, named by its
    /// label in the cell id (lower-cased), so two equal points (`clients = [1, 1]`) or two
    /// spellings of one size (`"1KB"` and `"1000B"`) would share an id, the second's result
    /// overwriting the first's and a resumed run skipping it.
    fn validate_points(&self, i: usize) -> Result<(), PlanError> {
        // Each label's first index; a map, since a list may be long before the cell count is
        // checked.
        let mut seen = std::collections::HashMap::new();
        for (at, point) in self.points(i).into_iter().enumerate() {
            let Some(first) = seen.insert(point.label().to_lowercase(), at) else {
                continue;
            };
            let (list, value, same) = match point {
                super::CellPoint::Payload(size) => (
                    "payloads",
                    quoted(&size.to_string()),
                    format!("the same size ({} B)", size.bytes()),
                ),
                super::CellPoint::Clients(pairs) => {
                    ("clients", pairs.to_string(), "the same count".to_string())
                }
                super::CellPoint::Single => continue,
            };
            return Err(invalid(
                format!("tests[{i}].{list}[{at}]"),
                value,
                format!(
                    "{same} as tests[{i}].{list}[{first}]: each point is one cell, and two would share its id"
                ),
            ));
        }
        Ok(())
    }

    /// `loadgen`, `spread` and `weights` of test `i`.
    fn validate_spread(&self, i: usize, test: &TestEntry) -> Result<(), PlanError> {
        let path = |field: &str| format!("tests[{i}].{field}");
        let nodes = &test.loadgen;
        if nodes.is_empty() || nodes.len() > MAX_LOADGEN_NODES {
            return Err(invalid(
                path("loadgen"),
                format!("{nodes:?}"),
                format!("one node or more, at most {MAX_LOADGEN_NODES}"),
            ));
        }
        if let Some((at, node)) = nodes
            .iter()
            .enumerate()
            .find(|(at, node)| nodes[..*at].contains(node))
        {
            return Err(invalid(
                format!("tests[{i}].loadgen[{at}]"),
                quoted(node),
                "named twice: give it a weight instead",
            ));
        }
        match test.spread.unwrap_or_default() {
            Spread::Split => {
                if nodes.len() != 2 {
                    return Err(invalid(
                        path("spread"),
                        quoted("split"),
                        format!(
                            "split puts publishers on the first node and subscribers on the \
                             second: it needs exactly two loadgen nodes, not {}",
                            nodes.len()
                        ),
                    ));
                }
                if test.weights.is_some() {
                    return Err(invalid(
                        path("weights"),
                        "[..]",
                        "weights apply to spread = \"even\" only",
                    ));
                }
            }
            Spread::Even => {
                if let Some(weights) = &test.weights {
                    if weights.len() != nodes.len() {
                        return Err(invalid(
                            path("weights"),
                            format!("{weights:?}"),
                            format!("one weight per loadgen node ({})", nodes.len()),
                        ));
                    }
                    if let Some((at, weight)) = weights
                        .iter()
                        .enumerate()
                        .find(|(_, w)| **w == 0 || **w > MAX_WEIGHT)
                    {
                        return Err(invalid(
                            format!("tests[{i}].weights[{at}]"),
                            weight,
                            format!(
                                "from 1 to {MAX_WEIGHT} (leave a node out rather than weigh it 0)"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
