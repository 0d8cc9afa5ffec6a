//! Reading a results folder back: the manifest, `summary.csv` (the last row of a cell wins,
//! since `--resume` retries failed cells), each measured cell's `result.json`, and
//! `metrics.csv`.
//!
//! Results are read one cell at a time and only their figures and merged latency
//! histograms are kept, so a study of thousands of cells fits in memory.

use crate::results::split_csv_line;
use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use hdrhistogram::Histogram;
use loadgen::size::ByteSize;
use loadgen::{RunResult, Summary};

use super::ReportError;
use crate::plan::TestKind;
use crate::results::{Manifest, MetricsRow, SUMMARY_FIXED_COLUMNS};

/// Everything the report is built from.
#[derive(Debug)]
pub struct RunData {
    /// The run's manifest.
    pub manifest: Manifest,
    /// Figures of every measured cell whose result could be read.
    pub cells: Vec<CellFigures>,
    /// Latency of the latency and payload tests, merged over repetitions.
    pub latency: BTreeMap<GroupKey, LatencyGroup>,
    /// Cells whose last recorded status is failed, by cell id.
    pub failed: Vec<CellNote>,
    /// Cells recorded as skipped, by cell id.
    pub skipped: Vec<CellNote>,
    /// Cells that failed at first and were measured on a later try.
    pub retried: usize,
    /// Things in the folder that could not be used, each naming the file.
    pub problems: Vec<String>,
    /// Samples from `metrics.csv` (empty when it is absent).
    pub metrics: Vec<MetricsRow>,
    /// Cell id -> (broker index, test index), for attributing metrics.
    pub cell_index: BTreeMap<String, (usize, usize)>,
}

/// The figures of one measured cell.
#[derive(Debug, Clone)]
pub struct CellFigures {
    /// Index into the plan's brokers.
    pub broker: usize,
    /// Index into the plan's scenarios.
    pub scenario: usize,
    /// Index into the plan's tests.
    pub test: usize,
    /// Payload bytes (payload test), client pairs (throughput test), 0 otherwise.
    pub point: u64,
    /// Everything loadgen derives from the cell's result.
    pub summary: Summary,
}

/// Which histograms merge: the same test, broker, scenario and point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupKey {
    /// Test index.
    pub test: usize,
    /// Broker index.
    pub broker: usize,
    /// Scenario index.
    pub scenario: usize,
    /// Payload bytes, or 0.
    pub point: u64,
}

/// Percentiles of a merged latency histogram, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencyGroup {
    /// Samples.
    pub count: u64,
    /// Repetitions merged.
    pub repetitions: u32,
    /// 1st percentile.
    pub p1: f64,
    /// 25th percentile.
    pub p25: f64,
    /// Median.
    pub p50: f64,
    /// 75th percentile.
    pub p75: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl LatencyGroup {
    /// Percentiles of a histogram of ns values, as loadgen's summary takes them.
    pub fn of(histogram: &Histogram<u64>, repetitions: u32) -> Self {
        if histogram.is_empty() {
            return LatencyGroup {
                repetitions,
                ..LatencyGroup::default()
            };
        }
        let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1_000.0;
        LatencyGroup {
            count: histogram.len(),
            repetitions,
            p1: us(0.01),
            p25: us(0.25),
            p50: us(0.50),
            p75: us(0.75),
            p99: us(0.99),
            max: histogram.max() as f64 / 1_000.0,
        }
    }

    /// p75 - p25.
    pub fn iqr(&self) -> f64 {
        self.p75 - self.p25
    }
}

/// A cell that was not measured, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellNote {
    /// Cell id.
    pub cell: String,
    /// Broker name.
    pub broker: String,
    /// Scenario name.
    pub scenario: String,
    /// Why.
    pub reason: String,
}

/// The name a test kind has in `summary.csv`.
pub fn kind_name(kind: TestKind) -> &'static str {
    match kind {
        TestKind::Latency => "latency",
        TestKind::Payload => "payload",
        TestKind::Throughput => "throughput",
    }
}

struct SummaryRow {
    cell: String,
    broker: String,
    scenario: String,
    test: String,
    point: String,
    status: String,
    reason: String,
}

fn read_text(path: &Path) -> Result<Option<String>, ReportError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReportError::Read {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Reads the folder.
pub fn load(dir: &Path) -> Result<RunData, ReportError> {
    let manifest_path = dir.join("manifest.json");
    let text = fs::read_to_string(&manifest_path).map_err(|source| ReportError::Read {
        path: manifest_path.display().to_string(),
        source,
    })?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| ReportError::Format {
        path: manifest_path.display().to_string(),
        problem: e.to_string(),
    })?;
    let mut data = RunData {
        manifest,
        cells: Vec::new(),
        latency: BTreeMap::new(),
        failed: Vec::new(),
        skipped: Vec::new(),
        retried: 0,
        problems: Vec::new(),
        metrics: Vec::new(),
        cell_index: BTreeMap::new(),
    };
    let summary_path = dir.join("summary.csv");
    let rows = match read_text(&summary_path)? {
        Some(text) => read_summary(&text, &summary_path, &mut data)?,
        None => {
            data.problems
                .push("summary.csv is absent: no cell has been recorded yet".to_string());
            BTreeMap::new()
        }
    };
    let mut merged: BTreeMap<GroupKey, (Histogram<u64>, u32)> = BTreeMap::new();
    for row in rows.values() {
        match row.status.as_str() {
            "ok" => read_cell(dir, row, &mut data, &mut merged),
            "failed" | "skipped" => {
                let note = CellNote {
                    cell: row.cell.clone(),
                    broker: row.broker.clone(),
                    scenario: row.scenario.clone(),
                    reason: row.reason.clone(),
                };
                if row.status == "failed" {
                    data.failed.push(note);
                } else {
                    data.skipped.push(note);
                }
            }
            other => data.problems.push(format!(
                "summary.csv: cell {} has unknown status {other:?}",
                row.cell
            )),
        }
    }
    data.latency = merged
        .into_iter()
        .map(|(key, (histogram, reps))| (key, LatencyGroup::of(&histogram, reps)))
        .collect();
    if let Some(text) = read_text(&dir.join("metrics.csv"))? {
        read_metrics(&text, &mut data);
    }
    Ok(data)
}

/// The last row of each cell, by cell id; counts cells that failed before they succeeded.
fn read_summary(
    text: &str,
    path: &Path,
    data: &mut RunData,
) -> Result<BTreeMap<String, SummaryRow>, ReportError> {
    let mut lines = text.lines();
    let header = lines.next().map(split_csv_line).unwrap_or_default();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| ReportError::Format {
                path: path.display().to_string(),
                problem: format!("the header has no column {name:?}"),
            })
    };
    let at: Vec<usize> = SUMMARY_FIXED_COLUMNS
        .iter()
        .map(|name| column(name))
        .collect::<Result<_, _>>()?;
    let mut rows: BTreeMap<String, SummaryRow> = BTreeMap::new();
    let mut failed_before: BTreeMap<String, bool> = BTreeMap::new();
    for (number, line) in lines.enumerate() {
        if line.is_empty() {
            continue;
        }
        let fields = split_csv_line(line);
        let field = |i: usize| fields.get(at[i]).cloned();
        let (Some(cell), Some(broker), Some(scenario), Some(test), Some(point)) =
            (field(0), field(1), field(2), field(3), field(4))
        else {
            data.problems.push(format!(
                "summary.csv line {}: {} fields, fewer than the header's",
                number + 2,
                fields.len()
            ));
            continue;
        };
        let status = field(6).unwrap_or_default();
        let reason = field(7).unwrap_or_default();
        if status == "failed" {
            failed_before.insert(cell.clone(), true);
        }
        let row = SummaryRow {
            cell: cell.clone(),
            broker,
            scenario,
            test,
            point,
            status,
            reason,
        };
        rows.insert(cell, row);
    }
    data.retried = rows
        .values()
        .filter(|row| row.status == "ok" && failed_before.contains_key(&row.cell))
        .count();
    Ok(rows)
}

/// The test a row belongs to: the index in its cell id (`.../<index>-<kind>/<point>/<rep>`),
/// or the plan's first test of its kind.
fn test_index(data: &RunData, row: &SummaryRow) -> Option<usize> {
    let tests = &data.manifest.plan.tests;
    let segments: Vec<&str> = row.cell.split('/').collect();
    let from_id = segments
        .len()
        .checked_sub(3)
        .and_then(|i| segments[i].split_once('-'))
        .and_then(|(index, _)| index.parse::<usize>().ok())
        .filter(|&i| i < tests.len() && kind_name(tests[i].kind) == row.test);
    from_id.or_else(|| tests.iter().position(|t| kind_name(t.kind) == row.test))
}

fn read_cell(
    dir: &Path,
    row: &SummaryRow,
    data: &mut RunData,
    merged: &mut BTreeMap<GroupKey, (Histogram<u64>, u32)>,
) {
    let plan = &data.manifest.plan;
    let broker = plan.brokers.iter().position(|b| b.name == row.broker);
    let scenario = plan.scenarios.iter().position(|s| s.name == row.scenario);
    let (Some(broker), Some(scenario), Some(test)) = (broker, scenario, test_index(data, row))
    else {
        data.problems.push(format!(
            "summary.csv: cell {} names a broker, scenario or test the plan does not have",
            row.cell
        ));
        return;
    };
    data.cell_index.insert(row.cell.clone(), (broker, test));
    let path = dir.join("cells").join(&row.cell).join("result.json");
    let result = match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str::<RunResult>(&text).map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    let result = match result {
        Ok(result) => result,
        Err(problem) => {
            data.problems.push(format!(
                "{}: {problem}; cell left out",
                path.strip_prefix(dir).unwrap_or(&path).display()
            ));
            return;
        }
    };
    let summary = Summary::of(&result);
    let kind = plan.tests[test].kind;
    let point = match kind {
        TestKind::Latency => 0,
        TestKind::Payload => row
            .point
            .parse::<ByteSize>()
            .map_or(summary.payload_bytes, ByteSize::bytes),
        TestKind::Throughput => row
            .point
            .parse::<u64>()
            .unwrap_or(u64::from(summary.publishers)),
    };
    if kind != TestKind::Throughput {
        let key = GroupKey {
            test,
            broker,
            scenario,
            point,
        };
        match merged.get_mut(&key) {
            Some((histogram, reps)) => match histogram.add(&result.latency) {
                Ok(()) => *reps += 1,
                Err(error) => data.problems.push(format!(
                    "cells/{}/result.json: its latency histogram does not merge ({error:?}); left out",
                    row.cell
                )),
            },
            None => {
                merged.insert(key, (result.latency, 1));
            }
        }
    }
    data.cells.push(CellFigures {
        broker,
        scenario,
        test,
        point,
        summary,
    });
}

fn read_metrics(text: &str, data: &mut RunData) {
    let mut lines = text.lines();
    let header = lines.next().map(split_csv_line).unwrap_or_default();
    let names = [
        "cell",
        "unix_ns",
        "node",
        "node_cpu_percent",
        "node_memory_used_bytes",
        "process",
        "process_cpu_percent",
        "process_rss_bytes",
    ];
    let Some(at) = names
        .iter()
        .map(|name| header.iter().position(|h| h == name))
        .collect::<Option<Vec<usize>>>()
    else {
        data.problems
            .push("metrics.csv: its header lacks the expected columns; not used".to_string());
        return;
    };
    let mut bad = 0usize;
    for line in lines.filter(|l| !l.is_empty()) {
        let fields = split_csv_line(line);
        let get = |i: usize| fields.get(at[i]).map(String::as_str).unwrap_or("");
        let row = (|| {
            Some(MetricsRow {
                cell: get(0).to_string(),
                unix_ns: get(1).parse().ok()?,
                node: get(2).to_string(),
                node_cpu_percent: get(3).parse().ok()?,
                node_memory_used_bytes: get(4).parse().ok()?,
                process: get(5).to_string(),
                process_cpu_percent: get(6).parse().ok()?,
                process_rss_bytes: get(7).parse().ok()?,
            })
        })();
        match row {
            Some(row) => data.metrics.push(row),
            None => bad += 1,
        }
    }
    if bad > 0 {
        data.problems.push(format!(
            "metrics.csv: {bad} rows could not be read; left out"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fields_keep_their_commas() {
        assert_eq!(
            split_csv_line("a,\"x, y\",\"say \"\"no\"\"\","),
            vec!["a", "x, y", "say \"no\"", ""]
        );
    }

    #[test]
    fn merged_percentiles_are_in_microseconds() {
        let mut histogram = loadgen::result::new_histogram();
        for ms in 1..=100u64 {
            histogram.record(ms * 1_000_000).expect("in range");
        }
        let group = LatencyGroup::of(&histogram, 2);
        assert_eq!(group.count, 100);
        assert_eq!(group.repetitions, 2);
        assert!((group.p50 - 50_000.0).abs() < 50.0, "{}", group.p50);
        assert!((group.iqr() - 50_000.0).abs() < 100.0, "{}", group.iqr());
        assert_eq!(
            LatencyGroup::of(&loadgen::result::new_histogram(), 0).count,
            0
        );
    }
}
