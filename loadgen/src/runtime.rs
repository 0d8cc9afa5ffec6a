//! The threads a run lives on: a runtime of its own, built from the spec's
//! [`EngineOptions`](crate::spec::EngineOptions), whether the run was started by the `loadgen`
//! command or by an agent (whose own runtime keeps serving gRPC meanwhile).
//!
//! Few threads (one on a 2-core machine) keep loadgen cheap for a broker on the same host: the
//! broker keeps a core of its own (bench/RESULTS.md, "loadgen as a neutral instrument"; the
//! subscribers' receive coalescing is the other half, [`crate::spec::Coalescing`]).

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::cpus::threads_for;
use crate::engine::{StartBarrier, Status};
use crate::spec::WorkloadSpec;
use crate::usage::{RunThreads, Scope};
use crate::{LoadgenError, RunResult};

/// Builds the runtime `spec` runs on; its threads register in `threads`.
fn build(
    spec: &WorkloadSpec,
    threads_of_run: &RunThreads,
) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = threads_for(spec);
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    builder.enable_all().thread_name("loadgen");
    let registry = threads_of_run.clone();
    builder.on_thread_start(move || registry.register_current());
    builder.build()
}

/// Runs `spec` on a runtime of its own (see [`build`]) on a new thread; the future resolves
/// when the run ends. Cancelling `cancel` stops the run as [`crate::run_at`] does.
pub async fn run_dedicated(
    spec: WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    let (done_tx, done_rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("loadgen-run".into())
        .spawn(move || {
            let threads = RunThreads::default();
            threads.register_current();
            let outcome = match build(&spec, &threads) {
                Ok(runtime) => runtime.block_on(crate::engine::run_scoped(
                    &spec,
                    barrier,
                    cancel,
                    status,
                    Scope::Threads(threads.clone()),
                )),
                Err(error) => Err(LoadgenError::Internal(format!(
                    "cannot start the load's runtime: {error}"
                ))),
            };
            let _ = done_tx.send(outcome);
        })
        .map_err(|e| LoadgenError::Internal(format!("cannot start the load's thread: {e}")))?;
    done_rx
        .await
        .map_err(|_| LoadgenError::Internal("the load's thread ended without a result".into()))?
}
