//! What a run reports as it goes: typed [`RunEvent`]s on a bounded channel for whoever
//! shows them (the `controller` binary's terminal, `controller serve`'s watchers), each also
//! logged with `tracing`. The run library itself never prints.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;

use crate::results::{CellRecord, CellStatus, NodeRecord};

/// Events a run may have in flight before it waits for its observer: plenty for a
/// terminal or a service that renders as they come, small enough to bound the memory.
pub const EVENT_CAPACITY: usize = 256;

/// What a measured cell recorded, as an observer of the run receives it.
#[derive(Debug, Clone)]
pub struct MeasuredCell {
    /// The record written to its `record.json` (broker, scenario, test, point, repetition,
    /// figures, broker usage).
    pub record: CellRecord,
    /// Its open-loop latency in the metrics' buckets, when it has a latency histogram.
    pub latency: Option<crate::metrics::LatencyBuckets>,
}

/// How far a run is, in cells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Cells of the plan.
    pub total: usize,
    /// Cells handled (including those a resumed folder already held).
    pub done: usize,
    /// Cells measured in this invocation.
    pub measured: usize,
    /// Cells that failed.
    pub failed: usize,
    /// Cells skipped.
    pub skipped: usize,
}

/// What a run reports as it goes, to an observer such as the terminal or `controller serve`.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// The results folder is open; the plan has `total` cells.
    Started {
        /// The results folder.
        dir: PathBuf,
        /// Cells of the plan.
        total: usize,
    },
    /// An in-process agent was started for a node with `agent = "local"`.
    LocalAgent {
        /// The node.
        node: String,
        /// Where it listens (loopback).
        address: SocketAddr,
    },
    /// A node's agent answered: what it runs on and its clock against ours.
    Node(NodeRecord),
    /// A step of the overlay or cluster phase ("overlay: Nebula on pi1 (10.42.0.2/24)").
    Testbed(String),
    /// A broker is deployed and ready.
    BrokerReady {
        /// The broker's name in the plan.
        broker: String,
        /// Where clients dial it.
        address: SocketAddr,
    },
    /// A broker could not be deployed; its cells are failed or skipped.
    BrokerUnavailable {
        /// The broker's name in the plan.
        broker: String,
        /// Why.
        reason: String,
    },
    /// netem of a scenario is in force on a node, as the kernel read it back.
    Netem {
        /// The scenario.
        scenario: String,
        /// The node.
        node: String,
        /// What was asked.
        asked: String,
        /// What the kernel holds.
        read_back: String,
    },
    /// Before the first broker: how many cells this testbed can run, and why the others
    /// cannot (each reason with its number of cells), known from the agents' capabilities.
    Runnable {
        /// Cells that will be attempted.
        runnable: usize,
        /// Cells in the plan.
        total: usize,
        /// Why the rest will be skipped, each with how many cells it skips.
        not_runnable: Vec<(String, usize)>,
    },
    /// A scenario cannot be emulated on this testbed; its cells are skipped.
    ScenarioSkipped {
        /// Why.
        reason: String,
    },
    /// A cell was recorded.
    Cell {
        /// Its id.
        id: String,
        /// How it ended.
        status: CellStatus,
        /// The one-line figures of a measured cell, or why it failed or was skipped.
        note: String,
        /// The run's counts after it.
        counts: RunCounts,
        /// A measured cell's record and latency histogram, for observers that keep figures
        /// (the metrics listener); shared, so that the event stays cheap to pass on.
        measured: Option<Arc<MeasuredCell>>,
    },
    /// A scenario's netem was cleared on these nodes.
    NetemCleared {
        /// The scenario.
        scenario: String,
        /// The nodes.
        nodes: Vec<String>,
    },
    /// A broker was removed after its cells.
    BrokerRemoved {
        /// The broker's name in the plan.
        broker: String,
    },
    /// The report was written.
    Report {
        /// report.html.
        html: PathBuf,
        /// report.md.
        markdown: PathBuf,
    },
    /// The report could not be written (the measurements are on disk; `controller report
    /// DIR` can try again).
    ReportFailed {
        /// Why.
        error: String,
    },
}

impl RunEvent {
    /// Logs the event with its fields.
    fn trace(&self) {
        match self {
            RunEvent::Started { dir, total } => {
                tracing::info!(dir = %dir.display(), total, "run started");
            }
            RunEvent::LocalAgent { node, address } => {
                tracing::info!(node = %node, %address, "local agent started");
            }
            RunEvent::Node(node) => tracing::info!(
                node = %node.name,
                arch = %node.arch,
                cores = node.cores,
                kernel = %node.kernel,
                clock_offset_ns = node.clock_offset_ns,
                clock_error_bound_ns = node.clock_error_bound_ns,
                netem = %node.netem,
                "node"
            ),
            RunEvent::Testbed(step) => tracing::info!(step = %step, "testbed"),
            RunEvent::BrokerReady { broker, address } => {
                tracing::info!(broker = %broker, %address, "broker ready");
            }
            RunEvent::BrokerUnavailable { broker, reason } => {
                tracing::warn!(broker = %broker, reason = %reason, "broker unavailable");
            }
            RunEvent::Netem {
                scenario,
                node,
                asked,
                read_back,
            } => tracing::info!(
                scenario = %scenario, node = %node, asked = %asked, read_back = %read_back,
                "netem applied"
            ),
            RunEvent::Runnable {
                runnable,
                total,
                not_runnable,
            } => tracing::info!(runnable, total, ?not_runnable, "cells this testbed can run"),
            RunEvent::ScenarioSkipped { reason } => {
                tracing::info!(reason = %reason, "scenario skipped");
            }
            RunEvent::Cell {
                id,
                status,
                note,
                counts,
                ..
            } => tracing::info!(
                cell = %id, status = status.as_str(), done = counts.done, total = counts.total,
                "{note}"
            ),
            RunEvent::NetemCleared { scenario, nodes } => {
                tracing::info!(scenario = %scenario, nodes = ?nodes, "netem cleared");
            }
            RunEvent::BrokerRemoved { broker } => {
                tracing::info!(broker = %broker, "broker removed")
            }
            RunEvent::Report { html, markdown } => tracing::info!(
                html = %html.display(), markdown = %markdown.display(), "report written"
            ),
            RunEvent::ReportFailed { error } => {
                tracing::warn!(error = %error, "the report could not be written");
            }
        }
    }
}

/// Where a run sends its [`RunEvent`]s: a bounded channel ([`EVENT_CAPACITY`]) made by
/// [`event_channel`]. A closed receiver is ignored; a full one makes the run wait.
pub type RunEvents = tokio::sync::mpsc::Sender<RunEvent>;

/// A channel for [`crate::run::run_plan_observed`] and its receiving end.
pub fn event_channel() -> (RunEvents, tokio::sync::mpsc::Receiver<RunEvent>) {
    tokio::sync::mpsc::channel(EVENT_CAPACITY)
}

/// The run's end of the channel, if anyone observes it.
#[derive(Debug, Clone, Default)]
pub(super) struct Events(Option<RunEvents>);

impl Events {
    pub(super) fn new(sender: Option<RunEvents>) -> Self {
        Events(sender)
    }

    /// Logs `event` and sends it to the observer.
    pub(super) async fn emit(&self, event: RunEvent) {
        event.trace();
        if let Some(sender) = &self.0 {
            // A receiver that is gone (a watcher that left) does not stop the run.
            let _ = sender.send(event).await;
        }
    }
}
