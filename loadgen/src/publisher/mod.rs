//! One publisher connection: writes its messages (burst, closed loop, or on the pacer's
//! schedule) and, in the same task, reads the broker's acknowledgements (`acks.rs`); what it
//! waits for between messages is in `wait.rs`.
//!
//! PUBLISH packets come from a template encoded once; per message only the packet id and the
//! measurement header are written, and up to [`BATCH_MESSAGES`] packets go out in one write.

mod acks;
mod wait;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::wait::{Stop, Waits};
use crate::clock::RunClock;
use crate::codec::{AckKind, Codec, PublishTemplate};
use crate::header::{HeaderEncoding, MessageHeader};
use crate::live::{Credit, Live, SampleBuffer, WindowTracker};
use crate::pacer::Release;
use crate::reconnect::Reconnector;
use crate::result::ClientWindow;
use crate::series::LocalSeries;
use crate::session::Session;
use crate::spec::{Qos, Schedule};
use crate::transport::WriteHalf;

/// Most packets written in one syscall.
pub(crate) const BATCH_MESSAGES: usize = 32;
/// Flush once this many bytes are buffered.
const BATCH_BYTES: usize = 16 * 1024;

/// When a publisher sends.
#[derive(Debug, Clone)]
pub(crate) enum PublisherPacing {
    /// As fast as the window allows from `start_ns` on (burst, closed loop).
    Flat { start_ns: u64 },
    /// When the pacer releases each message; stamped, like every message, with the time it
    /// actually left (subscribers know the intended time from the schedule).
    OpenLoop {
        schedule: Schedule,
        release: Arc<Release>,
    },
}

/// Which messages are warm-up: sent and counted, kept out of latency and rate figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warmup {
    /// The first `n` of each publisher (counted runs).
    Messages(u64),
    /// Those due (open loop) or sent (closed loop, burst) before this time on the run clock
    /// (timed runs).
    Until(u64),
}

impl Warmup {
    /// True when message `seq`, due (or, without a schedule, sent) at `due_ns`, is measured.
    pub fn measured(self, seq: u64, due_ns: u64) -> bool {
        match self {
            Warmup::Messages(n) => seq >= n,
            Warmup::Until(end_ns) => due_ns >= end_ns,
        }
    }

    /// Timed runs count warm-up messages in the rate series too: the measured window then
    /// selects by time, so the series say what crossed the broker when (as its own counters
    /// do).
    pub fn series_counts_warmup(self) -> bool {
        matches!(self, Warmup::Until(_))
    }
}

/// Everything one publisher needs.
#[derive(Debug)]
pub(crate) struct PublisherJob {
    pub id: u32,
    pub template: PublishTemplate,
    pub header: HeaderEncoding,
    /// Zeros after the header, shared by all publishers.
    pub padding: Arc<[u8]>,
    /// Messages to send; a closed loop sends until `end_ns` instead.
    pub messages: u64,
    /// Timed runs: no message leaves at or after this time on the run clock.
    pub end_ns: Option<u64>,
    pub warmup: Warmup,
    pub qos: Qos,
    pub inflight: u16,
    pub keep_alive: Duration,
    pub drain_timeout: Duration,
    pub pacing: PublisherPacing,
    /// Closed loop at QoS 0: the end-to-end window (deliveries its subscribers saw), and
    /// how many subscribers receive each message.
    pub credit: Option<(Arc<Credit>, u32)>,
    /// A message not delivered within this long counts as lost for the closed-loop window.
    pub credit_timeout: Duration,
    pub clock: RunClock,
    pub live: Arc<Live>,
    pub cancel: CancellationToken,
    /// How it comes back after a lost connection ([`crate::spec::Reconnect`]).
    pub reconnect: Option<Reconnecting>,
    /// A topic alias was asked for and the broker allows none: the topic travels whole.
    pub alias_refused: bool,
}

/// How a publisher comes back after a lost connection: it connects again and sends its
/// unacknowledged QoS 1 messages again, with their original numbers and stamps.
pub(crate) struct Reconnecting {
    pub reconnector: Arc<Reconnector>,
    pub client_id: String,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("client_id", &self.client_id)
            .finish()
    }
}

/// A QoS 1 message sent and not yet acknowledged, kept (only when reconnecting) to be sent
/// again after a lost connection.
#[derive(Debug, Clone, Copy)]
struct Unacked {
    pkid: u16,
    seq: u32,
    stamp_ns: u64,
}

type UnackedQueue = Mutex<VecDeque<Unacked>>;

/// What one publisher did.
#[derive(Debug)]
pub(crate) struct PublisherOutcome {
    pub id: u32,
    pub published: u64,
    /// Open loop: messages that left after the schedule's end although they were due before
    /// it (the publisher, or the broker's backpressure, could not keep up).
    pub sent_late_after_end: u64,
    pub acknowledged: u64,
    /// Bytes written to the broker: its PUBLISHes and the few packets beside them.
    pub bytes_written: u64,
    pub window: Option<ClientWindow>,
    pub series: LocalSeries,
    pub errors: Vec<(&'static str, u64)>,
}

/// Runs one publisher to completion; with a reconnect policy, across lost connections.
pub(crate) async fn run(session: Session, job: PublisherJob) -> PublisherOutcome {
    let window = usize::from(
        job.inflight
            .min(session.receive_maximum.unwrap_or(u16::MAX))
            .max(1),
    );
    let permits = Semaphore::new(window);
    let acknowledged = AtomicU64::new(0);
    let unacked: Option<UnackedQueue> = (job.reconnect.is_some() && job.qos != Qos::AtMostOnce)
        .then(|| Mutex::new(VecDeque::with_capacity(window)));
    let mut written = Written::default();
    if job.alias_refused {
        written.errors.push(("topic_alias_not_allowed", 1));
    }
    let mut cut_at = job
        .reconnect
        .as_ref()
        .and_then(|again| again.reconnector.cut_at());
    let mut session = session;
    let mut resend = false;
    loop {
        let Session {
            reader,
            writer,
            read_buffer,
            codec,
            ..
        } = session;
        let (pubrel_tx, pubrel_rx) = mpsc::channel(window + 1);
        let writer_done = CancellationToken::new();
        let reader_done = CancellationToken::new();
        let lost = CancellationToken::new();
        let links = Links {
            permits: &permits,
            window,
            acknowledged: &acknowledged,
            writer_done: &writer_done,
            reader_done: &reader_done,
            lost: job.reconnect.as_ref().map(|_| &lost),
            unacked: unacked.as_ref(),
        };
        // The storm loadgen makes: this connection ends at the cut, as an outage ends it.
        let cutter = async {
            if let Some(at) = cut_at {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => lost.cancel(),
                    () = writer_done.cancelled() => {}
                }
            }
        };
        let ((), read_errors, ()) = tokio::join!(
            write_loop(&job, writer, codec, pubrel_rx, &links, &mut written, resend),
            acks::read_loop(reader, read_buffer, codec, pubrel_tx, &links, &job.cancel),
            cutter,
        );
        written.errors.extend(read_errors);
        if cut_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
            cut_at = None;
        }
        let Some(again) = job.reconnect.as_ref() else {
            break;
        };
        if !lost.is_cancelled() || job.cancel.is_cancelled() {
            break;
        }
        let lost_ns = job.clock.now_ns();
        match again
            .reconnector
            .reconnect(&again.client_id, None, lost_ns, &job.cancel)
            .await
        {
            Some(back) => {
                session = back;
                resend = true;
            }
            None => {
                if !job.cancel.is_cancelled() {
                    written.errors.push(("reconnect_gave_up", 1));
                }
                break;
            }
        }
    }
    PublisherOutcome {
        id: job.id,
        published: written.published,
        sent_late_after_end: written.sent_late_after_end,
        acknowledged: acknowledged.load(Ordering::Relaxed),
        bytes_written: written.bytes,
        window: written.window.finish(job.id),
        series: written.series,
        errors: written.errors,
    }
}

/// What the writer and reader halves of one connection share.
struct Links<'a> {
    permits: &'a Semaphore,
    window: usize,
    acknowledged: &'a AtomicU64,
    writer_done: &'a CancellationToken,
    reader_done: &'a CancellationToken,
    /// When reconnecting: fired by whichever half finds the connection lost (or by the
    /// storm's cut); the connection is then left without DISCONNECT and opened again.
    lost: Option<&'a CancellationToken>,
    /// When reconnecting at QoS 1: what to send again.
    unacked: Option<&'a UnackedQueue>,
}

impl Links<'_> {
    /// The connection is gone: with a reconnect policy that is a loss to come back from
    /// (true), without one an error to count (false).
    fn connection_lost(&self) -> bool {
        match self.lost {
            Some(lost) => {
                lost.cancel();
                true
            }
            None => false,
        }
    }

    fn is_lost(&self) -> bool {
        self.lost.is_some_and(CancellationToken::is_cancelled)
    }
}

#[derive(Default)]
struct Written {
    /// The number of the next message (kept across reconnections).
    next_seq: u64,
    published: u64,
    sent_late_after_end: u64,
    /// Bytes written to the socket, every packet.
    bytes: u64,
    window: WindowTracker,
    series: LocalSeries,
    errors: Vec<(&'static str, u64)>,
}

/// The connection stopped; the reason was already counted.
struct Stopped;

struct Writer<'a> {
    sink: WriteHalf,
    out: BytesMut,
    pending: u64,
    last_write: Instant,
    codec: Codec,
    live: &'a Live,
    written: &'a mut Written,
    lost: Option<&'a CancellationToken>,
    /// The run's stop: after it, a write the broker does not take is given up.
    cancel: &'a CancellationToken,
    /// A write was given up after the stop; later ones are not tried.
    stuck: bool,
    /// This connection has had its first PUBLISH (with a topic alias: the one that set it).
    opened: bool,
}

impl Writer<'_> {
    async fn flush(&mut self) -> Result<(), Stopped> {
        if self.out.is_empty() {
            return Ok(());
        }
        // Flushed too: the waits that follow expect the broker to have it all (a WebSocket
        // or TLS writer may keep the last bytes when the socket is full; a no-op on TCP).
        let (sink, out) = (&mut self.sink, &self.out);
        let written = match self.stuck {
            true => Err(wait::STUCK.into()),
            false => {
                let write = async move {
                    match sink.write_all(out).await {
                        Ok(()) => sink.flush().await,
                        Err(error) => Err(error),
                    }
                };
                wait::unless_stuck_after_stop(write, self.cancel).await
            }
        };
        self.stuck |= written.as_ref().is_err_and(|e| e.kind() == wait::STUCK);
        if let Err(error) = written {
            tracing::debug!(%error, "publisher write failed");
            match self.lost {
                Some(lost) => {
                    // These messages have their numbers: they count as published, and are
                    // sent again (QoS 1) or lost (QoS 0) like any caught in an outage.
                    self.count_published();
                    self.out.clear();
                    lost.cancel();
                }
                None => self.written.errors.push(("write_failed", 1)),
            }
            return Err(Stopped);
        }
        self.written.bytes += self.out.len() as u64;
        self.out.clear();
        self.count_published();
        self.last_write = Instant::now();
        Ok(())
    }

    fn count_published(&mut self) {
        self.written.published += self.pending;
        self.live
            .published
            .fetch_add(self.pending, Ordering::Relaxed);
        self.pending = 0;
    }

    fn encode_ack(&mut self, kind: AckKind, pkid: u16) {
        if self.codec.ack(kind, pkid, &mut self.out).is_err() {
            self.written.errors.push(("encode_failed", 1));
        }
    }

    fn encode_ping(&mut self) {
        if self.codec.ping(&mut self.out).is_err() {
            self.written.errors.push(("encode_failed", 1));
        }
    }
}

async fn write_loop(
    job: &PublisherJob,
    sink: WriteHalf,
    codec: Codec,
    mut pubrel_rx: mpsc::Receiver<u16>,
    links: &Links<'_>,
    written: &mut Written,
    resend: bool,
) {
    let mut writer = Writer {
        sink,
        out: BytesMut::with_capacity(BATCH_BYTES + job.template.packet_len()),
        pending: 0,
        last_write: Instant::now(),
        codec,
        live: &job.live,
        written,
        lost: links.lost,
        cancel: &job.cancel,
        stuck: false,
        opened: false,
    };
    if !resend || send_again(job, &mut writer, links).await.is_ok() {
        let mut waits = Waits::new(job, links);
        let _ = publish_all(job, &mut writer, &mut pubrel_rx, links, &mut waits).await;
        let _ = acks::await_acknowledgements(job, &mut writer, &mut pubrel_rx, links).await;
    }
    if links.is_lost() {
        // Messages already numbered leave before the connection goes (or, if the write
        // fails, count as published and caught in the outage).
        let _ = writer.flush().await;
    }
    // A clean goodbye, so the broker does not count an abnormal disconnect; a lost
    // connection gets none.
    if !links.is_lost() && codec.disconnect(&mut writer.out).is_ok() && writer.flush().await.is_ok()
    {
        let _ = writer.sink.shutdown().await;
    }
    links.writer_done.cancel();
}

/// After a reconnect: every QoS 1 message still unacknowledged goes out again, flagged DUP,
/// with its number and original stamp (its latency includes the time away).
async fn send_again(
    job: &PublisherJob,
    writer: &mut Writer<'_>,
    links: &Links<'_>,
) -> Result<(), Stopped> {
    let Some(unacked) = links.unacked else {
        return Ok(());
    };
    let again: Vec<Unacked> = unacked
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .copied()
        .collect();
    let mut header_bytes = [0u8; 16];
    let header_len = job.header.len();
    for message in &again {
        job.template
            .write_prefix_again(message.pkid, &mut writer.out, !writer.opened);
        writer.opened = true;
        let header = MessageHeader {
            publisher: job.id,
            seq: message.seq,
            stamp_ns: message.stamp_ns,
        };
        job.header.encode(header, &mut header_bytes);
        job.template
            .write_header(&header_bytes[..header_len], &job.padding, &mut writer.out);
        if writer.out.len() >= BATCH_BYTES {
            writer.flush().await?;
        }
    }
    writer.flush().await?;
    if let Some(again_policy) = &job.reconnect {
        again_policy.reconnector.note_resent(again.len() as u64);
    }
    Ok(())
}

async fn publish_all(
    job: &PublisherJob,
    writer: &mut Writer<'_>,
    pubrel_rx: &mut mpsc::Receiver<u16>,
    links: &Links<'_>,
    waits: &mut Waits<'_>,
) -> Result<(), Stopped> {
    if let PublisherPacing::Flat { start_ns } = &job.pacing
        && waits
            .until_start(job.clock.instant_at(*start_ns))
            .await
            .is_err()
    {
        return Ok(());
    }
    let mut send_delays = SampleBuffer::new(&job.live.send_delay);
    let mut header_bytes = [0u8; 16];
    let header_len = job.header.len();
    let counts_warmup = job.warmup.series_counts_warmup();
    let mut seq: u64 = writer.written.next_seq;
    let mut batch_clock: Option<u64> = None;
    while seq < job.messages {
        // A flat timed run ends here, before a permit or credit is taken for a message that
        // would never be sent.
        if writer.pending == 0
            && let (PublisherPacing::Flat { .. }, Some(end_ns)) = (&job.pacing, job.end_ns)
            && job.clock.now_ns() >= end_ns
        {
            break;
        }
        let mut waited = Ok(());
        if let PublisherPacing::OpenLoop { release, .. } = &job.pacing
            && release.released() <= seq
        {
            waited = waits.for_release(release, seq, writer, pubrel_rx).await;
        }
        if waited.is_ok() {
            waited = match (job.qos, &job.credit) {
                (Qos::AtMostOnce, Some((credit, fanout))) => {
                    waits
                        .for_credit(credit, *fanout, seq, job, writer, pubrel_rx)
                        .await
                }
                (Qos::AtMostOnce, None) => Ok(()),
                _ => waits.for_permit(links.permits, writer, pubrel_rx).await,
            };
        }
        match waited {
            Ok(()) => {}
            Err(Stop::Ended) => break,
            Err(Stop::Stopped) => return Err(Stopped),
        }
        while let Ok(pkid) = pubrel_rx.try_recv() {
            writer.encode_ack(AckKind::PubRel, pkid);
        }
        // One clock reading per batch in a flat run: the batch leaves in one write anyway.
        // A wait flushes the batch (nothing pending), and what follows is a new batch.
        let now = match (&job.pacing, batch_clock) {
            (PublisherPacing::Flat { .. }, Some(now)) if writer.pending > 0 => now,
            _ => job.clock.now_ns(),
        };
        batch_clock = Some(now);
        // The header carries the actual send time; the open loop's intended time is the
        // schedule's, which subscribers compute themselves (see `Timetable`).
        let stamp_ns = now;
        let intended_ns = match &job.pacing {
            PublisherPacing::Flat { .. } => now,
            PublisherPacing::OpenLoop { schedule, .. } => schedule.intended_ns(seq),
        };
        // Packet ids cycle through 1..=65535; the window never exceeds 65535.
        let pkid = (seq % 65_535) as u16 + 1;
        if writer.opened {
            job.template.write_prefix(pkid, &mut writer.out);
        } else {
            job.template.write_opening_prefix(pkid, &mut writer.out);
            writer.opened = true;
        }
        let header = MessageHeader {
            publisher: job.id,
            seq: seq as u32,
            stamp_ns,
        };
        job.header.encode(header, &mut header_bytes);
        job.template
            .write_header(&header_bytes[..header_len], &job.padding, &mut writer.out);
        if let Some(unacked) = links.unacked {
            unacked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back(Unacked {
                    pkid,
                    seq: seq as u32,
                    stamp_ns,
                });
        }
        let measured = job.warmup.measured(seq, intended_ns);
        if measured {
            writer.written.window.add(now);
            if let PublisherPacing::OpenLoop { .. } = job.pacing {
                send_delays.push(now.saturating_sub(intended_ns));
            }
        }
        if measured || counts_warmup {
            writer.written.series.add(now, 1);
        }
        if let (PublisherPacing::OpenLoop { .. }, Some(end_ns)) = (&job.pacing, job.end_ns)
            && now > end_ns
        {
            writer.written.sent_late_after_end += 1;
        }
        seq += 1;
        writer.written.next_seq = seq;
        writer.pending += 1;
        let more_due = match &job.pacing {
            PublisherPacing::Flat { .. } => seq < job.messages,
            PublisherPacing::OpenLoop { release, .. } => release.released() > seq,
        };
        if !more_due || writer.out.len() >= BATCH_BYTES || writer.pending as usize >= BATCH_MESSAGES
        {
            writer.flush().await?;
            batch_clock = None;
            if job.cancel.is_cancelled() || links.reader_done.is_cancelled() || links.is_lost() {
                break;
            }
        }
    }
    if job.end_ns.is_some()
        && seq >= job.messages
        && job.messages > 0
        && let PublisherPacing::Flat { .. } = job.pacing
    {
        // The header numbers no more messages: this publisher stopped before the end.
        writer
            .written
            .errors
            .push(("sequence_numbers_exhausted", 1));
    }
    writer.flush().await
}
