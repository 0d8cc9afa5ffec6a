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
    while let Some(event) = events.recv().await {
        if let Some(bar) = &bar {
            match &event {
                RunEvent::Started { total, .. } => bar.set_length(*total as u64),
                RunEvent::Cell { counts, .. } => {
                    bar.set_position(counts.done as u64);
                    bar.set_message(format!(
                        "{} failed, {} skipped",
                        counts.failed, counts.skipped
                    ));
                }
                _ => {}
            }
        }
        let Some(line) = line(&event) else {
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
