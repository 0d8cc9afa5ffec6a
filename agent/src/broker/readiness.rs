//! Readiness: a broker is ready when an MQTT 3.1.1 CONNECT gets a CONNACK that accepts it.
//!
//! An open TCP port is not enough: RabbitMQ opens its listener before the MQTT plugin can
//! serve sessions, and Erlang brokers may accept and then stay silent while booting. The
//! probe hand-encodes its two packets (CONNECT, DISCONNECT) so it depends on no client
//! library. [`wait_ready`] polls it until a deadline, and stops early when the broker's
//! process has exited.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use host::poll::{Attempt, poll_until};
use recipes::Login;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// How long one probe may take (connect plus CONNACK).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause between two probes while waiting for a broker.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Keep-alive announced in CONNECT; the probe disconnects long before it matters, but
/// Mosquitto 2 refuses 0 from 3.1.1 clients.
const KEEP_ALIVE_SECS: u16 = 60;

/// Why one probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The TCP connection could not be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The probed address.
        addr: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
    /// Connect or CONNACK took longer than the probe's timeout.
    #[error("no CONNACK from {addr} within {timeout:?}")]
    Timeout {
        /// The probed address.
        addr: SocketAddr,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The broker answered CONNECT with a refusal (MQTT 3.1.1 return codes 1-5).
    #[error("{addr} refused the connection with CONNACK return code {code}")]
    Refused {
        /// The probed address.
        addr: SocketAddr,
        /// The CONNACK return code.
        code: u8,
    },
    /// The broker answered with something other than a CONNACK, or closed the connection.
    #[error("{addr} did not answer with a CONNACK: {detail}")]
    Protocol {
        /// The probed address.
        addr: SocketAddr,
        /// What arrived instead.
        detail: String,
    },
}

/// Sends one MQTT 3.1.1 CONNECT to `addr` and waits, up to `limit`, for a CONNACK that
/// accepts it; then disconnects cleanly.
pub async fn probe(addr: SocketAddr, limit: Duration) -> Result<(), ProbeError> {
    probe_as(addr, limit, None).await
}

/// [`probe`] with `login` in the CONNECT (a product whose anonymous access still asks for
/// one: `recipes::anonymous_login`).
pub async fn probe_as(
    addr: SocketAddr,
    limit: Duration,
    login: Option<Login>,
) -> Result<(), ProbeError> {
    match timeout(limit, probe_once(addr, login)).await {
        Ok(result) => result,
        Err(_) => Err(ProbeError::Timeout {
            addr,
            timeout: limit,
        }),
    }
}

async fn probe_once(addr: SocketAddr, login: Option<Login>) -> Result<(), ProbeError> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|source| ProbeError::Connect { addr, source })?;
    let protocol = |detail: String| ProbeError::Protocol { addr, detail };
    stream
        .write_all(&connect_packet(&probe_client_id(), login))
        .await
        .map_err(|e| protocol(format!("sending CONNECT failed: {e}")))?;
    let mut connack = [0u8; 4];
    stream
        .read_exact(&mut connack)
        .await
        .map_err(|e| protocol(format!("reading CONNACK failed: {e}")))?;
    match connack {
        [0x20, 0x02, _, 0] => {
            // A failed DISCONNECT is harmless: the broker drops the session either way.
            let _ = stream.write_all(&[0xE0, 0x00]).await;
            let _ = stream.shutdown().await;
            Ok(())
        }
        [0x20, 0x02, _, code] => Err(ProbeError::Refused { addr, code }),
        other => Err(protocol(format!("got bytes {other:02x?}"))),
    }
}

/// Polls [`probe_as`] with `login` until it succeeds or `deadline` has passed.
///
/// `exited` is asked before every attempt whether the broker's process is gone; if it
/// returns a reason, waiting stops at once with that reason. On failure the result is the
/// reason to report: the exit, or the last probe error.
pub async fn wait_ready(
    addr: SocketAddr,
    deadline: Duration,
    login: Option<Login>,
    exited: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    wait_for(deadline, exited, |limit| async move {
        probe_as(addr, limit, login)
            .await
            .map_err(|error| error.to_string())
    })
    .await
}

/// Polls `attempt` (given how long it may take) until it succeeds or `deadline` has
/// passed, stopping early when `exited` gives a reason, as [`wait_ready`] does.
pub async fn wait_for<F>(
    deadline: Duration,
    mut exited: impl FnMut() -> Option<String>,
    attempt: impl Fn(Duration) -> F,
) -> Result<(), String>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let end = Instant::now() + deadline;
    poll_until(deadline, POLL_INTERVAL, || {
        let exit = exited();
        let remaining = end.saturating_duration_since(Instant::now());
        let tried = attempt(PROBE_TIMEOUT.min(remaining.max(Duration::from_millis(100))));
        async move {
            if let Some(reason) = exit {
                return Attempt::Stop(reason);
            }
            match tried.await {
                Ok(()) => Attempt::Done(()),
                Err(error) => Attempt::Retry(error),
            }
        }
    })
    .await
}

/// A client id of at most 23 characters (the length every 3.1.1 broker must accept),
/// distinct per probe so two probes never take over each other's session.
pub(super) fn probe_client_id() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % 1_000_000;
    format!("ct-probe-{}-{n}", std::process::id() % 10_000_000)
}

/// CONNECT, MQTT 3.1.1, clean session, no will, with `login` when given.
pub(super) fn connect_packet(client_id: &str, login: Option<Login>) -> Vec<u8> {
    let flags = if login.is_some() { 0xC2 } else { 0x02 };
    let mut body = vec![0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, flags];
    body.extend_from_slice(&KEEP_ALIVE_SECS.to_be_bytes());
    let mut string = |text: &str| {
        // The probe's id and the recipes' logins are a few ASCII bytes each.
        let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(text.as_bytes());
    };
    string(client_id);
    if let Some(login) = login {
        string(login.username);
        string(login.password);
    }
    let mut packet = vec![0x10];
    // The remaining length: seven bits a byte, the high bit saying another follows.
    let mut remaining = body.len();
    loop {
        let low = (remaining % 128) as u8;
        remaining /= 128;
        packet.push(if remaining > 0 { low | 0x80 } else { low });
        if remaining == 0 {
            break;
        }
    }
    packet.extend_from_slice(&body);
    packet
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A fake broker answering every connection with `reply` (after reading CONNECT).
    async fn fake_broker(reply: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut header = [0u8; 2];
                if stream.read_exact(&mut header).await.is_err() {
                    continue;
                }
                let mut body = vec![0u8; usize::from(header[1])];
                let _ = stream.read_exact(&mut body).await;
                assert_eq!(header[0], 0x10, "first packet is CONNECT");
                assert_eq!(&body[..8], b"\x00\x04MQTT\x04\x02");
                let _ = stream.write_all(reply).await;
            }
        });
        (addr, task)
    }

    #[test]
    fn connect_is_well_formed_and_the_client_id_short() {
        let id = probe_client_id();
        assert!(id.len() <= 23, "{id}");
        let packet = connect_packet("abc", None);
        assert_eq!(
            packet,
            [
                0x10, 15, 0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, 3, b'a', b'b', b'c'
            ]
        );
        let login = Login {
            username: "u",
            password: "pw",
        };
        assert_eq!(
            connect_packet("abc", Some(login)),
            [
                0x10, 22, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xC2, 0, 60, 0, 3, b'a', b'b', b'c', 0,
                1, b'u', 0, 2, b'p', b'w'
            ]
        );
    }

    #[tokio::test]
    async fn an_accepting_connack_is_ready() {
        let (addr, task) = fake_broker(&[0x20, 0x02, 0x00, 0x00]).await;
        probe(addr, Duration::from_secs(5)).await.unwrap();
        task.abort();
    }

    #[tokio::test]
    async fn a_refusal_is_reported_with_its_code() {
        let (addr, task) = fake_broker(&[0x20, 0x02, 0x00, 0x03]).await;
        let error = probe(addr, Duration::from_secs(5)).await.unwrap_err();
        assert!(
            matches!(error, ProbeError::Refused { code: 3, .. }),
            "{error}"
        );
        task.abort();
    }

    #[tokio::test]
    async fn a_silent_listener_times_out_and_waiting_respects_the_deadline() {
        // Bound but never accepted: the kernel completes the handshake, nobody answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let started = std::time::Instant::now();
        let reason = wait_ready(addr, Duration::from_millis(600), None, || None)
            .await
            .unwrap_err();
        assert!(reason.contains("no CONNACK"), "{reason}");
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(listener);
    }

    #[tokio::test]
    async fn a_closed_port_fails_to_connect() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let error = probe(addr, Duration::from_secs(2)).await.unwrap_err();
        assert!(matches!(error, ProbeError::Connect { .. }), "{error}");
    }

    #[tokio::test]
    async fn waiting_stops_when_the_process_exits() {
        // A port that was free a moment ago: nothing answers there.
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let mut calls = 0;
        let reason = wait_ready(addr, Duration::from_secs(30), None, || {
            calls += 1;
            (calls == 3).then(|| "exited with status 1".to_owned())
        })
        .await
        .unwrap_err();
        assert_eq!(reason, "exited with status 1");
    }
}
