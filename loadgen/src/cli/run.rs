//! The run commands (`latency`, `payload`, `throughput`, `run`): one workload carried out
//! here, on its own runtime, with a progress bar on a terminal and Ctrl-C or SIGTERM ending it
//! early with the figures of what ran (or, if the run does not stop within
//! [`STOP_WITHIN`], without them).

use std::future::Future;
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
    let run = crate::runtime::run_dedicated(
        spec,
        crate::engine::StartBarrier::default(),
        cancel.clone(),
        Some(status_tx),
    );
    let outcome = stopped_within_bound(run, &cancel).await;
    if let Some(progress) = progress {
        // A run left behind still holds the status sender: its bar would wait for ever.
        if outcome.is_ok() {
            let _ = progress.await;
        } else {
            progress.abort();
        }
    }
    Ok(outcome??)
}

/// After SIGINT or SIGTERM a run has this long to stop and hand over its figures: loadgen
/// exits within a second of the signal, whatever the run was waiting for (systemd and CI
/// stop a process with SIGTERM and expect it gone).
pub(super) const STOP_WITHIN: Duration = Duration::from_millis(900);

/// `run`'s outcome, or [`CliError::NotStopped`] when `cancel` fired and `run` did not end
/// within [`STOP_WITHIN`] of it. The run's thread is left behind; the process exits.
pub(super) async fn stopped_within_bound<T>(
    run: impl Future<Output = T>,
    cancel: &CancellationToken,
) -> Result<T, CliError> {
    let overdue = async {
        cancel.cancelled().await;
        tokio::time::sleep(STOP_WITHIN).await;
    };
    tokio::select! {
        biased;
        outcome = run => Ok(outcome),
        () = overdue => Err(CliError::NotStopped(STOP_WITHIN)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_that_does_not_stop_after_the_signal_is_left_behind_within_the_bound() {
        let cancel = CancellationToken::new();
        // A run that finishes is never cut short, cancelled or not.
        assert_eq!(
            stopped_within_bound(async { 7 }, &cancel).await.ok(),
            Some(7)
        );
        cancel.cancel();
        assert_eq!(
            stopped_within_bound(async { 7 }, &cancel).await.ok(),
            Some(7)
        );
        // One that waits for ever after the signal is given up at the bound.
        let began = std::time::Instant::now();
        let outcome = stopped_within_bound(std::future::pending::<()>(), &cancel).await;
        assert!(matches!(outcome, Err(CliError::NotStopped(STOP_WITHIN))));
        assert!(began.elapsed() >= STOP_WITHIN);
    }
}
