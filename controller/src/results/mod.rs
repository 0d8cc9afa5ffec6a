//! The results folder of a run, written as each cell ends so an interrupted run loses
//! nothing and `--resume` knows what is done.
//!
//! ```text
//! <dir>/manifest.json            plan, versions, nodes (Info, clock offset ± bound), netem
//!                                asked and read back (numbers with units)
//! <dir>/summary.csv              one row per cell: ids, status, every loadgen figure, then the
//!                                broker's CPU and memory over the cell, who was the limit,
//!                                and a saturation search's outcome
//! <dir>/metrics.csv              node and broker CPU/memory samples taken during each cell
//! <dir>/cells/<cell id>/result.json   the raw, mergeable loadgen result (histograms inside)
//! <dir>/cells/<cell id>/latency.hgrm  HdrHistogram percentile text of its latency
//! <dir>/cells/<cell id>/saturation.json  a saturation search's probes and outcome
//! <dir>/report.md, report.html   written at the end (and by `controller report DIR`)
//! ```
//! A cell id is `broker/scenario/<test index>-<kind>/<point>/<repetition>`, lower case.

mod manifest;
mod summary;
pub mod usage;

pub use manifest::{
    AppliedNetem, BrokerRecord, ClusterNode, ClusterRecord, Manifest, NetemRecord, NodeRecord,
    OverlayPeer, OverlayRecord, TestbedRecord,
};
pub use summary::{
    CellRecord, CellStatus, MetricsRow, ResultsDir, SUMMARY_CELL_COLUMNS, SUMMARY_FIXED_COLUMNS,
    SaturationRecord, split_csv_line,
};

/// Results could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file's content is not what this version writes.
    #[error("{path}: {problem}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
}
