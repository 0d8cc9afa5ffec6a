//! One-line, human-readable descriptions of runs and run events.

use proto::controller::v1 as pb;

/// The state's short name: queued, running, finished, failed, cancelled.
pub fn state_name(state: pb::RunState) -> &'static str {
    match state {
        pb::RunState::Unspecified => "unknown",
        pb::RunState::Queued => "queued",
        pb::RunState::Running => "running",
        pb::RunState::Finished => "finished",
        pb::RunState::Failed => "failed",
        pb::RunState::Cancelled => "cancelled",
    }
}

fn counts_text(counts: Option<&pb::Counts>) -> String {
    let c = counts.copied().unwrap_or_default();
    format!(
        "{}/{} cells ({} measured, {} failed, {} skipped)",
        c.done, c.total, c.measured, c.failed, c.skipped
    )
}

/// A line for a run in `list` and `cancel`: id, state, plan, counts, times, folder, error.
pub fn describe_run(run: &pb::RunInfo) -> String {
    let mut line = format!(
        "{}  {:<9}  {}  {}",
        run.id,
        state_name(run.state()),
        run.plan_name,
        counts_text(run.counts.as_ref())
    );
    if run.started_unix_ms > 0 {
        line.push_str(&format!(
            "  started {}",
            crate::civil::utc_text(run.started_unix_ms)
        ));
    } else {
        line.push_str(&format!(
            "  submitted {}",
            crate::civil::utc_text(run.submitted_unix_ms)
        ));
    }
    if !run.results_dir.is_empty() {
        line.push_str(&format!("  {}", run.results_dir));
    }
    if !run.error.is_empty() {
        line.push_str(&format!("  ({})", run.error));
    }
    line
}

/// A line for an event of `watch`; None for an event without content.
pub fn describe_event(event: &pb::RunEvent) -> Option<String> {
    Some(match event.event.as_ref()? {
        pb::run_event::Event::Progress(progress) => format!(
            "{}: {}",
            state_name(progress.state()),
            counts_text(progress.counts.as_ref())
        ),
        pb::run_event::Event::Started(started) => format!(
            "results in {}, {} cells",
            started.results_dir, started.total_cells
        ),
        // As at the controller's terminal: the broker or scenario said why, once.
        pb::run_event::Event::Cell(cell) if cell.status == "skipped" => return None,
        pb::run_event::Event::Cell(cell) => {
            let c = cell.counts.unwrap_or_default();
            format!(
                "[{:>4}/{}] {} {}: {}",
                c.done, c.total, cell.id, cell.status, cell.note
            )
        }
        pb::run_event::Event::Step(step) if step.line.is_empty() => return None,
        pb::run_event::Event::Step(step) => step.line.clone(),
        pb::run_event::Event::Finished(finished) => {
            let mut line = format!(
                "{}: {}",
                state_name(finished.state()),
                counts_text(finished.counts.as_ref())
            );
            if !finished.results_dir.is_empty() {
                line.push_str(&format!("; results in {}", finished.results_dir));
            }
            if !finished.error.is_empty() {
                line.push_str(&format!(" ({})", finished.error));
            }
            line
        }
    })
}

/// How `watch` shows a run: each event's line on stdout and, when both stdout and stderr are
/// terminals, under a progress bar of the cells that will run, as the controller's own
/// terminal does. Piped, the lines alone.
#[derive(Debug)]
pub struct WatchDisplay {
    bar: Option<indicatif::ProgressBar>,
}

impl WatchDisplay {
    /// A display for this process's terminal.
    pub fn new() -> Self {
        use std::io::IsTerminal;
        let interactive = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let bar = interactive.then(|| {
            let bar = indicatif::ProgressBar::new(0);
            let style = indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} cells  {elapsed_precise}  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        WatchDisplay { bar }
    }

    /// Shows one event.
    pub fn show(&self, event: &pb::RunEvent) {
        if let Some(bar) = &self.bar {
            match event.event.as_ref() {
                Some(pb::run_event::Event::Started(started)) => {
                    bar.set_length(u64::from(started.total_cells));
                }
                Some(pb::run_event::Event::Step(step)) if step.runnable_cells > 0 => {
                    bar.set_length(u64::from(step.runnable_cells));
                }
                Some(pb::run_event::Event::Cell(cell)) => {
                    let c = cell.counts.unwrap_or_default();
                    bar.set_position(u64::from(c.done.saturating_sub(c.skipped)));
                    bar.set_message(format!("{} failed", c.failed));
                }
                _ => {}
            }
        }
        let Some(line) = describe_event(event) else {
            return;
        };
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }
}

impl Default for WatchDisplay {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for WatchDisplay {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_event_reads_as_one_line() {
        let event = pb::RunEvent {
            event: Some(pb::run_event::Event::Finished(pb::RunFinished {
                state: pb::RunState::Cancelled.into(),
                counts: Some(pb::Counts {
                    total: 4,
                    done: 2,
                    measured: 1,
                    failed: 1,
                    skipped: 0,
                }),
                results_dir: "results/x".into(),
                error: "cancelled".into(),
            })),
        };
        assert_eq!(
            describe_event(&event).as_deref(),
            Some(
                "cancelled: 2/4 cells (1 measured, 1 failed, 0 skipped); results in results/x (cancelled)"
            )
        );
    }
}
