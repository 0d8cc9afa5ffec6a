//! RunLoad: this agent's shard of a loadgen workload, started at the controller's barrier,
//! streamed as progress events and a final result. Cancelling the call cancels the load.

use std::sync::Arc;

use loadgen::{Phase, StartBarrier, WorkloadSpec};
use proto::agent::v1 as pb;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::load_board::{LoadBoard, check_labels};
use super::slots::Slots;
use super::status::{from_loadgen, missing};

/// Loads one agent runs at once. A run needs one per loadgen node and cell, but the load of a
/// cell that failed elsewhere (another node lost) may still be winding down when the next
/// cell's starts, so this leaves room for a few.
pub(crate) const MAX_CONCURRENT_LOADS: usize = 8;
/// The share of this node's memory one load's payloads may hold at once, percent.
pub(crate) const MAX_MEMORY_PERCENT: u64 = 50;

/// Loads running now.
static LOADS: Slots = Slots::new(MAX_CONCURRENT_LOADS, "loads");

/// The agent's own budget, beyond the spec's bounds (which hold for any machine): this
/// shard's payloads at once may take at most [`MAX_MEMORY_PERCENT`] of this node's memory.
fn within_budget(spec: &WorkloadSpec, node_memory_bytes: u64) -> Result<(), Status> {
    let shard = spec.effective_shard();
    let clients = (shard.publishers.len() + shard.subscribers.len()) as u64;
    let held = spec.payload.bytes().saturating_mul(clients);
    let budget = node_memory_bytes / 100 * MAX_MEMORY_PERCENT;
    if node_memory_bytes > 0 && held > budget {
        return Err(Status::resource_exhausted(format!(
            "payload: {} x {clients} clients of this shard hold {} at once, over {MAX_MEMORY_PERCENT} % of this node's {}",
            spec.payload,
            loadgen::size::ByteSize(held),
            loadgen::size::ByteSize(node_memory_bytes)
        )));
    }
    Ok(())
}

/// This node's memory; 0 (no budget beyond the spec's bounds) when it cannot be read.
fn node_memory_bytes() -> u64 {
    sysinfo::System::new().map_or(0, |mut system| {
        system.refresh_memory();
        system.total_memory()
    })
}

/// Checks the request and starts the load, shown on `board` as run on `node`; the stream
/// ends with the result or an error.
pub(crate) fn start(
    request: pb::RunLoadRequest,
    shutdown: CancellationToken,
    board: &Arc<LoadBoard>,
    node: &str,
) -> Result<ReceiverStream<Result<pb::RunLoadEvent, Status>>, Status> {
    let spec = request.spec.ok_or_else(|| missing("spec"))?;
    let spec = WorkloadSpec::try_from(spec).map_err(|e| Status::invalid_argument(e.to_string()))?;
    within_budget(&spec, node_memory_bytes())?;
    check_labels(&request.labels)?;
    let slot = LOADS.take()?;
    let shown = board.begin(node, spec.run_id.as_deref().unwrap_or("-"), &request.labels);
    let barrier = StartBarrier {
        origin_unix_ns: (request.origin_unix_ns != 0).then_some(request.origin_unix_ns),
        start_at_ns: (request.start_at_ns != 0).then_some(request.start_at_ns),
    };
    let (tx, rx) = mpsc::channel(16);
    let cancel = shutdown.child_token();
    tokio::spawn(async move {
        let _slot = slot;
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
                        shown.progress(&status);
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
        shown.end(outcome.as_ref().ok());
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

/// A phase as progress events and metrics name it.
pub(crate) fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Preflight => "preflight",
        Phase::Connecting => "connecting",
        Phase::Publishing => "publishing",
        Phase::Draining => "draining",
        Phase::Done => "done",
    }
}

fn progress(status: &loadgen::Status) -> pb::RunLoadEvent {
    pb::RunLoadEvent {
        event: Some(pb::run_load_event::Event::Progress(pb::LoadProgress {
            phase: phase_name(status.phase).to_string(),
            published: status.progress.published,
            received: status.progress.received,
            connected: status.connected.0,
            planned_connections: status.connected.1,
        })),
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod served_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_holding_more_than_half_the_nodes_memory_is_refused() {
        let mut spec = loadgen::presets::throughput();
        spec.publishers = 1_000;
        spec.subscribers = 1_000;
        spec.payload = loadgen::size::ByteSize(1 << 20);
        // 2000 clients x 1 MiB = about 2 GiB: fine on a 24 GiB node, not on a 2 GiB Pi.
        assert!(within_budget(&spec, 24 << 30).is_ok());
        let refused = within_budget(&spec, 2 << 30).expect_err("a small node");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().starts_with("payload:"),
            "{}",
            refused.message()
        );
    }

    #[test]
    fn loads_beyond_the_bound_are_refused_until_one_ends() {
        // Slots of its own: the agent's are the served loads' (loads_whose_caller_went_away).
        static LOADS: Slots = Slots::new(MAX_CONCURRENT_LOADS, "loads");
        let slots: Vec<_> = (0..MAX_CONCURRENT_LOADS)
            .map(|_| LOADS.take().expect("within the bound"))
            .collect();
        let refused = LOADS.take().expect_err("one too many");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("8 loads"),
            "{}",
            refused.message()
        );
        drop(slots);
        assert!(LOADS.take().is_ok());
    }
}
