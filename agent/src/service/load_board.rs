//! The loads this agent runs and ran lately, as its metrics listener shows them: the labels
//! the controller gave each (run, cell, broker, ...), its progress while it runs, and its
//! final counts and latency once it ended. The last [`MAX_ENDED`] ended loads stay, so that a
//! scrape after a load's end still sees what it measured.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use exposition::LatencyBuckets;
use tonic::Status;

use super::status::invalid;

/// Most labels a load may carry.
pub(crate) const MAX_LABELS: usize = 8;
/// Longest label name.
pub(crate) const MAX_LABEL_NAME: usize = 32;
/// Longest label value, bytes.
pub(crate) const MAX_LABEL_VALUE: usize = 128;
/// Ended loads kept for scrapes.
pub(crate) const MAX_ENDED: usize = 64;
/// Labels the agent sets itself.
const OWN_LABELS: [&str; 4] = ["node", "load", "phase", "le"];

/// Checks the labels of a RunLoad request: few, short, named as Prometheus allows and not
/// one the agent sets itself.
pub(crate) fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), Status> {
    if labels.len() > MAX_LABELS {
        return Err(invalid(
            "labels",
            format!("{} labels, more than {MAX_LABELS}", labels.len()),
        ));
    }
    for (name, value) in labels {
        let well_formed = !name.is_empty()
            && name.len() <= MAX_LABEL_NAME
            && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            && !name.starts_with("__");
        if !well_formed || OWN_LABELS.contains(&name.as_str()) {
            return Err(invalid(
                &format!("labels[{name:?}]"),
                format!(
                    "a label name has 1 to {MAX_LABEL_NAME} of a-z and _, and is none of \
                     {OWN_LABELS:?}"
                ),
            ));
        }
        if value.len() > MAX_LABEL_VALUE {
            return Err(invalid(
                &format!("labels[{name:?}]"),
                format!("{} bytes, more than {MAX_LABEL_VALUE}", value.len()),
            ));
        }
    }
    Ok(())
}

/// What a load has done so far.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct LoadFigures {
    /// preflight, connecting, publishing, draining, done or failed.
    pub phase: &'static str,
    /// Messages written to the broker.
    pub published: u64,
    /// PUBLISH packets subscribers received, copies included.
    pub received: u64,
    /// Distinct messages received, once the load ended.
    pub delivered: Option<u64>,
    /// Connections open and planned.
    pub connected: (u64, u64),
    /// The measured messages' latency, once the load ended.
    pub latency: Option<LatencyBuckets>,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    /// The labels as the text format writes them, node and load included.
    labels: String,
    figures: LoadFigures,
    ended: bool,
}

/// The loads shown, oldest first.
#[derive(Debug, Default)]
pub(crate) struct LoadBoard {
    entries: Mutex<(u64, Vec<Entry>)>,
}

impl LoadBoard {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<Entry>)> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shows a load that starts now under `labels` (checked), with this node's name and the
    /// load's run id. A load with the same labels (the same cell tried again) replaces the
    /// one shown before.
    pub(crate) fn begin(
        self: &Arc<Self>,
        node: &str,
        load: &str,
        labels: &BTreeMap<String, String>,
    ) -> LoadTicket {
        let mut pairs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        pairs.extend([("node", node), ("load", load)]);
        let labels = exposition::labels(&pairs);
        let mut guard = self.lock();
        let (next, entries) = &mut *guard;
        *next += 1;
        let ticket = *next;
        entries.retain(|entry| entry.labels != labels);
        entries.push(Entry {
            ticket,
            labels,
            figures: LoadFigures {
                phase: "preflight",
                ..LoadFigures::default()
            },
            ended: false,
        });
        LoadTicket {
            board: Arc::clone(self),
            ticket,
            ended: false,
        }
    }

    /// Each load shown, oldest first: its labels and figures.
    pub(crate) fn shown(&self) -> Vec<(String, LoadFigures)> {
        self.lock()
            .1
            .iter()
            .map(|entry| (entry.labels.clone(), entry.figures.clone()))
            .collect()
    }

    fn update(&self, ticket: u64, end: bool, change: impl FnOnce(&mut LoadFigures)) {
        let mut guard = self.lock();
        let entries = &mut guard.1;
        if let Some(entry) = entries.iter_mut().find(|entry| entry.ticket == ticket) {
            change(&mut entry.figures);
            entry.ended |= end;
        }
        let ended = entries.iter().filter(|entry| entry.ended).count();
        let mut surplus = ended.saturating_sub(MAX_ENDED);
        entries.retain(|entry| {
            let drop = surplus > 0 && entry.ended;
            surplus -= usize::from(drop);
            !drop
        });
    }
}

/// One load's place on the board; dropped before [`LoadTicket::end`] (its task went away),
/// the load shows as failed rather than running for ever.
#[derive(Debug)]
pub(crate) struct LoadTicket {
    board: Arc<LoadBoard>,
    ticket: u64,
    ended: bool,
}

impl Drop for LoadTicket {
    fn drop(&mut self) {
        if !self.ended {
            self.board
                .update(self.ticket, true, |figures| figures.phase = "failed");
        }
    }
}

impl LoadTicket {
    /// The load's progress now.
    pub(crate) fn progress(&self, status: &loadgen::Status) {
        self.board.update(self.ticket, false, |figures| {
            figures.phase = super::load::phase_name(status.phase);
            figures.published = status.progress.published;
            figures.received = status.progress.received;
            figures.connected = status.connected;
        });
    }

    /// The load ended: its result's counts and latency, or failed.
    pub(crate) fn end(mut self, result: Option<&loadgen::RunResult>) {
        self.ended = true;
        self.board
            .update(self.ticket, true, |figures| match result {
                Some(result) => {
                    figures.phase = "done";
                    figures.published = result.published.iter().sum();
                    figures.received = result.received;
                    figures.delivered = Some(result.delivered_unique.iter().sum());
                    figures.latency = Some(LatencyBuckets::of(&result.latency));
                }
                None => figures.phase = "failed",
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_are_few_short_and_never_the_agents_own() {
        assert!(check_labels(&named(&[("run", "study"), ("cell", "a/b/0-latency/-/1")])).is_ok());
        for (bad, field) in [
            (named(&[("node", "x")]), "labels[\"node\"]"),
            (named(&[("Run", "x")]), "labels[\"Run\"]"),
            (named(&[("__name__", "x")]), "labels[\"__name__\"]"),
            (named(&[("run", &"x".repeat(129))]), "labels[\"run\"]"),
        ] {
            let error = check_labels(&bad).expect_err(field);
            assert_eq!(error.code(), tonic::Code::InvalidArgument);
            assert!(error.message().contains(field), "{}", error.message());
        }
        let many: BTreeMap<String, String> = (0..9)
            .map(|i| (format!("l{}", "a".repeat(i + 1)), String::new()))
            .collect();
        assert!(check_labels(&many).is_err());
    }

    #[test]
    fn a_retried_cell_replaces_its_load_and_ended_loads_are_bounded() {
        let board = Arc::new(LoadBoard::default());
        let cell = named(&[("cell", "c1")]);
        let first = board.begin("tester", "run-1", &cell);
        first.end(None);
        let again = board.begin("tester", "run-1", &cell);
        let shown = board.shown();
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!(shown[0].1.phase, "preflight");
        assert_eq!(shown[0].0, "cell=\"c1\",node=\"tester\",load=\"run-1\"");
        again.end(None);
        for i in 0..(MAX_ENDED + 5) {
            board
                .begin("tester", &format!("run-{i}-x"), &BTreeMap::new())
                .end(None);
        }
        let running = board.begin("tester", "still", &BTreeMap::new());
        let shown = board.shown();
        assert_eq!(shown.len(), MAX_ENDED + 1);
        assert!(shown.iter().all(|(labels, _)| !labels.contains("c1")));
        running.end(None);
        assert_eq!(board.shown().len(), MAX_ENDED);
        // A load whose task went away without an end shows as failed, and ended.
        drop(board.begin("tester", "lost", &BTreeMap::new()));
        let shown = board.shown();
        assert_eq!(shown.len(), MAX_ENDED);
        let lost = shown.last().expect("the last load");
        assert!(
            lost.0.contains("lost") && lost.1.phase == "failed",
            "{lost:?}"
        );
    }
}
