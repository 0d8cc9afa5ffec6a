//! Preparing a run, before the broker is contacted: the spec checked; the run's id, shard,
//! dialer, codec and clock fixed; enough open files for every connection.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::state::{StartBarrier, Status};
use crate::LoadgenError;
use crate::clock::{RunClock, unix_now_ns};
use crate::codec::Codec;
use crate::live::Live;
use crate::spec::{Pacing, Qos, Routing, Shard, WorkloadSpec};
use crate::transport::Dialer;
use crate::usage::Scope;

/// What every phase of one run shares, fixed before the broker is contacted.
pub(super) struct Run<'a> {
    /// The workload.
    pub(super) spec: &'a WorkloadSpec,
    /// Part of every client id and topic, so concurrent runs never meet.
    pub(super) run_id: String,
    /// The publishers and subscribers this instance runs.
    pub(super) shard: Shard,
    /// Who receives whose messages.
    pub(super) routing: Arc<Routing>,
    /// Where the broker is.
    pub(super) dialer: Dialer,
    /// The MQTT version's packets.
    pub(super) codec: Codec,
    /// The run's timeline (shared by every instance when the barrier fixes its origin).
    pub(super) clock: RunClock,
    /// When the first message leaves, when the barrier fixes it.
    pub(super) start_at_ns: Option<u64>,
    /// The counters and histograms every task writes to.
    pub(super) live: Arc<Live>,
    /// Stops the run early.
    pub(super) cancel: CancellationToken,
    /// Whose CPU the run measures.
    pub(super) scope: Scope,
    /// Where the run's progress is shown.
    pub(super) status: StatusFeed,
}

/// The progress display's channel, when there is one.
pub(super) struct StatusFeed(Option<watch::Sender<Status>>);

impl StatusFeed {
    /// Applies `change` to the shown status (nothing without a display).
    pub(super) fn update(&self, change: impl FnOnce(&mut Status)) {
        if let Some(sender) = &self.0 {
            sender.send_modify(change);
        }
    }
}

/// Checks `spec` and fixes what every later phase shares; reports what the run plans.
pub(super) fn prepare(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
    scope: Scope,
) -> Result<Run<'_>, LoadgenError> {
    spec.validate()?;
    let run_id = spec.run_id.clone().unwrap_or_else(generate_run_id);
    let shard = spec.effective_shard();
    let routing = Arc::new(Routing::of(spec)?);
    let dialer = Dialer::new(&spec.broker)?.with_max_packet(spec.max_packet_bytes());
    let codec = Codec::new(spec.broker.protocol, spec.max_packet_bytes())
        .with_retain_as_published(spec.live_retain_flag());
    let clock = barrier
        .origin_unix_ns
        .map_or_else(RunClock::start_now, RunClock::aligned_to_unix);
    // A closed loop at QoS 0 has no acknowledgements to wait for: its window is end to end,
    // counted by the subscribers of this instance (validation keeps them in one instance).
    let end_to_end_window = spec.pacing == Pacing::ClosedLoop && spec.qos == Qos::AtMostOnce;
    let live = Arc::new(Live::new(if end_to_end_window {
        spec.publishers as usize
    } else {
        0
    }));
    let status = StatusFeed(status);
    let planned_publishes =
        shard.publishers.len() as u64 * spec.planned_messages_per_publisher().unwrap_or(0);
    let churn_connections = spec
        .churn
        .as_ref()
        .filter(|_| shard.publishers.contains(&0))
        .map_or(0, |churn| churn.most_open_at_once());
    // The will clients and their watcher (and a clean-up connection).
    let will_connections = spec
        .wills
        .as_ref()
        .filter(|_| shard.publishers.contains(&0))
        .map_or(0, |wills| u64::from(wills.clients) + 2);
    let planned_connections = (shard.publishers.len() + shard.subscribers.len()) as u64;
    crate::limits::ensure_open_files(planned_connections + churn_connections + will_connections)
        .map_err(LoadgenError::OpenFiles)?;
    status.update(|s| {
        s.planned_publishes = planned_publishes;
        s.connected = (0, planned_connections);
    });
    Ok(Run {
        spec,
        run_id,
        shard,
        routing,
        dialer,
        codec,
        clock,
        start_at_ns: barrier.start_at_ns,
        live,
        cancel,
        scope,
        status,
    })
}

/// A short id unique enough to keep concurrent runs' topics apart.
fn generate_run_id() -> String {
    let mixed = unix_now_ns() ^ (u64::from(std::process::id()) << 40);
    format!("{:010x}", mixed & 0xff_ffff_ffff)
}
