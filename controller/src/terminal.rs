//! The `controller` binary's terminal: one line per [`RunEvent`] worth a line
//! ([`EventLines`]), on a terminal under a progress bar of all the plan's cells, else plain
//! lines on stderr.

use controller::run::{EventLines, RunEvent};
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
    let mut lines = EventLines::default();
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
        let Some(line) = lines.line(&event) else {
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
