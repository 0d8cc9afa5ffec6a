//! Churn fleets (`[tests.workload.churn]`): per test, broker and scenario, the arrivals asked
//! and achieved, what the broker accepted, refused or failed, and how long CONNECT took.

use loadgen::summary::ChurnSummary;

use super::grouped::{by_kind, rows_per_group};
use super::input::RunData;
use super::model::{Block, Section, Table, ms};

/// The churn section, when a measured cell had a fleet.
pub fn section(data: &RunData) -> Option<Section> {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Repetitions",
            "Arrivals (/s asked, achieved)",
            "Connected / attempted",
            "Disconnected cleanly",
            "Refused or failed, by kind",
            "Connect p50 (ms)",
            "Connect p99 (ms)",
            "Most at once",
        ],
        3,
    );
    for row in rows_per_group(data, |s| s.churn.as_ref(), row) {
        table.row(row);
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("churn", "Churn: clients that come and go");
    section.paragraph(
        "Beside the test's workload, new clients arrived on a fixed schedule, each stayed for \
         its hold and disconnected. Counts are summed over the repetitions; rates, connect \
         times (accepted arrivals only, apart from the workload's) are medians over them, and \
         the most at once is the highest of any repetition.",
    );
    section.blocks.push(Block::Table(table));
    Some(section)
}

/// The figures of one test, broker and scenario's fleets (one per repetition, at least one).
fn row(fleets: &[&ChurnSummary]) -> Vec<String> {
    let Some(first) = fleets.first() else {
        return Vec::new();
    };
    let median = |value: fn(&ChurnSummary) -> Option<f64>| {
        let mut values: Vec<f64> = fleets.iter().filter_map(|f| value(f)).collect();
        values.sort_by(f64::total_cmp);
        crate::stats::median(&values)
    };
    let sum = |value: fn(&ChurnSummary) -> u64| fleets.iter().map(|f| value(f)).sum::<u64>();
    let failures = by_kind(fleets.iter().map(|f| &f.failures));
    let shown = |value: Option<f64>, text: fn(f64) -> String| value.map_or("-".to_string(), text);
    vec![
        fleets.len().to_string(),
        format!(
            "{}, {}",
            first.rate_asked,
            shown(median(|f| f.rate_achieved), |r| format!("{r:.1}"))
        ),
        format!("{} / {}", sum(|f| f.connected), sum(|f| f.attempted)),
        sum(|f| f.disconnected).to_string(),
        failures,
        shown(median(|f| Some(f.connect_time.p50_us)), ms),
        shown(median(|f| Some(f.connect_time.p99_us)), ms),
        fleets
            .iter()
            .map(|f| f.most_open)
            .max()
            .unwrap_or_default()
            .to_string(),
    ]
}
