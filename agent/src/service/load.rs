//! RunLoad: this agent's shard of a loadgen workload, started at the controller's barrier,
//! streamed as progress events and a final result. Cancelling the call cancels the load.

use loadgen::{Phase, StartBarrier, WorkloadSpec};
use proto::agent::v1 as pb;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::status::{from_loadgen, missing};

/// Checks the request and starts the load; the stream ends with the result or an error.
pub(crate) fn start(
    request: pb::RunLoadRequest,
    shutdown: CancellationToken,
) -> Result<ReceiverStream<Result<pb::RunLoadEvent, Status>>, Status> {
    let spec = request.spec.ok_or_else(|| missing("spec"))?;
    let spec = WorkloadSpec::try_from(spec).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let barrier = StartBarrier {
        origin_unix_ns: (request.origin_unix_ns != 0).then_some(request.origin_unix_ns),
        start_at_ns: (request.start_at_ns != 0).then_some(request.start_at_ns),
    };
    let (tx, rx) = mpsc::channel(16);
    let cancel = shutdown.child_token();
    tokio::spawn(async move {
        let (status_tx, mut status_rx) = watch::channel(loadgen::Status::default());
        // On a runtime of its own (loadgen::runtime): the load does not share this agent's
        // threads, and its CPU figures are its own threads', not the agent's.
        let run = loadgen::run_dedicated(spec, barrier, cancel.clone(), Some(status_tx));
        tokio::pin!(run);
        let mut caller_gone = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                changed = status_rx.changed() => {
                    if changed.is_ok() {
                        let status = *status_rx.borrow_and_update();
                        // Progress is best effort: a slow reader skips updates, never the result.
                        let _ = tx.try_send(Ok(progress(&status)));
                    }
                }
                _ = tx.closed(), if !caller_gone => {
                    caller_gone = true;
                    tracing::info!("RunLoad caller went away: cancelling the load");
                    cancel.cancel();
                }
            }
        };
        let last = match outcome {
            Ok(result) => proto::loadgen::v1::RunResult::try_from(&result)
                .map(|result| pb::RunLoadEvent {
                    event: Some(pb::run_load_event::Event::Result(Box::new(result))),
                })
                .map_err(|e| Status::internal(format!("encoding the result: {e}"))),
            Err(error) => Err(from_loadgen(error)),
        };
        let _ = tx.send(last).await;
    });
    Ok(ReceiverStream::new(rx))
}

fn progress(status: &loadgen::Status) -> pb::RunLoadEvent {
    let phase = match status.phase {
        Phase::Preflight => "preflight",
        Phase::Connecting => "connecting",
        Phase::Publishing => "publishing",
        Phase::Draining => "draining",
        Phase::Done => "done",
    };
    pb::RunLoadEvent {
        event: Some(pb::run_load_event::Event::Progress(pb::LoadProgress {
            phase: phase.to_string(),
            published: status.progress.published,
            received: status.progress.received,
            connected: status.connected.0,
            planned_connections: status.connected.1,
        })),
    }
}
