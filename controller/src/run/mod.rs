//! Running a plan: connect and check every agent, then for each broker deploy it, for each
//! scenario apply and verify netem, run the cells (tests x points x repetitions) recording
//! each as it ends, clear netem, remove the broker; finally write the report. SIGINT and
//! SIGTERM stop after undoing netem and brokers. Every change on a machine is held by an
//! undo guard (local agents, a deployed broker, netem), so errors and panics undo it too.
//!
//! # Layout
//! - this file: the entry points and the run's options; `error.rs`: why a run could not
//!   be carried out.
//! - `execute.rs`: the run as a value and its phases (broker, scenario, cell), each
//!   answering a `Flow`.
//! - `guard.rs`: the undo guards.
//! - `testbed/`: what the run asks of each node's agent, in its own types (the gRPC side is
//!   `crate::agent_client`); the undo tests' in-memory stand-in.
//! - `events.rs`: [`RunEvent`]s on a bounded channel, and their `tracing` lines;
//!   `lines.rs`: the line a person reads for each ([`EventLines`]).
//! - `record.rs`: recording a cell and counting it.
//! - `agents.rs`: connecting (and starting a local agent, `local_agent.rs`);
//!   `phases.rs`: the overlay and the cluster (phases 2 and 3); `deploy.rs`: starting and
//!   removing a broker; `impairment.rs`: a scenario's netem per node; `scenario.rs`: netem
//!   per scenario under leases; `cell.rs`, `load.rs` and `search.rs`: one measurement.

mod agents;
mod cell;
#[cfg(test)]
mod credentials_tests;
mod deploy;
mod error;
mod events;
mod execute;
mod guard;
mod impairment;
mod lines;
mod load;
mod local_agent;
#[cfg(feature = "local-agent")]
mod namespaces;
mod phases;
mod record;
#[cfg(test)]
mod resume_tests;
mod scenario;
mod search;
pub mod testbed;
#[cfg(test)]
mod undo_tests;

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

pub use self::agents::AgentHandle;
pub use self::deploy::BROKER_LEASE;
pub use self::error::RunError;
use self::events::Events;
pub use self::events::{
    EVENT_CAPACITY, MeasuredCell, RunCounts, RunEvent, RunEvents, event_channel,
};
pub use self::execute::RunSummary;
use self::execute::{Run, Setting};
use self::guard::{Guard, catching};
pub use self::lines::EventLines;
pub use self::local_agent::LocalAgent;
use self::local_agent::LocalAgents;
#[cfg(feature = "local-agent")]
pub use self::namespaces::{EMULATED_ROOT, Leftover, Missing, emulation_lacks, remove_leftovers};
use self::testbed::{Connected, Testbed};
use crate::plan::Plan;
use crate::results::ResultsDir;

/// How a run was started.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Continue the run in this folder, skipping finished cells.
    pub resume: Option<PathBuf>,
    /// A new run writes into this folder (a service names it by the run's id) instead of
    /// `<results_dir>/<name>-<time>`.
    pub folder: Option<PathBuf>,
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

/// [`run_plan`], also sending [`RunEvent`]s to `events` (from [`event_channel`]) as it goes:
/// when the folder is open, for each node, broker and scenario, as each cell is recorded,
/// and for the report.
pub async fn run_plan_observed(
    plan: &Plan,
    plan_text: &str,
    options: RunOptions,
    cancel: CancellationToken,
    events: Option<RunEvents>,
) -> Result<RunSummary, RunError> {
    run_on(plan, plan_text, options, cancel, events, &Connected).await
}

/// [`run_plan_observed`] on `testbed`: the agents the run connects to, as it reaches them.
pub(crate) async fn run_on(
    plan: &Plan,
    plan_text: &str,
    options: RunOptions,
    cancel: CancellationToken,
    events: Option<RunEvents>,
    testbed: &dyn Testbed,
) -> Result<RunSummary, RunError> {
    if let Some(source) = plan.unread_password_source() {
        return Err(RunError::Plan(format!(
            "{source}: the password it names was never read (Plan::parse_local or \
             Plan::read_credentials reads it); the run would connect without it"
        )));
    }
    let dir = results_folder(plan, &options)?;
    if let Some(pki) = plan.pki_dir.as_deref() {
        crate::pki_command::warn_expiring(pki);
    }
    let events = Events::new(events);
    let setting = Setting {
        plan_text,
        dir,
        cancel,
        events: events.clone(),
        netem_renewal: testbed.netem_renewal(),
    };
    // The local agents' guard is outermost: they are stopped (after the brokers and netem
    // inside) on every way out, before the report is written.
    let mut locals = Guard::new(LocalAgents::default());
    let outcome = catching(async {
        // Every agent must answer before anything is written or changed anywhere.
        let agents = agents::connect_all(plan, testbed, locals.get_mut(), &events).await?;
        let mut run = Run::open(plan, agents, setting).await?;
        run.prepare().await?;
        let flow = Box::pin(run.brokers()).await?;
        run.close(flow)
    })
    .await;
    let summary = locals.finish(outcome).await?;
    report(&summary.dir, &events).await;
    Ok(summary)
}

/// The folder to write into: the resumed one (which must hold this plan's run), or a new one.
fn results_folder(plan: &Plan, options: &RunOptions) -> Result<PathBuf, RunError> {
    let Some(dir) = &options.resume else {
        if let Some(folder) = &options.folder {
            return Ok(fresh_folder(folder));
        }
        let name = format!("{}-{}", plan.name, timestamp());
        return Ok(fresh_folder(&plan.results_dir.join(name)));
    };
    // The manifest holds the plan redacted (and is read back so): compare like with like,
    // or a plan with a password could never be resumed. Where metrics are served changes
    // nothing measured.
    let measured_part = |plan: &Plan| Plan {
        metrics: None,
        ..plan.clone()
    };
    if let Ok(previous) = ResultsDir::open(dir)?.read_manifest()
        && measured_part(&previous.plan) != measured_part(&plan.redacted())
    {
        return Err(RunError::ResumeMismatch {
            dir: dir.display().to_string(),
        });
    }
    Ok(dir.clone())
}

/// Writes the report; a failure is reported, not returned: the measurements are on disk and
/// `controller report DIR` can try again.
async fn report(dir: &Path, events: &Events) {
    let event = match crate::report::write_report(dir) {
        Ok(files) => RunEvent::Report {
            html: files.html,
            markdown: files.markdown,
        },
        Err(error) => RunEvent::ReportFailed {
            error: error.to_string(),
        },
    };
    events.emit(event).await;
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
