//! Publishing: when the run's messages go out and which are measured, and the publisher
//! tasks (with the pacer thread of an open loop) that send them.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Role, Status};
use crate::LoadgenError;
use crate::clock::RunClock;
use crate::codec::Codec;
use crate::live::Live;
use crate::pacer::{self, PacedPublisher, Release};
use crate::publisher::{self, PublisherJob, PublisherOutcome, PublisherPacing, Warmup};
use crate::reconnect::Reconnector;
use crate::session::Session;
use crate::spec::{RunLength, WorkloadSpec};
use crate::usage::Scope;

/// The pacer thread of an open-loop run and the token that stops it.
pub(super) type PacerHandle = (std::thread::JoinHandle<()>, CancellationToken);

/// When a run's messages go out and which are measured, fixed once the start is known.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    start_ns: u64,
    /// Timed runs: nothing is published at or after this.
    pub(super) end_ns: Option<u64>,
    /// Which messages are warm-up.
    pub(super) warmup: Warmup,
    /// Sequence numbers below this belong to the run.
    pub(super) seq_limit: u64,
    /// When the workload's last message is due to leave.
    pub(super) publishing_ends_ns: u64,
}

impl Timing {
    /// The start barrier on the run clock.
    pub(super) fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// The timing of `spec` starting at `start_ns` on the run clock.
    pub(super) fn of(spec: &WorkloadSpec, start_ns: u64) -> Self {
        let header_limit = spec.header_encoding().max_messages_per_publisher();
        match spec.length() {
            RunLength::Counted {
                per_publisher,
                warmup,
            } => Timing {
                start_ns,
                end_ns: None,
                warmup: Warmup::Messages(warmup),
                seq_limit: per_publisher,
                publishing_ends_ns: last_due_ns(spec, start_ns, per_publisher),
            },
            RunLength::Timed { warmup, measure } => {
                let warmup_ns = nanos(warmup);
                let end_ns = start_ns
                    .saturating_add(warmup_ns)
                    .saturating_add(nanos(measure));
                Timing {
                    start_ns,
                    end_ns: Some(end_ns),
                    warmup: Warmup::Until(start_ns.saturating_add(warmup_ns)),
                    seq_limit: spec
                        .planned_messages_per_publisher()
                        .unwrap_or(header_limit)
                        .min(header_limit),
                    publishing_ends_ns: end_ns,
                }
            }
        }
    }

    /// Messages publisher `id` sends: its share of a counted run, what its schedule holds
    /// before the end of a timed one, or (closed loop) as many as the header can number.
    fn messages_of(&self, spec: &WorkloadSpec, id: u32) -> u64 {
        match (spec.schedule_of(id), self.end_ns) {
            (Some(schedule), Some(end_ns)) => {
                schedule.starting_at(self.start_ns).messages_before(end_ns)
            }
            (None, Some(_)) => self.seq_limit,
            (_, None) => self.seq_limit,
        }
    }
}

/// A counted run's last intended send time (its start for a burst).
fn last_due_ns(spec: &WorkloadSpec, start_ns: u64, per_publisher: u64) -> u64 {
    let last = spec.publishers.saturating_sub(1);
    spec.schedule_of(last).map_or(start_ns, |schedule| {
        schedule
            .starting_at(start_ns)
            .intended_ns(per_publisher.saturating_sub(1))
    })
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[allow(clippy::too_many_arguments)]
/// Spawns one task per publisher session and, for an open loop, the pacer that releases them.
pub(super) fn start_publishers(
    spec: &WorkloadSpec,
    run_id: &str,
    codec: Codec,
    clock: RunClock,
    timing: &Timing,
    sessions: Vec<(u32, Session)>,
    live: &Arc<Live>,
    cancel: &CancellationToken,
    scope: &Scope,
    reconnector: Option<&Arc<Reconnector>>,
) -> Result<(JoinSet<PublisherOutcome>, Option<PacerHandle>), LoadgenError> {
    let header = spec.header_encoding();
    let payload_len =
        usize::try_from(spec.payload.bytes()).map_err(|e| LoadgenError::Internal(e.to_string()))?;
    let padding: Arc<[u8]> = vec![0u8; payload_len - header.len()].into();
    let mut paced = Vec::new();
    let mut tasks = JoinSet::new();
    let mut sessions = sessions;
    sessions.sort_by_key(|(id, _)| *id);
    for (id, session) in sessions {
        let template = codec
            .publish_template(&spec.topic_of(run_id, id), spec.qos, payload_len)
            .map_err(|e| LoadgenError::Internal(e.to_string()))?;
        let pacing = match spec.schedule_of(id) {
            None => PublisherPacing::Flat {
                start_ns: timing.start_ns,
            },
            Some(schedule) => {
                let schedule = schedule.starting_at(timing.start_ns);
                let release = Arc::new(Release::default());
                paced.push(PacedPublisher {
                    schedule,
                    release: release.clone(),
                });
                PublisherPacing::OpenLoop { schedule, release }
            }
        };
        let job = PublisherJob {
            id,
            template,
            header,
            padding: padding.clone(),
            messages: timing.messages_of(spec, id),
            end_ns: timing.end_ns,
            warmup: timing.warmup,
            qos: spec.qos,
            inflight: spec.connection.inflight,
            keep_alive: spec.connection.keep_alive,
            drain_timeout: spec.drain.timeout,
            pacing,
            credit: live.credits.get(id as usize).map(|credit| {
                let fanout = spec
                    .topology
                    .fanout_of(id, spec.publishers, spec.subscribers);
                (credit.clone(), fanout)
            }),
            credit_timeout: spec.drain.idle,
            clock,
            live: live.clone(),
            cancel: cancel.clone(),
            reconnect: reconnector.map(|reconnector| publisher::Reconnecting {
                reconnector: reconnector.clone(),
                client_id: super::connect::client_id(spec, run_id, Role::Publisher, id),
            }),
        };
        tasks.spawn(publisher::run(session, job));
    }
    let pacer = if paced.is_empty() {
        None
    } else {
        let token = cancel.child_token();
        let threads = match scope {
            Scope::Threads(threads) => Some(threads.clone()),
            Scope::Process => None,
        };
        let resolution = pacer::Resolution::of(&spec.pacing);
        let handle = pacer::spawn(
            clock,
            paced,
            timing.end_ns,
            resolution,
            token.clone(),
            threads,
        )
        .map_err(|e| LoadgenError::Internal(format!("pacer thread: {e}")))?;
        Some((handle, token))
    };
    Ok((tasks, pacer))
}

/// Waits for every publisher to finish, updating the progress display meanwhile.
pub(super) async fn await_publishers(
    mut tasks: JoinSet<PublisherOutcome>,
    live: &Live,
    status: &Option<watch::Sender<Status>>,
) -> Result<Vec<PublisherOutcome>, LoadgenError> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    let mut ticker = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(joined) => outcomes.push(joined.map_err(|e| LoadgenError::Internal(format!("publisher task: {e}")))?),
                None => return Ok(outcomes),
            },
            _ = ticker.tick() => {
                if let Some(sender) = status {
                    sender.send_modify(|s| s.progress = live.progress());
                }
            }
        }
    }
}
