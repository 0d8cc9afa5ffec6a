//! The `controller` binary's terminal: one line per [`RunEvent`] worth a line, on a
//! terminal under a progress bar of all the plan's cells, else plain lines on stderr.

use controller::results::CellStatus;
use controller::run::RunEvent;
use tokio::sync::mpsc::Receiver;

/// Shows `events` until the run closes the channel.
pub async fn show_progress(mut events: Receiver<RunEvent>) {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let bar = terminal.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        let style = indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} cells  {elapsed_precise}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    // What the opening "can run N of M" said: the scenario skips it covers are not repeated.
    let mut announced: Vec<String> = Vec::new();
    while let Some(event) = events.recv().await {
        if let Some(bar) = &bar {
            match &event {
                RunEvent::Started { total, .. } => bar.set_length(*total as u64),
                // The bar counts the cells that will run, not those known to be skipped.
                RunEvent::Runnable { runnable, .. } => bar.set_length(*runnable as u64),
                RunEvent::Cell { counts, .. } => {
                    bar.set_position(counts.done.saturating_sub(counts.skipped) as u64);
                    bar.set_message(format!("{} failed", counts.failed));
                }
                _ => {}
            }
        }
        let line = match &event {
            RunEvent::Runnable {
                runnable,
                total,
                not_runnable,
            } => {
                announced.extend(not_runnable.iter().map(|(reason, _)| reason.clone()));
                runnable_lines(*runnable, *total, not_runnable)
            }
            RunEvent::ScenarioSkipped { reason } if announced.contains(reason) => None,
            _ => line(&event),
        };
        let Some(line) = line else {
            continue;
        };
        match &bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
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

/// The line an event is shown as; none for those not worth one (skipped cells: the
/// scenario or broker said why once).
fn line(event: &RunEvent) -> Option<String> {
    let line = match event {
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
        } => format!("controller: {scenario} on {node}: asked {asked}, kernel holds {read_back}"),
        RunEvent::Runnable { .. } => return None,
        RunEvent::ScenarioSkipped { reason } => format!("controller: skipped: {reason}"),
        RunEvent::Cell { status, .. } if *status == CellStatus::Skipped => return None,
        RunEvent::Cell {
            id,
            status,
            note,
            counts,
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
