//! The run registry's Rust state as the `Controller` protocol's messages: the one place
//! where a time not yet reached becomes 0 and a missing folder or reason an empty string.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use proto::controller::v1 as pb;

use super::runs::{Outcome, RunInfo, RunState, Update};
use crate::run::RunCounts;

impl From<&RunInfo> for pb::RunInfo {
    fn from(run: &RunInfo) -> Self {
        let (state, started, ended, dir, error) = match &run.state {
            RunState::Queued => (pb::RunState::Queued, None, None, None, None),
            RunState::Running { started, dir, .. } => (
                pb::RunState::Running,
                Some(*started),
                None,
                dir.as_deref(),
                None,
            ),
            RunState::Ended {
                started,
                ended,
                outcome,
                dir,
            } => (
                state_of(outcome),
                *started,
                Some(*ended),
                dir.as_deref(),
                outcome.reason(),
            ),
        };
        pb::RunInfo {
            id: run.id.clone(),
            plan_name: run.plan_name.clone(),
            state: state.into(),
            counts: Some(counts(&run.counts)),
            submitted_unix_ms: unix_ms(Some(run.submitted)),
            started_unix_ms: unix_ms(started),
            ended_unix_ms: unix_ms(ended),
            results_dir: dir_text(dir),
            error: error.unwrap_or_default().to_string(),
        }
    }
}

impl From<Update> for pb::RunEvent {
    fn from(update: Update) -> Self {
        use pb::run_event::Event;
        let progress = |state: pb::RunState, now: &RunCounts| {
            Event::Progress(pb::RunProgress {
                state: state.into(),
                counts: Some(counts(now)),
            })
        };
        let event = match update {
            Update::Queued(now) => progress(pb::RunState::Queued, &now),
            Update::Running(now) => progress(pb::RunState::Running, &now),
            Update::Started { dir, total } => Event::Started(pb::RunStarted {
                results_dir: dir_text(Some(&dir)),
                total_cells: saturate(total),
            }),
            Update::Cell {
                id,
                status,
                note,
                counts: now,
            } => Event::Cell(pb::CellFinished {
                id,
                status: status.as_str().to_string(),
                note,
                counts: Some(counts(&now)),
            }),
            Update::Step { line, runnable } => Event::Step(pb::RunStep {
                line: line.unwrap_or_default(),
                runnable_cells: runnable.map_or(0, saturate),
            }),
            Update::Ended {
                outcome,
                counts: now,
                dir,
            } => Event::Finished(pb::RunFinished {
                state: state_of(&outcome).into(),
                counts: Some(counts(&now)),
                results_dir: dir_text(dir.as_deref()),
                error: outcome.reason().unwrap_or_default().to_string(),
            }),
        };
        pb::RunEvent { event: Some(event) }
    }
}

/// The protocol's final state for an outcome.
fn state_of(outcome: &Outcome) -> pb::RunState {
    match outcome {
        Outcome::Finished => pb::RunState::Finished,
        Outcome::Failed(_) => pb::RunState::Failed,
        Outcome::Cancelled(_) => pb::RunState::Cancelled,
    }
}

fn counts(counts: &RunCounts) -> pb::Counts {
    pb::Counts {
        total: saturate(counts.total),
        done: saturate(counts.done),
        measured: saturate(counts.measured),
        failed: saturate(counts.failed),
        skipped: saturate(counts.skipped),
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Unix ms; 0 for "not yet" (and for a clock before 1970).
fn unix_ms(time: Option<SystemTime>) -> u64 {
    time.and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The folder as text; empty for none.
fn dir_text(dir: Option<&Path>) -> String {
    dir.map(|dir| dir.display().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;

    fn info(state: RunState) -> RunInfo {
        RunInfo {
            id: "ab".into(),
            plan_name: "p".into(),
            submitted: UNIX_EPOCH + Duration::from_millis(1_000),
            state,
            counts: RunCounts {
                total: 3,
                ..RunCounts::default()
            },
        }
    }

    #[test]
    fn what_a_run_has_not_reached_is_zero_or_empty_on_the_wire() {
        let queued = pb::RunInfo::from(&info(RunState::Queued));
        assert_eq!(queued.state(), pb::RunState::Queued);
        assert_eq!(queued.submitted_unix_ms, 1_000);
        assert_eq!((queued.started_unix_ms, queued.ended_unix_ms), (0, 0));
        assert_eq!(
            (queued.results_dir.as_str(), queued.error.as_str()),
            ("", "")
        );
        assert_eq!(queued.counts.map(|c| c.total), Some(3));

        let cancelled = pb::RunInfo::from(&info(RunState::Ended {
            started: None,
            ended: UNIX_EPOCH + Duration::from_millis(2_500),
            outcome: Outcome::Cancelled("cancelled by laptop while queued".into()),
            dir: None,
        }));
        assert_eq!(cancelled.state(), pb::RunState::Cancelled);
        assert_eq!(
            (cancelled.started_unix_ms, cancelled.ended_unix_ms),
            (0, 2_500)
        );
        assert_eq!(cancelled.results_dir, "");
        assert_eq!(cancelled.error, "cancelled by laptop while queued");

        let finished = pb::RunInfo::from(&info(RunState::Ended {
            started: Some(UNIX_EPOCH + Duration::from_millis(1_500)),
            ended: UNIX_EPOCH + Duration::from_millis(2_500),
            outcome: Outcome::Finished,
            dir: Some(PathBuf::from("/srv/results/ab")),
        }));
        assert_eq!(finished.state(), pb::RunState::Finished);
        assert_eq!(finished.started_unix_ms, 1_500);
        assert_eq!(finished.results_dir, "/srv/results/ab");
        assert_eq!(finished.error, "");
    }

    #[test]
    fn the_last_update_is_a_run_finished_with_its_state_folder_and_reason() {
        let event = pb::RunEvent::from(Update::Ended {
            outcome: Outcome::Failed("node n: unreachable".into()),
            counts: RunCounts::default(),
            dir: None,
        });
        let Some(pb::run_event::Event::Finished(finished)) = event.event else {
            panic!("{event:?}");
        };
        assert_eq!(finished.state(), pb::RunState::Failed);
        assert_eq!(finished.results_dir, "");
        assert_eq!(finished.error, "node n: unreachable");
    }
}
