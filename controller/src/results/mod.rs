//! The results folder of a run, written as each cell ends so an interrupted run loses
//! nothing and `--resume` knows what is done.
//!
//! ```text
//! <dir>/manifest.json            plan, versions, nodes (Info, clock offset ± bound), netem
//!                                asked and read back (numbers with units)
//! <dir>/summary.csv              the records' export, one row per try of a cell: ids, status,
//!                                every loadgen figure, then the broker's CPU and memory over
//!                                the cell, who was the limit, and a saturation search's outcome
//! <dir>/metrics.csv              node and broker CPU/memory samples taken during each cell
//! <dir>/cells/<cell id>/record.json  the cell's [`CellRecord`]: how it ended, the workload as
//!                                run, loadgen's figures, the controller's extras, earlier
//!                                failed tries (the report and the glance read these)
//! <dir>/cells/<cell id>/result.json   the raw, mergeable loadgen result (histograms inside)
//! <dir>/cells/<cell id>/latency.hgrm  HdrHistogram percentile text of its latency
//! <dir>/cells/<cell id>/saturation.json  a saturation search's probes and outcome
//! <dir>/report.md, report.html   written at the end (and by `controller report DIR`)
//! ```
//! A cell id is `broker/scenario/<test index>-<kind>/<point>/<repetition>`, lower case.
//!
//! A results folder is untrusted input (it may come from anywhere, and the controller runs as
//! root): every file in it is read and written through [`host::Folder`], so no link inside it
//! is followed, only regular files are read and each only up to a cap, and files are replaced
//! by renaming a new file over them. A folder closed to others (`0700`, as `serve` keeps its
//! runs) gets `0700` folders and `0600` files.
//!
//! Each CSV file is written and read through one serde row type: [`SummaryRow`] for
//! `summary.csv`, [`MetricsRow`] for `metrics.csv`.
//!
//! # Layout
//! - `folder.rs`: [`ResultsDir`], writing a cell's files and rows, and what a resume skips.
//! - `manifest.rs`: [`Manifest`] and its records, netem as [`NetemRecord`].
//! - `summary.rs`: [`CellRecord`] (a finished cell, its `record.json`) and [`read_rows`].
//! - `row.rs`: [`SummaryRow`], the columns of `summary.csv`.
//! - `csv_file.rs`: appending and reading rows of a row type, the one CSV code.
//! - `in_place.rs`: opening one file of the folder to read, never through a link, up to a cap.
//! - `fields.rs`: how lists, error counts, verdicts and rounded numbers sit in one field.
//! - [`usage`]: [`MetricsRow`], the samples of `metrics.csv`, and the broker's CPU and
//!   memory over a cell's window from them.

mod csv_file;
mod fields;
mod folder;
mod in_place;
mod manifest;
mod row;
pub mod summary;
pub mod usage;

pub use fields::{ErrorCounts, TextList};
pub use folder::{MAX_RECORD_BYTES, RECORD_FILE, ResultsDir, close_to_others, read_record};
pub use manifest::{
    AppliedNetem, BrokerRecord, ClusterNode, ClusterRecord, Manifest, NetemRecord, NodeRecord,
    OverlayPeer, OverlayRecord, PathRecord, TestbedRecord,
};
pub use row::SummaryRow;
pub use summary::{CellRecord, CellStatus, SaturationRecord, read_each_row, read_rows};
pub use usage::{MetricsRow, read_each_sample};

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
    /// A file or folder inside the results folder is a link, not a regular file, too large,
    /// or could not be opened beneath it.
    #[error(transparent)]
    Folder(#[from] host::FolderError),
    /// A field of a CSV row is not what this version writes.
    #[error("{path} line {line}: column {column} = {value:?}: {problem}")]
    Row {
        /// The file.
        path: String,
        /// Its line (1 is the header).
        line: u64,
        /// The column's name.
        column: String,
        /// The field as written.
        value: String,
        /// What is wrong with it.
        problem: String,
    },
}
