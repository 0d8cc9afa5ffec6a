//! Test helpers: specs on loopback, the skip-or-fail rule for brokers that may not be
//! installed, the `/proc` check for leftovers, and a raw MQTT 3.1.1 client.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::install::InstallPaths;
use crate::MARKER_VAR;
use domain::{BrokerKind, BrokerOptions, BrokerSpec, Product};

/// A spec named `name` of `kind`, on 127.0.0.1, any port, default options.
pub fn loopback_spec(name: &str, kind: BrokerKind) -> BrokerSpec {
    BrokerSpec {
        name: name.to_owned(),
        kind,
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 0,
        options: BrokerOptions::default(),
    }
}

/// True under CI (`CI` set to anything but empty, `0` or `false`), where every broker is
/// installed and a missing one is a broken setup.
pub fn running_in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| {
        let value = value.trim();
        !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
    })
}

/// Whether `product` is installed; if not, prints why the calling test is skipped, or
/// panics under CI. Same rule as the harness's `components_available`.
pub fn installed_or_skip(install: &InstallPaths, product: Product) -> bool {
    match install.check(product) {
        Ok(()) => true,
        Err(error) => {
            assert!(
                !running_in_ci(),
                "CI must install every broker, but {error}"
            );
            eprintln!("SKIPPED: {error}");
            false
        }
    }
}

/// Running processes of this test process's instances named `name` (any start), found by
/// their marker in `/proc/*/environ`.
pub fn tagged_processes(name: &str) -> Vec<u32> {
    let prefix = format!("{MARKER_VAR}={}-{name}-", std::process::id());
    host::running_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&byte| byte == 0)
                    .any(|entry| entry.starts_with(prefix.as_bytes()))
            })
        })
        .collect()
}

/// A minimal MQTT 3.1.1 client for QoS 0 traffic, hand-encoded so it shares nothing with
/// the code under test.
#[derive(Debug)]
pub struct RawClient {
    stream: TcpStream,
}

impl RawClient {
    /// Connects and waits for an accepting CONNACK.
    pub async fn connect(addr: SocketAddr, client_id: &str) -> Self {
        let stream = TcpStream::connect(addr).await.expect("TCP connect");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        let mut client = Self { stream };
        let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0b10, 0, 60];
        put_string(&mut body, client_id);
        client.send(0x10, &body).await;
        let (header, body) = client.read_packet().await;
        assert_eq!(
            (header, body.as_slice()),
            (0x20, &[0u8, 0][..]),
            "CONNACK accepted"
        );
        client
    }

    /// Subscribes to `filter` at QoS 0 and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str) {
        let mut body = vec![0, 1];
        put_string(&mut body, filter);
        body.push(0);
        self.send(0x82, &body).await;
        let (header, body) = self.read_packet().await;
        assert_eq!(
            (header, body.as_slice()),
            (0x90, &[0u8, 1, 0][..]),
            "SUBACK granted"
        );
    }

    /// Publishes `payload` to `topic` at QoS 0.
    pub async fn publish(&mut self, topic: &str, payload: &[u8]) {
        let mut body = Vec::with_capacity(payload.len() + topic.len() + 2);
        put_string(&mut body, topic);
        body.extend_from_slice(payload);
        self.send(0x30, &body).await;
    }

    /// The next PUBLISH: its topic and payload.
    pub async fn next_publish(&mut self, limit: Duration) -> (String, Vec<u8>) {
        tokio::time::timeout(limit, async {
            loop {
                let (header, body) = self.read_packet().await;
                if header >> 4 == 3 {
                    let len = usize::from(u16::from_be_bytes([body[0], body[1]]));
                    let topic = String::from_utf8(body[2..2 + len].to_vec()).expect("UTF-8 topic");
                    return (topic, body[2 + len..].to_vec());
                }
            }
        })
        .await
        .expect("a PUBLISH within the limit")
    }

    async fn send(&mut self, header: u8, body: &[u8]) {
        let mut packet = vec![header];
        let mut length = body.len();
        loop {
            let mut digit = (length % 128) as u8;
            length /= 128;
            if length > 0 {
                digit |= 0x80;
            }
            packet.push(digit);
            if length == 0 {
                break;
            }
        }
        packet.extend_from_slice(body);
        self.stream
            .write_all(&packet)
            .await
            .expect("sending a packet");
    }

    async fn read_packet(&mut self) -> (u8, Vec<u8>) {
        let header = self.stream.read_u8().await.expect("a fixed header");
        let mut length = 0usize;
        for shift in [0, 7, 14, 21] {
            let byte = self.stream.read_u8().await.expect("a remaining length");
            length |= usize::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let mut body = vec![0u8; length];
        self.stream
            .read_exact(&mut body)
            .await
            .expect("a packet body");
        (header, body)
    }
}

fn put_string(buffer: &mut Vec<u8>, text: &str) {
    let len = u16::try_from(text.len()).expect("a short string");
    buffer.extend_from_slice(&len.to_be_bytes());
    buffer.extend_from_slice(text.as_bytes());
}
