//! The forwarding hop: a TCP relay on this node to a broker on another, the entry of a
//! message's path when a plan dials a broker through another node (as kube-proxy forwarded the
//! study's messages from the headnode's NodePort to the worker's pod). Started, leased and
//! stopped like a broker, so a controller that dies leaves no relay behind either.
//!
//! Each accepted connection gets its own connection to the target, `TCP_NODELAY` on both,
//! and its bytes are copied both ways as they come: a user-space relay, so besides the link it
//! adds one more receive and send per message on this node (tens of microseconds), where
//! kube-proxy's kernel DNAT adds less. A relay also acknowledges TCP segments itself, where a
//! forwarding kernel leaves that to the far end; a delayed ACK there would hold a sender that
//! keeps Nagle's algorithm on (rumqttd does) until the relayed reply came back, so every read
//! re-arms `TCP_QUICKACK` and each segment is acknowledged at once. Stopping it closes the
//! listener and every relayed connection.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::error::BrokerError;
use super::{BoxFuture, BrokerDriver, BrokerState, RunningBroker};
use domain::{BrokerKind, BrokerSpec};

/// Connecting to the target takes at most this; a client's connection is dropped after.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The driver for forwarding hops.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardDriver;

impl BrokerDriver for ForwardDriver {
    fn start<'a>(
        &'a self,
        spec: &'a BrokerSpec,
    ) -> BoxFuture<'a, Result<Box<dyn RunningBroker>, BrokerError>> {
        Box::pin(async move {
            let BrokerKind::Forward { target } = spec.kind else {
                return Err(BrokerError::invalid(
                    "kind",
                    spec.summary(),
                    "is not a forwarding hop",
                ));
            };
            let bind = SocketAddr::new(spec.bind, spec.port);
            let listener = TcpListener::bind(bind)
                .await
                .map_err(|e| BrokerError::io(format!("binding {bind}"), e))?;
            let address = listener
                .local_addr()
                .map_err(|e| BrokerError::io("reading the bound address", e))?;
            let stop = CancellationToken::new();
            let task = tokio::spawn(relay(listener, target, stop.clone()));
            Ok(Box::new(Forwarder {
                address,
                target,
                stop: stop.drop_guard(),
                task,
            }) as Box<dyn RunningBroker>)
        })
    }
}

/// Accepts until `stop`, relaying each connection to `target`; the relays end with it.
async fn relay(listener: TcpListener, target: SocketAddr, stop: CancellationToken) {
    let mut relays = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished relays so the set does not grow with every connection.
            Some(_) = relays.join_next(), if !relays.is_empty() => continue,
        };
        match accepted {
            Ok((client, peer)) => {
                relays.spawn(async move {
                    if let Err(error) = relay_one(client, target).await {
                        tracing::debug!(%peer, %target, "relay ended: {error}");
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%target, "accepting a connection to forward: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
    relays.shutdown().await;
}

async fn relay_one(client: TcpStream, target: SocketAddr) -> std::io::Result<()> {
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting"))??;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    // Either direction ending (a close, an error) ends the relay: the other is dropped.
    tokio::select! {
        outcome = pump(client_read, upstream_write) => outcome,
        outcome = pump(upstream_read, client_write) => outcome,
    }
}

/// Copies `from` to `to` until `from` closes, acknowledging each read at once.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = from.read(&mut buffer).await?;
        if read == 0 {
            return to.shutdown().await;
        }
        // Linux clears QUICKACK after it sends an ACK: re-armed per read.
        socket2::SockRef::from(from.as_ref()).set_tcp_quickack(true)?;
        to.write_all(&buffer[..read]).await?;
    }
}

/// A running forwarding hop.
#[derive(Debug)]
pub struct Forwarder {
    address: SocketAddr,
    target: SocketAddr,
    /// Cancelled on stop and on drop (a guard: dropped without `stop`, it still closes).
    stop: tokio_util::sync::DropGuard,
    task: JoinHandle<()>,
}

impl RunningBroker for Forwarder {
    fn address(&self) -> SocketAddr {
        self.address
    }

    fn pid(&self) -> Option<u32> {
        None
    }

    fn detail(&self) -> String {
        format!("forwarding hop: {} -> {}", self.address, self.target)
    }

    fn check(&mut self) -> BoxFuture<'_, BrokerState> {
        Box::pin(async move {
            if self.task.is_finished() {
                BrokerState::Failed("the forwarder's listener stopped".into())
            } else {
                BrokerState::Running
            }
        })
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), BrokerError>> {
        let Forwarder { stop, task, .. } = *self;
        Box::pin(async move {
            drop(stop);
            let _ = task.await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::test_support::loopback_spec;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_cross_the_hop_both_ways_and_stop_closes_it() {
        // An echo server stands in for the broker.
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        let spec = loopback_spec("hop", BrokerKind::Forward { target });
        let mut hop = ForwardDriver.start(&spec).await.unwrap();
        assert_eq!(hop.check().await, BrokerState::Running);
        let mut client = TcpStream::connect(hop.address()).await.unwrap();
        client.write_all(b"hello through the hop").await.unwrap();
        let mut back = [0u8; 21];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello through the hop");

        let address = hop.address();
        hop.stop().await.unwrap();
        // The relayed connection is closed and nothing listens any more.
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_to_end(&mut rest),
        )
        .await
        .expect("the relay closed the connection");
        assert!(closed.is_ok_and(|n| n == 0) || rest.is_empty());
        assert!(TcpStream::connect(address).await.is_err());
    }
}
