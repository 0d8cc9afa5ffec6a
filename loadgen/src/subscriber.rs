//! One subscriber connection: reads deliveries in bulk, acknowledges them, and accounts each
//! (publisher, seq) and its latency.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::accounting::{Delivery, DeliveryTracker};
use crate::clock::RunClock;
use crate::codec::{AckKind, Incoming};
use crate::header::HeaderEncoding;
use crate::live::{IntervalBuffer, Live, SampleBuffer, WindowTracker};
use crate::publisher::Warmup;
use crate::result::ClientWindow;
use crate::series::LocalSeries;
use crate::session::{READ_CHUNK, Session};
use crate::spec::Timetable;
use crate::transport::WriteHalf;

/// Everything one subscriber needs.
#[derive(Debug)]
pub(crate) struct SubscriberJob {
    pub id: u32,
    /// Global indices of the publishers whose messages reach it.
    pub publishers: crate::spec::Subscribed,
    /// Sequence numbers at or above this are not of this run.
    pub seq_limit: u64,
    pub warmup: Warmup,
    /// Open loop: when each message was due (the header carries when it actually left).
    pub timetable: Option<Timetable>,
    pub header: HeaderEncoding,
    /// MQTT 5: the header comes in a user property, never in the payload.
    pub header_in_property: bool,
    /// Messages per second this subscriber reads at most.
    pub rate_limit: Option<u32>,
    /// Receive coalescing: after a read that drained the socket, the next read waits until
    /// this long after it ([`crate::spec::Coalescing`]).
    pub read_cadence: Option<Duration>,
    pub keep_alive: Duration,
    /// The QoS it subscribed at: no delivery may come above it.
    pub subscribed_qos: u8,
    /// The RETAIN flag every delivery must carry ([`crate::spec::WorkloadSpec::live_retain_flag`]).
    pub retain_flag: bool,
    pub clock: RunClock,
    pub live: Arc<Live>,
    /// Fired when the drain is over.
    pub stop: CancellationToken,
    /// When it goes offline and how it comes back ([`crate::spec::OfflineGap`]).
    pub offline: Option<Offline>,
    /// How it comes back after a lost connection ([`crate::spec::Reconnect`]).
    pub reconnect: Option<Resubscribe>,
    /// MQTT 5, when expiry is judged ([`crate::spec::WorkloadSpec::judges_expiry`]): the
    /// expiry interval the publishes carry; a message the broker held through the absence
    /// and delivered older than it (beyond brokers' whole-second rounding) is counted as one
    /// it should have dropped.
    pub message_expiry: Option<Duration>,
}

/// When a subscriber was away ([`Offline`]), on the run clock: from writing DISCONNECT to the
/// CONNACK of its return; what it had received by then, and whether the broker had kept its
/// session (if not, nothing was held for it, and whatever it missed is lost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Absence {
    pub left_ns: u64,
    pub back_ns: u64,
    pub kept: bool,
    /// Per publisher: the highest sequence received before leaving (MQTT keeps one
    /// publisher's messages in order: what it missed came after).
    pub highest_before: std::collections::BTreeMap<u32, u32>,
}

/// A subscriber's one absence: it disconnects at `at_ns` (run clock), stays away for `gap`,
/// then reconnects to its kept session (no new SUBSCRIBE: the session holds it).
pub(crate) struct Offline {
    pub at_ns: u64,
    pub gap: Duration,
    pub spec: Arc<crate::spec::WorkloadSpec>,
    pub client_id: String,
    pub dialer: crate::transport::Dialer,
}

impl std::fmt::Debug for Offline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offline")
            .field("at_ns", &self.at_ns)
            .field("gap", &self.gap)
            .field("client_id", &self.client_id)
            .finish()
    }
}

/// What one subscriber saw.
#[derive(Debug)]
pub(crate) struct SubscriberOutcome {
    /// The subscriber's global index.
    pub id: u32,
    pub tracker: DeliveryTracker,
    pub received: u64,
    pub window: Option<ClientWindow>,
    pub series: LocalSeries,
    pub errors: Vec<(&'static str, u64)>,
    /// When it was away, if it went offline and came back.
    pub absence: Option<Absence>,
    /// Most QoS 1/2 deliveries that arrived in one read, before any of them was acknowledged:
    /// at that moment the broker had at least that many unacknowledged at this subscriber.
    pub most_unacknowledged: u64,
}

/// The latencies of each measured delivery, batched into the run's histograms.
struct Latencies<'a> {
    /// From the intended send time (open loop; the actual one without a schedule).
    open_loop: SampleBuffer<'a>,
    /// From the actual send time.
    transit: SampleBuffer<'a>,
    /// How long after the newest bytes of its read reached this host's kernel loadgen read
    /// the delivery: loadgen's own late read, at least ([`crate::transport::ArrivalStamp`]).
    read_delay: SampleBuffer<'a>,
    /// The open-loop latency again, by when it was received: the interval log.
    intervals: IntervalBuffer<'a>,
}

impl Latencies<'_> {
    fn flush(&mut self) {
        self.open_loop.flush();
        self.transit.flush();
        self.read_delay.flush();
        self.intervals.flush();
    }
}

/// Why the read loop ended early.
struct Ended(&'static str);

/// When a read returned: on the run clock, and how long after the newest bytes it returned
/// reached this host's kernel (`None` without a kernel stamp).
#[derive(Debug, Clone, Copy)]
struct ReadAt {
    now_ns: u64,
    read_delay_ns: Option<u64>,
}

/// Runs one subscriber until `job.stop` fires or the connection ends (and, with a reconnect
/// policy, cannot be opened again).
pub(crate) async fn run(mut session: Session, job: SubscriberJob) -> SubscriberOutcome {
    let mut state = State {
        tracker: DeliveryTracker::new(job.publishers.clone(), job.seq_limit),
        received: 0,
        unique: 0,
        window: WindowTracker::default(),
        series: LocalSeries::default(),
        errors: Vec::new(),
        negative_latency: 0,
        above_subscription: 0,
        past_expiry: 0,
        absence: None,
        most_unacknowledged: 0,
        retain_flag_wrong: 0,
    };
    let mut latencies = Latencies {
        open_loop: SampleBuffer::new(&job.live.latency),
        transit: SampleBuffer::new(&job.live.transit_latency),
        read_delay: SampleBuffer::new(&job.live.read_delay),
        intervals: IntervalBuffer::new(&job.live.latency_intervals),
    };
    if let Some(granted) = session
        .granted_qos
        .filter(|granted| *granted < job.subscribed_qos)
    {
        // The broker's answer: deliveries can come no higher than it granted.
        state.errors.push((granted_below_asked(granted), 1));
    }
    let session_codec = session.codec;
    let mut out = BytesMut::new();
    let ping_every = (job.keep_alive / 2).max(Duration::from_secs(1));
    let mut last_write = Instant::now();
    let mut read_allowed_at: Option<Instant> = None;
    // Until when (wall clock, ns) loadgen chose not to read: bytes that arrived before then
    // waited by design (receive coalescing, a slow consumer), not because loadgen was late.
    let mut held_until_unix_ns: Option<u64> = None;
    // Made once: per read, a fresh timer entry and cancellation waker cost more than the read.
    let stop = job.stop.cancelled();
    tokio::pin!(stop);
    let ping = tokio::time::sleep(ping_every);
    tokio::pin!(ping);
    let mut offline = job.offline.as_ref();
    let offline_at = tokio::time::sleep_until(
        offline.map_or_else(Instant::now, |o| job.clock.instant_at(o.at_ns).into()),
    );
    tokio::pin!(offline_at);
    let cut_at = job.reconnect.as_ref().and_then(|r| r.reconnector.cut_at());
    let mut cut_armed = cut_at.is_some();
    let cut = tokio::time::sleep_until(cut_at.unwrap_or_else(Instant::now));
    tokio::pin!(cut);
    // The coalescing wait, made once and reset per read (a fresh timer per read costs more).
    let next_read = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(next_read);
    loop {
        session.read_buffer.reserve(READ_CHUNK);
        let spare = session.read_buffer.capacity() - session.read_buffer.len();
        // How the connection was lost in this round, if it was.
        let mut lost: Option<&'static str> = None;
        let read = tokio::select! {
            biased;
            _ = &mut stop => break,
            _ = &mut cut, if cut_armed => {
                cut_armed = false;
                lost = Some("cut");
                Ok(1)
            }
            _ = &mut offline_at, if offline.is_some() => {
                let Some(away) = offline.take() else { continue };
                let left_ns = job.clock.now_ns();
                let highest_before = state.tracker.highest_by_publisher().collect();
                match go_offline(session, away, session_codec, &job.stop).await {
                    Some(back) => {
                        state.absence = Some(Absence {
                            left_ns,
                            back_ns: job.clock.now_ns(),
                            kept: back.session_present,
                            highest_before,
                        });
                        session = back;
                        last_write = Instant::now();
                        continue;
                    }
                    None => {
                        state.errors.push(("reconnect_failed", 1));
                        latencies.flush();
                        return state.finish(&job);
                    }
                }
            }
            read = session.reader.read_buf(&mut session.read_buffer) => read,
            _ = &mut ping => {
                // Re-armed lazily: acknowledgements written meanwhile moved the due time.
                let due = last_write + ping_every;
                if Instant::now() >= due {
                    if session.codec.ping(&mut out).is_err() {
                        state.errors.push(("encode_failed", 1));
                        break;
                    }
                    if write_out(&mut session.writer, &out).await.is_err() {
                        lost = Some("write_failed");
                    }
                    out.clear();
                    last_write = Instant::now();
                }
                ping.as_mut().reset(last_write + ping_every);
                if lost.is_none() {
                    continue;
                }
                Ok(1)
            }
        };
        match read {
            _ if lost.is_some() => {}
            Ok(0) => lost = Some("connection_closed"),
            Err(error) => lost = Some(crate::transport::read_failure(&error)),
            Ok(read_bytes) => {
                // Wall clock beside the run clock: the kernel's stamp is on the wall clock.
                let held_until = held_until_unix_ns.take().unwrap_or(0);
                let read_delay_ns = session
                    .arrival
                    .as_ref()
                    .and_then(|arrival| arrival.newest_unix_ns())
                    .map(|arrived| {
                        crate::clock::unix_now_ns().saturating_sub(arrived.max(held_until))
                    });
                let now_ns = job.clock.now_ns();
                let before = (state.received, state.unique());
                let read_at = ReadAt {
                    now_ns,
                    read_delay_ns,
                };
                let decoded = state.consume(&job, &mut session, read_at, &mut out, &mut latencies);
                if !out.is_empty() {
                    if write_out(&mut session.writer, &out).await.is_err() {
                        lost = Some("write_failed");
                    }
                    out.clear();
                    last_write = Instant::now();
                }
                let batch = state.received - before.0;
                job.live
                    .add_received(batch, state.unique() - before.1, now_ns);
                match decoded {
                    Err(Ended("broker_disconnected")) => lost = Some("broker_disconnected"),
                    Err(Ended(kind)) => {
                        state.errors.push((kind, 1));
                        break;
                    }
                    Ok(()) => {}
                }
                if lost.is_none()
                    && let Some(cadence) = job.read_cadence
                    && batch > 0
                    && read_bytes < spare
                {
                    // Drained: what arrives before the cadence is up is read in one go.
                    next_read.as_mut().reset(Instant::now() + cadence);
                    held_until_unix_ns =
                        Some(crate::clock::unix_now_ns() + crate::clock::saturating_nanos(cadence));
                    tokio::select! {
                        biased;
                        _ = &mut stop => break,
                        () = &mut next_read => {}
                    }
                }
                if lost.is_none()
                    && let Some(rate) = job.rate_limit
                {
                    // A slow consumer: hold the next read back so the average stays at `rate`.
                    let earliest = read_allowed_at
                        .unwrap_or_else(Instant::now)
                        .max(Instant::now() - Duration::from_millis(100));
                    let allowed =
                        earliest + Duration::from_secs_f64(batch as f64 / f64::from(rate));
                    read_allowed_at = Some(allowed);
                    let held = crate::clock::saturating_nanos(
                        allowed.saturating_duration_since(Instant::now()),
                    );
                    held_until_unix_ns = Some(
                        held_until_unix_ns
                            .unwrap_or(0)
                            .max(crate::clock::unix_now_ns().saturating_add(held)),
                    );
                    tokio::select! {
                        _ = tokio::time::sleep_until(allowed) => {}
                        _ = &mut stop => break,
                    }
                }
            }
        }
        if let Some(kind) = lost {
            match come_back(session, kind, &job, &mut state.errors).await {
                Some(back) => {
                    session = back;
                    last_write = Instant::now();
                }
                None => {
                    latencies.flush();
                    return state.finish(&job);
                }
            }
        }
    }
    latencies.flush();
    say_goodbye(&mut session).await;
    state.finish(&job)
}

/// The count of subscriptions a SUBACK granted at QoS `granted`, below what was asked.
fn granted_below_asked(granted: u8) -> &'static str {
    match granted {
        0 => "suback_granted_qos_0_below_asked",
        _ => "suback_granted_qos_1_below_asked",
    }
}

/// How a subscriber comes back after its connection was lost.
pub(crate) struct Resubscribe {
    pub reconnector: Arc<crate::reconnect::Reconnector>,
    pub client_id: String,
    pub topic: String,
    pub qos: crate::spec::Qos,
}

impl std::fmt::Debug for Resubscribe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resubscribe")
            .field("client_id", &self.client_id)
            .field("topic", &self.topic)
            .finish()
    }
}

/// The connection is gone (`kind` says how): without a reconnect policy that is an error and
/// the end; with one, the subscriber connects and subscribes again (`None` when it gave up
/// or the run stopped meanwhile).
async fn come_back(
    session: Session,
    kind: &'static str,
    job: &SubscriberJob,
    errors: &mut Vec<(&'static str, u64)>,
) -> Option<Session> {
    // Dropped without DISCONNECT: a cut connection ends as a network outage would end it.
    drop(session);
    let Some(again) = &job.reconnect else {
        errors.push((kind, 1));
        return None;
    };
    let lost_ns = job.clock.now_ns();
    let back = again
        .reconnector
        .reconnect(
            &again.client_id,
            Some((&again.topic, again.qos)),
            lost_ns,
            &job.stop,
        )
        .await;
    if back.is_none() && !job.stop.is_cancelled() {
        errors.push(("reconnect_gave_up", 1));
    }
    back
}

/// DISCONNECT, then close: the broker ends (or, clean session off, keeps) the session.
async fn say_goodbye(session: &mut Session) {
    let mut goodbye = BytesMut::new();
    if session.codec.disconnect(&mut goodbye).is_ok() {
        let _ = session.writer.write_all(&goodbye).await;
        let _ = session.writer.flush().await;
        let _ = session.writer.shutdown().await;
    }
}

/// Leaves, waits out the gap (unless the run stops), and reconnects to the kept session;
/// `None` when the reconnect failed or the run stopped meanwhile.
async fn go_offline(
    mut session: Session,
    away: &Offline,
    codec: crate::codec::Codec,
    stop: &CancellationToken,
) -> Option<Session> {
    say_goodbye(&mut session).await;
    drop(session);
    tokio::select! {
        () = tokio::time::sleep(away.gap) => {}
        () = stop.cancelled() => return None,
    }
    let fields = crate::session::connect_fields(&away.spec, &away.client_id);
    // Back on its kept session: nothing to subscribe, but still a subscriber's reads.
    crate::session::open_with(
        &away.dialer,
        codec,
        &fields,
        None,
        crate::session::KeptSession::SubscribeAnyway,
        crate::session::StampReads::Yes,
        away.spec.connection.connect_timeout,
    )
    .await
    .ok()
}

/// Writes `bytes` and flushes: acknowledgements the broker waits for must not stay in a
/// WebSocket or TLS writer's buffer while this task goes back to reading (a no-op on TCP).
async fn write_out(writer: &mut WriteHalf, bytes: &[u8]) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

impl State {
    fn finish(mut self, job: &SubscriberJob) -> SubscriberOutcome {
        self.errors
            .push(("negative_latency", self.negative_latency));
        self.errors
            .push(("foreign_message", self.tracker.foreign()));
        self.errors.push((
            crate::summary::ABOVE_SUBSCRIPTION_QOS,
            self.above_subscription,
        ));
        self.errors
            .push((crate::summary::DELIVERED_PAST_EXPIRY, self.past_expiry));
        self.errors
            .push((crate::summary::RETAIN_FLAG_WRONG, self.retain_flag_wrong));
        SubscriberOutcome {
            id: job.id,
            received: self.received,
            window: self.window.finish(job.id),
            series: self.series,
            errors: self.errors,
            tracker: self.tracker,
            absence: self.absence,
            most_unacknowledged: self.most_unacknowledged,
        }
    }
}

struct State {
    tracker: DeliveryTracker,
    received: u64,
    unique: u64,
    window: WindowTracker,
    series: LocalSeries,
    errors: Vec<(&'static str, u64)>,
    negative_latency: u64,
    /// Deliveries at a QoS above the subscription's: the broker did not downgrade.
    above_subscription: u64,
    /// First deliveries older than their expiry allows.
    past_expiry: u64,
    absence: Option<Absence>,
    most_unacknowledged: u64,
    /// Deliveries whose RETAIN flag the subscription did not allow.
    retain_flag_wrong: u64,
}

impl State {
    fn unique(&self) -> u64 {
        self.unique
    }

    /// Decodes every complete packet in the buffer; all arrived in the same read at `now_ns`.
    fn consume(
        &mut self,
        job: &SubscriberJob,
        session: &mut Session,
        read: ReadAt,
        out: &mut BytesMut,
        latencies: &mut Latencies<'_>,
    ) -> Result<(), Ended> {
        let ReadAt {
            now_ns,
            read_delay_ns,
        } = read;
        // QoS 1/2 deliveries of this read: none is acknowledged before all are decoded.
        let mut unacknowledged = 0u64;
        loop {
            let packet = match session.codec.decode(&mut session.read_buffer) {
                Ok(Some(packet)) => packet,
                Ok(None) => {
                    self.most_unacknowledged = self.most_unacknowledged.max(unacknowledged);
                    return Ok(());
                }
                Err(_) => return Err(Ended("protocol_error")),
            };
            match packet {
                Incoming::Publish {
                    qos,
                    pkid,
                    payload,
                    retain,
                    header: property,
                } => {
                    self.received += 1;
                    if retain != job.retain_flag {
                        self.retain_flag_wrong += 1;
                    }
                    if qos > job.subscribed_qos {
                        self.above_subscription += 1;
                    }
                    let ack = match qos {
                        1 => Some(AckKind::PubAck),
                        2 => Some(AckKind::PubRec),
                        _ => None,
                    };
                    if let Some(kind) = ack {
                        unacknowledged += 1;
                        if session.codec.ack(kind, pkid, out).is_err() {
                            return Err(Ended("encode_failed"));
                        }
                    }
                    let header = match (&property, job.header_in_property) {
                        (Some(bytes), _) => job.header.decode(bytes),
                        (None, false) => job.header.decode(&payload),
                        (None, true) => {
                            self.errors.push(("header_property_missing", 1));
                            continue;
                        }
                    };
                    let Some(header) = header else {
                        self.errors.push(("short_payload", 1));
                        continue;
                    };
                    if let Delivery::First { .. } =
                        self.tracker.record(header.publisher, header.seq)
                    {
                        self.unique += 1;
                        if let Some(credit) = job.live.credits.get(header.publisher as usize) {
                            credit.add(1);
                        }
                    } else {
                        continue;
                    }
                    // The stamp is when the message actually left; the compact header's is
                    // truncated, so restore it from the transit latency.
                    let transit = job.header.latency_ns(header.stamp_ns, now_ns);
                    let sent_ns = transit.map_or(header.stamp_ns, |l| now_ns.saturating_sub(l));
                    let due_ns = job.timetable.map_or(sent_ns, |timetable| {
                        timetable.intended_ns(header.publisher, u64::from(header.seq))
                    });
                    if let (Some(expiry), Some(absence), Some(age)) =
                        (job.message_expiry, &self.absence, transit)
                        && due_ns < absence.back_ns
                        && crate::spec::delivered_past_expiry(Duration::from_nanos(age), expiry)
                    {
                        // Held through the absence, and older than the broker may keep it.
                        self.past_expiry += 1;
                    }
                    let measured = job.warmup.measured(u64::from(header.seq), due_ns);
                    if measured {
                        self.window.add(now_ns);
                        let open_loop = match job.timetable {
                            Some(_) => now_ns.checked_sub(due_ns),
                            None => transit,
                        };
                        match (open_loop, transit) {
                            (Some(open_loop), Some(transit)) => {
                                latencies.open_loop.push(open_loop);
                                latencies.intervals.push(now_ns, open_loop);
                                latencies.transit.push(transit);
                                if let Some(late) = read_delay_ns {
                                    // Never more than the transit: clocks read apart.
                                    latencies.read_delay.push(late.min(transit));
                                }
                            }
                            _ => self.negative_latency += 1,
                        }
                    }
                    if measured || job.warmup.series_counts_warmup() {
                        self.series.add(now_ns, 1);
                    }
                }
                Incoming::PubRel(pkid)
                    if session.codec.ack(AckKind::PubComp, pkid, out).is_err() =>
                {
                    return Err(Ended("encode_failed"));
                }
                Incoming::Disconnect(reason) => {
                    // The broker's answer, by its reason code, beside the lost connection.
                    self.errors.push((reason, 1));
                    return Err(Ended("broker_disconnected"));
                }
                _ => {}
            }
        }
    }
}
