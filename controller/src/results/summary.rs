//! What a cell is recorded with ([`CellRecord`], each cell's `record.json`) and how the rows
//! of `summary.csv`, its export, are read back ([`read_rows`]), typed through [`SummaryRow`].

use std::path::Path;

use loadgen::{Summary, WorkloadSpec};
use serde::{Deserialize, Serialize};

use super::usage::BrokerUsage;
use super::{ResultsError, SummaryRow, csv_file};
use crate::plan::{CellPoint, TestKind};

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellStatus {
    /// Measured.
    Ok,
    /// Tried and failed (reason given).
    Failed,
    /// Not run (reason given), e.g. a scenario this testbed cannot emulate.
    Skipped,
}

impl CellStatus {
    /// As written in the CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Ok => "ok",
            CellStatus::Failed => "failed",
            CellStatus::Skipped => "skipped",
        }
    }
}

/// A finished cell as the run records it: its ids, how it ended, the workload it ran,
/// loadgen's figures and what the controller measured beside them. Written once, as the
/// cell's `record.json`, and exported as one [`SummaryRow`] of `summary.csv`; its raw result
/// (the histograms) is the cell's `result.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    /// Cell id.
    pub cell: String,
    /// Broker name.
    pub broker: String,
    /// Scenario name.
    pub scenario: String,
    /// Test kind.
    pub test: TestKind,
    /// Sweep point.
    pub point: CellPoint,
    /// 1-based repetition.
    pub repetition: u32,
    /// How it ended.
    pub status: CellStatus,
    /// Why it failed or was skipped.
    pub reason: String,
    /// Tries of this cell that failed before this one (a resumed run tries a failed cell
    /// again).
    #[serde(default)]
    pub earlier_failures: u32,
    /// The workload as run (its broker address and shard filled in; never a password), when
    /// measured.
    #[serde(default)]
    pub spec: Option<WorkloadSpec>,
    /// The figures, when measured.
    pub summary: Option<Summary>,
    /// The broker's CPU and memory over the cell's window, when its node sampled them.
    pub usage: Option<BrokerUsage>,
    /// Why the generator, not the broker, was the limit of this cell.
    pub generator_limit: Option<String>,
    /// A saturation cell's outcome.
    pub saturation: Option<SaturationRecord>,
}

/// What a saturation search found, in `summary.csv` (its probes are in the cell's
/// `saturation.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaturationRecord {
    /// The highest offered rate sustained, msg/s.
    pub rate: Option<u64>,
    /// Deliveries per second at that rate.
    pub delivered_msgs_per_s: Option<f64>,
    /// The lowest offered rate not sustained.
    pub failed_rate: Option<u64>,
    /// Why the search ended.
    pub end: loadgen::saturation::SearchEnd,
    /// Probes run.
    pub probes: usize,
}

impl SaturationRecord {
    /// The record of a search's report.
    pub fn of(report: &loadgen::saturation::SaturationReport) -> Self {
        SaturationRecord {
            rate: report.rate,
            delivered_msgs_per_s: report.delivered_msgs_per_s,
            failed_rate: report.failed_rate,
            end: report.end,
            probes: report.probes.len(),
        }
    }
}

/// Every row of the `summary.csv` at `path`, in file order; the first row that cannot be
/// read is the error (naming the file, line, column and value).
pub fn read_rows(path: &Path) -> Result<Vec<SummaryRow>, ResultsError> {
    match read_each_row(path)? {
        Some(rows) => rows.into_iter().collect(),
        None => Err(ResultsError::Io {
            path: path.display().to_string(),
            source: std::io::ErrorKind::NotFound.into(),
        }),
    }
}

/// Every row of the `summary.csv` at `path`, each read or why not, so a reader can use the
/// good rows and name the bad ones; `None` when the file does not exist (no cell recorded).
pub fn read_each_row(
    path: &Path,
) -> Result<Option<Vec<Result<SummaryRow, ResultsError>>>, ResultsError> {
    csv_file::read(path, &SummaryRow::REQUIRED_COLUMNS)
}
