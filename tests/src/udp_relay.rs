//! A UDP relay on 127.0.0.1 that stands for one broker address in front of a broker that can
//! change: each client socket (a flow) is relayed to the broker the relay points at when the
//! flow's first datagram arrives, and stays with it. Pointing it at another broker is what a
//! client sees of a broker restarting (or failing over) behind the same address, without the
//! moment of no broker a real restart has: a QUIC client's handshake into that moment would
//! not be answered, only time out.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::UdpSocket;
use tokio::task::{JoinHandle, JoinSet};

use crate::ports::LOOPBACK;

/// The largest datagram relayed (QUIC's are at most 65527 bytes of payload).
const LARGEST_DATAGRAM: usize = 65_536;

/// The relay; it stops relaying when dropped.
#[derive(Debug)]
pub struct UdpRelay {
    address: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// What the relay's task and its owner share.
#[derive(Debug)]
struct Shared {
    /// Where new flows go.
    target: Mutex<SocketAddr>,
    /// Datagrams from the broker to each flow's client, by flow (in order of arrival).
    replies: Mutex<Vec<Arc<AtomicU64>>>,
}

impl UdpRelay {
    /// A relay on a free 127.0.0.1 port, relaying to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let front = Arc::new(UdpSocket::bind((LOOPBACK, 0)).await?);
        let address = front.local_addr()?;
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            replies: Mutex::new(Vec::new()),
        });
        let task = tokio::spawn(relay(front, shared.clone()));
        Ok(UdpRelay {
            address,
            shared,
            task,
        })
    }

    /// The address clients send to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sends flows that begin from now on to `target`; the ones begun stay where they are.
    pub fn point_at(&self, target: SocketAddr) {
        *self
            .shared
            .target
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = target;
    }

    /// How many datagrams the broker sent back on each flow so far, in the flows' order.
    pub fn replies_per_flow(&self) -> Vec<u64> {
        self.shared
            .replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|count| count.load(Ordering::Acquire))
            .collect()
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        // The flows' tasks are in the relay task's JoinSet: they go with it.
        self.task.abort();
    }
}

/// Relays each client's datagrams through a socket of the flow's own (so the broker sees one
/// peer per client), and the broker's answers back from the front socket.
async fn relay(front: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut flows: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut replies = JoinSet::new();
    let mut datagram = vec![0u8; LARGEST_DATAGRAM];
    loop {
        let Ok((length, client)) = front.recv_from(&mut datagram).await else {
            return;
        };
        let upstream = match flows.get(&client) {
            Some(upstream) => upstream.clone(),
            None => {
                let target = *shared.target.lock().unwrap_or_else(PoisonError::into_inner);
                let Ok(upstream) = flow_socket(target).await else {
                    continue;
                };
                let count = Arc::new(AtomicU64::new(0));
                shared
                    .replies
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(count.clone());
                replies.spawn(relay_replies(
                    upstream.clone(),
                    front.clone(),
                    client,
                    count,
                ));
                flows.insert(client, upstream.clone());
                upstream
            }
        };
        // A datagram that cannot be sent is lost, as on a network.
        let _ = upstream.send(&datagram[..length]).await;
    }
}

/// A socket of one flow's own, connected to `target`.
async fn flow_socket(target: SocketAddr) -> io::Result<Arc<UdpSocket>> {
    let socket = UdpSocket::bind((LOOPBACK, 0)).await?;
    socket.connect(target).await?;
    Ok(Arc::new(socket))
}

/// Sends what the broker answers on `upstream` to `client`, counting it.
async fn relay_replies(
    upstream: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    client: SocketAddr,
    count: Arc<AtomicU64>,
) {
    let mut datagram = vec![0u8; LARGEST_DATAGRAM];
    loop {
        match upstream.recv(&mut datagram).await {
            Ok(length) => {
                count.fetch_add(1, Ordering::AcqRel);
                let _ = front.send_to(&datagram[..length], client).await;
            }
            // An ICMP "port unreachable" from a broker gone surfaces here: keep reading.
            Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(_) => return,
        }
    }
}
