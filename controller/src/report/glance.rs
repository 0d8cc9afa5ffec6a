//! The run at a glance, for the terminal at its end: one line per broker, scenario, test and
//! point with the medians over its measured repetitions. The report says the rest.

use std::collections::HashMap;
use std::path::Path;

use crate::plan::{CellId, MAX_CELLS};
use host::Folder;

use crate::results::{CellStatus, Manifest, SummaryRow, read_each_row, read_record};

/// Broker, scenario, test (`<index>-<kind>`) and point label.
type GroupKey = (String, String, String, String);

/// The table, or `None` when no cell was measured. Latencies are the medians over the
/// repetitions of each cell's p50 and p99 (ms); the receive rate is the median of the
/// aggregate rates, labelled with their kind (burst, sustained, ...); lost is summed.
pub fn table(dir: &Path) -> Option<String> {
    let rows: Vec<SummaryRow> = measured_rows(dir)?;
    if rows.is_empty() {
        return None;
    }
    // In the order the cells ran (the plan's order), not sorted by label: 1KB before 10KB.
    let mut groups: Vec<(GroupKey, Vec<&SummaryRow>)> = Vec::new();
    let mut index: HashMap<GroupKey, usize> = HashMap::new();
    for row in &rows {
        // Two tests of one kind are kept apart by the test's index in the cell id.
        let test = row.cell.parse::<CellId>().map_or_else(
            |_| row.test.name().to_string(),
            |id| format!("{}-{}", id.test, id.kind),
        );
        let key = (
            row.broker.clone(),
            row.scenario.clone(),
            test,
            row.point.label(),
        );
        match index.get(&key) {
            Some(&at) => groups[at].1.push(row),
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, vec![row]));
            }
        }
    }
    let header = [
        "broker",
        "scenario",
        "test",
        "point",
        "reps",
        "latency p50 ms",
        "p99 ms",
        "transit p50 ms",
        "p99 ms",
        "tail",
        "receive msg/s",
        "lost",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for ((broker, scenario, test, point), rows) in &groups {
        let median_of =
            |f: fn(&SummaryRow) -> Option<f64>| median(rows.iter().filter_map(|r| f(r)));
        let ms = |us: Option<f64>| us.map_or("-".to_string(), |us| format!("{:.2}", us / 1e3));
        let rate = median_of(|r| r.receive_rate_msgs_per_s).map_or("-".to_string(), |rate| {
            let kind = rows
                .iter()
                .find_map(|r| r.rate_kind)
                .map_or("", |k| k.as_str());
            format!("{rate:.0} {kind}")
        });
        let lost: u64 = rows.iter().filter_map(|r| r.lost).sum();
        lines.push(vec![
            broker.clone(),
            scenario.clone(),
            test.clone(),
            point.clone(),
            rows.len().to_string(),
            ms(median_of(|r| r.latency_p50_us)),
            ms(median_of(|r| r.latency_p99_us)),
            ms(median_of(|r| r.transit_latency_p50_us)),
            ms(median_of(|r| r.transit_latency_p99_us)),
            tail(rows),
            rate,
            lost.to_string(),
        ]);
    }
    Some(aligned(&lines))
}

/// The measured cells as `summary.csv` rows: exported from each cell's `record.json` in the
/// plan's order, or, in a folder written before records, read from `summary.csv`.
fn measured_rows(dir: &Path) -> Option<Vec<SummaryRow>> {
    let manifest = Manifest::read(&dir.join("manifest.json")).ok()?;
    let rows: Vec<SummaryRow> = if manifest.cell_records {
        let folder = Folder::open(dir).ok()?;
        let plan = &manifest.plan;
        // Listed only for a plan a run would accept (see the report's reading).
        plan.checked_cell_count()
            .filter(|cells| *cells <= MAX_CELLS)?;
        plan.cells()
            .iter()
            .filter_map(|cell| read_record(&folder, &cell.id(plan)).ok().flatten())
            .map(|record| SummaryRow::of(&record))
            .collect()
    } else {
        read_each_row(&dir.join("summary.csv"))
            .ok()
            .flatten()?
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    };
    Some(
        rows.into_iter()
            .filter(|row| row.status == CellStatus::Ok)
            .collect(),
    )
}

/// Whose the open-loop tail was: "loadgen" in every repetition, "loadgen 1/3" in some,
/// "broker" in none, "-" without a schedule.
fn tail(rows: &[&SummaryRow]) -> String {
    let owners: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.latency_tail.as_deref())
        .collect();
    let loadgen = owners.iter().filter(|o| **o == "loadgen").count();
    match (owners.len(), loadgen) {
        (0, _) => "-".to_string(),
        (_, 0) => "broker".to_string(),
        (n, l) if l == n => "loadgen".to_string(),
        (n, l) => format!("loadgen {l}/{n}"),
    }
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

/// Columns padded to their widest cell, two spaces apart.
fn aligned(lines: &[Vec<String>]) -> String {
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    lines
        .iter()
        .map(|line| {
            line.iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), Some(2.5));
        assert_eq!(median(std::iter::empty()), None);
    }

    #[test]
    fn columns_line_up() {
        let lines = vec![
            vec!["a".to_string(), "bb".to_string()],
            vec!["ccc".to_string(), "d".to_string()],
        ];
        assert_eq!(aligned(&lines), "a    bb\nccc  d");
    }
}
