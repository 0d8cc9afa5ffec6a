//! [`ResultsDir`]: a run's results folder, written as each cell ends, through
//! [`host::Folder`] (no link inside it followed, files replaced by rename).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use host::Folder;
use loadgen::RunResult;

// manifest.rs reads its file through here.
use super::summary::read_each_row;
use super::usage::BrokerUsage;
use super::{CellRecord, CellStatus, Manifest, MetricsRow, ResultsError, SummaryRow, csv_file};

/// Largest `manifest.json` read, 16 MiB: a plan, its text and the records of a testbed of
/// hundreds of nodes fit many times over.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// A cell's record, in its folder under `cells/`.
pub const RECORD_FILE: &str = "record.json";

/// Largest `record.json` read: a record is a few kilobytes (its histograms are in
/// `result.json`).
pub const MAX_RECORD_BYTES: u64 = 4 << 20;

/// The `record.json` of cell `cell` in `folder`, `None` when the cell has none; read
/// through the folder (no link followed, capped) and parsed, the error naming the file.
pub fn read_record(folder: &Folder, cell: &str) -> Result<Option<CellRecord>, ResultsError> {
    let relative = cell_path(folder.path(), cell)?.join(RECORD_FILE);
    let Some(bytes) = folder.read(&relative, MAX_RECORD_BYTES)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| ResultsError::Format {
            path: relative.display().to_string(),
            problem: error.to_string(),
        })
}

/// A run's results folder.
#[derive(Debug, Clone)]
pub struct ResultsDir {
    dir: PathBuf,
    folder: Arc<Folder>,
}

fn json_error(path: &Path) -> impl FnOnce(serde_json::Error) -> ResultsError + '_ {
    move |error| ResultsError::Format {
        path: path.display().to_string(),
        problem: error.to_string(),
    }
}

impl ResultsDir {
    /// Creates (or reopens, for `--resume`) the folder. A new folder is private (`0700`, its
    /// files `0600`) when the folder it is created in is.
    pub fn open(dir: &Path) -> Result<Self, ResultsError> {
        let folder = Folder::create(dir)?;
        folder.create_folder(Path::new("cells"))?;
        Ok(ResultsDir {
            dir: dir.to_path_buf(),
            folder: Arc::new(folder),
        })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The folder of one cell's files, refused unless it lies inside `cells/`: a cell id is
    /// made of plan names, and a name that slipped past validation must not write elsewhere.
    pub fn cell_dir(&self, cell: &str) -> Result<PathBuf, ResultsError> {
        Ok(self.dir.join(cell_path(&self.dir, cell)?))
    }

    /// `summary.csv`.
    pub fn summary_path(&self) -> PathBuf {
        self.dir.join("summary.csv")
    }

    /// Writes the manifest (replacing an earlier one).
    pub fn write_manifest(&self, manifest: &Manifest) -> Result<(), ResultsError> {
        let path = self.dir.join("manifest.json");
        let json = serde_json::to_string_pretty(manifest).map_err(json_error(&path))?;
        Ok(self.folder.replace("manifest.json", json.as_bytes())?)
    }

    /// Reads the manifest.
    pub fn read_manifest(&self) -> Result<Manifest, ResultsError> {
        Manifest::read(&self.dir.join("manifest.json"))
    }

    /// Records a finished cell: its raw result and histogram first, then its `record.json`,
    /// then its summary row, so a row never points at files that are not there. Each file is
    /// written whole and synced before the rename, and the folder after it, so a power loss
    /// cannot leave a summary row (synced on append) naming an empty result that resume
    /// would then skip. The record counts the failed tries it replaces.
    pub fn record(
        &self,
        record: &CellRecord,
        result: Option<&RunResult>,
        search: Option<&loadgen::saturation::SaturationReport>,
    ) -> Result<(), ResultsError> {
        let relative = cell_path(&self.dir, &record.cell)?;
        let cell = self.folder.create_folder(&relative)?;
        if let Some(search) = search {
            let path = cell.path().join("saturation.json");
            let json = serde_json::to_string_pretty(search).map_err(json_error(&path))?;
            cell.replace("saturation.json", json.as_bytes())?;
        }
        if let Some(result) = result {
            let path = cell.path().join("result.json");
            let json = serde_json::to_string(result).map_err(json_error(&path))?;
            cell.replace("result.json", json.as_bytes())?;
            let hgrm = loadgen::output::percentile_distribution(&result.latency, 1e6);
            cell.replace("latency.hgrm", hgrm.as_bytes())?;
            match loadgen::interval_log::latency_log(result) {
                Ok(log) => cell.replace("latency.hlog", log.as_bytes())?,
                // The result and its percentiles are kept; only the time series is missing.
                Err(error) => tracing::warn!(%error, cell = %record.cell, "no latency.hlog"),
            }
        }
        let earlier_failures = match read_record(&self.folder, &record.cell) {
            Ok(Some(earlier)) if earlier.status == CellStatus::Failed => {
                earlier.earlier_failures.saturating_add(1)
            }
            Ok(Some(earlier)) => earlier.earlier_failures,
            Ok(None) => 0,
            Err(error) => {
                tracing::warn!(%error, "the cell's earlier record; its tries are counted from here");
                0
            }
        };
        let record = CellRecord {
            earlier_failures,
            usage: record.usage.map(BrokerUsage::as_published),
            ..record.clone()
        };
        let path = cell.path().join(RECORD_FILE);
        let json = serde_json::to_string_pretty(&record).map_err(json_error(&path))?;
        cell.replace(RECORD_FILE, json.as_bytes())?;
        csv_file::append(&self.folder, "summary.csv", &[SummaryRow::of(&record)])
    }

    /// Appends metrics samples.
    pub fn record_metrics(&self, rows: &[MetricsRow]) -> Result<(), ResultsError> {
        csv_file::append(&self.folder, "metrics.csv", rows)
    }

    /// Cells already in `summary.csv` with status ok or skipped: a resumed run skips them
    /// (failed cells are tried again, and so are cells whose row cannot be read).
    pub fn finished_cells(&self) -> Result<HashSet<String>, ResultsError> {
        let rows = read_each_row(&self.summary_path())?.unwrap_or_default();
        let mut finished = HashSet::new();
        for row in rows {
            match row {
                Ok(row) if row.status != CellStatus::Failed => {
                    finished.insert(row.cell);
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "a summary row; its cell runs again"),
            }
        }
        Ok(finished)
    }
}

/// Closes `dir` (created when missing) to group and others (`0700`): a results folder
/// created in it is private too, and so is every folder and file written in that
/// (`0700`, `0600`). `controller serve` keeps its runs' root so: results are the submitter's.
pub fn close_to_others(dir: &Path) -> Result<(), ResultsError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let io = |source| ResultsError::Io {
        path: dir.display().to_string(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)
}

/// `cells/<cell>`, refused unless every step of the id is a plain name.
pub(crate) fn cell_path(dir: &Path, cell: &str) -> Result<PathBuf, ResultsError> {
    let relative = Path::new(cell);
    let inside = !cell.is_empty()
        && relative
            .components()
            .all(|step| matches!(step, std::path::Component::Normal(_)));
    if !inside {
        return Err(ResultsError::Format {
            path: dir.join("cells").display().to_string(),
            problem: format!("cell id {cell:?} is not a path inside the run's cells folder"),
        });
    }
    Ok(Path::new("cells").join(relative))
}

#[cfg(test)]
mod tests {
    use loadgen::Summary;

    use super::*;
    use crate::plan::TestKind;

    #[test]
    fn a_cell_id_that_would_leave_the_cells_folder_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let results = ResultsDir::open(dir.path()).expect("open");
        for id in ["../../escaped/x", "/etc/x", "b/../../x", ""] {
            let error = results.cell_dir(id).expect_err(id).to_string();
            assert!(error.contains("not a path inside"), "{id}: {error}");
        }
        let inside = results.cell_dir("b/local/0-latency/-/1").expect("inside");
        assert!(inside.starts_with(dir.path().join("cells")));
    }

    #[test]
    fn rows_append_and_finished_cells_are_known_for_resume() {
        let dir = tempfile::tempdir().expect("temp dir");
        let results = ResultsDir::open(dir.path()).expect("open");
        let spec = loadgen::presets::latency();
        let mut result = RunResult::empty(&spec, "r");
        result.shards.push(spec.effective_shard());
        let record = |cell: &str, status, summary| CellRecord {
            cell: cell.to_string(),
            broker: "b".into(),
            scenario: "local".into(),
            test: TestKind::Latency,
            point: crate::plan::CellPoint::Single,
            repetition: 1,
            status,
            reason: String::new(),
            earlier_failures: 0,
            spec: None,
            summary,
            usage: None,
            generator_limit: None,
            saturation: None,
        };
        let ok = record(
            "b/local/0-latency/-/1",
            CellStatus::Ok,
            Some(Summary::of(&result)),
        );
        results.record(&ok, Some(&result), None).expect("ok row");
        let failed = record("b/local/0-latency/-/2", CellStatus::Failed, None);
        results.record(&failed, None, None).expect("failed row");
        let skipped = record("b/edge/0-latency/-/1", CellStatus::Skipped, None);
        results.record(&skipped, None, None).expect("skipped row");
        let rows = super::super::read_rows(&results.summary_path()).expect("read");
        assert_eq!(rows, [&ok, &failed, &skipped].map(SummaryRow::of));
        let mut raw = csv::Reader::from_path(results.summary_path()).expect("read");
        let header = raw.headers().expect("header").clone();
        assert_eq!(
            header.iter().take(8).collect::<Vec<_>>(),
            SummaryRow::REQUIRED_COLUMNS
        );
        assert!(
            raw.records()
                .all(|row| row.is_ok_and(|row| row.len() == header.len())),
            "every row has every column"
        );
        let done = results.finished_cells().expect("finished");
        assert!(done.contains("b/local/0-latency/-/1") && done.contains("b/edge/0-latency/-/1"));
        assert!(
            !done.contains("b/local/0-latency/-/2"),
            "failed cells run again"
        );
        assert!(
            dir.path()
                .join("cells/b/local/0-latency/-/1/result.json")
                .exists()
        );
        // Every cell has its record, read back as written.
        let folder = Folder::open(dir.path()).expect("folder");
        for written in [&ok, &failed, &skipped] {
            let read = read_record(&folder, &written.cell).expect("readable");
            assert_eq!(read.as_ref(), Some(written), "{}", written.cell);
        }
        // A cell tried again after failing counts the tries it replaces.
        results.record(&failed, None, None).expect("failed again");
        let measured = CellRecord {
            status: CellStatus::Ok,
            summary: Some(Summary::of(&result)),
            ..failed.clone()
        };
        results
            .record(&measured, Some(&result), None)
            .expect("measured at last");
        let read = read_record(&folder, &failed.cell).expect("readable");
        assert_eq!(
            read.map(|r| (r.status, r.earlier_failures)),
            Some((CellStatus::Ok, 2))
        );
        assert_eq!(
            read_record(&folder, "b/none/0-latency/-/1").expect("absent"),
            None
        );
        assert!(
            read_record(&folder, "../x").is_err(),
            "an id outside cells/ is refused"
        );
    }

    #[test]
    fn an_unreadable_row_is_named_and_its_cell_runs_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let results = ResultsDir::open(dir.path()).expect("open");
        let header = "cell,broker,scenario,test,point,repetition,status,reason";
        let text = format!(
            "{header}\na/l/0-latency/-/1,a,l,latency,-,1,ok,\na/l/0-latency/-/2,a,l,latency,-,two,ok,\n"
        );
        std::fs::write(results.summary_path(), text).expect("write");
        let done = results.finished_cells().expect("finished");
        assert_eq!(done, HashSet::from(["a/l/0-latency/-/1".to_string()]));
        let error = super::super::read_rows(&results.summary_path()).expect_err("bad row");
        let error = error.to_string();
        assert!(
            error.ends_with(
                "summary.csv line 3: column repetition = \"two\": invalid digit found in string"
            ),
            "{error}"
        );
    }
}
