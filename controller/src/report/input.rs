//! Reading a results folder back: the manifest, each cell's `record.json` (or, in a folder
//! written before records, `summary.csv`, where the last row of a cell wins since `--resume`
//! retries failed cells), each measured cell's `result.json`, and `metrics.csv`.
//!
//! The figures are derived from each cell's checked `result.json`, never taken from a
//! summary stored beside it: the folder is untrusted, and a stored summary would be a second,
//! unchecked source of the same figures.
//!
//! Results are read one cell at a time and only their figures and merged latency
//! histograms are kept, so a study of thousands of cells fits in memory.
//!
//! The folder is untrusted input: cell files are read through [`host::Folder`] (never
//! through a link, never above the folder, regular files only, each under a cap), and each
//! `result.json` passes [`loadgen::result_checks::check`] before anything sums or indexes by
//! it; a cell that fails is left out and named among the report's problems.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hdrhistogram::Histogram;
use host::Folder;
use loadgen::result_checks::{self, MAX_RESULT_FILE_BYTES};
use loadgen::{RunResult, Summary};

use super::ReportError;
use super::timeseries::CellSeries;
use crate::plan::{CellId, CellPoint, MAX_CELLS, Sweep, TestKind, Timing};
use crate::results::usage::BrokerUsage;
use crate::results::{
    self, CellRecord, CellStatus, Manifest, MetricsRow, RECORD_FILE, ResultsError, SummaryRow,
};

/// Everything the report is built from.
#[derive(Debug)]
pub struct RunData {
    /// The run's manifest.
    pub manifest: Manifest,
    /// Figures of every measured cell whose result could be read.
    pub cells: Vec<CellFigures>,
    /// Latency of the latency and payload tests, merged over repetitions.
    pub latency: BTreeMap<GroupKey, LatencyGroup>,
    /// Their transit latency (from the actual send), merged the same way; absent for groups
    /// whose results predate it.
    pub transit_latency: BTreeMap<GroupKey, LatencyGroup>,
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
    /// Where each measured cell sits in the plan, by cell id, for attributing metrics.
    pub cell_index: BTreeMap<String, CellPlace>,
    /// Saturation cells: what each search found.
    pub searches: Vec<SearchFigures>,
}

/// A saturation cell: its search and, when a rate was sustained, the probe at that rate.
#[derive(Debug, Clone)]
pub struct SearchFigures {
    /// Index into the plan's brokers.
    pub broker: usize,
    /// Index into the plan's scenarios.
    pub scenario: usize,
    /// Index into the plan's tests.
    pub test: usize,
    /// Client pairs.
    pub point: u64,
    /// 1-based repetition.
    pub repetition: u32,
    /// The search's probes and outcome.
    pub report: loadgen::saturation::SaturationReport,
    /// What the controller added to the cell (broker usage at the rate found).
    pub extras: CellExtras,
}

/// What the controller recorded about a cell beside loadgen's figures (`summary.csv`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellExtras {
    /// The broker's mean CPU over the cell's window, percent of one core.
    pub broker_cpu_percent: Option<f64>,
    /// The broker's CPU per delivered message, µs.
    pub broker_cpu_us_per_delivery: Option<f64>,
    /// The broker's peak resident memory, MB.
    pub broker_peak_rss_mb: Option<f64>,
    /// Why the generator, not the broker, was the limit.
    pub generator_limit: Option<String>,
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
    /// 1-based repetition.
    pub repetition: u32,
    /// The workload as the cell ran it (from its result).
    pub spec: loadgen::WorkloadSpec,
    /// Everything loadgen derives from the cell's result.
    pub summary: Summary,
    /// What the controller recorded beside it.
    pub extras: CellExtras,
    /// Timed cells: rates over time.
    pub series: Option<CellSeries>,
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
    kind.name()
}

/// Where a measured cell sits in the plan, for attributing its metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellPlace {
    /// Index into the plan's brokers.
    pub broker: usize,
    /// Index into the plan's tests.
    pub test: usize,
}

impl CellExtras {
    fn of(record: &CellRecord) -> Self {
        let usage = record.usage.as_ref();
        CellExtras {
            broker_cpu_percent: usage.map(|u| u.cpu_percent),
            broker_cpu_us_per_delivery: usage.and_then(|u| u.cpu_us_per_delivery),
            broker_peak_rss_mb: usage.map(|u| u.peak_rss_mb),
            generator_limit: record.generator_limit.clone().filter(|r| !r.is_empty()),
        }
    }
}

/// A row of `summary.csv` as the record it was exported from, for a folder written before
/// cells had records: ids, status and the controller's extras (the figures are derived from
/// `result.json`, as for every folder).
fn record_of_row(row: SummaryRow) -> CellRecord {
    let usage = row.broker_cpu_percent.map(|cpu_percent| BrokerUsage {
        cpu_percent,
        cpu_us_per_delivery: row.broker_cpu_us_per_delivery,
        peak_rss_mb: row.broker_peak_rss_mb.unwrap_or(0.0),
        samples: row.broker_samples.unwrap_or(0),
    });
    CellRecord {
        cell: row.cell,
        broker: row.broker,
        scenario: row.scenario,
        test: row.test,
        point: row.point,
        repetition: row.repetition,
        status: row.status,
        reason: row.reason,
        earlier_failures: 0,
        spec: None,
        summary: None,
        usage,
        generator_limit: row.limit_reason,
        saturation: None,
    }
}

/// A problem with a file of the folder, naming it as `name` (relative to the folder, so the
/// same folder gives the same report wherever it lies).
fn problem_in(name: &str, error: &ResultsError) -> String {
    match error {
        ResultsError::Row {
            line,
            column,
            value,
            problem,
            ..
        } => format!("{name} line {line}: column {column} = {value:?}: {problem}; left out"),
        ResultsError::Format { problem, .. } => format!("{name}: {problem}; left out"),
        ResultsError::Io { source, .. } => format!("{name}: {source}; left out"),
        ResultsError::Folder(error) => format!("{name}: {}; left out", error.problem()),
    }
}

/// Reads the folder.
pub fn load(dir: &Path) -> Result<RunData, ReportError> {
    let manifest = Manifest::read(&dir.join("manifest.json"))?;
    let folder = Folder::open(dir).map_err(ResultsError::from)?;
    let mut data = RunData {
        manifest,
        cells: Vec::new(),
        latency: BTreeMap::new(),
        transit_latency: BTreeMap::new(),
        failed: Vec::new(),
        skipped: Vec::new(),
        retried: 0,
        problems: Vec::new(),
        metrics: Vec::new(),
        cell_index: BTreeMap::new(),
        searches: Vec::new(),
    };
    let records = if data.manifest.cell_records {
        recorded_cells(dir, &folder, &mut data)
    } else {
        exported_cells(dir, &mut data)?
    };
    let mut merged: BTreeMap<GroupKey, Merged> = BTreeMap::new();
    for record in records.values() {
        let note = || CellNote {
            cell: record.cell.clone(),
            broker: record.broker.clone(),
            scenario: record.scenario.clone(),
            reason: record.reason.clone(),
        };
        match record.status {
            CellStatus::Ok => read_cell(&folder, record, &mut data, &mut merged),
            CellStatus::Failed => data.failed.push(note()),
            CellStatus::Skipped => data.skipped.push(note()),
        }
    }
    data.transit_latency = merged
        .iter()
        .filter(|(_, m)| !m.transit.is_empty())
        .map(|(key, m)| (*key, LatencyGroup::of(&m.transit, m.repetitions)))
        .collect();
    data.latency = merged
        .into_iter()
        .map(|(key, m)| (key, LatencyGroup::of(&m.histogram, m.repetitions)))
        .collect();
    match results::read_each_sample(&dir.join("metrics.csv")) {
        Ok(Some(samples)) => {
            let mut bad = 0usize;
            for sample in samples {
                match sample {
                    Ok(sample) => data.metrics.push(sample),
                    Err(_) => bad += 1,
                }
            }
            if bad > 0 {
                data.problems.push(format!(
                    "metrics.csv: {bad} rows could not be read; left out"
                ));
            }
        }
        Ok(None) => {}
        // Samples only add to the report: a file of another layout is named, not fatal.
        Err(error @ ResultsError::Format { .. }) => {
            data.problems.push(problem_in("metrics.csv", &error));
        }
        Err(error) => return Err(error.into()),
    }
    Ok(data)
}

/// Latency histograms of one group, merged over repetitions.
struct Merged {
    histogram: Histogram<u64>,
    transit: Histogram<u64>,
    repetitions: u32,
}

/// Each cell's `record.json`, by cell id, for the cells of the manifest's plan; counts cells
/// that failed before they succeeded. A record that cannot be read, or that names another
/// cell, is left out and named.
fn recorded_cells(dir: &Path, folder: &Folder, data: &mut RunData) -> BTreeMap<String, CellRecord> {
    let mut records = BTreeMap::new();
    // The manifest is read back from the folder, never validated: a plan no run would accept
    // must not make the report list billions of cells.
    if data
        .manifest
        .plan
        .checked_cell_count()
        .is_none_or(|cells| cells > MAX_CELLS)
    {
        data.problems.push(format!(
            "manifest.json: its plan has more than {MAX_CELLS} cells, which no run makes; no cell read"
        ));
        return records;
    }
    for cell in data.manifest.plan.cells() {
        let id = cell.id(&data.manifest.plan);
        let name = format!("cells/{id}/{RECORD_FILE}");
        match results::read_record(folder, &id) {
            Ok(Some(record)) if record.cell == id => {
                records.insert(id, record);
            }
            Ok(Some(record)) => data.problems.push(format!(
                "{name}: it is the record of cell {:?}; cell left out",
                record.cell
            )),
            Ok(None) => {}
            Err(error) => data.problems.push(problem_in(&name, &error)),
        }
    }
    // A cell that summary.csv, the records' export, lists but whose record is gone (a folder
    // copied in part, a cell folder deleted) is named rather than left out in silence.
    let exported = results::read_each_row(&dir.join("summary.csv"))
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut named = BTreeSet::new();
    for row in exported.into_iter().flatten() {
        if !records.contains_key(&row.cell) && named.insert(row.cell.clone()) {
            data.problems.push(format!(
                "cells/{}/{RECORD_FILE}: missing, though summary.csv lists the cell; cell left out",
                row.cell
            ));
        }
    }
    if records.is_empty() {
        data.problems
            .push("no cell has a record.json: no cell has been recorded yet".to_string());
    }
    data.retried = records
        .values()
        .filter(|record| record.status == CellStatus::Ok && record.earlier_failures > 0)
        .count();
    records
}

/// The cells of a folder written before records, from `summary.csv`: the last row of each
/// cell, by cell id (`--resume` retries failed cells); counts cells that failed before they
/// succeeded.
fn exported_cells(
    dir: &Path,
    data: &mut RunData,
) -> Result<BTreeMap<String, CellRecord>, ReportError> {
    let Some(rows) = results::read_each_row(&dir.join("summary.csv"))? else {
        data.problems
            .push("summary.csv is absent: no cell has been recorded yet".to_string());
        return Ok(BTreeMap::new());
    };
    let mut last: BTreeMap<String, CellRecord> = BTreeMap::new();
    let mut failed_before: BTreeSet<String> = BTreeSet::new();
    for row in rows {
        match row {
            Ok(row) => {
                if row.status == CellStatus::Failed {
                    failed_before.insert(row.cell.clone());
                }
                last.insert(row.cell.clone(), record_of_row(row));
            }
            Err(error) => data.problems.push(problem_in("summary.csv", &error)),
        }
    }
    data.retried = last
        .values()
        .filter(|record| record.status == CellStatus::Ok && failed_before.contains(&record.cell))
        .count();
    Ok(last)
}

/// The test a cell belongs to: the index in its cell id, or the plan's first test of its
/// kind.
fn test_index(data: &RunData, row: &CellRecord) -> Option<usize> {
    let tests = &data.manifest.plan.tests;
    let from_id = row
        .cell
        .parse::<CellId>()
        .ok()
        .map(|id| id.test)
        .filter(|&i| i < tests.len() && tests[i].kind == row.test);
    from_id.or_else(|| tests.iter().position(|t| t.kind == row.test))
}

/// Largest `saturation.json` read: a search of hundreds of probes fits many times over.
const MAX_SEARCH_FILE_BYTES: u64 = 16 << 20;

fn read_cell(
    folder: &Folder,
    row: &CellRecord,
    data: &mut RunData,
    merged: &mut BTreeMap<GroupKey, Merged>,
) {
    let plan = &data.manifest.plan;
    let broker = plan.brokers.iter().position(|b| b.name == row.broker);
    let scenario = plan.scenarios.iter().position(|s| s.name == row.scenario);
    let (Some(broker), Some(scenario), Some(test)) = (broker, scenario, test_index(data, row))
    else {
        let source = if data.manifest.cell_records {
            format!("cells/{}/{RECORD_FILE}", row.cell)
        } else {
            "summary.csv".to_string()
        };
        data.problems.push(format!(
            "{source}: cell {} names a broker, scenario or test the plan does not have",
            row.cell
        ));
        return;
    };
    data.cell_index
        .insert(row.cell.clone(), CellPlace { broker, test });
    let kind = plan.tests[test].kind;
    let extras = CellExtras::of(row);
    // A cell id that is absolute or has `..` is refused by the folder, as are links in it.
    let read_json = |name: &str, cap: u64| -> Result<Option<String>, String> {
        let relative = Path::new("cells").join(&row.cell).join(name);
        match folder.read(&relative, cap) {
            Ok(Some(bytes)) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| "not UTF-8 text".to_string()),
            Ok(None) => Ok(None),
            Err(error) => Err(error.problem()),
        }
    };
    let left_out = |data: &mut RunData, name: &str, problem: String| {
        data.problems.push(format!(
            "cells/{}/{name}: {problem}; cell left out",
            row.cell
        ));
    };
    if kind.timing() == Timing::Searched {
        let report = match read_json("saturation.json", MAX_SEARCH_FILE_BYTES) {
            Ok(Some(text)) => serde_json::from_str(&text).map_err(|e| e.to_string()),
            Ok(None) => Err("missing".to_string()),
            Err(problem) => Err(problem),
        };
        match report {
            Ok(report) => data.searches.push(SearchFigures {
                broker,
                scenario,
                test,
                point: match row.point {
                    CellPoint::Clients(pairs) => u64::from(pairs),
                    _ => 0,
                },
                repetition: row.repetition,
                report,
                extras,
            }),
            Err(problem) => left_out(data, "saturation.json", problem),
        }
        return;
    }
    let result = match read_json("result.json", MAX_RESULT_FILE_BYTES) {
        Ok(Some(text)) => serde_json::from_str::<RunResult>(&text)
            .map_err(|e| e.to_string())
            .and_then(|result| {
                result_checks::check(&result)
                    .map(|()| result)
                    .map_err(|e| e.to_string())
            }),
        Ok(None) => Err("missing".to_string()),
        Err(problem) => Err(problem),
    };
    let result = match result {
        Ok(result) => result,
        Err(problem) => {
            left_out(data, "result.json", problem);
            return;
        }
    };
    let summary = Summary::of(&result);
    let series = CellSeries::of(&result);
    let point = match kind.sweep() {
        Sweep::Single => 0,
        Sweep::Payloads => match row.point {
            CellPoint::Payload(size) => size.bytes(),
            _ => summary.payload_bytes,
        },
        Sweep::Clients => match row.point {
            CellPoint::Clients(pairs) => u64::from(pairs),
            _ => u64::from(summary.publishers),
        },
    };
    if !kind.sweeps_clients() {
        let key = GroupKey {
            test,
            broker,
            scenario,
            point,
        };
        match merged.get_mut(&key) {
            Some(group) => match group
                .histogram
                .add(&result.latency)
                .and_then(|()| group.transit.add(&result.transit_latency))
            {
                Ok(()) => group.repetitions += 1,
                Err(error) => data.problems.push(format!(
                    "cells/{}/result.json: its latency histogram does not merge ({error:?}); left out",
                    row.cell
                )),
            },
            None => {
                merged.insert(
                    key,
                    Merged {
                        histogram: result.latency,
                        transit: result.transit_latency,
                        repetitions: 1,
                    },
                );
            }
        }
    }
    data.cells.push(CellFigures {
        broker,
        scenario,
        test,
        point,
        repetition: row.repetition,
        spec: result.spec.clone(),
        summary,
        extras,
        series,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
