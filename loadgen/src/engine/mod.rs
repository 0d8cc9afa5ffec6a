//! Runs one workload through its phases and gathers the [`RunResult`]. `run_scoped` (behind
//! [`run`] and [`run_at`]) is the script, one call per phase:
//!
//! `prepare -> preflight -> connect -> start -> publish -> drain -> finish`
//!
//! Each phase lives in its own file and hands the next a small struct:
//! - `prepare`: the spec checked; the run's id, shard, dialer, codec and clock fixed; enough
//!   open files (the `Run` every phase shares).
//! - `preflight`: one probe connection, so a broker that is down fails fast; the broker's
//!   process when it runs on this host.
//! - `connect`: every connection, subscribers first, ramped up (`Connected`).
//! - `start`: the start barrier: the CPU measurement begins, the first message's time and the
//!   run's `Timing` are fixed, the subscribers, the churn fleet (`churn`) and the will clients
//!   (`wills`) set off (`Started`).
//! - `publish`: the publisher tasks and an open loop's pacer, until the last publisher ends.
//! - `drain`: waiting for what is in flight, then for every subscriber, churn client and will
//!   client (`Drained`).
//! - `finish`: the measurement stops; every outcome is folded into the result with the
//!   instance's load over the measured window.

mod churn;
mod connect;
mod drain;
mod finish;
mod preflight;
mod prepare;
mod publish;
mod retained;
mod start;
mod state;
mod wills;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::LoadgenError;
use crate::result::RunResult;
use crate::spec::WorkloadSpec;
use crate::usage::Scope;
use connect::connect;
use drain::drain;
use finish::finish;
use preflight::preflight;
use prepare::Run;
use prepare::prepare;
use publish::publish;
use start::start;
pub use state::{Phase, Role, StartBarrier, Status};

/// Runs `spec` to completion (or until `cancel`), reporting progress on `status` if given.
pub async fn run(
    spec: &WorkloadSpec,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    run_at(spec, StartBarrier::default(), cancel, status).await
}

/// Like [`run`], with the run clock and the start time fixed by `barrier`, so that instances
/// on several hosts publish on one timeline from one moment.
pub async fn run_at(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    run_scoped(spec, barrier, cancel, status, Scope::Process).await
}

/// [`run_at`], measuring the CPU of `scope` (a dedicated run's own threads): the phases in
/// order, each handing the next what it needs.
pub(crate) async fn run_scoped(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
    scope: Scope,
) -> Result<RunResult, LoadgenError> {
    let run = prepare(spec, barrier, cancel, status, scope)?;
    let outcome = measure(&run).await;
    // Connections still closing (QUIC's, after their goodbye) finish before the runtime may
    // go, whether the run succeeded or not.
    run.dialer.settle().await;
    outcome
}

/// The phases after `prepare`.
async fn measure(run: &Run<'_>) -> Result<RunResult, LoadgenError> {
    let local_broker = preflight(run).await?;
    let connected = connect(run).await?;
    let mut started = start(run, connected.subscribers, local_broker)?;
    let published = publish(run, &started, connected.publishers).await?;
    let drained = drain(run, &mut started, published).await?;
    let mut result = finish(run, connected.result, started, drained).await;
    // After the measurement: the late subscribers' connections are not the load's.
    // The instance holding every publisher checks; one without publishers leaves it to it.
    if run.spec.retain.is_some()
        && run.shard.publishers == (0..run.spec.publishers)
        && !run.cancel.is_cancelled()
    {
        result.retained = Some(retained::check(run, &result.published).await);
    }
    Ok(result)
}
