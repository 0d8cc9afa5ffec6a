//! The emulation check: for each emulated scenario, the delay netem should add to a
//! message's path publisher -> broker -> subscriber, beside what the latency test measured
//! (its median in the scenario minus its median in the local one, per broker).

use super::input::{GroupKey, RunData};
use super::model::{Block, Section, Table, ms, signed_ms, signed_ms_like};
use crate::plan::{DelaySplit, Measures, MessagePath, NodeRole, Plan, Sweep, scenario_preset};

/// What is compared, and why.
const METHOD: &str = "Latency is measured publisher -> broker -> subscriber. A scenario's delay \
     (from the plan, or the study's preset: local 0, edge 2.5 ms, cloud 6.25 ms) is a total \
     between two nodes, split over the nodes' egress (half on each end unless the plan says \
     broker-side, as the study's repository split it). A message crosses the emulated network \
     twice: from the publisher's node to the broker's node (delayed by the publisher node's \
     egress share) and from the broker's node to the subscriber's node (delayed by the broker \
     node's share); a hop inside one node is not delayed. In the study's 2-node setup (load on \
     one node, broker on the other) the two shares add up to the scenario's total once: the \
     one-way delay from publisher to subscriber, which is what 'should add' gives. Measured: \
     the median latency in the scenario minus the median in the local scenario, for the same \
     broker and test, so the broker's own time cancels out. Jitter hardly moves a median, and \
     loss (QoS 1 resends it) shows in the tail, not here.";

/// The delay a scenario's netem puts on one node's egress, in ns, and where it came from:
/// what the node's netem read back after it was applied, else what was asked, else (a
/// folder without netem records) what the plan says.
fn egress_ns(
    plan: &Plan,
    data: &RunData,
    broker: usize,
    scenario: usize,
    node: &str,
) -> (f64, &'static str) {
    let entry = &plan.scenarios[scenario];
    let applied = data.manifest.netem.iter().find(|n| {
        n.broker == plan.brokers[broker].name && n.scenario == entry.name && n.node == node
    });
    if let Some(netem) = applied {
        return match &netem.read_back {
            Some(read_back) => (read_back.delay_ns as f64, "netem read back"),
            None => (netem.asked.delay_ns as f64, "netem asked"),
        };
    }
    let total = entry
        .delay
        .or_else(|| scenario_preset(&entry.name).map(|(delay, _, _)| delay))
        .unwrap_or_default()
        .as_nanos() as f64;
    let has_netem = plan
        .nodes
        .iter()
        .any(|n| n.name == node && n.roles.contains(&NodeRole::Netem));
    let share = match entry.split {
        DelaySplit::HalfEachEnd if has_netem => total / 2.0,
        DelaySplit::BrokerSide if plan.brokers[broker].node.as_deref() == Some(node) => total,
        _ => 0.0,
    };
    (share, "plan")
}

/// The delay a message's path should gain in a scenario.
pub(super) struct PathModel {
    /// One way, µs.
    pub should_us: f64,
    /// Hop by hop, and where each figure came from.
    pub description: String,
}

/// The path of `broker`'s messages under test `test`: as the manifest recorded it, else (an
/// older folder) as the plan gives it; `None` for an external broker.
pub(super) fn message_path(data: &RunData, broker: usize, test: usize) -> Option<MessagePath> {
    let plan = &data.manifest.plan;
    let name = &plan.brokers[broker].name;
    data.manifest
        .paths
        .iter()
        .find(|p| p.broker == *name && p.test == test)
        .map(|p| p.path.clone())
        .or_else(|| MessagePath::of(plan, broker, test))
}

/// The path model of `broker` in `scenario` along `path`: each hop between two nodes gains
/// the sending node's egress delay.
pub(super) fn path_model(
    data: &RunData,
    broker: usize,
    scenario: usize,
    path: &MessagePath,
) -> PathModel {
    let plan = &data.manifest.plan;
    let mut parts = Vec::new();
    let mut sources = Vec::new();
    let mut should_us = 0.0;
    for pair in path.nodes.windows(2) {
        let (from, to) = (pair[0].as_str(), pair[1].as_str());
        if from == to {
            continue;
        }
        let (ns, source) = egress_ns(plan, data, broker, scenario, from);
        should_us += ns / 1e3;
        sources.push(source);
        parts.push(format!("{from}->{to} {}", ms(ns / 1e3)));
    }
    sources.sort_unstable();
    sources.dedup();
    let hops = if parts.is_empty() {
        format!("no hop between nodes (all on {})", path.nodes[0])
    } else {
        parts.join(" + ")
    };
    let description = format!(
        "{}: {hops}; from {}",
        path.describe(),
        if sources.is_empty() {
            "-".to_string()
        } else {
            sources.join(", ")
        }
    );
    PathModel {
        should_us,
        description,
    }
}

/// The scenario the others are compared with: `local`, else the first without delay.
pub(super) fn baseline(plan: &Plan) -> Option<usize> {
    // A scenario losing packets in bursts is no baseline, whatever its name or delay.
    let clean = |s: &&crate::plan::ScenarioEntry| s.gilbert_elliott.is_none();
    plan.scenarios
        .iter()
        .position(|s| s.name == "local" && clean(&s))
        .or_else(|| {
            plan.scenarios
                .iter()
                .position(|s| clean(&s) && s.delay.is_some_and(|d| d.is_zero()))
        })
}

/// What one broker's latency says about one emulated scenario.
struct DelayCheck {
    /// The broker's name.
    broker: String,
    /// What the emulation should add one way, µs.
    should_us: f64,
    /// The rise of the broker's median over the baseline's, µs; `None` when not measured.
    added_us: Option<f64>,
}

/// One line: what the scenario should add and what each broker measured.
fn scenario_line(scenario: &str, checks: &[DelayCheck]) -> String {
    let measured = |added: Option<f64>| {
        added.map_or_else(
            || "not measured".to_string(),
            |a| format!("{} ms", signed_ms(a)),
        )
    };
    let same = checks
        .windows(2)
        .all(|w| ms(w[0].should_us) == ms(w[1].should_us));
    match checks.first() {
        None => format!("{scenario}: no broker with a known node to check."),
        Some(first) if same => format!(
            "{scenario}: emulation should add {} ms one way (publisher -> broker -> subscriber) vs measured (median minus local's median): {}.",
            ms(first.should_us),
            checks
                .iter()
                .map(|c| format!("{} {}", c.broker, measured(c.added_us)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(_) => format!(
            "{scenario}: emulation should add, vs measured (median minus local's median): {}.",
            checks
                .iter()
                .map(|c| format!(
                    "{} {} ms vs {}",
                    c.broker,
                    ms(c.should_us),
                    measured(c.added_us)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The section, when the plan has a latency (or payload) test and an emulated scenario.
pub fn section(data: &RunData) -> Option<Section> {
    let plan = &data.manifest.plan;
    let test = plan
        .tests
        .iter()
        .position(|t| t.kind.measures() == Measures::Latency && t.kind.sweep() == Sweep::Single)
        .or_else(|| {
            plan.tests
                .iter()
                .position(|t| t.kind.measures() == Measures::Latency)
        })?;
    let base = baseline(plan);
    let emulated: Vec<usize> = (0..plan.scenarios.len())
        .filter(|&s| Some(s) != base)
        .collect();
    if emulated.is_empty() {
        return None;
    }
    let mut section = Section::new("emulation", "Emulation check");
    let Some(base) = base else {
        section.paragraph(METHOD);
        section.paragraph("The plan has no local scenario (no delay) to compare with.");
        return Some(section);
    };
    // The payload test's smallest payload stands in when there is no latency test.
    let point = data
        .latency
        .keys()
        .filter(|k| k.test == test)
        .map(|k| k.point)
        .min()
        .unwrap_or(0);
    let median = |broker: usize, scenario: usize| {
        data.latency
            .get(&GroupKey {
                test,
                broker,
                scenario,
                point,
            })
            .filter(|g| g.count > 0)
            .map(|g| g.p50)
    };
    // Scenarios never measured (skipped: no netem here, no link to emulate) have nothing to
    // check: one line names them, rather than a row of "n/a" per broker.
    let (measured, unmeasured): (Vec<usize>, Vec<usize>) = emulated
        .iter()
        .partition(|&&s| (0..plan.brokers.len()).any(|b| median(b, s).is_some()));
    let mut lines = Vec::new();
    if !unmeasured.is_empty() {
        let names: Vec<&str> = unmeasured
            .iter()
            .map(|&s| plan.scenarios[s].name.as_str())
            .collect();
        lines.push(format!(
            "{}: not measured in this run (see \"Not measured\"), so nothing to check.",
            names.join(", ")
        ));
    }
    if measured.is_empty() {
        section.blocks.push(Block::List(lines));
        return Some(section);
    }
    section.paragraph(METHOD);
    let mut table = Table::new(
        &[
            "Scenario",
            "Broker",
            "Where the delay is added",
            "Should add (ms)",
            "Median (ms)",
            "Local median (ms)",
            "Measured added (ms)",
            "Measured - should (ms)",
        ],
        3,
    );
    for &scenario in &measured {
        let name = &plan.scenarios[scenario].name;
        let mut checks: Vec<DelayCheck> = Vec::new();
        for broker in 0..plan.brokers.len() {
            // Brokers never measured in this test are listed as skipped in the run section.
            if !(0..plan.scenarios.len()).any(|s| median(broker, s).is_some()) {
                continue;
            }
            let broker_name = &plan.brokers[broker].name;
            let Some(path) = message_path(data, broker, test) else {
                table.row(vec![
                    name.clone(),
                    broker_name.clone(),
                    "external broker: its node is unknown".into(),
                    "n/a".into(),
                    "n/a".into(),
                    "n/a".into(),
                    "n/a".into(),
                    "n/a".into(),
                ]);
                continue;
            };
            let path = path_model(data, broker, scenario, &path);
            let should_us = path.should_us;
            let mut row = vec![
                name.clone(),
                broker_name.clone(),
                path.description,
                ms(should_us),
            ];
            let added = match (median(broker, scenario), median(broker, base)) {
                (Some(here), Some(local)) => {
                    row.extend([
                        ms(here),
                        ms(local),
                        signed_ms(here - local),
                        signed_ms_like(here - local - should_us, should_us),
                    ]);
                    Some(here - local)
                }
                _ => {
                    row.extend(["n/a", "n/a", "n/a", "n/a"].map(String::from));
                    None
                }
            };
            table.row(row);
            checks.push(DelayCheck {
                broker: broker_name.clone(),
                should_us,
                added_us: added,
            });
        }
        lines.push(scenario_line(name, &checks));
    }
    section.blocks.push(Block::List(lines));
    section.blocks.push(Block::Table(table));
    Some(section)
}
