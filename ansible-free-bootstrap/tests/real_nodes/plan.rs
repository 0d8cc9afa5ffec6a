//! The plan the controller runs against the real nodes, and what its results must show.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use controller::results::{CellStatus, SummaryRow, read_rows};

/// The broker on the worker, measured first (a run takes its brokers one after the other).
pub const ON_WORKER: &str = "on-worker";
/// The broker on the headnode, whose node is powered off mid-run.
pub const ON_HEADNODE: &str = "on-headnode";
/// The study's scenarios and their total one-way delay in ms (half on each end's egress, so a
/// message from the tester to a broker and back passes both: the rise over local is this).
pub const SCENARIOS: [(&str, f64); 3] = [("local", 0.0), ("edge", 2.5), ("cloud", 6.25)];
pub const REPETITIONS: u32 = 2;

/// Tester, headnode and worker at their addresses; a native Mosquitto on the worker and one
/// on the headnode; the study's three scenarios; the latency test from the tester.
pub fn text(results: &Path, pki: &Path, agents: &[(&str, String)]) -> String {
    let mut text = format!(
        "name = \"realnodes\"\nrepetitions = {REPETITIONS}\norder = \"interleaved\"\n\
         results_dir = {results:?}\npki_dir = {pki:?}\non_failure = \"continue\"\n\n\
         [timeouts]\nconnect = \"10s\"\ndeploy = \"120s\"\nnetem = \"30s\"\ncell = \"120s\"\n"
    );
    for (name, address) in agents {
        let roles = if *name == "tester" {
            "\"loadgen\", \"netem\""
        } else {
            "\"broker\", \"netem\""
        };
        text += &format!(
            "\n[[nodes]]\nname = \"{name}\"\nagent = \"{address}:7100\"\nroles = [{roles}]\n\
             data_address = \"{address}\"\n"
        );
    }
    for (broker, node) in [(ON_WORKER, "worker"), (ON_HEADNODE, "headnode")] {
        text += &format!(
            "\n[[brokers]]\nname = \"{broker}\"\nkind = \"native\"\nproduct = \"mosquitto\"\n\
             node = \"{node}\"\n"
        );
    }
    for (scenario, _) in SCENARIOS {
        text += &format!("\n[[scenarios]]\nname = \"{scenario}\"\n");
    }
    text += "\n[[tests]]\nkind = \"latency\"\nloadgen = [\"tester\"]\npublishers = 10\n\
             messages = 16\nwarmup = 2\ninterval = \"250ms\"\n";
    text
}

/// The run's folder (the only one under `results`).
pub fn run_folder(results: &Path) -> Result<PathBuf> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(results)
        .with_context(|| results.display().to_string())?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir())
        .collect();
    ensure!(folders.len() == 1, "one run folder: {folders:?}");
    Ok(folders.remove(0))
}

/// How many cells of `broker` have a record so far.
pub fn records_of(results: &Path, broker: &str) -> usize {
    let Ok(run) = run_folder(results) else {
        return 0;
    };
    tests::files_under(&run.join("cells").join(broker))
        .map(|files| {
            files
                .iter()
                .filter(|f| f.file_name().is_some_and(|n| n == "record.json"))
                .count()
        })
        .unwrap_or(0)
}

/// Each scenario's rise over local for the worker's broker: per repetition, its latency
/// median minus local's, then the median of those (of two: their mean). In ms.
pub fn rises(rows: &[SummaryRow]) -> Result<BTreeMap<&'static str, f64>> {
    let median = |scenario: &str, repetition: u32| -> Result<f64> {
        rows.iter()
            .find(|r| {
                r.broker == ON_WORKER
                    && r.scenario == scenario
                    && r.repetition == repetition
                    && r.status == CellStatus::Ok
            })
            .and_then(|r| r.latency_p50_us)
            .map(|us| us / 1000.0)
            .with_context(|| format!("{ON_WORKER} {scenario} repetition {repetition} measured"))
    };
    let mut rises = BTreeMap::new();
    for (scenario, _) in SCENARIOS.iter().skip(1) {
        let mut paired = Vec::new();
        for repetition in 1..=REPETITIONS {
            paired.push(median(scenario, repetition)? - median("local", repetition)?);
        }
        rises.insert(*scenario, paired.iter().sum::<f64>() / paired.len() as f64);
    }
    Ok(rises)
}

/// The rows of the run's `summary.csv`, the last try of each cell.
pub fn rows(run: &Path) -> Result<Vec<SummaryRow>> {
    let mut last: BTreeMap<String, SummaryRow> = BTreeMap::new();
    for row in read_rows(&run.join("summary.csv")).context("summary.csv")? {
        last.insert(row.cell.clone(), row);
    }
    Ok(last.into_values().collect())
}

/// The scenario whose rise over local is held to a bound: the cloud's, whose model is well
/// above TCG's noise (up to 1.2 ms seen on a busy host, half the edge's 2.5 ms).
pub const BOUNDED_RISE: &str = "cloud";
/// The least rise over local [`BOUNDED_RISE`] must show, as a share of its model: a path
/// without netem cannot reach it, a noisy one with it does (101-118 % seen).
pub const RISE_AT_LEAST: f64 = 0.5;

/// `manifest.json`: for the worker's broker, edge and cloud were applied on the tester's and
/// the worker's `eth0`, each half of the scenario's delay, and each node's kernel read back
/// what was asked (delays to the microsecond, the kernel's unit; loss to 1e-6 %).
pub fn check_netem_read_back(run: &Path) -> Result<()> {
    let text = std::fs::read_to_string(run.join("manifest.json")).context("manifest.json")?;
    let manifest: serde_json::Value = serde_json::from_str(&text).context("manifest.json")?;
    let applied = manifest["netem"]
        .as_array()
        .context("manifest.json has a netem list")?;
    for (scenario, model_ms) in SCENARIOS.iter().skip(1) {
        for node in ["tester", "worker"] {
            let entry = applied
                .iter()
                .find(|e| {
                    e["broker"] == ON_WORKER && e["scenario"] == *scenario && e["node"] == node
                })
                .with_context(|| format!("netem of {scenario} on {node} in manifest.json"))?;
            let (asked, read_back) = (&entry["asked"], &entry["read_back"]);
            let ns = |record: &serde_json::Value, field: &str| record[field].as_u64();
            let near = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a.abs_diff(b) < 1_000);
            let half_ns = (model_ms * 1e6 / 2.0).round() as u64;
            let loss_near = match (
                asked["loss_percent"].as_f64(),
                read_back["loss_percent"].as_f64(),
            ) {
                (Some(a), Some(b)) => (a - b).abs() < 1e-6,
                _ => false,
            };
            ensure!(
                entry["interface"] == "eth0"
                    && near(ns(asked, "delay_ns"), Some(half_ns))
                    && near(ns(read_back, "delay_ns"), ns(asked, "delay_ns"))
                    && near(ns(read_back, "jitter_ns"), ns(asked, "jitter_ns"))
                    && loss_near,
                "{scenario} on {node}: {entry} (half the model's delay is {half_ns} ns)"
            );
        }
    }
    Ok(())
}
