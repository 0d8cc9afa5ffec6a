//! Recording cells as they end: the summary row, the result and histogram files, the run's
//! counts and the [`RunEvent::Cell`] that reports them.

use std::sync::Arc;

use crate::plan::{Cell, Plan};
use crate::results::usage::{BrokerUsage, broker_usage, generator_limit};
use crate::results::{CellRecord, CellStatus, MetricsRow, ResultsDir, SaturationRecord};

use super::cell::{self, CellOutcome};
use super::error::RunError;
use super::events::{Events, MeasuredCell, RunCounts, RunEvent};

/// What a cell adds to loadgen's figures.
#[derive(Debug, Default)]
pub(super) struct Extras {
    usage: Option<BrokerUsage>,
    generator_limit: Option<String>,
    search: Option<loadgen::saturation::SaturationReport>,
}

/// A cell as it is recorded: how it ended, its note, its result and what it adds.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) status: CellStatus,
    /// The one-line figures, or why it failed or was skipped.
    pub(super) note: String,
    result: Option<Box<loadgen::RunResult>>,
    /// The result's figures, computed once when the cell ended.
    summary: Option<Box<loadgen::Summary>>,
    extras: Extras,
}

impl Ended {
    /// This cell, failed for `reason` although it was measured (its emulation lapsed while
    /// it ran): its figures stay on disk with the reason in front, never as a success.
    pub(super) fn failed_because(mut self, reason: &str) -> Self {
        self.status = CellStatus::Failed;
        self.note = if self.note.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}; measured anyway: {}", self.note)
        };
        self
    }

    /// A cell that was not measured, for `reason`.
    pub(super) fn unmeasured(status: CellStatus, reason: &str) -> Self {
        Ended {
            status,
            note: reason.to_string(),
            result: None,
            summary: None,
            extras: Extras::default(),
        }
    }

    /// A cell that ran: its outcome with the broker's usage from `metrics` (of the broker
    /// `watched` by name, its node's clock `shift` ns from the loadgen node's).
    pub(super) fn ran(
        outcome: CellOutcome,
        metrics: &[MetricsRow],
        watched: Option<(&str, i64)>,
    ) -> Self {
        let measured = |result: &loadgen::RunResult| {
            let summary = loadgen::Summary::of(result);
            let usage = watched
                .and_then(|(name, shift)| broker_usage(result, &summary, metrics, name, shift));
            let limit = generator_limit(&summary, usage.as_ref());
            let extras = Extras {
                usage,
                generator_limit: limit,
                search: None,
            };
            (cell::one_line(&summary), extras, Some(Box::new(summary)))
        };
        match outcome {
            CellOutcome::Measured(result) => {
                let (note, extras, summary) = measured(&result);
                Ended {
                    status: CellStatus::Ok,
                    note,
                    result: Some(result),
                    summary,
                    extras,
                }
            }
            CellOutcome::Searched(report, at_rate) => {
                let (note, mut extras, summary) = match &at_rate {
                    Some(result) => measured(result),
                    None => (String::new(), Extras::default(), None),
                };
                let found = loadgen::output::saturation_summary(&report);
                let note = if note.is_empty() {
                    found.trim_end().to_string()
                } else {
                    format!("{}; at that rate: {note}", found.trim_end())
                };
                extras.search = Some(*report);
                Ended {
                    status: CellStatus::Ok,
                    note,
                    result: at_rate,
                    summary,
                    extras,
                }
            }
            CellOutcome::Failed(reason) => Ended::unmeasured(CellStatus::Failed, &reason),
        }
    }
}

/// The run's counts and where they are reported.
#[derive(Debug)]
pub(super) struct Progress {
    pub(super) counts: RunCounts,
    pub(super) events: Events,
}

impl Progress {
    /// Records `cell` as it ended, counts it and reports it.
    pub(super) async fn record(
        &mut self,
        results: &ResultsDir,
        plan: &Plan,
        cell: &Cell,
        ended: Ended,
    ) -> Result<(), RunError> {
        let test = &plan.tests[cell.test];
        let Ended {
            status,
            note,
            result,
            summary,
            extras,
        } = ended;
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
                note.clone()
            },
            // Counted by the folder, from the record this one replaces.
            earlier_failures: 0,
            spec: result.as_ref().map(|result| result.spec.clone()),
            summary: summary.map(|summary| *summary),
            usage: extras.usage,
            generator_limit: extras.generator_limit,
            saturation: extras.search.as_ref().map(SaturationRecord::of),
        };
        results.record(&record, result.as_deref(), extras.search.as_ref())?;
        let measured = (status == CellStatus::Ok).then(|| {
            Arc::new(MeasuredCell {
                record: record.clone(),
                latency: result
                    .as_ref()
                    .map(|result| crate::metrics::LatencyBuckets::of(&result.latency)),
            })
        });
        let counts = &mut self.counts;
        counts.done += 1;
        match status {
            CellStatus::Ok => counts.measured += 1,
            CellStatus::Failed => counts.failed += 1,
            CellStatus::Skipped => counts.skipped += 1,
        }
        let event = RunEvent::Cell {
            id: record.cell,
            status,
            note,
            counts: *counts,
            measured,
        };
        self.events.emit(event).await;
        Ok(())
    }

    /// Records `cells` as failed or skipped, all for the same reason.
    pub(super) async fn record_unmeasured(
        &mut self,
        results: &ResultsDir,
        plan: &Plan,
        cells: &[&Cell],
        status: CellStatus,
        reason: &str,
    ) -> Result<(), RunError> {
        for cell in cells {
            self.record(results, plan, cell, Ended::unmeasured(status, reason))
                .await?;
        }
        Ok(())
    }
}
