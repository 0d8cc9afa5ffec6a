//! Runs one workload through its phases: preflight -> connect (ramp-up) -> start barrier ->
//! publish (warm-up, then measured) -> drain -> stop, and gathers the [`RunResult`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::LoadgenError;
use crate::clock::{RunClock, unix_now_ns};
use crate::codec::{Codec, ConnectFields};
use crate::live::{Live, Progress};
use crate::pacer::{self, PacedPublisher, Release};
use crate::publisher::{self, PublisherJob, PublisherOutcome, PublisherPacing, Warmup};
use crate::result::RunResult;
use crate::session::{self, ConnectFailure, Session};
use crate::spec::{Pacing, Qos, RunLength, WorkloadSpec};
use crate::subscriber::{self, SubscriberJob, SubscriberOutcome};
use crate::transport::Dialer;
use crate::usage::{Monitor, Reading, Scope};

/// Handshakes under way at once while connecting, so a broker's listen backlog is not flooded.
const CONCURRENT_HANDSHAKES: usize = 64;
/// Time between the last connection and the first message, so every task is parked at start.
const START_BARRIER_DELAY: Duration = Duration::from_millis(50);
/// The preflight probe gives up after this long, whatever the connect timeout.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

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
    let dialer = Dialer::new(&spec.broker)?;
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
    let planned_connections = (shard.publishers.len() + shard.subscribers.len()) as u64;
    report(&|s| {
        s.planned_publishes = planned_publishes;
        s.connected = (0, planned_connections);
    });

    preflight(&dialer, codec, spec, &run_id).await?;

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
    let monitor = Monitor::start(scope.clone(), clock);
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
    for (id, session) in subscriber_sessions {
        let job = SubscriberJob {
            id,
            publishers: spec.topology.publishers_of(id, spec.publishers),
            seq_limit: timing.seq_limit,
            warmup: timing.warmup,
            header: spec.header_encoding(),
            rate_limit: spec.subscriber_rate_limit,
            keep_alive: spec.connection.keep_alive,
            clock,
            live: live.clone(),
            stop: stop_subscribers.clone(),
        };
        subscribers.spawn(subscriber::run(session, job));
    }

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
    let load_wall_ns = clock.now_ns().saturating_sub(start_ns);
    let usage_after = Reading::now(&scope);
    let samples = monitor.finish().await;

    fill_result(&mut result, publisher_outcomes, subscriber_outcomes, &live);
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
    ));
    result.interrupted = cancel.is_cancelled();
    report(&|s| {
        s.phase = Phase::Done;
        s.progress = live.progress();
    });
    Ok(result)
}

/// One connection to check the broker answers MQTT before anything else happens, so a broker
/// that is down fails the run within seconds with one clear message.
async fn preflight(
    dialer: &Dialer,
    codec: Codec,
    spec: &WorkloadSpec,
    run_id: &str,
) -> Result<(), LoadgenError> {
    let client_id = format!("{}-{run_id}-probe", spec.connection.client_id_prefix);
    let fields = connect_fields(spec, &client_id);
    let deadline = spec.connection.connect_timeout.min(PREFLIGHT_TIMEOUT);
    let mut probe = session::open(dialer, codec, &fields, None, deadline)
        .await
        .map_err(|failure| LoadgenError::BrokerUnreachable {
            address: dialer.address().to_string(),
            failure,
        })?;
    let mut goodbye = bytes::BytesMut::new();
    if codec.disconnect(&mut goodbye).is_ok() {
        use tokio::io::AsyncWriteExt;
        let _ = probe.writer.write_all(&goodbye).await;
        let _ = probe.writer.shutdown().await;
    }
    Ok(())
}

fn connect_fields<'a>(spec: &'a WorkloadSpec, client_id: &'a str) -> ConnectFields<'a> {
    ConnectFields {
        client_id,
        keep_alive_secs: u16::try_from(spec.connection.keep_alive.as_secs()).unwrap_or(u16::MAX),
        clean_session: spec.connection.clean_session,
        login: spec
            .broker
            .username
            .as_deref()
            .map(|user| (user, spec.broker.password.as_deref().unwrap_or(""))),
        max_packet_size: u32::try_from(spec.max_packet_bytes()).unwrap_or(u32::MAX),
    }
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

struct Connector<'a> {
    spec: &'a WorkloadSpec,
    run_id: &'a str,
    dialer: &'a Dialer,
    codec: Codec,
    cancel: &'a CancellationToken,
}

impl Connector<'_> {
    /// Opens the connections of `ids`, paced by the ramp-up rate; the first failure aborts.
    async fn connect_all(
        &self,
        role: Role,
        ids: std::ops::Range<u32>,
        result: &mut RunResult,
        status: &Option<watch::Sender<Status>>,
    ) -> Result<Vec<(u32, Session)>, LoadgenError> {
        let handshakes = Arc::new(Semaphore::new(CONCURRENT_HANDSHAKES));
        let mut pending = JoinSet::new();
        let ramp_start = Instant::now();
        let mut sessions = Vec::with_capacity(ids.len());
        for (n, id) in ids.clone().enumerate() {
            if let Some(rate) = self.spec.connection.ramp_up_per_second {
                let at = ramp_start + Duration::from_secs_f64(n as f64 / f64::from(rate));
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = self.cancel.cancelled() => return Err(LoadgenError::Cancelled),
                }
            }
            let permit = handshakes
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| LoadgenError::Internal(e.to_string()))?;
            let tag = match role {
                Role::Publisher => 'p',
                Role::Subscriber => 's',
            };
            let client_id = format!(
                "{}-{}-{tag}{id}",
                self.spec.connection.client_id_prefix, self.run_id
            );
            let subscription = match role {
                Role::Subscriber => {
                    let publisher = self
                        .spec
                        .topology
                        .publishers_of(id, self.spec.publishers)
                        .start;
                    Some((self.spec.topic_of(self.run_id, publisher), self.spec.qos))
                }
                Role::Publisher => None,
            };
            let (spec, dialer, codec) = (self.spec.clone(), self.dialer.clone(), self.codec);
            pending.spawn(async move {
                let began = Instant::now();
                let fields = connect_fields(&spec, &client_id);
                let subscription = subscription
                    .as_ref()
                    .map(|(topic, qos)| (topic.as_str(), *qos));
                let opened = session::open(
                    &dialer,
                    codec,
                    &fields,
                    subscription,
                    spec.connection.connect_timeout,
                )
                .await;
                drop(permit);
                (id, began.elapsed(), opened)
            });
            // Collect finished handshakes as we go, so a failure stops the ramp early.
            while let Some(joined) = pending.try_join_next() {
                self.collect(role, joined, result, &mut sessions)?;
            }
            if let Some(sender) = status {
                sender.send_modify(|s| s.connected.0 = result.connect_time.len());
            }
        }
        while let Some(joined) = tokio::select! {
            joined = pending.join_next() => joined,
            _ = self.cancel.cancelled() => return Err(LoadgenError::Cancelled),
        } {
            self.collect(role, joined, result, &mut sessions)?;
        }
        if let Some(sender) = status {
            sender.send_modify(|s| s.connected.0 = result.connect_time.len());
        }
        Ok(sessions)
    }

    fn collect(
        &self,
        role: Role,
        joined: Result<(u32, Duration, Result<Session, ConnectFailure>), tokio::task::JoinError>,
        result: &mut RunResult,
        sessions: &mut Vec<(u32, Session)>,
    ) -> Result<(), LoadgenError> {
        let (id, elapsed, opened) =
            joined.map_err(|e| LoadgenError::Internal(format!("connect task: {e}")))?;
        match opened {
            Ok(session) => {
                result
                    .connect_time
                    .saturating_record(elapsed.as_nanos().max(1) as u64);
                sessions.push((id, session));
                Ok(())
            }
            Err(failure) => Err(LoadgenError::Connect {
                role,
                client: id,
                address: self.dialer.address().to_string(),
                failure,
            }),
        }
    }
}

type PacerHandle = (std::thread::JoinHandle<()>, CancellationToken);

/// When a run's messages go out and which are measured, fixed once the start is known.
#[derive(Debug, Clone, Copy)]
struct Timing {
    start_ns: u64,
    /// Timed runs: nothing is published at or after this.
    end_ns: Option<u64>,
    warmup: Warmup,
    /// Sequence numbers below this belong to the run.
    seq_limit: u64,
    /// When the workload's last message is due to leave.
    publishing_ends_ns: u64,
}

impl Timing {
    fn of(spec: &WorkloadSpec, start_ns: u64) -> Self {
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
fn start_publishers(
    spec: &WorkloadSpec,
    run_id: &str,
    codec: Codec,
    clock: RunClock,
    timing: &Timing,
    sessions: Vec<(u32, Session)>,
    live: &Arc<Live>,
    cancel: &CancellationToken,
    scope: &Scope,
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
        let handle = pacer::spawn(clock, paced, timing.end_ns, token.clone(), threads)
            .map_err(|e| LoadgenError::Internal(format!("pacer thread: {e}")))?;
        Some((handle, token))
    };
    Ok((tasks, pacer))
}

async fn await_publishers(
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

/// Deliveries the local subscribers should see, when every publisher is local (else unknown).
fn expected_local_deliveries(
    spec: &WorkloadSpec,
    shard: &crate::spec::Shard,
    outcomes: &[PublisherOutcome],
) -> Option<u64> {
    if shard.publishers != (0..spec.publishers) {
        return None;
    }
    let mut published = vec![0u64; spec.publishers as usize];
    for outcome in outcomes {
        published[outcome.id as usize] = outcome.published;
    }
    Some(
        shard
            .subscribers
            .clone()
            .map(|s| {
                spec.topology
                    .publishers_of(s, spec.publishers)
                    .map(|p| published[p as usize])
                    .sum::<u64>()
            })
            .sum(),
    )
}

/// Waits until every expected delivery arrived, nothing arrived for `drain.idle` after the
/// last message was due, the deadline passed, or the run was cancelled.
async fn drain(
    spec: &WorkloadSpec,
    clock: RunClock,
    live: &Live,
    expected: Option<u64>,
    published: u64,
    publishing_ends_ns: u64,
    cancel: &CancellationToken,
) {
    let began_ns = clock.now_ns().max(publishing_ends_ns);
    let deadline = Instant::from_std(clock.instant_at(began_ns)) + spec.drain.timeout;
    let idle_ns = spec.drain.idle.as_nanos() as u64;
    loop {
        let unique = live.received_unique.load(Ordering::Relaxed);
        if expected.is_some_and(|expected| unique >= expected)
            || (published == 0 && expected.is_some())
        {
            return;
        }
        let quiet_since = live.last_receive_ns.load(Ordering::Relaxed).max(began_ns);
        if clock.now_ns().saturating_sub(quiet_since) > idle_ns
            || Instant::now() >= deadline
            || cancel.is_cancelled()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn fill_result(
    result: &mut RunResult,
    publishers: Vec<PublisherOutcome>,
    subscribers: Vec<SubscriberOutcome>,
    live: &Live,
) {
    for outcome in publishers {
        let slot = outcome.id as usize;
        result.published[slot] += outcome.published;
        result.sent_late_after_end += outcome.sent_late_after_end;
        result.acknowledged[slot] += outcome.acknowledged;
        result.publisher_windows.extend(outcome.window);
        outcome.series.fold_into(&mut result.publish_series);
        for (kind, count) in outcome.errors {
            result.count_error(kind, count);
        }
    }
    for outcome in subscribers {
        for (publisher, unique) in outcome.tracker.unique_by_publisher() {
            result.delivered_unique[publisher as usize] += unique;
        }
        result.received += outcome.received;
        result.duplicates += outcome.tracker.duplicates();
        result.out_of_order += outcome.tracker.out_of_order();
        result.subscriber_windows.extend(outcome.window);
        outcome.series.fold_into(&mut result.receive_series);
        for (kind, count) in outcome.errors {
            result.count_error(kind, count);
        }
    }
    result.publisher_windows.sort_by_key(|w| w.client);
    result.subscriber_windows.sort_by_key(|w| w.client);
    let lock = |h: &std::sync::Mutex<hdrhistogram::Histogram<u64>>| {
        h.lock().unwrap_or_else(|p| p.into_inner()).clone()
    };
    result.latency = lock(&live.latency);
    result.send_delay = lock(&live.send_delay);
}

/// A short id unique enough to keep concurrent runs' topics apart.
fn generate_run_id() -> String {
    let mixed = unix_now_ns() ^ (u64::from(std::process::id()) << 40);
    format!("{:010x}", mixed & 0xff_ffff_ffff)
}
