//! MQTT over several streams of one QUIC connection (`broker.quic_streams = "per_topic"` or
//! `"per_publish"`). CONNECT and every packet but PUBLISH travel on the connection's first
//! bidirectional stream, the control stream; PUBLISH leaves on unidirectional streams of the
//! client's own, one per topic (kept) or one per message (finished after it). PUBLISH is read
//! from the control stream and from every stream the broker opens (the mqttv5 broker's
//! `per_topic` and `per_publish` deliveries), whose flow header, if one leads, is skipped.
//! Whole packets from every stream reach the session in the order they complete, so a stream
//! waiting for a lost datagram holds back its own packets only.
//!
//! The session reads and writes bytes, as over TCP; these halves cut them into packets at
//! their MQTT fixed headers. Acknowledgements go back on the control stream, which the mqttv5
//! broker takes for a message it delivered on any stream. Before DISCONNECT leaves, the
//! PUBLISH streams are finished and loadgen waits ([`super::quic::CLOSE_WAIT`] at most) until
//! the broker has acknowledged receiving their data, so the goodbye does not leave before
//! the last messages have arrived (the broker may still handle it first: its streams are
//! read apart).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::PollSender;

use super::quic::{CLOSE_WAIT, Closing, stream_read_end};
use super::{ReadHalf, WriteHalf};
use crate::session::READ_CHUNK;
use crate::spec::QuicStreams;

/// Packets queued between a connection's halves and the tasks that move them: enough to
/// keep a burst moving, few enough that a stalled connection holds little.
const QUEUED_PACKETS: usize = 64;

/// The first byte of a data flow header (the "flows" of MQTT-next, which the mqttv5 broker
/// writes at the start of every stream it opens: 0x13, a server's; 0x12 is a client's, of
/// the same layout). No MQTT packet starts with one (0x1_ is CONNECT, whose flags are 0,
/// and a client never gets one).
const DATA_FLOW_HEADERS: [u8; 2] = [0x12, 0x13];

/// The other flow header types (0x11 control, 0x14 user-defined), laid out otherwise: a
/// broker's stream starting with one is refused rather than misread.
const OTHER_FLOW_HEADERS: [u8; 2] = [0x11, 0x14];

/// MQTT's packet types, as the fixed header's high nibble gives them.
const PUBLISH: u8 = 3;
const DISCONNECT: u8 = 14;

/// The halves of a multi-stream connection, whose control stream is `send`/`recv`; packets
/// read are at most `largest` bytes.
pub(super) fn halves(
    connection: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    mode: QuicStreams,
    largest: usize,
    closing: Arc<Closing>,
) -> (ReadHalf, WriteHalf) {
    let (read_tx, read_rx) = mpsc::channel(QUEUED_PACKETS);
    let reading = tokio::spawn(read_packets(connection.clone(), recv, largest, read_tx));
    let (write_tx, write_rx) = mpsc::channel(QUEUED_PACKETS);
    let failure = Arc::new(OnceLock::new());
    let writing = tokio::spawn(write_packets(
        Outbound {
            connection,
            control: send,
            mode,
            topics: TopicStreams::default(),
            published: JoinSet::new(),
        },
        write_rx,
        closing.clone(),
        failure.clone(),
    ));
    let reader = StreamsReader {
        packet: Bytes::new(),
        packets: read_rx,
        failed: None,
        reading,
    };
    let writer = StreamsWriter {
        written: BytesMut::new(),
        packets: PollSender::new(write_tx),
        failure,
        closing,
        finished: false,
        writing: writing.abort_handle(),
    };
    (Box::pin(reader), Box::pin(writer))
}

/// The length of the whole MQTT packet that starts `buf`, once its fixed header is in;
/// refused when it announces more than `largest` bytes or its length is malformed.
fn packet_len(buf: &[u8], largest: usize) -> io::Result<Option<usize>> {
    let mut remaining = 0usize;
    for (index, byte) in buf.iter().skip(1).take(4).enumerate() {
        remaining |= usize::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            let len = 1 + (index + 1) + remaining;
            if len > largest {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a {len}-byte MQTT packet on a QUIC stream: at most {largest}"),
                ));
            }
            return Ok(Some(len));
        }
    }
    if buf.len() >= 5 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "an MQTT remaining length of more than 4 bytes on a QUIC stream",
        ));
    }
    Ok(None)
}

/// The length of the data flow header that leads `buf`: 0 when the stream starts with an
/// MQTT packet, `None` until the whole header is in. A header is its type, the flow id and
/// the expiry interval as QUIC variable-length integers, then one byte of flags.
fn flow_header_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if OTHER_FLOW_HEADERS.contains(&first) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a QUIC stream of the broker's starts with flow header type {first:#04x}, not a data flow's"
            ),
        ));
    }
    if !DATA_FLOW_HEADERS.contains(&first) {
        return Ok(Some(0));
    }
    let mut at = 1;
    for _ in 0..2 {
        let Some(&lead) = buf.get(at) else {
            return Ok(None);
        };
        at += 1 << (lead >> 6);
    }
    at += 1;
    Ok((buf.len() >= at).then_some(at))
}

/// The topic name of a PUBLISH packet (whole, as [`packet_len`] cut it); `None` for any
/// other packet.
fn publish_topic(packet: &Bytes) -> Option<Bytes> {
    if packet.first()? >> 4 != PUBLISH {
        return None;
    }
    let mut at = 1;
    while packet.get(at)? & 0x80 != 0 {
        at += 1;
    }
    let length = usize::from(u16::from_be_bytes([
        *packet.get(at + 1)?,
        *packet.get(at + 2)?,
    ]));
    let start = at + 3;
    (packet.len() >= start + length).then(|| packet.slice(start..start + length))
}

/// The read half: whole packets from every stream, handed over by [`read_packets`].
struct StreamsReader {
    /// What is left of the packet being read.
    packet: Bytes,
    packets: mpsc::Receiver<io::Result<Bytes>>,
    /// An error that came after bytes were handed over: the next read's.
    failed: Option<io::Error>,
    reading: JoinHandle<()>,
}

impl Drop for StreamsReader {
    fn drop(&mut self) {
        // The reading task holds the connection: it must not outlive the reader.
        self.reading.abort();
    }
}

impl AsyncRead for StreamsReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(error) = self.failed.take() {
            return Poll::Ready(Err(error));
        }
        let start = buf.filled().len();
        while buf.remaining() > 0 {
            if !self.packet.is_empty() {
                let take = self.packet.len().min(buf.remaining());
                buf.put_slice(&self.packet[..take]);
                self.packet.advance(take);
                continue;
            }
            match self.packets.poll_recv(cx) {
                Poll::Ready(Some(Ok(packet))) => self.packet = packet,
                // What was read first is handed over first; the error comes with the next read.
                Poll::Ready(Some(Err(error))) if buf.filled().len() == start => {
                    return Poll::Ready(Err(error));
                }
                Poll::Ready(Some(Err(error))) => {
                    self.failed = Some(error);
                    break;
                }
                // The end: the control stream ended.
                Poll::Ready(None) => break,
                Poll::Pending if buf.filled().len() == start => return Poll::Pending,
                Poll::Pending => break,
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Reads the control stream and every stream the broker opens, handing whole packets to
/// `packets`, until the control stream ends; then its error (or nothing, at its normal end)
/// is the last thing handed over.
async fn read_packets(
    connection: quinn::Connection,
    control: quinn::RecvStream,
    largest: usize,
    packets: mpsc::Sender<io::Result<Bytes>>,
) {
    let mut broker_streams = JoinSet::new();
    let control_read = read_stream(control, false, largest, packets.clone());
    tokio::pin!(control_read);
    // Accepting ends with the connection; the control stream then says how it ended.
    let mut accepting = true;
    let end = loop {
        tokio::select! {
            end = &mut control_read => break end,
            opened = connection.accept_uni(), if accepting => match opened {
                Ok(recv) => {
                    broker_streams.spawn(read_stream(recv, true, largest, packets.clone()));
                }
                Err(_) => accepting = false,
            },
            opened = connection.accept_bi(), if accepting => match opened {
                // The broker reads acknowledgements on the control stream too: this stream's
                // sending half is finished at once, so it closes once the broker finishes.
                Ok((send, recv)) => {
                    drop(send);
                    broker_streams.spawn(read_stream(recv, true, largest, packets.clone()));
                }
                Err(_) => accepting = false,
            },
            Some(ended) = broker_streams.join_next() => {
                // A broker's stream that breaks MQTT's framing loses what follows on it:
                // the session hears why rather than counting the loss unexplained.
                if let Ok(Err(error)) = ended {
                    let _ = packets.send(Err(error)).await;
                }
            }
        }
    };
    if let Err(error) = end {
        let _ = packets.send(Err(error)).await;
    }
}

/// Hands the whole packets of `recv` to `packets`, skipping a flow header first when
/// `flow_header` may lead it; `Ok` at the stream's end, the connection's normal close, or
/// when the stream is reset or the connection lost (the control stream tells the session
/// what became of the connection); an error when the bytes break MQTT's framing.
async fn read_stream(
    mut recv: quinn::RecvStream,
    flow_header: bool,
    largest: usize,
    packets: mpsc::Sender<io::Result<Bytes>>,
) -> io::Result<()> {
    let mut buf = BytesMut::new();
    let mut header_left = flow_header;
    loop {
        match recv.read_chunk(READ_CHUNK, true).await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk.bytes),
            Ok(None) if buf.is_empty() => return Ok(()),
            Ok(None) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a QUIC stream ended inside an MQTT packet",
                ));
            }
            Err(error) if flow_header => {
                tracing::debug!(%error, "a QUIC stream of the broker's ended");
                return Ok(());
            }
            Err(error) => return stream_read_end(error),
        }
        if header_left {
            let Some(header) = flow_header_len(&buf)? else {
                continue;
            };
            buf.advance(header);
            header_left = false;
        }
        while let Some(len) = packet_len(&buf, largest)? {
            if buf.len() < len {
                break;
            }
            if packets.send(Ok(buf.split_to(len).freeze())).await.is_err() {
                return Ok(());
            }
        }
    }
}

/// What the write half hands its task.
enum Outgoing {
    Packet(Bytes),
    /// The writer shut down: finish every stream and let the connection close.
    Finish,
}

/// The write half: bytes written are cut into packets and queued for [`write_packets`].
struct StreamsWriter {
    /// Bytes written that do not yet make a whole packet, or whole packets not yet queued.
    written: BytesMut,
    packets: PollSender<Outgoing>,
    /// Why the writing task stopped, if it failed.
    failure: Arc<OnceLock<String>>,
    closing: Arc<Closing>,
    finished: bool,
    writing: tokio::task::AbortHandle,
}

impl Drop for StreamsWriter {
    fn drop(&mut self) {
        // A writer dropped without shutdown (a connection cut or lost): its task, which may
        // wait on the broker, must not keep the connection. After shutdown the task closes
        // the connection itself, and the run waits for it.
        if !self.finished {
            self.writing.abort();
        }
    }
}

impl StreamsWriter {
    /// Queues every whole packet written so far; pending while the queue is full.
    fn poll_queue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The client's own packets: its codec caps them.
        while let Some(len) = packet_len(&self.written, usize::MAX)? {
            if self.written.len() < len {
                break;
            }
            ready!(self.packets.poll_reserve(cx)).map_err(|_| self.stopped())?;
            let packet = self.written.split_to(len).freeze();
            self.packets
                .send_item(Outgoing::Packet(packet))
                .map_err(|_| self.stopped())?;
        }
        Poll::Ready(Ok(()))
    }

    fn stopped(&self) -> io::Error {
        match self.failure.get() {
            Some(reason) => io::Error::new(io::ErrorKind::BrokenPipe, reason.clone()),
            None => io::Error::new(io::ErrorKind::BrokenPipe, "the QUIC connection is gone"),
        }
    }
}

impl AsyncWrite for StreamsWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // Whole packets still unqueued take the place of new bytes: the caller waits, as it
        // does on a full socket.
        ready!(self.poll_queue(cx))?;
        self.written.extend_from_slice(buf);
        // What does not fit in the queue now goes with the next write or the flush.
        if let Poll::Ready(Err(error)) = self.poll_queue(cx) {
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_queue(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.finished {
            return Poll::Ready(Ok(()));
        }
        // A writing task gone already (the connection lost) leaves nothing to finish.
        if ready!(self.poll_queue(cx)).is_err() || ready!(self.packets.poll_reserve(cx)).is_err() {
            self.finished = true;
            return Poll::Ready(Ok(()));
        }
        self.finished = true;
        // Counted before the task can end it: the run waits for it.
        self.closing.begin();
        if self.packets.send_item(Outgoing::Finish).is_err() {
            self.closing.end();
        }
        Poll::Ready(Ok(()))
    }
}

/// The connection's sending side as the writing task holds it.
struct Outbound {
    connection: quinn::Connection,
    control: quinn::SendStream,
    mode: QuicStreams,
    topics: TopicStreams,
    /// PUBLISH streams finished, until the broker has acknowledged their data.
    published: JoinSet<()>,
}

/// Writes each packet queued on the stream its kind and the mode give it, until the writer
/// shuts down (then finishes the streams and lets the connection close) or goes.
async fn write_packets(
    mut out: Outbound,
    mut packets: mpsc::Receiver<Outgoing>,
    closing: Arc<Closing>,
    failure: Arc<OnceLock<String>>,
) {
    while let Some(outgoing) = packets.recv().await {
        let packet = match outgoing {
            Outgoing::Packet(packet) => packet,
            Outgoing::Finish => {
                // One wait in all, as the run waits for one ([`super::quic::QuicDialer::settle`]).
                let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
                out.finish_publish_streams(deadline).await;
                // Finished or reset already (the broker closed first) is fine.
                let _ = out.control.finish();
                let _ = tokio::time::timeout_at(deadline, out.connection.closed()).await;
                out.connection
                    .close(super::quic::CLOSED_NORMALLY.into(), b"");
                closing.end();
                return;
            }
        };
        if let Err(error) = out.write(packet).await {
            let _ = failure.set(error.to_string());
            // A shutdown already queued still ends its count.
            packets.close();
            while let Some(outgoing) = packets.recv().await {
                if let Outgoing::Finish = outgoing {
                    closing.end();
                }
            }
            return;
        }
    }
}

impl Outbound {
    async fn write(&mut self, packet: Bytes) -> io::Result<()> {
        let kind = packet.first().map_or(0, |first| first >> 4);
        match (self.mode, publish_topic(&packet)) {
            (QuicStreams::PerTopic, Some(topic)) => {
                let stream = self.topics.stream(&self.connection, topic).await?;
                stream.write_all(&packet).await.map_err(io::Error::from)
            }
            (QuicStreams::PerPublish, Some(_)) => {
                let mut stream = self.connection.open_uni().await.map_err(io::Error::from)?;
                stream.write_all(&packet).await.map_err(io::Error::from)?;
                finish_and_track(stream, &mut self.published);
                Ok(())
            }
            _ => {
                if kind == DISCONNECT {
                    let deadline = tokio::time::Instant::now() + CLOSE_WAIT;
                    self.finish_publish_streams(deadline).await;
                }
                self.control
                    .write_all(&packet)
                    .await
                    .map_err(io::Error::from)
            }
        }
    }

    /// Finishes every PUBLISH stream and waits (until `deadline` at most) until the broker
    /// has acknowledged receiving all their data.
    async fn finish_publish_streams(&mut self, deadline: tokio::time::Instant) {
        for stream in self.topics.take_all() {
            finish_and_track(stream, &mut self.published);
        }
        let published = &mut self.published;
        let _ = tokio::time::timeout_at(deadline, async {
            while published.join_next().await.is_some() {}
        })
        .await;
        published.abort_all();
    }
}

/// Finishes `stream` and tracks it in `published` until the broker acknowledges its data
/// (or stops it); those already acknowledged are let go.
fn finish_and_track(mut stream: quinn::SendStream, published: &mut JoinSet<()>) {
    // Finished or reset already (the broker stopped it) is fine.
    let _ = stream.finish();
    published.spawn(async move {
        let _ = stream.stopped().await;
    });
    while published.try_join_next().is_some() {}
}

/// The topic streams of one connection. A loadgen publisher publishes to one topic (the
/// spec refuses the retained and will scenarios, which publish to many from one client, with
/// a stream mode), so a connection holds one, far below the broker's limit of streams open
/// at once (quinn's default, 100, which the mqttv5 broker keeps).
#[derive(Default)]
struct TopicStreams {
    streams: HashMap<Bytes, quinn::SendStream>,
}

/// Topic streams one connection may hold: a connection that would need more fails, saying
/// so, rather than wait forever for stream credit its own open streams hold.
const TOPIC_STREAMS: usize = 64;

impl TopicStreams {
    /// The stream of `topic`, opened now if it has none.
    async fn stream(
        &mut self,
        connection: &quinn::Connection,
        topic: Bytes,
    ) -> io::Result<&mut quinn::SendStream> {
        use std::collections::hash_map::Entry;
        let full = self.streams.len() >= TOPIC_STREAMS;
        match self.streams.entry(topic) {
            Entry::Occupied(stream) => Ok(stream.into_mut()),
            Entry::Vacant(_) if full => Err(io::Error::other(format!(
                "more than {TOPIC_STREAMS} topics on one QUIC connection with a stream per topic"
            ))),
            Entry::Vacant(vacant) => {
                let stream = connection.open_uni().await.map_err(io::Error::from)?;
                Ok(vacant.insert(stream))
            }
        }
    }

    fn take_all(&mut self) -> Vec<quinn::SendStream> {
        self.streams.drain().map(|(_, stream)| stream).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_cut_at_their_fixed_headers() {
        assert_eq!(packet_len(&[], 100).expect("fine"), None);
        assert_eq!(packet_len(&[0x30], 100).expect("fine"), None);
        // PINGRESP: two bytes, nothing more.
        assert_eq!(packet_len(&[0xd0, 0x00], 100).expect("fine"), Some(2));
        // 200 bytes of remaining length take two length bytes.
        assert_eq!(
            packet_len(&[0x30, 0xc8, 0x01], 1000).expect("fine"),
            Some(203)
        );
        assert_eq!(packet_len(&[0x30, 0xc8], 1000).expect("fine"), None);
        let large = packet_len(&[0x30, 0xc8, 0x01], 100).expect_err("over the cap");
        assert!(large.to_string().contains("203-byte"), "{large}");
        packet_len(&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01], usize::MAX)
            .expect_err("five length bytes are malformed");
    }

    #[test]
    fn a_flow_header_is_skipped_and_mqtt_without_one_is_not() {
        // The mqttv5 broker's server flow 3, expiry 300 (two bytes), no flags.
        let header = [0x13, 0x03, 0x41, 0x2c, 0x00];
        let len = |buf: &[u8]| flow_header_len(buf).expect("a data flow or MQTT");
        assert_eq!(len(&header), Some(5));
        assert_eq!(len(&header[..4]), None);
        assert_eq!(len(&[]), None);
        // A flow id of 4 bytes (0b10 prefix).
        assert_eq!(len(&[0x13, 0x80, 0, 0, 9, 0x01, 0x00]), Some(7));
        assert_eq!(len(&[0x30, 0x05]), Some(0));
        assert_eq!(len(&[0x40, 0x02]), Some(0));
        for other in OTHER_FLOW_HEADERS {
            flow_header_len(&[other, 0x01]).expect_err("not a data flow's header");
        }
    }

    #[tokio::test]
    async fn an_error_after_packets_is_the_next_reads_and_the_end_an_empty_read() {
        use tokio::io::AsyncReadExt;
        let (tx, rx) = mpsc::channel(4);
        let mut reader = StreamsReader {
            packet: Bytes::new(),
            packets: rx,
            failed: None,
            reading: tokio::spawn(async {}),
        };
        tx.send(Ok(Bytes::from_static(&[0xd0, 0x00])))
            .await
            .expect("sent");
        tx.send(Ok(Bytes::from_static(&[0xd0, 0x00])))
            .await
            .expect("sent");
        tx.send(Err(io::Error::other("reset"))).await.expect("sent");
        let mut buf = [0u8; 16];
        // Both packets in one read; the error waits for the next.
        assert_eq!(reader.read(&mut buf).await.expect("bytes first"), 4);
        let error = reader.read(&mut buf).await.expect_err("then the error");
        assert_eq!(error.to_string(), "reset");
        tx.send(Ok(Bytes::from_static(&[0xd0, 0x00])))
            .await
            .expect("sent");
        drop(tx);
        assert_eq!(reader.read(&mut buf[..1]).await.expect("a byte"), 1);
        assert_eq!(reader.read(&mut buf).await.expect("the rest"), 1);
        assert_eq!(reader.read(&mut buf).await.expect("the end"), 0);
    }

    #[test]
    fn a_publish_is_told_by_its_topic_and_other_packets_have_none() {
        let publish = Bytes::from_static(&[
            0x32, 0x09, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x01, b'x', b'y',
        ]);
        assert_eq!(publish_topic(&publish).as_deref(), Some(&b"a/b"[..]));
        let puback = Bytes::from_static(&[0x40, 0x02, 0x00, 0x01]);
        assert_eq!(publish_topic(&puback), None);
        let cut = Bytes::from_static(&[0x30, 0x09, 0x00, 0x05, b'a']);
        assert_eq!(publish_topic(&cut), None);
    }
}
