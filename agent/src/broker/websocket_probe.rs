//! Readiness of a broker's WebSocket listener: the same CONNECT/CONNACK as the MQTT probe,
//! carried in one WebSocket binary frame after an HTTP upgrade that asks for the `mqtt`
//! subprotocol. An open port is not enough here either: RabbitMQ's web-mqtt plugin starts
//! after its MQTT listener, and a listener that upgrades but serves another subprotocol
//! would fail every client. Hand-encoded (one masked frame out, the CONNACK's bytes in
//! however many frames the server cuts them into), so the agent needs no WebSocket library.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::readiness::{connect_packet, probe_client_id, wait_for};

/// The upgrade answer is read up to this size: a few headers.
const MAX_UPGRADE_ANSWER: usize = 4096;
/// A fixed key: the probe does not check the server's accept hash (a wrong one would only
/// mean a broken server, which the CONNACK exchange shows anyway).
const PROBE_KEY: &str = "Y29udGludXVtLXByb2JlIQ==";
/// The mask of the probe's one frame (clients must mask; any value will do).
const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// Upgrades a connection to `addr` at `path` and exchanges CONNECT/CONNACK in binary
/// frames, within `limit`.
pub async fn probe(addr: SocketAddr, path: &str, limit: Duration) -> Result<(), String> {
    match timeout(limit, probe_once(addr, path)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no WebSocket upgrade and CONNACK from {addr} within {limit:?}"
        )),
    }
}

async fn probe_once(addr: SocketAddr, path: &str) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {PROBE_KEY}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: mqtt\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the upgrade to {addr}: {e}"))?;
    let head = read_head(&mut stream, addr).await?;
    check_upgrade(&head).map_err(|problem| format!("{addr}{path}: {problem}"))?;
    stream
        .write_all(&masked_binary_frame(&connect_packet(
            &probe_client_id(),
            None,
        )))
        .await
        .map_err(|e| format!("sending CONNECT to {addr}: {e}"))?;
    let connack = read_connack(&mut stream)
        .await
        .map_err(|problem| format!("{addr}: {problem}"))?;
    match connack {
        [0x20, 0x02, _, 0] => Ok(()),
        [0x20, 0x02, _, code] => Err(format!(
            "{addr} refused the connection with CONNACK return code {code}"
        )),
        other => Err(format!(
            "{addr} did not answer with a CONNACK: got bytes {other:02x?}"
        )),
    }
}

/// Most frames read for one CONNACK: a broker may send its 4 bytes in as many frames (aedes
/// sends one byte per frame), with pings between them.
const MAX_CONNACK_FRAMES: usize = 8;
/// Longest frame payload accepted while waiting for a CONNACK.
const MAX_FRAME_PAYLOAD: usize = 125;

/// The first 4 bytes of MQTT the server sends, from its binary and continuation frames (the
/// MQTT stream may be cut into frames anywhere); ping and pong frames are skipped.
async fn read_connack(stream: &mut TcpStream) -> Result<[u8; 4], String> {
    let mut mqtt = Vec::new();
    for _ in 0..MAX_CONNACK_FRAMES {
        let mut head = [0u8; 2];
        stream
            .read_exact(&mut head)
            .await
            .map_err(|e| format!("reading a frame: {e}"))?;
        let opcode = head[0] & 0x0f;
        let length = usize::from(head[1] & 0x7f);
        if head[1] & 0x80 != 0 || length > MAX_FRAME_PAYLOAD {
            return Err(format!(
                "a masked or long frame (header {head:02x?}) where a CONNACK was due"
            ));
        }
        let mut payload = vec![0u8; length];
        stream
            .read_exact(&mut payload)
            .await
            .map_err(|e| format!("reading a frame: {e}"))?;
        match opcode {
            // Continuation and binary frames carry MQTT.
            0x0 | 0x2 => mqtt.extend_from_slice(&payload),
            // Ping and pong.
            0x9 | 0xA => continue,
            other => {
                return Err(format!(
                    "a frame of opcode {other:#x} where a CONNACK was due"
                ));
            }
        }
        if let Some(connack) = mqtt.get(..4) {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(connack);
            return Ok(bytes);
        }
    }
    Err(format!(
        "no CONNACK within {MAX_CONNACK_FRAMES} frames (got {mqtt:02x?})"
    ))
}

/// The HTTP answer up to its blank line.
async fn read_head(stream: &mut TcpStream, addr: SocketAddr) -> Result<String, String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte: the frame after the head must stay in the socket for the next read.
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_UPGRADE_ANSWER {
            return Err(format!(
                "{addr} sent no end of its HTTP answer within {MAX_UPGRADE_ANSWER} bytes"
            ));
        }
        let read = stream
            .read(&mut byte)
            .await
            .map_err(|e| format!("reading the upgrade answer from {addr}: {e}"))?;
        if read == 0 {
            return Err(format!("{addr} closed the connection during the upgrade"));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Accepts `101 Switching Protocols` with the `mqtt` subprotocol.
fn check_upgrade(head: &str) -> Result<(), String> {
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 101") {
        return Err(format!("the upgrade was answered {status:?}"));
    }
    let subprotocol = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("sec-websocket-protocol")
            .then(|| value.trim().to_owned())
    });
    match subprotocol.as_deref() {
        Some("mqtt") => Ok(()),
        Some(other) => Err(format!("the server chose subprotocol {other:?}, not mqtt")),
        None => Err("the server named no subprotocol (mqtt was asked for)".to_owned()),
    }
}

/// One final binary frame holding `payload` (under 126 bytes), masked as a client's must be.
fn masked_binary_frame(payload: &[u8]) -> Vec<u8> {
    // CONNECT of a 23-byte client id is 37 bytes: the 7-bit length always fits.
    let length = u8::try_from(payload.len()).unwrap_or(125).min(125);
    let mut frame = vec![0x82, 0x80 | length];
    frame.extend_from_slice(&MASK);
    frame.extend(
        payload
            .iter()
            .take(usize::from(length))
            .enumerate()
            .map(|(i, byte)| byte ^ MASK[i % 4]),
    );
    frame
}

/// Polls [`probe`] until it succeeds or `deadline` has passed; `exited` as for the MQTT
/// probe's wait.
pub async fn wait_ready(
    addr: SocketAddr,
    path: &str,
    deadline: Duration,
    exited: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    wait_for(deadline, exited, |limit| probe(addr, path, limit)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upgrade_must_switch_to_the_mqtt_subprotocol() {
        let ok = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n";
        assert_eq!(check_upgrade(ok), Ok(()));
        let refused = "HTTP/1.1 404 Not Found\r\n\r\n";
        assert!(check_upgrade(refused).unwrap_err().contains("404"));
        let other = "HTTP/1.1 101 Switching Protocols\r\nsec-websocket-protocol: wamp\r\n\r\n";
        assert!(check_upgrade(other).unwrap_err().contains("wamp"));
        let none = "HTTP/1.1 101 Switching Protocols\r\n\r\n";
        assert!(check_upgrade(none).unwrap_err().contains("no subprotocol"));
    }

    #[test]
    fn the_frame_is_masked_binary_and_unmasks_to_the_payload() {
        let payload = connect_packet("abc", None);
        let frame = masked_binary_frame(&payload);
        assert_eq!(frame[0], 0x82);
        assert_eq!(usize::from(frame[1] & 0x7f), payload.len());
        assert_eq!(frame[1] & 0x80, 0x80);
        let unmasked: Vec<u8> = frame[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ frame[2 + i % 4])
            .collect();
        assert_eq!(unmasked, payload);
    }
}
