//! The Open MQTT Benchmark Suite's scenarios (`p2p`, `fan-out`, `fan-in-shared`,
//! `connections`) laid out as the suite's result tables: per broker, connections, messages
//! in and out per second, average and p99 latency, CPU and memory; with Continuum's
//! accounting (delivered, lost, duplicates) and intervals over the repetitions beside.

use super::estimate::{Estimate, INTERVAL_MEANING};
use super::input::{CellFigures, RunData};
use super::model::{Block, Section, Table, ms, rate};
use super::test_label;
use crate::plan::Measures;

/// How the suite measured, so its published tables and this one are read alike.
const SUITE_MEANING: &str = "The suite (emqx/mqttbs) publishes, per broker: the actual message \
     rate, the average pub-to-sub latency, and the broker host's maximum and average CPU \
     (user + system) and memory; it reports no losses and no spread. Here, per broker and \
     network scenario: messages in (published) and out (delivered) per second, every client \
     together over the measured window (sustained: after the warm-up, open loop at the \
     suite's per-client rates); latency is the transit latency (from the moment loadgen \
     handed a message to the socket to its arrival), its mean and 99th percentile; CPU is the \
     broker process's mean over the measured window (percent of one core) and memory its \
     peak resident size over the whole cell (warm-up, a connection ramp and the departures \
     after the window included), sampled by its node's agent (the suite measures the whole \
     host); \
     connections are the clients connected during the window (for the connections scenario, \
     the arrivals accepted plus its one publisher -> subscriber pair). Delivered / expected, \
     lost and duplicates are counted per message, summed over the repetitions. The suite's \
     full size is scale = 1 (50,000 -> 50,000 point to point); the scale used is in the \
     table, marked where the plan set publishers or subscribers instead.";

/// One section for every suite scenario in the plan, or none.
pub fn section(data: &RunData) -> Option<Section> {
    let plan = &data.manifest.plan;
    let tests: Vec<usize> = (0..plan.tests.len())
        .filter(|&t| plan.tests[t].kind.measures() == Measures::SuiteFigures)
        .collect();
    if tests.is_empty() {
        return None;
    }
    let mut section = Section::new("suite", "Open MQTT Benchmark Suite scenarios");
    section.paragraph(SUITE_MEANING);
    let mut table = Table::new(
        &[
            "Scenario",
            "Broker",
            "Network",
            "Scale",
            "Connections",
            "Msgs in (msg/s)",
            "Msgs out (msg/s)",
            "Latency avg (ms)",
            "Latency p99 (ms)",
            "Broker CPU mean (% of a core)",
            "Broker memory peak (MB)",
            "Delivered / expected",
            "Lost",
            "Duplicates",
            "Repetitions",
        ],
        4,
    );
    for &test in &tests {
        let entry = &plan.tests[test];
        let mut scale = entry.scale.unwrap_or(crate::plan::FULL_SCALE).to_string();
        if entry.publishers.is_some() || entry.subscribers.is_some() {
            scale.push_str(" (counts set)");
        }
        for (b, broker) in plan.brokers.iter().enumerate() {
            for (s, scenario) in plan.scenarios.iter().enumerate() {
                let cells: Vec<&CellFigures> = data
                    .cells
                    .iter()
                    .filter(|c| c.test == test && c.broker == b && c.scenario == s)
                    .collect();
                if cells.is_empty() {
                    continue;
                }
                let mut row = vec![
                    test_label(plan, test),
                    broker.name.clone(),
                    scenario.name.clone(),
                    scale.clone(),
                ];
                row.extend(figures(&cells));
                table.row(row);
            }
        }
    }
    if table.rows.is_empty() {
        section.paragraph(
            "No cell of these scenarios was measured (see the failed and skipped cells above).",
        );
    } else {
        section.blocks.push(Block::Table(table));
        section.paragraph(INTERVAL_MEANING);
    }
    Some(section)
}

/// The figures of one broker at one scenario, over its repetitions.
fn figures(cells: &[&CellFigures]) -> Vec<String> {
    let estimate = |value: &dyn Fn(&CellFigures) -> Option<f64>, text: fn(f64) -> String| {
        let values: Vec<f64> = cells.iter().filter_map(|c| value(c)).collect();
        Estimate::of(&values).map_or_else(|| "n/a".to_string(), |e| e.text(text))
    };
    let latency = |cell: &CellFigures| cell.summary.transit_latency;
    let sum = |value: fn(&CellFigures) -> u64| cells.iter().map(|c| value(c)).sum::<u64>();
    let lost = cells
        .iter()
        .map(|c| c.summary.lost)
        .sum::<Option<u64>>()
        .map_or_else(|| "not judged".to_string(), |lost| lost.to_string());
    vec![
        estimate(&|c| Some(connections(c)), |n| format!("{n:.0}")),
        estimate(&|c| Some(c.summary.publish_rate.msgs_per_s), rate),
        estimate(&|c| Some(c.summary.receive_rate.msgs_per_s), rate),
        estimate(&|c| (latency(c).count > 0).then(|| latency(c).mean_us), ms),
        estimate(&|c| (latency(c).count > 0).then(|| latency(c).p99_us), ms),
        estimate(&|c| c.extras.broker_cpu_percent, |p| format!("{p:.1}")),
        estimate(&|c| c.extras.broker_peak_rss_mb, |mb| format!("{mb:.1}")),
        format!(
            "{} / {}",
            sum(|c| c.summary.delivered_unique),
            sum(|c| c.summary.expected_deliveries)
        ),
        lost,
        sum(|c| c.summary.duplicates).to_string(),
        cells.len().to_string(),
    ]
}

/// Clients connected during a cell's window: its publishers and subscribers, and the churn
/// arrivals it accepted.
fn connections(cell: &CellFigures) -> f64 {
    let summary = &cell.summary;
    let arrivals = summary.churn.as_ref().map_or(0, |churn| churn.connected);
    (u64::from(summary.publishers) + u64::from(summary.subscribers) + arrivals) as f64
}
