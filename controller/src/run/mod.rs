//! Running a plan: connect and check every agent, then for each broker deploy it, for each
//! scenario apply and verify netem, run the cells (tests x points x repetitions) recording
//! each as it ends, clear netem, remove the broker; finally write the report. SIGINT and
//! SIGTERM stop after undoing netem and brokers.
//!
//! - `agents.rs`: connecting (and starting a local agent); `phases.rs`: the overlay and
//!   the cluster (phases 2 and 3); `deploy.rs`: starting and removing a broker;
//!   `scenario.rs`: netem per scenario under leases; `cell.rs`: one measurement; this file:
//!   the loop and its undo.

mod agents;
mod cell;
mod deploy;
mod local_agent;
mod phases;
mod scenario;
mod search;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

pub use self::agents::AgentHandle;
use self::cell::CellOutcome;
pub use self::local_agent::LocalAgent;
use self::scenario::ScenarioOutcome;
use crate::plan::{Cell, OnFailure, Plan};
use crate::results::{
    BrokerRecord, CellRecord, CellStatus, Manifest, NodeRecord, ResultsDir, ResultsError,
};

/// Why a run could not be carried out (cells that fail are recorded, not errors).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plan cannot run as written.
    #[error("plan: {0}")]
    Plan(String),
    /// An agent could not be reached or is not what the plan says.
    #[error("node {node}: {problem}")]
    Agent {
        /// Node name.
        node: String,
        /// What went wrong.
        problem: String,
    },
    /// The in-process agent could not start.
    #[error("local agent: {0}")]
    Local(String),
    /// Results could not be written.
    #[error(transparent)]
    Results(#[from] ResultsError),
    /// A resumed run's folder holds another plan.
    #[error("{dir}: it holds a run of another plan; resume it with that plan")]
    ResumeMismatch {
        /// The folder.
        dir: String,
    },
}

/// How a run was started.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Continue the run in this folder, skipping finished cells.
    pub resume: Option<PathBuf>,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The results folder.
    pub dir: PathBuf,
    /// Cells measured, failed and skipped in this invocation.
    pub measured: usize,
    /// Cells that failed.
    pub failed: usize,
    /// Cells skipped (not emulable, broker not installed, already done).
    pub skipped: usize,
    /// The run stopped early (signal or on_failure = "stop").
    pub interrupted: bool,
}

/// How far a run is, in cells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Cells of the plan.
    pub total: usize,
    /// Cells handled (including those a resumed folder already held).
    pub done: usize,
    /// Cells measured in this invocation.
    pub measured: usize,
    /// Cells that failed.
    pub failed: usize,
    /// Cells skipped.
    pub skipped: usize,
}

/// What a run reports as it goes, to an observer such as `controller serve`.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// The results folder is open; the plan has `total` cells.
    Started {
        /// The results folder.
        dir: PathBuf,
        /// Cells of the plan.
        total: usize,
    },
    /// A cell was recorded.
    Cell {
        /// Its id.
        id: String,
        /// How it ended.
        status: CellStatus,
        /// The one-line figures of a measured cell, or why it failed or was skipped.
        note: String,
        /// The run's counts after it.
        counts: RunCounts,
    },
}

/// Where a run sends its [`RunEvent`]s (sending never blocks the run; a closed receiver is
/// ignored).
pub type RunEvents = tokio::sync::mpsc::UnboundedSender<RunEvent>;

struct Progress {
    total: usize,
    done: usize,
    measured: usize,
    failed: usize,
    skipped: usize,
    events: Option<RunEvents>,
}

/// Runs `plan` (whose file text is `plan_text`), writing into a new results folder or the
/// one being resumed.
pub async fn run_plan(
    plan: &Plan,
    plan_text: &str,
    options: RunOptions,
    cancel: CancellationToken,
) -> Result<RunSummary, RunError> {
    run_plan_observed(plan, plan_text, options, cancel, None).await
}

/// [`run_plan`], also sending a [`RunEvent`] to `events` when the folder is open and as
/// each cell is recorded.
pub async fn run_plan_observed(
    plan: &Plan,
    plan_text: &str,
    options: RunOptions,
    cancel: CancellationToken,
    events: Option<RunEvents>,
) -> Result<RunSummary, RunError> {
    let dir = match &options.resume {
        Some(dir) => dir.clone(),
        None => fresh_folder(
            &plan
                .results_dir
                .join(format!("{}-{}", plan.name, timestamp())),
        ),
    };
    if options.resume.is_some()
        && let Ok(previous) = ResultsDir::open(&dir)?.read_manifest()
        && previous.plan != *plan
    {
        return Err(RunError::ResumeMismatch {
            dir: dir.display().to_string(),
        });
    }
    // Every agent must answer before anything is written or changed anywhere.
    let (agents, locals) = agents::connect_all(plan).await?;
    let results = ResultsDir::open(&dir)?;
    let finished: HashSet<String> = results.finished_cells()?;
    eprintln!("controller: results in {}", dir.display());
    if let Some(events) = &events {
        let _ = events.send(RunEvent::Started {
            dir: dir.clone(),
            total: plan.cells().len(),
        });
    }
    let mut manifest = Manifest {
        plan: plan.clone(),
        plan_text: plan_text.to_string(),
        controller_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix_ms: loadgen::clock::unix_now_ns() / 1_000_000,
        nodes: plan
            .nodes
            .iter()
            .filter_map(|n| agents.get(&n.name))
            .map(|a| node_record(plan, a))
            .collect(),
        netem: Vec::new(),
        skipped: Vec::new(),
        testbed: None,
        brokers: Vec::new(),
    };
    if let Ok(previous) = results.read_manifest() {
        manifest.netem = previous.netem;
        manifest.skipped = previous.skipped;
        manifest.brokers = previous.brokers;
    }
    results.write_manifest(&manifest)?;
    // Phases 2 and 3: a failure here stops the run before any broker (nothing measured yet).
    manifest.testbed = phases::prepare(plan, &agents).await?;
    results.write_manifest(&manifest)?;
    for node in &manifest.nodes {
        eprintln!(
            "controller: {} ({} {} cores, kernel {}), clock {:+.3} ms ± {:.3} ms, netem: {}",
            node.name,
            node.arch,
            node.cores,
            node.kernel,
            node.clock_offset_ns as f64 / 1e6,
            node.clock_error_bound_ns as f64 / 1e6,
            node.netem
        );
    }
    let mut progress = Progress {
        total: plan.cells().len(),
        done: 0,
        measured: 0,
        failed: 0,
        skipped: 0,
        events,
    };
    let mut interrupted = false;
    'brokers: for (b, broker) in plan.brokers.iter().enumerate() {
        let pending: Vec<Cell> = (0..plan.scenarios.len())
            .flat_map(|s| plan.cells_of(b, s))
            .filter(|c| !finished.contains(&c.id(plan)))
            .collect();
        progress.done += plan.cells().iter().filter(|c| c.broker == b).count() - pending.len();
        if pending.is_empty() {
            continue;
        }
        let deployed = deploy::deploy(plan, broker, &agents).await;
        let address = match deployed {
            Ok(deployed) => {
                let record = BrokerRecord {
                    name: broker.name.clone(),
                    node: deploy::deploying_node(plan, broker)
                        .unwrap_or("-")
                        .to_string(),
                    address: deployed.address.to_string(),
                    detail: deployed.detail,
                };
                manifest.brokers.retain(|b| b.name != record.name);
                manifest.brokers.push(record);
                results.write_manifest(&manifest)?;
                deployed.address
            }
            Err((reason, skip)) => {
                let status = if skip {
                    CellStatus::Skipped
                } else {
                    CellStatus::Failed
                };
                eprintln!("controller: broker {}: {reason}", broker.name);
                if skip {
                    manifest
                        .skipped
                        .push(format!("broker {}: {reason}", broker.name));
                }
                record_unmeasured(&results, plan, &pending, status, &reason, &mut progress)?;
                if !skip && plan.on_failure == OnFailure::Stop {
                    interrupted = true;
                    break 'brokers;
                }
                continue;
            }
        };
        eprintln!("controller: broker {} ready at {address}", broker.name);
        for (s, scenario_entry) in plan.scenarios.iter().enumerate() {
            let cells: Vec<&Cell> = pending.iter().filter(|c| c.scenario == s).collect();
            if cells.is_empty() {
                continue;
            }
            if cancel.is_cancelled() {
                interrupted = true;
                break;
            }
            let outcome = scenario::apply(
                plan,
                scenario_entry,
                &broker.name,
                broker.node.as_deref(),
                &agents,
            )
            .await;
            let active = match outcome {
                Ok(ScenarioOutcome::Unimpaired) => None,
                Ok(ScenarioOutcome::Applied(active, applied)) => {
                    for netem in &applied {
                        eprintln!(
                            "controller: {} on {}: asked {}, kernel holds {}",
                            netem.scenario,
                            netem.node,
                            netem.asked,
                            netem.read_back_text()
                        );
                    }
                    manifest.netem.extend(applied);
                    results.write_manifest(&manifest)?;
                    Some(active)
                }
                Ok(ScenarioOutcome::Skipped(reason)) => {
                    eprintln!("controller: skipped: {reason}");
                    if !manifest.skipped.contains(&reason) {
                        manifest.skipped.push(reason.clone());
                    }
                    record_unmeasured(
                        &results,
                        plan,
                        cells,
                        CellStatus::Skipped,
                        &reason,
                        &mut progress,
                    )?;
                    continue;
                }
                Err(reason) => {
                    record_unmeasured(
                        &results,
                        plan,
                        cells,
                        CellStatus::Failed,
                        &reason,
                        &mut progress,
                    )?;
                    continue;
                }
            };
            for cell in cells {
                if cancel.is_cancelled() {
                    interrupted = true;
                    break;
                }
                let id = cell.id(plan);
                let run_id = format!("c{:016x}", fingerprint(&id, manifest.started_unix_ms));
                let spec = match cell::workload(plan, cell, address, &run_id) {
                    Ok(spec) => spec,
                    Err(reason) => {
                        record(
                            &results,
                            plan,
                            cell,
                            CellStatus::Failed,
                            &reason,
                            None,
                            Extras::default(),
                            &mut progress,
                        )?;
                        continue;
                    }
                };
                let watch =
                    deploy::deploying_node(plan, broker).map(|node| (node, broker.name.as_str()));
                let (outcome, metrics) =
                    cell::run(plan, cell, spec, &agents, watch, &id, &cancel).await;
                results.record_metrics(&metrics)?;
                let watched = watch.map(|(node, name)| {
                    let shift = match (
                        agents.get(node),
                        agents.get(&plan.tests[cell.test].loadgen[0]),
                    ) {
                        (Some(broker_node), Some(loadgen_node)) => {
                            broker_node.clock.offset_ns - loadgen_node.clock.offset_ns
                        }
                        _ => 0,
                    };
                    (name, shift)
                });
                let measured = |result: &loadgen::RunResult| {
                    let summary = loadgen::Summary::of(result);
                    let usage = watched.and_then(|(name, shift)| {
                        crate::results::usage::broker_usage(result, &summary, &metrics, name, shift)
                    });
                    let limit = crate::results::usage::generator_limit(&summary, usage.as_ref());
                    (
                        summary,
                        Extras {
                            usage,
                            generator_limit: limit,
                            search: None,
                        },
                    )
                };
                match outcome {
                    CellOutcome::Measured(result) => {
                        let (summary, extras) = measured(&result);
                        let note = cell::one_line(&summary);
                        record(
                            &results,
                            plan,
                            cell,
                            CellStatus::Ok,
                            &note,
                            Some(&result),
                            extras,
                            &mut progress,
                        )?;
                    }
                    CellOutcome::Searched(report, at_rate) => {
                        let (note, mut extras) = match &at_rate {
                            Some(result) => {
                                let (summary, extras) = measured(result);
                                (cell::one_line(&summary), extras)
                            }
                            None => (String::new(), Extras::default()),
                        };
                        extras.search = Some(*report);
                        let note = format!(
                            "{}{}",
                            loadgen::output::saturation_summary(
                                extras.search.as_ref().expect("set")
                            )
                            .trim_end(),
                            if note.is_empty() {
                                String::new()
                            } else {
                                format!("; at that rate: {note}")
                            }
                        );
                        record(
                            &results,
                            plan,
                            cell,
                            CellStatus::Ok,
                            &note,
                            at_rate.as_deref(),
                            extras,
                            &mut progress,
                        )?;
                    }
                    CellOutcome::Failed(reason) => {
                        record(
                            &results,
                            plan,
                            cell,
                            CellStatus::Failed,
                            &reason,
                            None,
                            Extras::default(),
                            &mut progress,
                        )?;
                        if plan.on_failure == OnFailure::Stop {
                            interrupted = true;
                        }
                    }
                }
                if interrupted {
                    break;
                }
            }
            if let Some(active) = active {
                active.clear().await;
            }
            if interrupted {
                break;
            }
        }
        deploy::undeploy(plan, broker, &agents).await;
        if interrupted || cancel.is_cancelled() {
            interrupted = true;
            break;
        }
    }
    results.write_manifest(&manifest)?;
    for local in locals {
        local.shutdown().await;
    }
    match crate::report::write_report(&dir) {
        Ok(files) => eprintln!(
            "controller: report {} and {}",
            files.html.display(),
            files.markdown.display()
        ),
        // The measurements are on disk; `controller report DIR` can try again.
        Err(error) => eprintln!("controller: the report could not be written: {error}"),
    }
    Ok(RunSummary {
        dir,
        measured: progress.measured,
        failed: progress.failed,
        skipped: progress.skipped,
        interrupted,
    })
}

fn node_record(plan: &Plan, agent: &AgentHandle) -> NodeRecord {
    let entry = plan.nodes.iter().find(|n| n.name == agent.name);
    NodeRecord {
        name: agent.name.clone(),
        agent: entry.map(|n| n.agent.clone()).unwrap_or_default(),
        arch: agent.info.arch.clone(),
        cores: agent.info.cores,
        memory_bytes: agent.info.memory_bytes,
        kernel: agent.info.kernel.clone(),
        os: agent.info.os.clone(),
        agent_version: agent.info.agent_version.clone(),
        netem: if agent.netem_available() {
            "available".to_string()
        } else {
            format!("unavailable: {}", agent.netem_detail())
        },
        clock_offset_ns: agent.clock.offset_ns,
        clock_error_bound_ns: agent.clock.error_bound_ns,
    }
}

/// Records `cells` as failed or skipped, all for the same reason.
fn record_unmeasured<'a>(
    results: &ResultsDir,
    plan: &Plan,
    cells: impl IntoIterator<Item = &'a Cell>,
    status: CellStatus,
    reason: &str,
    progress: &mut Progress,
) -> Result<(), RunError> {
    for cell in cells {
        record(
            results,
            plan,
            cell,
            status,
            reason,
            None,
            Extras::default(),
            progress,
        )?;
    }
    Ok(())
}

/// What a cell adds to loadgen's figures.
#[derive(Debug, Default)]
struct Extras {
    usage: Option<crate::results::usage::BrokerUsage>,
    generator_limit: Option<String>,
    search: Option<loadgen::saturation::SaturationReport>,
}

#[allow(clippy::too_many_arguments)]
fn record(
    results: &ResultsDir,
    plan: &Plan,
    cell: &Cell,
    status: CellStatus,
    reason: &str,
    result: Option<&loadgen::RunResult>,
    extras: Extras,
    progress: &mut Progress,
) -> Result<(), RunError> {
    let test = &plan.tests[cell.test];
    let record = CellRecord {
        cell: cell.id(plan),
        broker: plan.brokers[cell.broker].name.clone(),
        scenario: plan.scenarios[cell.scenario].name.clone(),
        test: test.kind,
        point: cell.point,
        repetition: cell.repetition,
        status,
        reason: if status == CellStatus::Ok {
            String::new()
        } else {
            reason.to_string()
        },
        summary: result.map(loadgen::Summary::of),
        usage: extras.usage,
        generator_limit: extras.generator_limit,
        saturation: extras
            .search
            .as_ref()
            .map(crate::results::SaturationRecord::of),
    };
    results.record(&record, result, extras.search.as_ref())?;
    progress.done += 1;
    match status {
        CellStatus::Ok => progress.measured += 1,
        CellStatus::Failed => progress.failed += 1,
        CellStatus::Skipped => progress.skipped += 1,
    }
    if let Some(events) = &progress.events {
        let _ = events.send(RunEvent::Cell {
            id: record.cell.clone(),
            status,
            note: reason.to_string(),
            counts: RunCounts {
                total: progress.total,
                done: progress.done,
                measured: progress.measured,
                failed: progress.failed,
                skipped: progress.skipped,
            },
        });
    }
    // With an observer, showing progress is the observer's (a progress bar, a remote watcher).
    if status != CellStatus::Skipped && progress.events.is_none() {
        eprintln!(
            "[{:>4}/{}] {} {}: {reason}",
            progress.done,
            progress.total,
            record.cell,
            status.as_str()
        );
    }
    Ok(())
}

/// A short, stable-per-run fingerprint of a cell id: loadgen run ids are [A-Za-z0-9-].
fn fingerprint(id: &str, salt: u64) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325 ^ salt, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `base`, or `base-2`, `base-3`, ... when runs started in the same second: a new run must
/// never take an earlier one's folder (it would skip that run's cells as finished).
fn fresh_folder(base: &Path) -> PathBuf {
    let mut candidate = base.to_path_buf();
    let mut attempt = 1;
    while candidate.exists() {
        attempt += 1;
        candidate = PathBuf::from(format!("{}-{attempt}", base.display()));
    }
    candidate
}

fn timestamp() -> String {
    crate::civil::folder_stamp(loadgen::clock::unix_now_ns() / 1_000_000_000)
}

/// Where the results of `plan` go when not resuming (for messages).
pub fn results_root(plan: &Plan) -> &Path {
    &plan.results_dir
}
