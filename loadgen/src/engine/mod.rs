//! Runs one workload through its phases: preflight -> connect (ramp-up) -> start barrier ->
//! publish (warm-up, then measured) -> drain -> stop, and gathers the [`RunResult`].
//!
//! The phases are in order in [`run_at`]; the work of each lives beside it: `connect` (the
//! preflight probe and the connections), `publish` (the run's timing and the publisher tasks),
//! `drain` (waiting for what is in flight, then folding every task's outcome into the result).

mod churn;
mod connect;
mod drain;
mod publish;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::LoadgenError;
use crate::clock::{RunClock, unix_now_ns};
use crate::codec::Codec;
use crate::live::{Live, Progress};
use crate::publisher::Warmup;
use crate::reconnect::Reconnector;
use crate::result::RunResult;
use crate::spec::{Pacing, Qos, WorkloadSpec};
use crate::subscriber::{self, SubscriberJob};
use crate::transport::Dialer;
use crate::usage::{Monitor, Reading, Scope};
pub(crate) use connect::connect_fields;
use connect::{Connector, preflight};
use drain::{drain, expected_local_deliveries, fill_result};
use publish::{Timing, await_publishers, start_publishers};

/// Time between the last connection and the first message, so every task is parked at start.
const START_BARRIER_DELAY: Duration = Duration::from_millis(50);

/// The phase a run is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Checking the broker answers.
    #[default]
    Preflight,
    /// Opening connections.
    Connecting,
    /// Publishing.
    Publishing,
    /// Waiting for in-flight messages.
    Draining,
    /// Finished.
    Done,
}

/// What a progress display shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Current phase.
    pub phase: Phase,
    /// Counters so far.
    pub progress: Progress,
    /// Messages this instance will publish.
    pub planned_publishes: u64,
    /// Connections opened / planned.
    pub connected: (u64, u64),
}

/// When a run starts, for instances that must start together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartBarrier {
    /// The run clock's origin as Unix time in ns on *this* host's clock (the controller maps
    /// its own time through the host's clock offset); now when absent.
    pub origin_unix_ns: Option<u64>,
    /// The first message leaves this long after the origin, ns; 50 ms after the last
    /// connection when absent.
    pub start_at_ns: Option<u64>,
}

/// Runs `spec` to completion (or until `cancel`), reporting progress on `status` if given.
pub async fn run(
    spec: &WorkloadSpec,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    run_at(spec, StartBarrier::default(), cancel, status).await
}

/// Like [`run`], with the run clock and the start time fixed by `barrier`, so that instances
/// on several hosts publish on one timeline from one moment.
pub async fn run_at(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    run_scoped(spec, barrier, cancel, status, Scope::Process).await
}

/// [`run_at`], measuring the CPU of `scope` (a dedicated run's own threads).
pub(crate) async fn run_scoped(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
    scope: Scope,
) -> Result<RunResult, LoadgenError> {
    spec.validate()?;
    let run_id = spec.run_id.clone().unwrap_or_else(generate_run_id);
    let shard = spec.effective_shard();
    let dialer = Dialer::new(&spec.broker)?.with_max_packet(spec.max_packet_bytes());
    let codec = Codec::new(spec.broker.protocol, spec.max_packet_bytes());
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
    let report = |update: &dyn Fn(&mut Status)| {
        if let Some(sender) = &status {
            sender.send_modify(|s| update(s));
        }
    };
    let planned_publishes =
        shard.publishers.len() as u64 * spec.planned_messages_per_publisher().unwrap_or(0);
    let churn_connections = spec
        .churn
        .as_ref()
        .filter(|_| shard.publishers.contains(&0))
        .map_or(0, |churn| churn.most_open_at_once());
    let planned_connections = (shard.publishers.len() + shard.subscribers.len()) as u64;
    crate::limits::ensure_open_files(planned_connections + churn_connections)
        .map_err(LoadgenError::OpenFiles)?;
    report(&|s| {
        s.planned_publishes = planned_publishes;
        s.connected = (0, planned_connections);
    });

    preflight(&dialer, codec, spec, &run_id).await?;
    let local_broker = {
        let (host, port) = (spec.broker.host.clone(), spec.broker.port);
        tokio::task::spawn_blocking(move || crate::local_broker::find(&host, port))
            .await
            .ok()
            .flatten()
    };

    report(&|s| s.phase = Phase::Connecting);
    let mut result = RunResult::empty(spec, &run_id);
    result.shards.push(shard.clone());
    result.clock_origin_unix_ns = clock.origin_unix_ns();
    let connector = Connector {
        spec,
        run_id: &run_id,
        dialer: &dialer,
        codec,
        cancel: &cancel,
    };
    let subscriber_sessions = connector
        .connect_all(
            Role::Subscriber,
            shard.subscribers.clone(),
            &mut result,
            &status,
        )
        .await?;
    let publisher_sessions = connector
        .connect_all(
            Role::Publisher,
            shard.publishers.clone(),
            &mut result,
            &status,
        )
        .await?;

    let usage_before = Reading::now(&scope);
    let monitor = Monitor::start(
        scope.clone(),
        clock,
        local_broker.as_ref().map(|broker| broker.pid),
    );
    let earliest_start_ns = clock.now_ns() + START_BARRIER_DELAY.as_nanos() as u64;
    let start_ns = match barrier.start_at_ns {
        None => earliest_start_ns,
        Some(start_at) if start_at >= clock.now_ns() => start_at,
        Some(start_at) => {
            return Err(LoadgenError::StartMissed {
                late_ms: (clock.now_ns() - start_at) as f64 / 1e6,
            });
        }
    };
    let timing = Timing::of(spec, start_ns);
    let stop_subscribers = CancellationToken::new();
    let mut subscribers = JoinSet::new();
    let shared_spec = Arc::new(spec.clone());
    let reconnector = Reconnector::of(&shared_spec, &dialer, codec, clock, start_ns);
    for (id, session) in subscriber_sessions {
        let offline = spec.connection.offline.map(|gap| subscriber::Offline {
            at_ns: start_ns.saturating_add(crate::clock::saturating_nanos(gap.after)),
            gap: gap.gap,
            spec: shared_spec.clone(),
            client_id: connect::client_id(spec, &run_id, Role::Subscriber, id),
            dialer: dialer.clone(),
        });
        let job = SubscriberJob {
            id,
            publishers: spec.topology.publishers_of(id, spec.publishers),
            seq_limit: timing.seq_limit,
            warmup: timing.warmup,
            timetable: spec
                .timetable()
                .map(|timetable| timetable.starting_at(timing.start_ns())),
            header: spec.header_encoding(),
            rate_limit: spec.subscriber_rate_limit,
            read_cadence: spec.read_cadence(),
            keep_alive: spec.connection.keep_alive,
            clock,
            live: live.clone(),
            stop: stop_subscribers.clone(),
            offline,
            reconnect: reconnector
                .as_ref()
                .map(|reconnector| subscriber::Resubscribe {
                    reconnector: reconnector.clone(),
                    client_id: connect::client_id(spec, &run_id, Role::Subscriber, id),
                    topic: spec.topic_of(
                        &run_id,
                        spec.topology.publishers_of(id, spec.publishers).start,
                    ),
                    qos: spec.qos,
                }),
        };
        subscribers.spawn(subscriber::run(session, job));
    }

    // The churn fleet arrives from the start barrier on, beside the workload, run by the
    // instance holding publisher 0.
    let churn = spec
        .churn
        .clone()
        .filter(|_| shard.publishers.contains(&0))
        .map(|churn| {
            let fleet = churn::Fleet {
                spec: shared_spec.clone(),
                churn,
                run_id: run_id.clone(),
                dialer: dialer.clone(),
                codec,
                clock,
                start_ns,
            };
            tokio::spawn(fleet.run(cancel.clone()))
        });

    report(&|s| s.phase = Phase::Publishing);
    let (publishers, pacer) = start_publishers(
        spec,
        &run_id,
        codec,
        clock,
        &timing,
        publisher_sessions,
        &live,
        &cancel,
        &scope,
        reconnector.as_ref(),
    )?;
    let publisher_outcomes = await_publishers(publishers, &live, &status).await?;
    if let Some((handle, pacer_cancel_token)) = pacer {
        pacer_cancel_token.cancel();
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }

    report(&|s| s.phase = Phase::Draining);
    let published: u64 = publisher_outcomes.iter().map(|o| o.published).sum();
    let expected = expected_local_deliveries(spec, &shard, &publisher_outcomes);
    let publishing_ends = timing.publishing_ends_ns;
    drain(
        spec,
        clock,
        &live,
        expected,
        published,
        publishing_ends,
        &cancel,
    )
    .await;
    stop_subscribers.cancel();
    let mut subscriber_outcomes = Vec::new();
    while let Some(joined) = subscribers.join_next().await {
        subscriber_outcomes
            .push(joined.map_err(|e| LoadgenError::Internal(format!("subscriber task: {e}")))?);
    }
    if let Some(churn) = churn {
        result.churn = Some(
            churn
                .await
                .map_err(|e| LoadgenError::Internal(format!("churn task: {e}")))?,
        );
    }
    let load_wall_ns = clock.now_ns().saturating_sub(start_ns);
    let usage_after = Reading::now(&scope);
    let samples = monitor.finish().await;

    fill_result(&mut result, publisher_outcomes, subscriber_outcomes, &live);
    result.reconnect = reconnector.map(|reconnector| reconnector.outcome());
    result.load_wall_ns = load_wall_ns;
    let threads = crate::runtime::threads_for(spec);
    result.resources = usage_before.until(usage_after, threads);
    let (from_ns, until_ns) = match timing.end_ns {
        Some(end_ns) => {
            let from_ns = match timing.warmup {
                Warmup::Until(from_ns) => from_ns,
                Warmup::Messages(_) => start_ns,
            };
            result.measured_window = Some(crate::result::MeasuredWindow {
                start_ns,
                from_ns,
                until_ns: end_ns,
            });
            (from_ns, end_ns)
        }
        None => {
            let last_publish = result.publisher_windows.iter().map(|w| w.last_ns).max();
            let last_receive = live.last_receive_ns.load(Ordering::Relaxed);
            let last = last_publish.unwrap_or(start_ns).max(last_receive);
            (start_ns, last.max(start_ns + 1))
        }
    };
    result.instances.push(crate::usage::instance_load(
        &samples,
        from_ns,
        until_ns,
        crate::usage::capacity_milli(threads),
        shard.clone(),
        local_broker.as_ref(),
    ));
    result.interrupted = cancel.is_cancelled();
    report(&|s| {
        s.phase = Phase::Done;
        s.progress = live.progress();
    });
    Ok(result)
}

/// Publisher or subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends messages.
    Publisher,
    /// Receives messages.
    Subscriber,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Publisher => "publisher",
            Role::Subscriber => "subscriber",
        })
    }
}

/// A short id unique enough to keep concurrent runs' topics apart.
fn generate_run_id() -> String {
    let mixed = unix_now_ns() ^ (u64::from(std::process::id()) << 40);
    format!("{:010x}", mixed & 0xff_ffff_ffff)
}
