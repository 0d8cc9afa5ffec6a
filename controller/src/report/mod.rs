//! The report of a run, rebuilt from its results folder alone: `report.md`, `report.html`
//! (self-contained: SVG figures and styles inline, no script, nothing fetched) and the
//! figures as files under `figures/`.
//!
//! [`write_report`] is what `controller report DIR` calls, and what a run calls at its end.
//! It reads `manifest.json`, `summary.csv`, each measured cell's `result.json` and
//! `metrics.csv` (when present), and writes:
//!
//! 1. Run: plan, start, versions, nodes with clock offsets, netem asked and read back.
//! 2. Latency (the study's Fig. 2): boxplots per broker and scenario of the latency
//!    histogram merged over repetitions, with a table of median, IQR, p99, samples.
//! 3. Latency vs payload (Tables IV/V): median-IQR per payload, broker and scenario, and
//!    median latency against payload size.
//! 4. Sustained throughput vs clients: rates kept over a whole measured window, with exact
//!    intervals, broker CPU per delivery, and each cell's rates over time.
//! 5. Saturation point: the highest offered rate sustained, and latency vs offered load.
//! 6. The study's burst (Fig. 4/5), labelled as burst figures, beside its per-client medians.
//! 7. Broker comparisons: Mann-Whitney U and Cliff's delta for every pair of brokers; TCP
//!    and QUIC side by side where two tests differ only in transport (`transports.rs`).
//! 8. Broker CPU and memory per test, from `metrics.csv`.
//! 9. Emulation check: the delay netem should add beside the measured rise of the median.
//! 10. Beside the study: its Tables IV/V next to this run's figures, added delays over local
//!     and what each path should add.
//! 11. Not measured: skipped cells as a compact table (broker, scenario, reason, count),
//!     failed cells by reason.
//!
//! It opens with the findings (who is ahead, by how much, significant or not) and the run's
//! conditions.
//!
//! Sections for tests the plan does not have are left out; failed cells are counted and
//! excluded. The same folder always gives the same bytes.
//!
//! The folder is untrusted: every file is written through [`host::Folder`], as a new file
//! renamed over the old one, so a link planted as `report.md`, `figures` or a temporary name
//! is never written through, and stale figures are unlinked, never followed.
//!
//! Layout: `input.rs` reads the folder; `findings.rs`, `run.rs`, `latency.rs`, `payload.rs`,
//! `throughput.rs`, `saturation.rs`, `burst.rs`, `custom.rs`, `suite.rs` (the Open MQTT
//! Benchmark Suite's layout), `comparison.rs`, `resources.rs`, `emulation.rs`, `study.rs`
//! build one section each; `estimate.rs` gives medians with intervals;
//! `model.rs` is the document model; `svg.rs` (the drawing builder), `axes.rs` (scales,
//! axes, legends), `frame.rs` (the canvas every chart shares: title fitted to the width,
//! legend, plot area), `chart.rs` (line charts) and `timeseries.rs` (a cell over time)
//! draw; `markdown.rs` and `html.rs` render.

mod answers;
mod axes;
mod burst;
mod chart;
mod churn;
pub mod compare;
mod comparison;
mod custom;
mod emulation;
mod estimate;
mod findings;
mod fleet;
mod frame;
pub mod glance;
mod grouped;
mod html;
mod input;
mod latency;
mod markdown;
mod model;
mod payload;
mod reconnect;
mod resources;
mod run;
mod saturation;
mod study;
mod suite;
mod svg;
mod throughput;
mod timeseries;
mod transports;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use host::Folder;

use crate::plan::{Plan, Sweep, TestKind};
use crate::results::ResultsError;
use input::RunData;
use model::{Block, Section};

/// The report could not be built or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file of the results folder could not be read, or is not what this version writes.
    #[error(transparent)]
    Results(#[from] ResultsError),
    /// A report file could not be written (or its folder is a link, or not a folder).
    #[error(transparent)]
    Write(#[from] host::FolderError),
}

/// The files a report consists of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// `report.md`.
    pub markdown: PathBuf,
    /// `report.html`.
    pub html: PathBuf,
    /// `figures/*.svg`, the same figures the HTML inlines, in report order.
    pub figures: Vec<PathBuf>,
}

/// Rebuilds the report of the run in `dir` from its files and writes it into `dir`.
pub fn write_report(dir: &Path) -> Result<ReportFiles, ReportError> {
    let data = input::load(dir)?;
    let sections = sections(&data);
    let plan = &data.manifest.plan;
    let title = format!("Continuum report: {}", plan.name);
    let intro = format!(
        "MQTT broker benchmark run \"{}\", started {}, controller {}. Rebuilt from the files of \
         its results folder (manifest.json, summary.csv, cells/*/result.json, metrics.csv); \
         'controller report DIR' writes it again.",
        plan.name,
        model::utc(data.manifest.started_unix_ms),
        data.manifest.controller_version
    );
    let appendix = &data.manifest.plan_text;
    let folder = Folder::open(dir)?;
    let figures_folder = folder.create_folder(Path::new("figures"))?;
    let mut figures = Vec::new();
    let mut written = BTreeSet::new();
    for section in &sections {
        for block in &section.blocks {
            if let Block::Figures(list) = block {
                for figure in list {
                    figures_folder.replace(&figure.file, figure.svg.as_bytes())?;
                    written.insert(figure.file.clone());
                    figures.push(dir.join("figures").join(&figure.file));
                }
            }
        }
    }
    remove_stale_figures(&figures_folder, &written)?;
    let markdown = dir.join("report.md");
    folder.replace(
        "report.md",
        markdown::render(&title, &intro, &sections, appendix).as_bytes(),
    )?;
    let html = dir.join("report.html");
    folder.replace(
        "report.html",
        html::render(&title, &intro, &sections, appendix).as_bytes(),
    )?;
    Ok(ReportFiles {
        markdown,
        html,
        figures,
    })
}

/// Every section, in report order; those of tests the plan lacks are absent.
fn sections(data: &RunData) -> Vec<Section> {
    let mut sections = vec![findings::section(data), run::section(data)];
    sections.extend(latency::sections(data));
    sections.extend(payload::sections(data));
    sections.extend(throughput::sections(data));
    sections.extend(saturation::sections(data));
    sections.extend(burst::sections(data));
    sections.extend(custom::sections(data));
    sections.extend(suite::section(data));
    sections.extend(churn::section(data));
    sections.extend(reconnect::section(data));
    sections.extend(fleet::shared_section(data));
    sections.extend(fleet::retained_section(data));
    sections.extend(fleet::wills_section(data));
    sections.extend(answers::section(data));
    sections.extend(transports::section(data));
    sections.extend(comparison::section(data));
    sections.push(resources::section(data));
    sections.extend(emulation::section(data));
    sections.extend(study::section(data));
    sections.push(run::not_measured(data));
    sections
}

/// One section per test of the kinds `having` picks, in plan order, built by `build` with its
/// title: `title` for the kind the section was written for (`home`), with the test's number
/// when several tests share the section and the kind's name when it is another kind.
fn sections_of(
    data: &RunData,
    having: impl Fn(TestKind) -> bool,
    home: TestKind,
    title: &str,
    build: impl Fn(&RunData, usize, &str) -> Section,
) -> Vec<Section> {
    let plan = &data.manifest.plan;
    let tests: Vec<usize> = (0..plan.tests.len())
        .filter(|&t| having(plan.tests[t].kind))
        .collect();
    tests
        .iter()
        .map(|&test| {
            let kind = plan.tests[test].kind;
            let title = match (tests.len() > 1, kind == home) {
                (false, true) => title.to_string(),
                (true, true) => format!("{title} (test {})", test_number(plan, test)),
                (false, false) => format!("{title} ({} test)", kind.name()),
                (true, false) => {
                    format!(
                        "{title} (test {}, {})",
                        test_number(plan, test),
                        kind.name()
                    )
                }
            };
            build(data, test, &title)
        })
        .collect()
}

/// A test as named in tables: its kind, with its number when the plan has two of a kind.
fn test_label(plan: &Plan, test: usize) -> String {
    let kind = plan.tests[test].kind;
    let name = input::kind_name(kind);
    if plan.tests.iter().filter(|t| t.kind == kind).count() > 1 {
        format!("{name} (test {})", test_number(plan, test))
    } else {
        name.to_string()
    }
}

/// A test's number as the plan file counts it (from 1), with the transport of a
/// `transports` sweep's run: `2`, `2, over quic`.
fn test_number(plan: &Plan, test: usize) -> String {
    let number = plan.file_test(test) + 1;
    match plan.swept_transport(test) {
        Some(transport) => format!("{number}, over {transport}"),
        None => number.to_string(),
    }
}

/// The workload of a test, as its first measured cell ran it.
fn workload_line(data: &RunData, test: usize) -> Option<String> {
    let cell = data.cells.iter().find(|c| c.test == test)?;
    let s = &cell.summary;
    let kind = data.manifest.plan.tests[test].kind;
    let clients = match kind.sweep() {
        Sweep::Clients => "N publisher/subscriber pairs (one cell per N)".to_string(),
        _ => format!(
            "{} publisher{} -> {} subscriber{} ({})",
            s.publishers,
            if s.publishers == 1 { "" } else { "s" },
            s.subscribers,
            if s.subscribers == 1 { "" } else { "s" },
            s.topology
        ),
    };
    let payload = match kind.sweep() {
        Sweep::Payloads => "one cell per payload size".to_string(),
        _ => format!("{} B payload", s.payload_bytes),
    };
    let pacing = match (s.pacing.as_str(), s.interval_ms) {
        ("open-loop", Some(interval)) => format!("each publisher every {interval} ms (open loop)"),
        ("rate", _) => match &cell.spec.pacing {
            loadgen::spec::Pacing::Rate { rate } => {
                format!("offered {rate} msg/s over all publishers (open loop)")
            }
            _ => "at an offered rate (open loop)".to_string(),
        },
        ("closed-loop", _) => "closed loop: each publisher keeps its window full".to_string(),
        _ => "as fast as possible: a burst".to_string(),
    };
    Some(format!(
        "Workload: {clients}, MQTT {}, QoS {}, {payload}, {pacing}, {} messages per publisher \
         of which {} warm-up (not measured).",
        s.protocol, s.qos, s.messages_per_publisher, s.warmup_messages
    ))
}

/// Removes `.svg` files of an earlier report that this one did not write (an entry itself:
/// a link is removed, not followed).
fn remove_stale_figures(folder: &Folder, keep: &BTreeSet<String>) -> Result<(), ReportError> {
    for name in folder.names()? {
        let stale = Path::new(&name).extension() == Some(OsStr::new("svg"))
            && !name.to_str().is_some_and(|name| keep.contains(name));
        if stale {
            folder.remove(&name)?;
        }
    }
    Ok(())
}
