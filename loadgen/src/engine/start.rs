//! The start barrier: this instance's measurement begins, the first message's time is fixed
//! (with it the run's [`Timing`]), and the subscribers and the churn fleet set off; the
//! publishers follow in `publish`.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::churn;
use super::connect;
use super::prepare::Run;
use super::state::Role;
use crate::LoadgenError;
use crate::clock::RunClock;
use crate::local_broker::LocalBroker;
use crate::publisher::Warmup;
use crate::reconnect::Reconnector;
use crate::result::ChurnOutcome;
use crate::session::Session;
use crate::spec::{RunLength, WorkloadSpec};
use crate::subscriber::{self, SubscriberJob, SubscriberOutcome};
use crate::usage::{Monitor, Reading};
use crate::wills::WillOutcome;

/// Time between the last connection and the first message, so every task is parked at start.
const START_BARRIER_DELAY: Duration = Duration::from_millis(50);

/// A started run: when it publishes, what measures it, and the tasks beside the publishers.
pub(super) struct Started {
    /// When messages go out and which are measured.
    pub(super) timing: Timing,
    /// This instance's CPU, measured from the start barrier.
    pub(super) meter: Meter,
    /// Reconnects dropped clients, when the spec asks for it.
    pub(super) reconnector: Option<Arc<Reconnector>>,
    /// The subscriber tasks, receiving.
    pub(super) subscribers: Subscribers,
    /// The churn fleet's task, on the instance holding publisher 0.
    pub(super) churn: Option<JoinHandle<ChurnOutcome>>,
    /// The will clients' task, on the instance holding publisher 0.
    pub(super) wills: Option<JoinHandle<WillOutcome>>,
}

/// What measures this instance's load between the start barrier and the finish.
pub(super) struct Meter {
    /// The CPU used so far, read at the start barrier.
    pub(super) usage_before: Reading,
    /// Samples this instance's (and a local broker's) CPU meanwhile.
    pub(super) monitor: Monitor,
    /// The broker's process, when it runs on this host.
    pub(super) local_broker: Option<LocalBroker>,
}

/// The subscriber tasks and the token that ends them once the run has drained.
pub(super) struct Subscribers {
    /// One task per subscriber session.
    pub(super) tasks: JoinSet<SubscriberOutcome>,
    /// Stops every subscriber.
    pub(super) stop: CancellationToken,
}

/// Starts measuring, fixes the run's timing, and sets off the subscribers and the churn fleet.
pub(super) fn start(
    run: &Run<'_>,
    subscriber_sessions: Vec<(u32, Session)>,
    local_broker: Option<LocalBroker>,
) -> Result<Started, LoadgenError> {
    let usage_before = Reading::now(&run.scope);
    let monitor = Monitor::start(
        run.scope.clone(),
        run.clock,
        local_broker.as_ref().map(|broker| broker.pid),
    );
    let start_ns = first_message_ns(run.clock, run.start_at_ns)?;
    let timing = Timing::of(run.spec, start_ns);
    let stop_subscribers = CancellationToken::new();
    let mut subscribers = JoinSet::new();
    let shared_spec = Arc::new(run.spec.clone());
    let reconnector = Reconnector::of(&shared_spec, &run.dialer, run.codec, run.clock, start_ns);
    for (id, session) in subscriber_sessions {
        let job = subscriber_job(
            run,
            id,
            &timing,
            &shared_spec,
            reconnector.as_ref(),
            &stop_subscribers,
        );
        subscribers.spawn(subscriber::run(session, job));
    }
    let churn = start_churn(run, &shared_spec, start_ns);
    let wills = start_wills(run, &shared_spec, start_ns);
    Ok(Started {
        timing,
        meter: Meter {
            usage_before,
            monitor,
            local_broker,
        },
        reconnector,
        subscribers: Subscribers {
            tasks: subscribers,
            stop: stop_subscribers,
        },
        churn,
        wills,
    })
}

/// When the first message leaves on the run clock: the barrier's time (an error once it has
/// passed), or [`START_BARRIER_DELAY`] from now.
fn first_message_ns(clock: RunClock, start_at_ns: Option<u64>) -> Result<u64, LoadgenError> {
    let earliest_start_ns = clock.now_ns() + START_BARRIER_DELAY.as_nanos() as u64;
    match start_at_ns {
        None => Ok(earliest_start_ns),
        Some(start_at) if start_at >= clock.now_ns() => Ok(start_at),
        Some(start_at) => Err(LoadgenError::StartMissed {
            late_ms: (clock.now_ns() - start_at) as f64 / 1e6,
        }),
    }
}

/// What subscriber `id` is told: what to expect, how to read, and how to come back.
fn subscriber_job(
    run: &Run<'_>,
    id: u32,
    timing: &Timing,
    shared_spec: &Arc<WorkloadSpec>,
    reconnector: Option<&Arc<Reconnector>>,
    stop: &CancellationToken,
) -> SubscriberJob {
    let (spec, run_id) = (run.spec, run.run_id.as_str());
    let offline = spec.connection.offline.map(|gap| subscriber::Offline {
        at_ns: timing
            .start_ns
            .saturating_add(crate::clock::saturating_nanos(gap.after)),
        gap: gap.gap,
        spec: shared_spec.clone(),
        client_id: connect::client_id(spec, run_id, Role::Subscriber, id),
        dialer: run.dialer.clone(),
    });
    SubscriberJob {
        id,
        publishers: run.routing.publishers_of(id),
        seq_limit: timing.seq_limit,
        warmup: timing.warmup,
        timetable: spec
            .timetable()
            .map(|timetable| timetable.starting_at(timing.start_ns())),
        header: spec.header_encoding(),
        header_in_property: spec.header_in.is_property(),
        rate_limit: spec.subscriber_rate_limit,
        read_cadence: spec.read_cadence(),
        keep_alive: spec.connection.keep_alive,
        subscribed_qos: spec.subscription_qos().level(),
        retain_flag: spec.live_retain_flag(),
        clock: run.clock,
        live: run.live.clone(),
        stop: stop.clone(),
        offline,
        message_expiry: spec
            .connection
            .message_expiry
            .filter(|_| spec.judges_expiry()),
        reconnect: reconnector.map(|reconnector| subscriber::Resubscribe {
            reconnector: reconnector.clone(),
            client_id: connect::client_id(spec, run_id, Role::Subscriber, id),
            topic: spec.subscription_of(run_id, id),
            qos: spec.subscription_qos(),
        }),
    }
}

/// The churn fleet arrives from the start barrier on, beside the workload, run by the instance
/// holding publisher 0.
fn start_churn(
    run: &Run<'_>,
    shared_spec: &Arc<WorkloadSpec>,
    start_ns: u64,
) -> Option<JoinHandle<ChurnOutcome>> {
    run.spec
        .churn
        .clone()
        .filter(|_| run.shard.publishers.contains(&0))
        .map(|churn| {
            let fleet = churn::Fleet {
                spec: shared_spec.clone(),
                churn,
                run_id: run.run_id.clone(),
                // Each arrival visits once: no tickets kept for it.
                dialer: run.dialer.for_one_off_clients(),
                codec: run.codec,
                clock: run.clock,
                start_ns,
            };
            tokio::spawn(fleet.run(run.cancel.clone()))
        })
}

/// The will clients connect from the start barrier on, beside the workload, run by the
/// instance holding publisher 0.
fn start_wills(
    run: &Run<'_>,
    shared_spec: &Arc<WorkloadSpec>,
    start_ns: u64,
) -> Option<JoinHandle<WillOutcome>> {
    run.spec
        .wills
        .clone()
        .filter(|_| run.shard.publishers.contains(&0))
        .map(|wills| {
            let fleet = super::wills::Fleet {
                spec: shared_spec.clone(),
                wills,
                run_id: run.run_id.clone(),
                dialer: run.dialer.clone(),
                codec: run.codec,
                clock: run.clock,
                start_ns,
            };
            tokio::spawn(fleet.run(run.cancel.clone()))
        })
}

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
    pub(super) fn messages_of(&self, spec: &WorkloadSpec, id: u32) -> u64 {
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
