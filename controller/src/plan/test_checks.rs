//! Checking a plan's `[[tests]]`: loadgen nodes and spread, sweep points, timing as each
//! kind's traits allow, a custom test's table, and each point's workload as loadgen checks it.

use std::time::Duration;

use loadgen::WorkloadSpec;
use loadgen::spec::{MAX_DURATION, SpecError};
use loadgen::suite::SuiteScenario;

use super::error::{PlanError, invalid, quoted};
use super::kinds::{Sweep, TestKind, Timing, kind_names, kinds_named};
use super::spread::{MAX_LOADGEN_NODES, MAX_WEIGHT};
use super::types::{NodeRole, Plan, Spread, TestEntry, WarmupEntry};

/// `only throughput does`: which kinds have a trait, as a parenthesis says it.
fn only_kinds(having: impl Fn(TestKind) -> bool) -> String {
    let names = kind_names(having);
    let verb = if names.len() == 1 { "does" } else { "do" };
    format!("only {} {verb}", super::kinds::sentence(&names))
}

/// Time a timed cell needs beyond its load: connecting, the start barrier, the drain.
const CELL_MARGIN: Duration = Duration::from_secs(30);

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

/// A loadgen limit a suite scenario's scaled counts break, named by `scale` (the plan wrote
/// no count), with the count it made.
fn scaled_count_refused(i: usize, test: &TestEntry, error: &SpecError) -> Option<PlanError> {
    test.kind.suite_scenario()?;
    let counted = match error.path.as_str() {
        "publishers" => test.publishers.is_none(),
        "subscribers" => test.subscribers.is_none(),
        "churn.connections" => true,
        path => path.starts_with("topics") && test.publishers.is_none(),
    };
    counted.then(|| {
        invalid(
            format!("tests[{i}].scale"),
            test.scale.unwrap_or(super::presets::FULL_SCALE),
            format!(
                "at this scale {} = {}: {}",
                error.path, error.value, error.problem
            ),
        )
    })
}

impl Plan {
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
        if matches!(timing, Timing::Timed | Timing::Searched) && test.messages.is_some() {
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
    /// warm-up, or its churn's or will clients' span when longer (none for a counted load). A workload that is not valid is refused later with
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
            .filter(|spec| self.validate_as_run(spec).is_ok())
            .and_then(|spec| {
                let timed = spec
                    .duration
                    .map(|duration| duration.saturating_add(spec.warmup.unwrap_or_default()));
                // Arrivals go on until the last one's hold ends, and the will clients until
                // their wills are in, past the window if need be.
                let arrivals = spec.churn.as_ref().map(|churn| churn.span());
                let wills = spec.wills.as_ref().map(|w| w.span(spec.drain.timeout));
                timed.max(arrivals).max(wills)
            }))
    }

    /// Counted tests take messages and a warm-up count; timed ones a duration and a warm-up
    /// time; the saturation search its own settings; and a cell's deadline must leave room.
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

    /// Every test, in plan order.
    pub(super) fn validate_tests(&self) -> Result<(), PlanError> {
        if self.tests.is_empty() {
            return Err(invalid("tests", "[]", "at least one test"));
        }
        for (i, test) in self.tests.iter().enumerate() {
            self.validate_spread(i, test)?;
            self.validate_loadgen_nodes(i, test)?;
            Self::validate_sweep(i, test)?;
            Self::validate_suite(i, test)?;
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

    /// Test `i` gives `scale` only when its kind is one of the suite's scenarios, as a
    /// fraction of the suite's client counts; a suite scenario's shape (its clients, topics
    /// and, for connections, each arrival's hold) is its own, not `[tests.workload]`'s.
    fn validate_suite(i: usize, test: &TestEntry) -> Result<(), PlanError> {
        let path = |field: &str| format!("tests[{i}].{field}");
        let Some(scenario) = test.kind.suite_scenario() else {
            if let Some(scale) = test.scale {
                let suite = kinds_named(|k| k.suite_scenario().is_some());
                return Err(invalid(
                    path("scale"),
                    scale,
                    format!("only {suite} (the Open MQTT Benchmark Suite's) take a scale"),
                ));
            }
            return Ok(());
        };
        if let Some(scale) = test.scale
            && !(scale.is_finite() && scale > 0.0 && scale <= 1.0)
        {
            return Err(invalid(
                path("scale"),
                scale,
                "a fraction of the suite's client counts: more than 0, at most 1 \
                 (0.01 is 500 -> 500 point to point)",
            ));
        }
        let Some(table) = &test.workload else {
            return Ok(());
        };
        let mut owned = vec![
            (
                "publishers",
                "set tests[i].publishers (the scenario keeps its shape)",
            ),
            (
                "subscribers",
                "set tests[i].subscribers (the scenario keeps its shape)",
            ),
            ("topology", "the scenario's topology is its own"),
            ("topics", "the scenario's topics are its own"),
        ];
        if scenario == SuiteScenario::Connections {
            owned.push((
                "churn.hold",
                "each arrival holds through the ramp, the warm-up and the measured window",
            ));
        }
        for (field, problem) in owned {
            if super::presets::sets(table, field) {
                return Err(invalid(
                    path(&format!("workload.{field}")),
                    "(set)",
                    problem.replace("tests[i]", &format!("tests[{i}]")),
                ));
            }
        }
        Ok(())
    }

    /// A connections scenario's last arrival leaves after the ramp, the warm-up and the
    /// window: over loadgen's longest schedule, the plan's `duration` is what to shorten.
    fn validate_departures(
        i: usize,
        test: &TestEntry,
        spec: &WorkloadSpec,
    ) -> Result<(), PlanError> {
        let Some(churn) = spec
            .churn
            .as_ref()
            .filter(|_| test.kind.suite_scenario() == Some(SuiteScenario::Connections))
        else {
            return Ok(());
        };
        if churn.span() <= MAX_DURATION {
            return Ok(());
        }
        let written = test.duration.unwrap_or(loadgen::suite::SUITE_DURATION);
        Err(invalid(
            format!("tests[{i}].duration"),
            humantime::format_duration(written),
            format!(
                "each arrival stays through the measured window, so the last of {} at {}/s \
                 leaves {} after the first arrives (the ramp, the warm-up and this duration), \
                 over loadgen's longest schedule, {}",
                churn.connections,
                churn.rate,
                humantime::format_duration(Duration::from_secs(churn.span().as_secs())),
                humantime::format_duration(MAX_DURATION)
            ),
        ))
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
            Self::validate_departures(i, test, &spec)?;
            if let Err(error) = self.validate_as_run(&spec) {
                if let Some(refused) = scaled_count_refused(i, test, &error) {
                    return Err(refused);
                }
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
                    "broker.transport" if test.transports.is_some() => "transports",
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
            let split_publishers = placed.iter().any(|p| {
                !p.shard.publishers.is_empty() && p.shard.publishers != (0..spec.publishers)
            });
            if spec.retain.is_some() && split_publishers {
                return Err(invalid(
                    path("loadgen"),
                    format!("{:?}", test.loadgen),
                    "retain needs every publisher on one loadgen node (the late subscribers \
                     judge against what they sent): name one node, or spread = \"split\"",
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
