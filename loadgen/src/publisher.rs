//! One publisher connection: writes its messages (burst or on the pacer's schedule) and, in
//! the same task, reads the broker's acknowledgements.
//!
//! PUBLISH packets come from a template encoded once; per message only the packet id and the
//! measurement header are written, and up to [`BATCH_MESSAGES`] packets go out in one write.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;
use crate::codec::{AckKind, Codec, Incoming, PublishTemplate};
use crate::header::{HeaderEncoding, MessageHeader};
use crate::live::{Live, SampleBuffer, WindowTracker};
use crate::pacer::{Release, Schedule};
use crate::result::ClientWindow;
use crate::series::LocalSeries;
use crate::session::Session;
use crate::spec::Qos;
use crate::transport::{ReadHalf, WriteHalf};

/// Most packets written in one syscall.
pub(crate) const BATCH_MESSAGES: usize = 32;
/// Flush once this many bytes are buffered.
const BATCH_BYTES: usize = 16 * 1024;
/// After DISCONNECT, how long to wait for the broker to close the socket.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// When a publisher sends.
#[derive(Debug, Clone)]
pub(crate) enum PublisherPacing {
    /// As fast as possible from `start_ns` on.
    Burst { start_ns: u64 },
    /// When the pacer releases each message; stamped with its intended time.
    OpenLoop {
        schedule: Schedule,
        release: Arc<Release>,
    },
}

/// Everything one publisher needs.
#[derive(Debug)]
pub(crate) struct PublisherJob {
    pub id: u32,
    pub template: PublishTemplate,
    pub header: HeaderEncoding,
    /// Zeros after the header, shared by all publishers.
    pub padding: Arc<[u8]>,
    pub messages: u64,
    pub warmup: u64,
    pub qos: Qos,
    pub inflight: u16,
    pub keep_alive: Duration,
    pub drain_timeout: Duration,
    pub pacing: PublisherPacing,
    pub clock: RunClock,
    pub live: Arc<Live>,
    pub cancel: CancellationToken,
}

/// What one publisher did.
#[derive(Debug)]
pub(crate) struct PublisherOutcome {
    pub id: u32,
    pub published: u64,
    pub acknowledged: u64,
    pub window: Option<ClientWindow>,
    pub series: LocalSeries,
    pub errors: Vec<(&'static str, u64)>,
}

/// Runs one publisher to completion.
pub(crate) async fn run(session: Session, job: PublisherJob) -> PublisherOutcome {
    let Session {
        reader,
        writer,
        read_buffer,
        codec,
        receive_maximum,
    } = session;
    let window = usize::from(job.inflight.min(receive_maximum.unwrap_or(u16::MAX)).max(1));
    let permits = Semaphore::new(window);
    let acknowledged = AtomicU64::new(0);
    let (pubrel_tx, pubrel_rx) = mpsc::channel(window + 1);
    let writer_done = CancellationToken::new();
    let reader_done = CancellationToken::new();
    let links = Links {
        permits: &permits,
        window,
        acknowledged: &acknowledged,
        writer_done: &writer_done,
        reader_done: &reader_done,
    };
    let (mut written, read_errors) = tokio::join!(
        write_loop(&job, writer, codec, pubrel_rx, &links),
        read_loop(reader, read_buffer, codec, pubrel_tx, &links),
    );
    written.errors.extend(read_errors);
    PublisherOutcome {
        id: job.id,
        published: written.published,
        acknowledged: acknowledged.load(Ordering::Relaxed),
        window: written.window.finish(job.id),
        series: written.series,
        errors: written.errors,
    }
}

/// What the writer and reader halves share.
struct Links<'a> {
    permits: &'a Semaphore,
    window: usize,
    acknowledged: &'a AtomicU64,
    writer_done: &'a CancellationToken,
    reader_done: &'a CancellationToken,
}

#[derive(Default)]
struct Written {
    published: u64,
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
    written: Written,
}

impl Writer<'_> {
    async fn flush(&mut self) -> Result<(), Stopped> {
        if self.out.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.sink.write_all(&self.out).await {
            tracing::debug!(%error, "publisher write failed");
            self.written.errors.push(("write_failed", 1));
            return Err(Stopped);
        }
        self.out.clear();
        self.written.published += self.pending;
        self.live
            .published
            .fetch_add(self.pending, Ordering::Relaxed);
        self.pending = 0;
        self.last_write = Instant::now();
        Ok(())
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

/// Why a wait ended.
enum Wake {
    Ready,
    PubRel(u16),
    PingDue,
    Stop,
}

async fn write_loop(
    job: &PublisherJob,
    sink: WriteHalf,
    codec: Codec,
    mut pubrel_rx: mpsc::Receiver<u16>,
    links: &Links<'_>,
) -> Written {
    let mut writer = Writer {
        sink,
        out: BytesMut::with_capacity(BATCH_BYTES + job.template.packet_len()),
        pending: 0,
        last_write: Instant::now(),
        codec,
        live: &job.live,
        written: Written::default(),
    };
    let _ = publish_all(job, &mut writer, &mut pubrel_rx, links).await;
    let _ = await_acknowledgements(job, &mut writer, &mut pubrel_rx, links).await;
    // A clean goodbye, so the broker does not count an abnormal disconnect.
    if codec.disconnect(&mut writer.out).is_ok() && writer.flush().await.is_ok() {
        let _ = writer.sink.shutdown().await;
    }
    links.writer_done.cancel();
    writer.written
}

async fn publish_all(
    job: &PublisherJob,
    writer: &mut Writer<'_>,
    pubrel_rx: &mut mpsc::Receiver<u16>,
    links: &Links<'_>,
) -> Result<(), Stopped> {
    let ping_every = (job.keep_alive / 2).max(Duration::from_secs(1));
    if let PublisherPacing::Burst { start_ns } = &job.pacing {
        tokio::select! {
            _ = tokio::time::sleep_until(job.clock.instant_at(*start_ns).into()) => {}
            _ = job.cancel.cancelled() => return Ok(()),
        }
    }
    let mut send_delays = SampleBuffer::new(&job.live.send_delay);
    let mut header_bytes = [0u8; 16];
    let header_len = job.header.len();
    let mut seq: u64 = 0;
    let mut batch_clock: Option<u64> = None;
    while seq < job.messages {
        if let PublisherPacing::OpenLoop { release, .. } = &job.pacing {
            while release.released() <= seq {
                writer.flush().await?;
                let wake = tokio::select! {
                    _ = release.changed() => Wake::Ready,
                    Some(pkid) = pubrel_rx.recv() => Wake::PubRel(pkid),
                    _ = tokio::time::sleep_until(writer.last_write + ping_every) => Wake::PingDue,
                    _ = links.reader_done.cancelled() => Wake::Stop,
                    _ = job.cancel.cancelled() => Wake::Stop,
                };
                handle_wake(wake, writer)?;
            }
        }
        if job.qos != Qos::AtMostOnce {
            acquire_permit(job, writer, pubrel_rx, links, ping_every).await?;
        }
        while let Ok(pkid) = pubrel_rx.try_recv() {
            writer.encode_ack(AckKind::PubRel, pkid);
        }
        // One clock reading per batch in burst mode: the batch leaves in one write anyway.
        let now = match (&job.pacing, batch_clock) {
            (PublisherPacing::Burst { .. }, Some(now)) => now,
            _ => job.clock.now_ns(),
        };
        batch_clock = Some(now);
        let stamp_ns = match &job.pacing {
            PublisherPacing::Burst { .. } => now,
            PublisherPacing::OpenLoop { schedule, .. } => schedule.intended_ns(seq),
        };
        // Packet ids cycle through 1..=65535; the window never exceeds 65535.
        let pkid = (seq % 65_535) as u16 + 1;
        job.template.write_prefix(pkid, &mut writer.out);
        let header = MessageHeader {
            publisher: job.id,
            seq: seq as u32,
            stamp_ns,
        };
        job.header.encode(header, &mut header_bytes);
        writer.out.extend_from_slice(&header_bytes[..header_len]);
        writer.out.extend_from_slice(&job.padding);
        if seq >= job.warmup {
            writer.written.window.add(now);
            writer.written.series.add(now, 1);
            if let PublisherPacing::OpenLoop { .. } = job.pacing {
                send_delays.push(now.saturating_sub(stamp_ns));
            }
        }
        seq += 1;
        writer.pending += 1;
        let more_due = match &job.pacing {
            PublisherPacing::Burst { .. } => seq < job.messages,
            PublisherPacing::OpenLoop { release, .. } => release.released() > seq,
        };
        if !more_due || writer.out.len() >= BATCH_BYTES || writer.pending as usize >= BATCH_MESSAGES
        {
            writer.flush().await?;
            batch_clock = None;
            if job.cancel.is_cancelled() || links.reader_done.is_cancelled() {
                break;
            }
        }
    }
    writer.flush().await
}

fn handle_wake(wake: Wake, writer: &mut Writer<'_>) -> Result<(), Stopped> {
    match wake {
        Wake::Ready => {}
        Wake::PubRel(pkid) => writer.encode_ack(AckKind::PubRel, pkid),
        Wake::PingDue => writer.encode_ping(),
        Wake::Stop => return Err(Stopped),
    }
    Ok(())
}

async fn acquire_permit(
    job: &PublisherJob,
    writer: &mut Writer<'_>,
    pubrel_rx: &mut mpsc::Receiver<u16>,
    links: &Links<'_>,
    ping_every: Duration,
) -> Result<(), Stopped> {
    if let Ok(permit) = links.permits.try_acquire() {
        permit.forget();
        return Ok(());
    }
    loop {
        // Whatever is buffered must reach the broker, or its acknowledgements never come.
        writer.flush().await?;
        let wake = tokio::select! {
            permit = links.permits.acquire() => match permit {
                Ok(permit) => { permit.forget(); Wake::Ready }
                Err(_) => Wake::Stop,
            },
            Some(pkid) = pubrel_rx.recv() => Wake::PubRel(pkid),
            _ = tokio::time::sleep_until(writer.last_write + ping_every) => Wake::PingDue,
            _ = links.reader_done.cancelled() => Wake::Stop,
            _ = job.cancel.cancelled() => Wake::Stop,
        };
        if let Wake::Ready = wake {
            return Ok(());
        }
        handle_wake(wake, writer)?;
    }
}

/// Drain: waits until the broker acknowledged every QoS 1/2 message, or the deadline.
async fn await_acknowledgements(
    job: &PublisherJob,
    writer: &mut Writer<'_>,
    pubrel_rx: &mut mpsc::Receiver<u16>,
    links: &Links<'_>,
) -> Result<(), Stopped> {
    if job.qos == Qos::AtMostOnce {
        return Ok(());
    }
    let deadline = Instant::now() + job.drain_timeout;
    let window = u32::try_from(links.window).unwrap_or(u32::MAX);
    loop {
        writer.flush().await?;
        if links.permits.available_permits() == links.window {
            return Ok(());
        }
        tokio::select! {
            all = links.permits.acquire_many(window) => {
                drop(all);
                return Ok(());
            }
            Some(pkid) = pubrel_rx.recv() => writer.encode_ack(AckKind::PubRel, pkid),
            _ = tokio::time::sleep_until(deadline) => {
                let missing = links.window - links.permits.available_permits();
                writer.written.errors.push(("ack_timeout", missing as u64));
                return Err(Stopped);
            }
            _ = links.reader_done.cancelled() => return Err(Stopped),
            _ = job.cancel.cancelled() => return Err(Stopped),
        }
    }
}

async fn read_loop(
    mut source: ReadHalf,
    mut buffer: BytesMut,
    codec: Codec,
    pubrel_tx: mpsc::Sender<u16>,
    links: &Links<'_>,
) -> Vec<(&'static str, u64)> {
    let mut errors = Vec::new();
    let mut closing_since: Option<Instant> = None;
    loop {
        buffer.reserve(4096);
        let read = tokio::select! {
            read = source.read_buf(&mut buffer) => read,
            _ = links.writer_done.cancelled(), if closing_since.is_none() => {
                closing_since = Some(Instant::now());
                continue;
            }
            _ = tokio::time::sleep_until(closing_since.unwrap_or_else(Instant::now) + CLOSE_GRACE), if closing_since.is_some() => break,
        };
        let writer_finished = links.writer_done.is_cancelled();
        match read {
            Ok(0) => {
                if !writer_finished {
                    errors.push(("connection_closed", 1));
                }
                break;
            }
            Err(_) => {
                if !writer_finished {
                    errors.push(("read_failed", 1));
                }
                break;
            }
            Ok(_) => {}
        }
        if let Err(kind) = handle_acks(&codec, &mut buffer, &pubrel_tx, links).await {
            errors.push((kind, 1));
            break;
        }
    }
    links.reader_done.cancel();
    errors
}

async fn handle_acks(
    codec: &Codec,
    buffer: &mut BytesMut,
    pubrel_tx: &mpsc::Sender<u16>,
    links: &Links<'_>,
) -> Result<(), &'static str> {
    loop {
        match codec.decode(buffer) {
            Ok(None) => return Ok(()),
            Ok(Some(Incoming::PubAck(_) | Incoming::PubComp(_))) => {
                links.acknowledged.fetch_add(1, Ordering::Relaxed);
                links.permits.add_permits(1);
            }
            Ok(Some(Incoming::PubRec(pkid))) => {
                // The writer may be gone at shutdown; then nobody needs the PUBREL.
                let _ = pubrel_tx.send(pkid).await;
            }
            Ok(Some(Incoming::Disconnect(_))) => return Err("broker_disconnected"),
            Ok(Some(_)) => {}
            Err(_) => return Err("protocol_error"),
        }
    }
}
