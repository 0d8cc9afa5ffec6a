//! A minimal blocking MQTT 3.1.1 client over `std::net::TcpStream`.
//!
//! The harness needs just enough MQTT to prove a broker is ready (CONNECT ->
//! CONNACK), to read Mosquitto's `$SYS` tree, and to play a subscriber that
//! stops reading. Hand-encoding the few packets keeps the harness free of the
//! async client the code under test uses, so a bug there cannot hide here.
//! QoS 2 is not supported; QoS 1 deliveries are acknowledged automatically.

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Child;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use host::{Attempt, poll_until_blocking};

use crate::process::POLL_INTERVAL;

/// Keep-alive announced in CONNECT. Mosquitto 2.0 refuses 0 from MQTT 3.1.1
/// clients (its `max_keepalive` defaults to 65535), and the harness never
/// sends PINGREQ, so the largest value keeps long-lived readers connected.
const KEEP_ALIVE_SECS: u16 = u16::MAX;

/// One PUBLISH received from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedPublish {
    /// Topic name the message was published to.
    pub topic: String,
    /// Application payload.
    pub payload: Vec<u8>,
    /// QoS of this delivery (0 or 1).
    pub qos: u8,
    /// Set when the broker sent a stored retained message because of a new
    /// subscription, clear for live traffic (MQTT 3.1.1 section 3.3.1.3).
    pub retain: bool,
}

/// A connected MQTT 3.1.1 session (clean session) on a blocking socket.
#[derive(Debug)]
pub struct MqttConnection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    next_packet_id: u16,
    /// PUBLISHes that arrived while waiting for a SUBACK.
    pending: VecDeque<ReceivedPublish>,
}

impl MqttConnection {
    /// Connects to `addr`, sends CONNECT for `client_id` and waits for a
    /// successful CONNACK; each step is bounded by `timeout`.
    pub fn connect(addr: SocketAddr, client_id: &str, timeout: Duration) -> Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .with_context(|| format!("TCP connect to {addr}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        stream
            .set_read_timeout(Some(timeout))
            .context("setting the CONNACK read timeout")?;
        let writer = stream.try_clone().context("cloning the MQTT socket")?;
        let mut connection = Self {
            reader: BufReader::new(stream),
            writer,
            next_packet_id: 1,
            pending: VecDeque::new(),
        };

        let mut body = Vec::new();
        put_string(&mut body, "MQTT")?;
        body.push(4); // protocol level 4 = MQTT 3.1.1
        body.push(0b0000_0010); // clean session, no will, no credentials
        body.extend_from_slice(&KEEP_ALIVE_SECS.to_be_bytes());
        put_string(&mut body, client_id)?;
        connection.send(0x10, &body).context("sending CONNECT")?;

        let (header, body) = connection
            .read_packet()
            .with_context(|| format!("waiting for CONNACK from {addr}"))?;
        ensure!(
            header >> 4 == 2 && body.len() == 2,
            "expected CONNACK from {addr}, got packet type {} with {} bytes",
            header >> 4,
            body.len()
        );
        ensure!(
            body[1] == 0,
            "{addr} refused the connection: CONNACK return code {}",
            body[1]
        );
        Ok(connection)
    }

    /// Subscribes to `filters` (topic filter, requested QoS 0 or 1) in one
    /// SUBSCRIBE and waits for a SUBACK granting every one of them.
    pub fn subscribe(&mut self, filters: &[(&str, u8)]) -> Result<()> {
        ensure!(!filters.is_empty(), "SUBSCRIBE needs at least one filter");
        let packet_id = self.take_packet_id();
        let mut body = packet_id.to_be_bytes().to_vec();
        for (filter, qos) in filters {
            ensure!(*qos <= 1, "this client supports QoS 0 and 1, not {qos}");
            put_string(&mut body, filter)?;
            body.push(*qos);
        }
        self.send(0x82, &body).context("sending SUBSCRIBE")?;
        loop {
            let (header, body) = self.read_packet().context("waiting for SUBACK")?;
            if header >> 4 == 3 {
                // Traffic for earlier subscriptions may arrive before this
                // SUBACK; keep it for next_publish rather than lose it.
                let publish = self.accept_publish(header, &body)?;
                self.pending.push_back(publish);
                continue;
            }
            if header >> 4 != 9 {
                continue;
            }
            ensure!(body.len() == 2 + filters.len(), "malformed SUBACK");
            ensure!(
                body[..2] == packet_id.to_be_bytes(),
                "SUBACK for another packet id"
            );
            if let Some(index) = body[2..].iter().position(|&code| code == 0x80) {
                bail!("the broker refused subscription to {:?}", filters[index].0);
            }
            return Ok(());
        }
    }

    /// Publishes one message at QoS 0 (fire and forget).
    pub fn publish_qos0(&mut self, topic: &str, payload: &[u8]) -> Result<()> {
        let mut body = Vec::with_capacity(2 + topic.len() + payload.len());
        put_string(&mut body, topic)?;
        body.extend_from_slice(payload);
        self.send(0x30, &body).context("sending PUBLISH")
    }

    /// Blocks until the next PUBLISH arrives (honouring the read timeout),
    /// acknowledging it if it is QoS 1. Other packets are skipped.
    pub fn next_publish(&mut self) -> Result<ReceivedPublish> {
        if let Some(publish) = self.pending.pop_front() {
            return Ok(publish);
        }
        loop {
            let (header, body) = self.read_packet()?;
            if header >> 4 == 3 {
                return self.accept_publish(header, &body);
            }
        }
    }

    /// Decodes a PUBLISH and sends the PUBACK a QoS 1 delivery needs.
    fn accept_publish(&mut self, header: u8, body: &[u8]) -> Result<ReceivedPublish> {
        let qos = (header >> 1) & 0b11;
        ensure!(
            qos <= 1,
            "received a QoS {qos} PUBLISH, which is unsupported"
        );
        let (topic, mut rest) = take_string(body).context("PUBLISH topic")?;
        if qos == 1 {
            ensure!(rest.len() >= 2, "QoS 1 PUBLISH without a packet id");
            let packet_id = [rest[0], rest[1]];
            rest = &rest[2..];
            self.send(0x40, &packet_id).context("sending PUBACK")?;
        }
        Ok(ReceivedPublish {
            topic,
            payload: rest.to_vec(),
            qos,
            retain: header & 1 == 1,
        })
    }

    /// Sets how long reads may block; `None` blocks forever.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .context("setting the MQTT read timeout")
    }

    /// Shrinks the socket's receive buffer (`SO_RCVBUF`), so that a
    /// subscriber which stops reading pushes back on the broker quickly.
    pub fn set_receive_buffer(&self, bytes: u32) -> Result<()> {
        let value = libc::c_int::try_from(bytes).context("SO_RCVBUF size")?;
        // SAFETY: the fd is a live socket owned by `self`; `value` outlives the call.
        let rc = unsafe {
            libc::setsockopt(
                self.writer.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                std::ptr::from_ref(&value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("setsockopt(SO_RCVBUF)");
        }
        Ok(())
    }

    /// A second handle on the socket, e.g. to `shutdown` it from another
    /// thread and so end a blocking [`Self::next_publish`].
    pub fn socket_handle(&self) -> Result<TcpStream> {
        self.writer.try_clone().context("cloning the MQTT socket")
    }

    /// Sends DISCONNECT and closes the connection.
    pub fn disconnect(mut self) -> Result<()> {
        self.send(0xE0, &[]).context("sending DISCONNECT")
    }

    fn take_packet_id(&mut self) -> u16 {
        let id = self.next_packet_id;
        self.next_packet_id = self.next_packet_id.checked_add(1).unwrap_or(1);
        id
    }

    fn send(&mut self, header: u8, body: &[u8]) -> Result<()> {
        let mut packet = Vec::with_capacity(body.len() + 5);
        packet.push(header);
        put_remaining_length(&mut packet, body.len())?;
        packet.extend_from_slice(body);
        self.writer.write_all(&packet)?;
        Ok(())
    }

    /// Reads one packet: its first header byte and its body.
    fn read_packet(&mut self) -> Result<(u8, Vec<u8>)> {
        let mut byte = [0u8; 1];
        self.reader
            .read_exact(&mut byte)
            .context("reading an MQTT fixed header")?;
        let header = byte[0];
        let mut length = 0usize;
        for shift in [0, 7, 14, 21] {
            self.reader
                .read_exact(&mut byte)
                .context("reading an MQTT remaining length")?;
            length |= usize::from(byte[0] & 0x7F) << shift;
            if byte[0] & 0x80 == 0 {
                let mut body = vec![0u8; length];
                self.reader
                    .read_exact(&mut body)
                    .context("reading an MQTT packet body")?;
                return Ok((header, body));
            }
        }
        bail!("malformed MQTT remaining length (more than 4 bytes)")
    }
}

/// Polls until an MQTT CONNECT to `addr` gets a successful CONNACK.
///
/// Fails early if `broker` (the process that should be listening) exits, and
/// after `timeout` otherwise, with the last connection error.
pub fn wait_for_connack(addr: SocketAddr, broker: &mut Child, timeout: Duration) -> Result<()> {
    // Each try is short: a broker still booting may accept TCP and stay silent.
    const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
    let connection = poll_until_blocking(timeout, POLL_INTERVAL, || {
        match broker.try_wait() {
            Ok(Some(status)) => {
                return Attempt::Stop(anyhow!(
                    "the broker exited ({status}) before answering MQTT on {addr}"
                ));
            }
            Ok(None) => {}
            Err(error) => {
                return Attempt::Stop(anyhow!(error).context("checking the broker process"));
            }
        }
        match MqttConnection::connect(addr, "continuum-readiness-probe", ATTEMPT_TIMEOUT) {
            Ok(connection) => Attempt::Done(connection),
            Err(error) => {
                Attempt::Retry(error.context(format!("no CONNACK from {addr} within {timeout:?}")))
            }
        }
    })?;
    connection.disconnect()
}

fn put_string(buffer: &mut Vec<u8>, text: &str) -> Result<()> {
    let length = u16::try_from(text.len())
        .with_context(|| format!("MQTT string of {} bytes exceeds 65535", text.len()))?;
    buffer.extend_from_slice(&length.to_be_bytes());
    buffer.extend_from_slice(text.as_bytes());
    Ok(())
}

fn take_string(bytes: &[u8]) -> Result<(String, &[u8])> {
    ensure!(bytes.len() >= 2, "string length prefix missing");
    let length = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    ensure!(bytes.len() >= 2 + length, "string shorter than its prefix");
    let text = std::str::from_utf8(&bytes[2..2 + length]).context("string is not UTF-8")?;
    Ok((text.to_owned(), &bytes[2 + length..]))
}

fn put_remaining_length(buffer: &mut Vec<u8>, mut length: usize) -> Result<()> {
    ensure!(
        length < 268_435_456,
        "MQTT packet body of {length} bytes is too large"
    );
    loop {
        let mut digit = (length % 128) as u8;
        length /= 128;
        if length > 0 {
            digit |= 0x80;
        }
        buffer.push(digit);
        if length == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_length_uses_the_mqtt_varint() {
        for (length, encoded) in [
            (0, vec![0x00]),
            (127, vec![0x7F]),
            (128, vec![0x80, 0x01]),
            (16_383, vec![0xFF, 0x7F]),
            (2_097_152, vec![0x80, 0x80, 0x80, 0x01]),
        ] {
            let mut buffer = Vec::new();
            put_remaining_length(&mut buffer, length).unwrap();
            assert_eq!(buffer, encoded, "length {length}");
        }
        assert!(put_remaining_length(&mut Vec::new(), 268_435_456).is_err());
    }

    #[test]
    fn strings_round_trip_and_truncation_is_reported() {
        let mut buffer = Vec::new();
        put_string(&mut buffer, "$SYS/broker/uptime").unwrap();
        buffer.push(42);
        let (text, rest) = take_string(&buffer).unwrap();
        assert_eq!(text, "$SYS/broker/uptime");
        assert_eq!(rest, [42]);
        assert!(take_string(&buffer[..5]).is_err());
        assert!(put_string(&mut buffer, &"x".repeat(65_536)).is_err());
    }
}
