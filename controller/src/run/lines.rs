//! What a person reads of a run: one line per [`RunEvent`] worth a line, the same at the
//! controller's terminal and at a `controller remote watch` of a served run.

use super::events::RunEvent;
use crate::results::CellStatus;

/// Renders a run's events as lines, remembering what the opening "can run N of M" said so
/// that a scenario skip it covered is not said again.
#[derive(Debug, Clone, Default)]
pub struct EventLines {
    announced: Vec<String>,
}

impl EventLines {
    /// The line `event` is shown as; none for those not worth one (skipped cells: their
    /// broker or scenario said why once).
    pub fn line(&mut self, event: &RunEvent) -> Option<String> {
        let line = match event {
            RunEvent::Runnable {
                runnable,
                total,
                not_runnable,
            } => {
                self.announced
                    .extend(not_runnable.iter().map(|(reason, _)| reason.clone()));
                return runnable_lines(*runnable, *total, not_runnable);
            }
            RunEvent::ScenarioSkipped { reason } if self.announced.contains(reason) => {
                return None;
            }
            RunEvent::Started { dir, .. } => format!("controller: results in {}", dir.display()),
            RunEvent::LocalAgent { .. } => return None,
            RunEvent::Node(node) => format!(
                "controller: {} ({} {} cores, kernel {}), clock {:+.3} ms ± {:.3} ms, netem: {}",
                node.name,
                node.arch,
                node.cores,
                node.kernel,
                node.clock_offset_ns as f64 / 1e6,
                node.clock_error_bound_ns as f64 / 1e6,
                node.netem
            ),
            RunEvent::Testbed(step) => format!("controller: {step}"),
            RunEvent::BrokerReady { broker, address } => {
                format!("controller: broker {broker} ready at {address}")
            }
            RunEvent::BrokerUnavailable { broker, reason } => {
                format!("controller: broker {broker}: {reason}")
            }
            RunEvent::Netem {
                scenario,
                node,
                asked,
                read_back,
            } => {
                format!("controller: {scenario} on {node}: asked {asked}, kernel holds {read_back}")
            }
            RunEvent::ScenarioSkipped { reason } => format!("controller: skipped: {reason}"),
            RunEvent::Cell { status, .. } if *status == CellStatus::Skipped => return None,
            RunEvent::Cell {
                id,
                status,
                note,
                counts,
                ..
            } => format!(
                "[{:>4}/{}] {id} {}: {note}",
                counts.done,
                counts.total,
                status.as_str()
            ),
            RunEvent::NetemCleared { scenario, nodes } => {
                format!(
                    "controller: {scenario}: netem cleared on {}",
                    nodes.join(", ")
                )
            }
            RunEvent::BrokerRemoved { broker } => format!("controller: broker {broker} removed"),
            RunEvent::Report { html, markdown } => format!(
                "controller: report {} and {}",
                html.display(),
                markdown.display()
            ),
            RunEvent::ReportFailed { error } => {
                format!("controller: the report could not be written: {error}")
            }
        };
        Some(line)
    }
}

/// "This testbed can run N of M cells", and why not the rest, once at the start; nothing
/// when every cell can run.
fn runnable_lines(
    runnable: usize,
    total: usize,
    not_runnable: &[(String, usize)],
) -> Option<String> {
    if not_runnable.is_empty() {
        return None;
    }
    let mut text =
        format!("controller: this testbed can run {runnable} of {total} cells; not the others:");
    for (reason, cells) in not_runnable {
        text.push_str(&format!("\n  {reason} ({cells} cells)"));
    }
    Some(text)
}
