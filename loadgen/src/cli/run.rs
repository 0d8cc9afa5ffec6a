//! The run commands (`latency`, `payload`, `throughput`, `run`): one workload carried out
//! here, on its own runtime, with a progress bar on a terminal and Ctrl-C or SIGTERM ending it
//! early with the figures of what ran.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{CliError, OutputArgs};
use crate::engine::{Phase, Status};
use crate::result::RunResult;
use crate::spec::WorkloadSpec;

/// Runs `spec` to completion or until a signal, showing progress unless `output` says not to.
pub(super) async fn run_workload(
    spec: WorkloadSpec,
    output: &OutputArgs,
) -> Result<RunResult, CliError> {
    let cancel = CancellationToken::new();
    spawn_signal_handler(cancel.clone());
    let show_progress = !output.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (status_tx, status_rx) = watch::channel(Status::default());
    let progress = show_progress.then(|| tokio::spawn(progress_bar(status_rx)));
    let outcome = crate::runtime::run_dedicated(
        spec,
        crate::engine::StartBarrier::default(),
        cancel,
        Some(status_tx),
    )
    .await;
    if let Some(progress) = progress {
        let _ = progress.await;
    }
    Ok(outcome?)
}

/// Cancels `cancel` on SIGINT or SIGTERM (how systemd and CI stop a process).
pub(super) fn spawn_signal_handler(cancel: CancellationToken) {
    tokio::spawn(async move {
        host::termination().await;
        eprintln!("loadgen: stopping (the figures will cover what ran)");
        cancel.cancel();
    });
}

/// Draws the run's phase and counters on stderr until the run is done.
async fn progress_bar(mut status: watch::Receiver<Status>) {
    let bar = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} {msg:<12} [{bar:30}] {pos}/{len} published {prefix}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar.enable_steady_tick(Duration::from_millis(120));
    loop {
        let current = *status.borrow_and_update();
        let phase = match current.phase {
            Phase::Preflight => "preflight",
            Phase::Connecting => "connecting",
            Phase::Publishing => "publishing",
            Phase::Draining => "draining",
            Phase::Done => "done",
        };
        bar.set_message(phase);
        bar.set_length(current.planned_publishes);
        bar.set_position(current.progress.published);
        bar.set_prefix(format!(
            "| {} received | {}/{} connected",
            current.progress.received, current.connected.0, current.connected.1
        ));
        if current.phase == Phase::Done || status.changed().await.is_err() {
            break;
        }
    }
    bar.finish_and_clear();
}
