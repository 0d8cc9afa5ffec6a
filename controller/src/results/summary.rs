//! `summary.csv`, `metrics.csv` and the per-cell files, appended as each cell ends.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use loadgen::{RunResult, Summary};
use serde::{Deserialize, Serialize};

use super::usage::BrokerUsage;
use super::{Manifest, ResultsError};

/// The columns every summary row starts with; loadgen's figures follow.
pub const SUMMARY_FIXED_COLUMNS: [&str; 8] = [
    "cell",
    "broker",
    "scenario",
    "test",
    "point",
    "repetition",
    "status",
    "reason",
];

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

/// One row of `summary.csv`.
#[derive(Debug, Clone)]
pub struct CellRecord {
    /// Cell id.
    pub cell: String,
    /// Broker name.
    pub broker: String,
    /// Scenario name.
    pub scenario: String,
    /// Test kind (latency, payload, throughput).
    pub test: String,
    /// Sweep point (`-`, a payload size, a number of pairs).
    pub point: String,
    /// 1-based repetition.
    pub repetition: u32,
    /// How it ended.
    pub status: CellStatus,
    /// Why it failed or was skipped.
    pub reason: String,
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

/// Columns after loadgen's figures: what the controller adds to a cell.
pub const SUMMARY_CELL_COLUMNS: [&str; 11] = [
    "broker_cpu_percent",
    "broker_cpu_us_per_delivery",
    "broker_peak_rss_mb",
    "broker_samples",
    "limited_by_generator",
    "limit_reason",
    "saturation_rate",
    "saturation_delivered_msgs_per_s",
    "saturation_failed_rate",
    "saturation_end",
    "saturation_probes",
];

fn cell_columns(record: &CellRecord) -> Vec<String> {
    let opt = |v: Option<String>| v.unwrap_or_default();
    let usage = record.usage.as_ref();
    let saturation = record.saturation.as_ref();
    vec![
        opt(usage.map(|u| format!("{:.2}", u.cpu_percent))),
        opt(usage
            .and_then(|u| u.cpu_us_per_delivery)
            .map(|v| format!("{v:.3}"))),
        opt(usage.map(|u| format!("{:.1}", u.peak_rss_mb))),
        opt(usage.map(|u| u.samples.to_string())),
        if record.summary.is_some() {
            (if record.generator_limit.is_some() {
                "yes"
            } else {
                "no"
            })
            .to_string()
        } else {
            String::new()
        },
        record.generator_limit.clone().unwrap_or_default(),
        opt(saturation.and_then(|s| s.rate).map(|r| r.to_string())),
        opt(saturation
            .and_then(|s| s.delivered_msgs_per_s)
            .map(|r| format!("{r:.0}"))),
        opt(saturation
            .and_then(|s| s.failed_rate)
            .map(|r| r.to_string())),
        opt(saturation.map(|s| {
            serde_json::to_value(s.end)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })),
        opt(saturation.map(|s| s.probes.to_string())),
    ]
}

/// One node or process sample taken during a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsRow {
    /// Cell id.
    pub cell: String,
    /// Sample time, Unix ns on the node's clock.
    pub unix_ns: u64,
    /// Node.
    pub node: String,
    /// Node CPU busy, percent of all cores.
    pub node_cpu_percent: f64,
    /// Node memory in use, bytes.
    pub node_memory_used_bytes: u64,
    /// Watched process (the broker), or empty.
    pub process: String,
    /// Its CPU, percent of one core.
    pub process_cpu_percent: f64,
    /// Its resident memory, bytes.
    pub process_rss_bytes: u64,
}

const METRICS_HEADER: &str = "cell,unix_ns,node,node_cpu_percent,node_memory_used_bytes,process,process_cpu_percent,process_rss_bytes";

/// A run's results folder.
#[derive(Debug, Clone)]
pub struct ResultsDir {
    dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ResultsError + '_ {
    move |source| ResultsError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

impl ResultsDir {
    /// Creates (or reopens, for `--resume`) the folder.
    pub fn open(dir: &Path) -> Result<Self, ResultsError> {
        fs::create_dir_all(dir.join("cells")).map_err(io(dir))?;
        Ok(ResultsDir {
            dir: dir.to_path_buf(),
        })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The folder of one cell's files.
    pub fn cell_dir(&self, cell: &str) -> PathBuf {
        self.dir.join("cells").join(cell)
    }

    /// Writes the manifest (replacing an earlier one).
    pub fn write_manifest(&self, manifest: &Manifest) -> Result<(), ResultsError> {
        let path = self.dir.join("manifest.json");
        let json = serde_json::to_string_pretty(manifest).map_err(|e| ResultsError::Format {
            path: path.display().to_string(),
            problem: e.to_string(),
        })?;
        write_atomically(&path, json.as_bytes())
    }

    /// Reads the manifest.
    pub fn read_manifest(&self) -> Result<Manifest, ResultsError> {
        let path = self.dir.join("manifest.json");
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map_err(|e| ResultsError::Format {
            path: path.display().to_string(),
            problem: e.to_string(),
        })
    }

    /// Records a finished cell: its raw result and histogram first, then its summary row, so
    /// a row never points at files that are not there.
    pub fn record(
        &self,
        record: &CellRecord,
        result: Option<&RunResult>,
        search: Option<&loadgen::saturation::SaturationReport>,
    ) -> Result<(), ResultsError> {
        if let Some(search) = search {
            let cell_dir = self.cell_dir(&record.cell);
            fs::create_dir_all(&cell_dir).map_err(io(&cell_dir))?;
            let json = serde_json::to_string_pretty(search).map_err(|e| ResultsError::Format {
                path: cell_dir.display().to_string(),
                problem: e.to_string(),
            })?;
            write_atomically(&cell_dir.join("saturation.json"), json.as_bytes())?;
        }
        if let Some(result) = result {
            let cell_dir = self.cell_dir(&record.cell);
            fs::create_dir_all(&cell_dir).map_err(io(&cell_dir))?;
            let json = serde_json::to_string(result).map_err(|e| ResultsError::Format {
                path: cell_dir.display().to_string(),
                problem: e.to_string(),
            })?;
            write_atomically(&cell_dir.join("result.json"), json.as_bytes())?;
            let hgrm = loadgen::output::percentile_distribution(&result.latency, 1e6);
            write_atomically(&cell_dir.join("latency.hgrm"), hgrm.as_bytes())?;
        }
        let mut fixed = vec![
            record.cell.clone(),
            record.broker.clone(),
            record.scenario.clone(),
            record.test.clone(),
            record.point.clone(),
            record.repetition.to_string(),
            record.status.as_str().to_string(),
            record.reason.replace('\n', " "),
        ];
        let figures = match &record.summary {
            Some(summary) => {
                loadgen::output::csv_columns(summary).map_err(|e| ResultsError::Format {
                    path: "summary.csv".to_string(),
                    problem: e.to_string(),
                })?
            }
            None => Vec::new(),
        };
        let path = self.dir.join("summary.csv");
        let exists = path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        // The figure columns are fixed by loadgen's Summary; take their names from a template.
        let template = loadgen::output::csv_columns(&figures_template()).unwrap_or_default();
        if !exists {
            let mut header: Vec<String> = SUMMARY_FIXED_COLUMNS
                .iter()
                .map(|c| c.to_string())
                .collect();
            header.extend(template.iter().map(|(name, _)| figure_column_name(name)));
            header.extend(SUMMARY_CELL_COLUMNS.iter().map(|c| c.to_string()));
            write_line(&mut file, &header).map_err(io(&path))?;
        }
        // Columns follow the template; a figure this cell lacks (a counted run has no
        // steadiness verdict) is left empty, so every row lines up with the header.
        let values: std::collections::HashMap<String, String> = figures.into_iter().collect();
        fixed.extend(
            template
                .iter()
                .map(|(name, _)| values.get(name).cloned().unwrap_or_default()),
        );
        fixed.extend(cell_columns(record));
        write_line(&mut file, &fixed).map_err(io(&path))?;
        file.sync_data().map_err(io(&path))
    }

    /// Appends metrics samples.
    pub fn record_metrics(&self, rows: &[MetricsRow]) -> Result<(), ResultsError> {
        let path = self.dir.join("metrics.csv");
        let exists = path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        // One write for the whole batch, for the same reason as summary rows.
        let mut text = String::new();
        if !exists {
            text.push_str(METRICS_HEADER);
            text.push('\n');
        }
        for row in rows {
            text.push_str(&format!(
                "{},{},{},{:.2},{},{},{:.2},{}\n",
                csv_field(&row.cell),
                row.unix_ns,
                csv_field(&row.node),
                row.node_cpu_percent,
                row.node_memory_used_bytes,
                csv_field(&row.process),
                row.process_cpu_percent,
                row.process_rss_bytes
            ));
        }
        file.write_all(text.as_bytes()).map_err(io(&path))
    }

    /// Cells already in `summary.csv` with status ok or skipped: a resumed run skips them
    /// (failed cells are tried again).
    pub fn finished_cells(&self) -> Result<std::collections::HashSet<String>, ResultsError> {
        let path = self.dir.join("summary.csv");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Default::default());
            }
            Err(error) => return Err(io(&path)(error)),
        };
        Ok(text
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields = split_csv_line(line);
                let status = fields.get(6)?;
                (status == "ok" || status == "skipped").then(|| fields[0].clone())
            })
            .collect())
    }

    /// Every row of `summary.csv` as (header, rows of fields).
    pub fn read_summary(&self) -> Result<(Vec<String>, Vec<Vec<String>>), ResultsError> {
        let path = self.dir.join("summary.csv");
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        let mut lines = text.lines();
        let header = lines.next().map(split_csv_line).unwrap_or_default();
        Ok((
            header,
            lines
                .filter(|l| !l.is_empty())
                .map(split_csv_line)
                .collect(),
        ))
    }
}

/// loadgen's own `broker` column (the address it dialled) would repeat the fixed `broker`
/// column (the broker's name in the plan).
fn figure_column_name(name: &str) -> String {
    match name {
        "broker" => "broker_address".to_string(),
        other => other.to_string(),
    }
}

/// Writes one CSV line, newline included, in a single write: a process killed mid-row must
/// not leave half a line for the next row to be glued to.
fn write_line(file: &mut std::fs::File, fields: &[String]) -> std::io::Result<()> {
    let mut line = fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    file.write_all(line.as_bytes())
}

/// A summary with every field, optional ones included (a timed run's steadiness verdict), so
/// the CSV header is the same whatever the first cell did.
fn figures_template() -> Summary {
    let mut spec = loadgen::presets::throughput();
    spec.messages_per_publisher = 0;
    spec.duration = Some(std::time::Duration::from_secs(1));
    spec.pacing = loadgen::spec::Pacing::ClosedLoop;
    let mut result = RunResult::empty(&spec, "template");
    result.shards.push(spec.effective_shard());
    result.measured_window = Some(loadgen::result::MeasuredWindow {
        start_ns: 0,
        from_ns: 0,
        until_ns: 1_000_000_000,
    });
    Summary::of(&result)
}

/// Splits one CSV line, honouring quotes.
pub fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    fields.push(field);
    fields
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ResultsError> {
    let temporary = path.with_extension("partial");
    fs::write(&temporary, bytes).map_err(io(&temporary))?;
    fs::rename(&temporary, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            test: "latency".into(),
            point: "-".into(),
            repetition: 1,
            status,
            reason: String::new(),
            summary,
            usage: None,
            generator_limit: None,
            saturation: None,
        };
        results
            .record(
                &record(
                    "b/local/0-latency/-/1",
                    CellStatus::Ok,
                    Some(Summary::of(&result)),
                ),
                Some(&result),
                None,
            )
            .expect("ok row");
        results
            .record(
                &record("b/local/0-latency/-/2", CellStatus::Failed, None),
                None,
                None,
            )
            .expect("failed row");
        results
            .record(
                &record("b/edge/0-latency/-/1", CellStatus::Skipped, None),
                None,
                None,
            )
            .expect("skipped row");
        let (header, rows) = results.read_summary().expect("read");
        assert_eq!(&header[..8], &SUMMARY_FIXED_COLUMNS);
        assert!(
            rows.iter().all(|row| row.len() == header.len()),
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
    }

    #[test]
    fn csv_lines_split_with_quotes() {
        assert_eq!(
            split_csv_line("a,\"b,c\",\"say \"\"hi\"\"\","),
            vec!["a", "b,c", "say \"hi\"", ""]
        );
    }
}
