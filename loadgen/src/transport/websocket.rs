//! MQTT over WebSocket as plain byte halves. After the upgrade (`GET <path>`,
//! `Sec-WebSocket-Protocol: mqtt`), each `poll_write` becomes one binary frame and reads hand
//! out the concatenated payloads of binary frames: MQTT packets need not line up with frames
//! (MQTT 3.1.1 §6, MQTT 5 §6), so the codec above sees the same byte stream as over TCP.
//!
//! A write pushes its frame to the socket at once, as a TCP write would; when the socket is
//! full the frame stays queued and the next write or flush finishes it. Callers therefore
//! flush before they wait for an answer, which costs nothing over plain TCP. Pings from the
//! broker are answered by tungstenite while reading.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{Sink, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::{DialSetupError, ReadHalf, WriteHalf};
use crate::spec::{BrokerTarget, MQTT_MAX_REMAINING_LENGTH};

/// The subprotocol MQTT over WebSocket must be negotiated with (MQTT 3.1.1 §6.0, MQTT 5 §6).
const SUBPROTOCOL: &str = "mqtt";
const SUBPROTOCOL_HEADER: &str = "Sec-WebSocket-Protocol";

/// The largest MQTT packet: fixed header byte, 4 length bytes, the largest remaining length.
/// Brokers frame packet by packet, so no frame or message needs to be larger; tungstenite's
/// own defaults (16 MiB frames) would refuse payloads loadgen sends over TCP. A run caps
/// frames lower, at the spec's largest packet ([`Upgrade::with_largest_packet`]).
const LARGEST_FRAME: usize = 1 + 4 + MQTT_MAX_REMAINING_LENGTH as usize;

/// What the WebSocket runs over: a TCP stream or a TLS stream on one.
pub(super) trait Carrier: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Carrier for T {}

/// The WebSocket upgrade of one broker target, checked once and sent on every connection.
#[derive(Debug, Clone)]
pub(super) struct Upgrade {
    /// `ws://host:port/path` or `wss://...`: the request line and the Host header.
    url: String,
    /// The largest frame and message read: larger ones are refused at the frame header,
    /// before tungstenite reserves room for them (it reserves what the header announces).
    largest: usize,
}

impl Upgrade {
    /// The upgrade for `target` (`wss` when it has a CA); fails when host, port and path
    /// make no valid request.
    pub(super) fn new(target: &BrokerTarget) -> Result<Self, DialSetupError> {
        let scheme = if target.has_ca() { "wss" } else { "ws" };
        let path = target.websocket_path();
        let invalid = |reason: String| DialSetupError::WebSocketRequest {
            path: path.to_string(),
            reason,
        };
        if !path.starts_with('/') {
            return Err(invalid("must start with '/'".to_string()));
        }
        // An IPv6 literal needs brackets in a URL and in the Host header.
        let host = if target.host.contains(':') && !target.host.starts_with('[') {
            format!("[{}]", target.host)
        } else {
            target.host.clone()
        };
        let upgrade = Upgrade {
            url: format!("{scheme}://{host}:{}{path}", target.port),
            largest: LARGEST_FRAME,
        };
        upgrade
            .request()
            .map_err(|e| invalid(format!("{}: {e}", upgrade.url)))?;
        Ok(upgrade)
    }

    /// Caps frames and messages read at `bytes`, the largest MQTT packet the clients accept
    /// (`max_packet_size`), as the codec caps packets over TCP at their header: one frame
    /// holds at most one packet, so a larger frame is the broker's error, refused before its
    /// payload is read or room is reserved for it.
    pub(super) fn with_largest_packet(mut self, bytes: usize) -> Self {
        self.largest = bytes.clamp(1, LARGEST_FRAME);
        self
    }

    /// The URL requested.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// A fresh request (each carries its own `Sec-WebSocket-Key`).
    fn request(&self) -> Result<Request<()>, WsError> {
        let mut request = self.url.as_str().into_client_request()?;
        request
            .headers_mut()
            .insert(SUBPROTOCOL_HEADER, HeaderValue::from_static(SUBPROTOCOL));
        Ok(request)
    }

    /// Runs the upgrade over `stream`, already connected (and TLS-wrapped for wss).
    pub(super) async fn over<S: Carrier>(&self, stream: S) -> io::Result<(ReadHalf, WriteHalf)> {
        let failed = |reason: String| format!("WebSocket upgrade at {}: {reason}", self.url);
        let request = self
            .request()
            .map_err(|e| io::Error::other(failed(e.to_string())))?;
        let config = WebSocketConfig::default()
            .max_frame_size(Some(self.largest))
            .max_message_size(Some(self.largest));
        let (socket, response) =
            tokio_tungstenite::client_async_with_config(request, stream, Some(config))
                .await
                .map_err(|e| upgrade_error(e, failed))?;
        // tungstenite refuses a missing or foreign subprotocol too; this says so in our words.
        let answered = response.headers().get(SUBPROTOCOL_HEADER);
        if answered.map(HeaderValue::as_bytes) != Some(SUBPROTOCOL.as_bytes()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                failed(format!(
                    "the broker answered subprotocol {answered:?}, not {SUBPROTOCOL:?}"
                )),
            ));
        }
        let (sink, frames) = socket.split();
        Ok((
            Box::pin(FrameReader {
                frames,
                chunk: Bytes::new(),
                closed: false,
            }),
            Box::pin(FrameWriter {
                sink,
                unflushed: false,
            }),
        ))
    }
}

/// A failed upgrade as an I/O error that says what the broker did.
fn upgrade_error(error: WsError, failed: impl Fn(String) -> String) -> io::Error {
    match error {
        WsError::Io(e) => io::Error::new(e.kind(), failed(e.to_string())),
        WsError::Http(response) => io::Error::new(
            io::ErrorKind::ConnectionRefused,
            failed(format!(
                "the broker answered HTTP {} instead of switching protocols (wrong websocket_path?)",
                response.status()
            )),
        ),
        WsError::Protocol(ProtocolError::SecWebSocketSubProtocolError(e)) => io::Error::new(
            io::ErrorKind::InvalidData,
            failed(format!("subprotocol {SUBPROTOCOL:?} not agreed: {e}")),
        ),
        other => io::Error::new(io::ErrorKind::InvalidData, failed(other.to_string())),
    }
}

/// A WebSocket error met while reading or writing frames, as an I/O error.
fn frame_error(error: WsError) -> io::Error {
    match error {
        WsError::Io(e) => e,
        WsError::ConnectionClosed | WsError::AlreadyClosed => io::Error::new(
            io::ErrorKind::BrokenPipe,
            "WebSocket connection already closed",
        ),
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the broker announced a WebSocket frame or message of {size} bytes, over the \
                 largest MQTT packet accepted ({max_size} bytes, connection.max_packet_size)"
            ),
        ),
        other => io::Error::new(io::ErrorKind::InvalidData, format!("WebSocket: {other}")),
    }
}

/// The read half: binary frames' payloads, one after another.
struct FrameReader<S> {
    frames: SplitStream<WebSocketStream<S>>,
    /// What is left of the last binary frame (tungstenite hands out `Bytes`: no copy).
    chunk: Bytes,
    /// The broker closed the WebSocket: reads return end of stream from now on.
    closed: bool,
}

impl<S: Carrier> AsyncRead for FrameReader<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.chunk.is_empty() {
            if this.closed {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut this.frames).poll_next(cx)) {
                Some(Ok(Message::Binary(payload))) => this.chunk = payload,
                // MQTT over WebSocket is binary only; the spec says to close on anything else.
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the broker sent a text frame on an MQTT WebSocket",
                    )));
                }
                // Pings are answered inside tungstenite's read (its pong goes out on the next
                // read, write or flush); pongs and raw frames carry no MQTT bytes.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_)))
                | Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed))
                | None => this.closed = true,
                Some(Err(e)) => return Poll::Ready(Err(frame_error(e))),
            }
        }
        let taken = this.chunk.len().min(buf.remaining());
        buf.put_slice(&this.chunk[..taken]);
        this.chunk.advance(taken);
        Poll::Ready(Ok(()))
    }
}

/// The write half: one binary frame per write.
struct FrameWriter<S> {
    sink: SplitSink<WebSocketStream<S>, Message>,
    /// A frame was queued but the socket was full: finish it before taking another.
    unflushed: bool,
}

impl<S: Carrier> AsyncWrite for FrameWriter<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.unflushed {
            ready!(Pin::new(&mut this.sink).poll_flush(cx)).map_err(frame_error)?;
            this.unflushed = false;
        }
        ready!(Pin::new(&mut this.sink).poll_ready(cx)).map_err(frame_error)?;
        // One frame per write: a batch written with one write_all is one frame.
        Pin::new(&mut this.sink)
            .start_send(Message::Binary(Bytes::copy_from_slice(buf)))
            .map_err(frame_error)?;
        // To the socket now, as a TCP write would; a full socket leaves the frame queued for
        // the next write or flush (the bytes were taken, so this write is done either way).
        match Pin::new(&mut this.sink).poll_flush(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(frame_error(e))),
            Poll::Pending => this.unflushed = true,
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(Pin::new(&mut this.sink).poll_flush(cx)).map_err(frame_error)?;
        this.unflushed = false;
        Poll::Ready(Ok(()))
    }

    /// Sends a Close frame after whatever is still queued.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sink).poll_close(cx).map_err(frame_error)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::SinkExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio_tungstenite::tungstenite::handshake::server::{
        ErrorResponse, Request as ServerRequest, Response,
    };

    use super::*;

    fn target() -> BrokerTarget {
        BrokerTarget {
            host: "127.0.0.1".to_string(),
            port: 9001,
            protocol: crate::spec::MqttVersion::V311,
            tls_ca_file: None,
            tls_ca_pem: None,
            username: None,
            password: None,
            transport: crate::spec::Transport::WebSocket,
            websocket_path: None,
            quic_zero_rtt: false,
            quic_streams: Default::default(),
        }
    }

    /// A WebSocket server on the far end of an in-memory pipe that answers `subprotocol`.
    // tungstenite's callback type fixes the (large) error response type.
    #[allow(clippy::result_large_err)]
    async fn serve(
        stream: DuplexStream,
        subprotocol: Option<&'static str>,
    ) -> Result<WebSocketStream<DuplexStream>, WsError> {
        let answer = move |request: &ServerRequest, mut response: Response| {
            assert_eq!(request.uri().path(), "/mqtt");
            assert_eq!(
                request.headers().get("host").map(HeaderValue::as_bytes),
                Some(&b"127.0.0.1:9001"[..])
            );
            if let Some(subprotocol) = subprotocol {
                response
                    .headers_mut()
                    .insert(SUBPROTOCOL_HEADER, HeaderValue::from_static(subprotocol));
            }
            Ok::<_, ErrorResponse>(response)
        };
        tokio_tungstenite::accept_hdr_async(stream, answer).await
    }

    async fn connected() -> (ReadHalf, WriteHalf, WebSocketStream<DuplexStream>) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let upgrade = Upgrade::new(&target()).expect("valid target");
        let (halves, server) = tokio::join!(upgrade.over(client), serve(server, Some("mqtt")));
        let (reader, writer) = halves.expect("upgrade");
        (reader, writer, server.expect("server handshake"))
    }

    #[tokio::test]
    async fn reads_join_frames_and_each_write_is_one_frame() {
        let (mut reader, mut writer, mut server) = connected().await;
        // A packet split over two frames, then two packets in one frame, with a ping between.
        for frame in [
            Message::binary(vec![0x30, 0x03]),
            Message::Ping(Bytes::from_static(b"hi")),
            Message::binary(vec![0x00, 0x01, b'a']),
            Message::binary(vec![0xc0, 0x00, 0xd0, 0x00]),
        ] {
            server.send(frame).await.expect("server sends");
        }
        let mut bytes = [0u8; 9];
        reader.read_exact(&mut bytes).await.expect("client reads");
        assert_eq!(
            bytes,
            [0x30, 0x03, 0x00, 0x01, b'a', 0xc0, 0x00, 0xd0, 0x00]
        );

        writer.write_all(&[0xe0, 0x00]).await.expect("write");
        writer
            .write_all(&[0xc0, 0x00, 0xc0, 0x00])
            .await
            .expect("write");
        writer.flush().await.expect("flush");
        let mut received = Vec::new();
        while received.len() < 2 {
            match server.next().await.expect("a message").expect("valid") {
                Message::Binary(payload) => received.push(payload.to_vec()),
                Message::Pong(payload) => assert_eq!(&payload[..], b"hi"),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(received, [vec![0xe0, 0x00], vec![0xc0, 0x00, 0xc0, 0x00]]);

        writer.shutdown().await.expect("close");
        assert!(matches!(server.next().await, Some(Ok(Message::Close(_)))));
    }

    #[tokio::test]
    async fn a_close_frame_is_the_end_of_the_stream_and_text_an_error() {
        let (mut reader, _writer, mut server) = connected().await;
        server.send(Message::text("{}")).await.expect("send");
        let error = reader.read_u8().await.expect_err("text is refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);

        let (mut reader, _writer, mut server) = connected().await;
        server.send(Message::binary(vec![7])).await.expect("send");
        server.close(None).await.expect("close");
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.expect("clean end");
        assert_eq!(rest, [7]);
    }

    #[tokio::test]
    async fn a_broker_that_does_not_agree_to_mqtt_is_refused_clearly() {
        for answered in [None, Some("mqttv3.1")] {
            let (client, server) = tokio::io::duplex(64 * 1024);
            let upgrade = Upgrade::new(&target()).expect("valid target");
            let (halves, _) = tokio::join!(upgrade.over(client), serve(server, answered));
            let error = halves.err().expect("refused");
            let shown = error.to_string();
            assert!(
                shown.contains("ws://127.0.0.1:9001/mqtt") && shown.contains("subprotocol"),
                "{shown}"
            );
        }
    }

    /// A hostile broker on loopback: it completes the upgrade, sends one binary frame of
    /// `first` bytes, then only the header of a frame announcing `announced` bytes, and
    /// holds the connection open without sending its payload.
    // tungstenite's callback type fixes the (large) error response type.
    #[allow(clippy::result_large_err)]
    async fn hostile_broker(
        listener: tokio::net::TcpListener,
        first: usize,
        announced: u64,
    ) -> tokio::net::TcpStream {
        let (stream, _) = listener.accept().await.expect("accept");
        let answer = |_: &ServerRequest, mut response: Response| {
            response
                .headers_mut()
                .insert(SUBPROTOCOL_HEADER, HeaderValue::from_static(SUBPROTOCOL));
            Ok::<_, ErrorResponse>(response)
        };
        let mut socket = tokio_tungstenite::accept_hdr_async(stream, answer)
            .await
            .expect("server handshake");
        socket
            .send(Message::binary(vec![0x30; first]))
            .await
            .expect("server sends");
        let mut stream = socket.into_inner();
        // FIN + binary, then the 64-bit length form (servers send unmasked frames).
        let mut header = vec![0x82, 127];
        header.extend_from_slice(&announced.to_be_bytes());
        stream.write_all(&header).await.expect("header sent");
        stream.flush().await.expect("flushed");
        stream
    }

    /// Over TCP the codec refuses a packet over `max_packet_size` at its header; over
    /// WebSocket a frame announcing more is refused at the frame header, before its payload
    /// arrives (the broker never sends it) and before tungstenite reserves room for it.
    #[tokio::test]
    async fn a_frame_over_the_largest_packet_is_refused_at_its_header() {
        const CAP: usize = 4096;
        for announced in [CAP as u64 + 1, 200 << 20, 1 << 40] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let mut target = target();
            target.port = listener.local_addr().expect("address").port();
            let dialer = super::super::Dialer::new(&target)
                .expect("valid target")
                .with_max_packet(CAP);
            let broker = tokio::spawn(hostile_broker(listener, CAP, announced));
            let (mut reader, _writer) = dialer.dial().await.expect("upgrade");
            // A frame of exactly the largest packet passes.
            let mut first = vec![0u8; CAP];
            reader
                .read_exact(&mut first)
                .await
                .expect("frame at the cap");
            assert!(first.iter().all(|&byte| byte == 0x30));
            // The announced frame is refused without waiting for bytes that never come; the
            // bound only catches a hang, it measures nothing.
            let refused = tokio::time::timeout(Duration::from_secs(30), reader.read_u8())
                .await
                .expect("refused at the header, not waiting for the payload")
                .expect_err("refused");
            assert_eq!(refused.kind(), io::ErrorKind::InvalidData, "{refused}");
            let shown = refused.to_string();
            assert!(
                shown.contains(&format!("{announced} bytes"))
                    && shown.contains(&format!("({CAP} bytes, connection.max_packet_size)")),
                "{shown}"
            );
            // The broker held its end open: the refusal is not an end of stream.
            drop(broker.await.expect("broker task"));
        }
    }

    #[test]
    fn the_url_dialled_is_the_one_the_target_shows() {
        let mut target = target();
        let upgrade = Upgrade::new(&target).expect("valid");
        assert_eq!(upgrade.url(), "ws://127.0.0.1:9001/mqtt");
        assert_eq!(target.to_string(), upgrade.url());

        target.tls_ca_file = Some("/ca.pem".into());
        target.host = "broker.example".to_string();
        target.websocket_path = Some("/ws".to_string());
        let upgrade = Upgrade::new(&target).expect("valid");
        assert_eq!(upgrade.url(), "wss://broker.example:9001/ws");
        assert_eq!(target.to_string(), upgrade.url());

        target.websocket_path = Some("ws".to_string());
        let error = Upgrade::new(&target).expect_err("no leading slash");
        assert!(
            error.to_string().contains("broker.websocket_path"),
            "{error}"
        );
    }
}
