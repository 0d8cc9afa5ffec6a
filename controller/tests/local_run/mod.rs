//! A plan run end to end in a temporary results folder, and what the run wrote there: the
//! tests that drive a whole study through the in-process agent share this.

use std::path::PathBuf;

use controller::plan::Plan;
use controller::results::{self, CellRecord, SummaryRow};
use controller::run::{RunOptions, run_plan};
use tokio_util::sync::CancellationToken;

/// A finished run: its folder (removed with this value) and its `summary.csv` rows.
pub struct LocalRun {
    _work: tempfile::TempDir,
    /// The run's results folder.
    pub dir: PathBuf,
    /// One row per cell.
    pub rows: Vec<SummaryRow>,
}

impl LocalRun {
    /// Runs `plan` (a plan's text without `results_dir`), named `origin` in errors.
    pub async fn of(plan: &str, origin: &str) -> LocalRun {
        let work = tempfile::tempdir().expect("temp dir");
        let text = format!(
            "results_dir = \"{}\"\n{plan}",
            work.path().join("results").display()
        );
        let parsed = Plan::parse(&text, origin).expect("a valid plan");
        let summary = run_plan(
            &parsed,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        )
        .await
        .expect("the run completes");
        let rows = results::read_rows(&summary.dir.join("summary.csv")).expect("summary.csv");
        LocalRun {
            _work: work,
            dir: summary.dir,
            rows,
        }
    }

    /// A file of the run's folder, as text.
    pub fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The record of cell `cell`.
    // Not every test that runs a plan reads a cell's record.
    #[allow(dead_code)]
    pub fn record(&self, cell: &str) -> CellRecord {
        serde_json::from_str(&self.text(&format!("cells/{cell}/record.json"))).expect("a record")
    }
}
