//! The embedded broker: rumqttd 0.20 inside the agent, for a quickstart with nothing to
//! install. It shares the agent's process, so its CPU is sampled from its own two threads
//! (the server and the router), not from the process, which also runs loadgen.
//!
//! rumqttd's `Broker::start` blocks forever and offers no way to stop it, so the driver
//! assembles the broker from rumqttd's public parts instead:
//!
//! - a `Router` (message routing and the in-memory commit log) on its own thread, started
//!   by `Router::spawn`;
//! - a `Server` (the MQTT 3.1.1 listener and one task per connection) on a dedicated thread
//!   running its own current-thread tokio runtime, as rumqttd itself does.
//!
//! Teardown: a oneshot tells the server thread to stop; it drops the server future, which
//! closes the listening socket, then shuts its runtime down, which drops every connection
//! task and so closes every client socket. The thread is joined, so the port is free when
//! `stop` returns and a restart on the same port succeeds.
//!
//! What cannot be torn down: rumqttd 0.20's router thread. It holds a sender to its own
//! channel, so its receive loop never sees a disconnect, and rumqttd has no shutdown
//! event. After `stop` it stays parked in a blocking receive, holding the commit log of the
//! topics it carried (at most `SEGMENT_SIZE * SEGMENT_COUNT` bytes per topic, and every run
//! has topics of its own), until the agent exits. Each embedded start therefore gets a fresh
//! router, so no state leaks into the next instance; the cost is one idle thread and its
//! memory per stopped instance, which the small segments keep to a few MB per topic.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rumqttd::protocol::v4::V4;
use rumqttd::{ConnectionSettings, LinkType, Router, RouterConfig, Server, ServerSettings};
use tokio::sync::oneshot;

use super::error::BrokerError;
use super::ports::{
    claim_port, connect_address, disable_nagle_on_listeners, listening_in_this_process,
};
use super::readiness::wait_ready;
use super::{BoxFuture, BrokerDriver, BrokerState, RunningBroker, Usage, UsageSampler};
use domain::{BrokerKind, BrokerSpec};

/// How long the embedded broker may take to answer MQTT.
pub const START_DEADLINE: Duration = Duration::from_secs(10);
/// Largest MQTT packet payload accepted: MQTT's own maximum.
pub const MAX_PAYLOAD_SIZE: usize = 268_435_455;
/// Unacknowledged QoS 1/2 messages per connection unless the spec says otherwise
/// (rumqttd's example configuration).
pub const DEFAULT_MAX_INFLIGHT: u16 = 100;
/// Concurrent connections the router accepts (rumqttd's example configuration; the study's
/// largest test used 1600).
pub const MAX_CONNECTIONS: usize = 10_010;
/// Bytes per segment of a topic's in-memory commit log (a larger message fills a segment alone).
pub const SEGMENT_SIZE: usize = 256 * 1024;
/// Segments kept per topic; older ones are dropped, so a subscriber lagging by more than
/// `SEGMENT_SIZE * SEGMENT_COUNT` bytes loses messages (counted as lost). Kept small: the
/// router never releases a topic's log, and every run (and every saturation probe) has
/// topics of its own.
pub const SEGMENT_COUNT: usize = 2;
/// Router ids, so that each instance's router thread has a name of its own (`router-<id>`).
static ROUTER_IDS: AtomicUsize = AtomicUsize::new(1);
/// Time a new connection has to send CONNECT.
const CONNECTION_TIMEOUT_MS: u16 = 60_000;
/// Starts tried, each on a fresh port, when the spec asked for any port.
const START_ATTEMPTS: usize = 3;
/// How long `stop` waits for the server thread to finish.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// The driver for the in-process broker.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbeddedDriver;

impl BrokerDriver for EmbeddedDriver {
    fn start<'a>(
        &'a self,
        spec: &'a BrokerSpec,
    ) -> BoxFuture<'a, Result<Box<dyn RunningBroker>, BrokerError>> {
        Box::pin(async move {
            if spec.kind != BrokerKind::Embedded {
                return Err(BrokerError::invalid(
                    "kind",
                    spec.summary(),
                    "is not the embedded broker",
                ));
            }
            let attempts = if spec.port == 0 { START_ATTEMPTS } else { 1 };
            let mut attempt = 0;
            loop {
                attempt += 1;
                // Held until this attempt is over: by then the server holds the port.
                let claim = claim_port(spec.bind, spec.port)?;
                match start_once(spec, claim.port()).await {
                    Ok(broker) => return Ok(Box::new(broker) as Box<dyn RunningBroker>),
                    Err(error) if attempt < attempts && is_port_taken(&error) => {
                        tracing::info!(broker = %spec.name, port = claim.port(), "port taken meanwhile, retrying");
                    }
                    Err(error) => return Err(error),
                }
            }
        })
    }
}

fn is_port_taken(error: &BrokerError) -> bool {
    matches!(error, BrokerError::NotReady { reason, .. } if reason.contains("in use"))
}

async fn start_once(spec: &BrokerSpec, port: u16) -> Result<EmbeddedBroker, BrokerError> {
    let listen = spec.listen_address(port);
    let inflight = spec
        .options
        .max_inflight_messages
        .unwrap_or(DEFAULT_MAX_INFLIGHT);
    let settings = ServerSettings {
        name: format!("embedded-{}", spec.name),
        listen,
        tls: None,
        // rumqttd pauses this long after every accept; a benchmark connects hundreds at once.
        next_connection_delay_ms: 0,
        connections: ConnectionSettings {
            connection_timeout_ms: CONNECTION_TIMEOUT_MS,
            max_payload_size: MAX_PAYLOAD_SIZE,
            max_inflight_count: usize::from(inflight),
            auth: None,
            external_auth: None,
            // Topics are created on first use, as in every other broker.
            dynamic_filters: true,
        },
    };
    let router = RouterConfig {
        max_connections: MAX_CONNECTIONS,
        max_outgoing_packet_count: 200,
        max_segment_size: SEGMENT_SIZE,
        max_segment_count: SEGMENT_COUNT,
        ..RouterConfig::default()
    };
    let (shutdown, shutdown_rx) = oneshot::channel::<()>();
    let router_id = ROUTER_IDS.fetch_add(1, Ordering::Relaxed);
    let threads = Arc::new(Mutex::new(Vec::new()));
    let registry = threads.clone();
    let thread = std::thread::Builder::new()
        .name(format!("embedded-{}", spec.name))
        .spawn(move || serve(settings, router, router_id, registry, shutdown_rx))
        .map_err(|e| BrokerError::io("spawning the embedded broker's thread", e))?;
    let mut broker = EmbeddedBroker {
        name: spec.name.clone(),
        listen,
        shutdown: Some(shutdown),
        thread: Some(thread),
        ended: None,
        sampler: Arc::new(ThreadSampler {
            threads,
            last: Mutex::new(None),
        }),
    };
    let deadline = spec.options.start_deadline_or(START_DEADLINE);
    let probe_at = connect_address(listen);
    let mut ready = wait_ready(probe_at, deadline, None, || {
        broker.ended().map(str::to_owned)
    })
    .await;
    if ready.is_ok() && !listening_in_this_process(port) {
        // A probe reached some listener, but not ours: another program owns the port.
        let ended = broker.ended().unwrap_or("the server is not listening");
        ready = Err(format!(
            "{ended}; the probe was answered by another program's listener"
        ));
    }
    if ready.is_ok() && disable_nagle_on_listeners(port) == 0 {
        tracing::warn!(
            port,
            "could not turn Nagle off for the embedded broker's clients"
        );
    }
    match ready {
        Ok(()) => {
            tracing::info!(broker = %spec.name, address = %listen, "embedded broker ready");
            Ok(broker)
        }
        Err(reason) => {
            if let Err(error) = broker.shutdown().await {
                tracing::warn!(broker = %spec.name, "cleaning up a failed start: {error}");
            }
            Err(BrokerError::NotReady {
                name: spec.name.clone(),
                address: probe_at,
                deadline,
                reason,
                log_tail: String::new(),
            })
        }
    }
}

/// The server thread: starts a router, runs the listener until told to stop (or the sender
/// is dropped), then shuts the runtime down, dropping every connection.
fn serve(
    settings: ServerSettings,
    router: RouterConfig,
    router_id: usize,
    threads: Arc<Mutex<Vec<i32>>>,
    shutdown: oneshot::Receiver<()>,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("building the embedded broker's runtime: {e}"))?;
    // Started here because rumqttd does not export the type of the router's handle.
    let router_tx = Router::new(router_id, router).spawn();
    {
        let mut tids = threads.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: gettid has no preconditions.
        tids.push(unsafe { libc::gettid() });
        tids.extend(thread_named(&format!("router-{router_id}")));
    }
    let result = runtime.block_on(async move {
        let mut server = Server::new(settings, router_tx, V4);
        tokio::select! {
            served = server.start(LinkType::Remote) => match served {
                Ok(()) => Err("the embedded server stopped by itself".to_owned()),
                Err(error) => Err(format!("the embedded server failed: {error}")),
            },
            _ = shutdown => Ok(()),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

/// The thread of this process named `name`, if there is one.
fn thread_named(name: &str) -> Option<i32> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .find_map(|entry| {
            let entry = entry.ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (comm.trim_end() == name)
                .then(|| entry.file_name().to_str()?.parse().ok())
                .flatten()
        })
}

/// The embedded broker's CPU, from its own threads' schedstat, between two samples; its
/// memory is the agent process's (threads share it), an upper bound.
#[derive(Debug)]
struct ThreadSampler {
    threads: Arc<Mutex<Vec<i32>>>,
    last: Mutex<Option<(Instant, u64)>>,
}

impl ThreadSampler {
    fn cpu_ns(&self) -> u64 {
        let tids = self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        tids.iter()
            .filter_map(|tid| {
                let text =
                    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
                text.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    }
}

fn process_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let kb = line.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?;
                kb.trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kb| kb * 1024)
}

impl UsageSampler for ThreadSampler {
    fn sample(&self) -> BoxFuture<'_, Result<Option<Usage>, BrokerError>> {
        Box::pin(async move {
            let now = (Instant::now(), self.cpu_ns());
            let previous = self
                .last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replace(now);
            Ok(previous.map(|(at, cpu)| Usage {
                cpu_percent: now.1.saturating_sub(cpu) as f64 * 100.0
                    / now.0.duration_since(at).as_nanos().max(1) as f64,
                memory_bytes: process_rss_bytes(),
            }))
        })
    }
}

/// A running embedded broker.
#[derive(Debug)]
pub struct EmbeddedBroker {
    name: String,
    listen: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), String>>>,
    /// Why the server thread ended, once it has.
    ended: Option<String>,
    sampler: Arc<ThreadSampler>,
}

impl EmbeddedBroker {
    /// Why the server thread ended, if it has (joins it when it is finished).
    fn ended(&mut self) -> Option<&str> {
        if self.ended.is_none()
            && let Some(thread) = self.thread.take_if(|thread| thread.is_finished())
        {
            self.ended = Some(match thread.join() {
                Ok(Ok(())) => "the embedded server was stopped".to_owned(),
                Ok(Err(reason)) => reason,
                Err(_) => "the embedded server's thread panicked".to_owned(),
            });
        }
        self.ended.as_deref()
    }

    async fn shutdown(&mut self) -> Result<(), BrokerError> {
        if let Some(shutdown) = self.shutdown.take() {
            // An error means the thread is already gone; joining tells how.
            let _ = shutdown.send(());
        }
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let joined = tokio::time::timeout(
            STOP_DEADLINE,
            tokio::task::spawn_blocking(move || thread.join()),
        )
        .await;
        match joined {
            Ok(Ok(Ok(_))) => {
                tracing::info!(broker = %self.name, "embedded broker stopped");
                Ok(())
            }
            Ok(Ok(Err(_))) | Ok(Err(_)) => Err(BrokerError::StopFailed {
                name: self.name.clone(),
                reason: "the embedded server's thread panicked".to_owned(),
            }),
            Err(_) => Err(BrokerError::StopFailed {
                name: self.name.clone(),
                reason: format!(
                    "the embedded server's thread did not end within {STOP_DEADLINE:?}"
                ),
            }),
        }
    }
}

impl RunningBroker for EmbeddedBroker {
    fn address(&self) -> SocketAddr {
        self.listen
    }

    fn pid(&self) -> Option<u32> {
        // The agent's process also runs loadgen: the broker's CPU is its threads'.
        None
    }

    fn usage_sampler(&self) -> Option<Arc<dyn UsageSampler>> {
        Some(self.sampler.clone())
    }

    fn detail(&self) -> String {
        format!(
            "rumqttd in the agent (pid {}, CPU of its server and router threads), max payload {MAX_PAYLOAD_SIZE} B",
            std::process::id()
        )
    }

    fn check(&mut self) -> BoxFuture<'_, BrokerState> {
        Box::pin(async move {
            match self.ended() {
                None => BrokerState::Running,
                Some(reason) => BrokerState::Failed(reason.to_owned()),
            }
        })
    }

    fn stop(mut self: Box<Self>) -> BoxFuture<'static, Result<(), BrokerError>> {
        Box::pin(async move { self.shutdown().await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::readiness::{PROBE_TIMEOUT, probe};
    use crate::broker::test_support::{RawClient, loopback_spec};

    async fn start(spec: &BrokerSpec) -> Box<dyn RunningBroker> {
        tokio::time::timeout(Duration::from_secs(20), EmbeddedDriver.start(spec))
            .await
            .expect("start is bounded")
            .unwrap()
    }

    #[tokio::test]
    async fn it_starts_stops_and_restarts_on_the_same_port() {
        let spec = loopback_spec("emb", BrokerKind::Embedded);
        let mut broker = start(&spec).await;
        let address = broker.address();
        assert_ne!(address.port(), 0);
        assert_eq!(
            broker.pid(),
            None,
            "the agent's process is not the broker's"
        );
        let sampler = broker.usage_sampler().expect("its threads are sampled");
        assert_eq!(
            sampler.sample().await.expect("sampled"),
            None,
            "no interval yet"
        );
        let usage = sampler
            .sample()
            .await
            .expect("sampled")
            .expect("an interval");
        assert!(
            usage.cpu_percent >= 0.0 && usage.memory_bytes > 0,
            "{usage:?}"
        );
        assert_eq!(broker.check().await, BrokerState::Running);
        broker.stop().await.unwrap();
        assert!(
            probe(address, PROBE_TIMEOUT).await.is_err(),
            "nothing answers after stop"
        );

        let mut same_port = spec.clone();
        same_port.port = address.port();
        let broker = start(&same_port).await;
        assert_eq!(broker.address(), address);
        probe(address, PROBE_TIMEOUT).await.unwrap();
        broker.stop().await.unwrap();
        // The port is free again: nothing holds the listener.
        std::net::TcpListener::bind(address).unwrap();
    }

    #[tokio::test]
    async fn a_megabyte_payload_goes_through_unchanged() {
        let broker = start(&loopback_spec("big", BrokerKind::Embedded)).await;
        let address = broker.address();
        let mut subscriber = RawClient::connect(address, "big-sub").await;
        subscriber.subscribe("bench/big").await;
        let mut publisher = RawClient::connect(address, "big-pub").await;
        for size in [1_000_000, 3 * 1024 * 1024] {
            let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            publisher.publish("bench/big", &payload).await;
            let (topic, received) = subscriber.next_publish(Duration::from_secs(10)).await;
            assert_eq!(topic, "bench/big");
            assert_eq!(received.len(), size);
            assert!(received == payload, "the {size} B payload arrived altered");
        }
        broker.stop().await.unwrap();
    }

    #[tokio::test]
    async fn dropping_it_without_stop_still_frees_the_port() {
        let broker = start(&loopback_spec("dropped", BrokerKind::Embedded)).await;
        let address = broker.address();
        drop(broker);
        let freed = host::poll_until(Duration::from_secs(10), Duration::from_millis(25), || {
            std::future::ready(match std::net::TcpListener::bind(address) {
                Ok(_) => host::Attempt::Done(()),
                Err(_) => host::Attempt::Retry(()),
            })
        });
        assert!(freed.await.is_ok(), "{address} still bound");
    }

    #[tokio::test]
    async fn a_port_in_use_is_refused_before_starting() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut spec = loopback_spec("busy", BrokerKind::Embedded);
        spec.port = holder.local_addr().unwrap().port();
        let error = EmbeddedDriver.start(&spec).await.unwrap_err();
        assert_eq!(
            error.code(),
            crate::broker::ErrorCode::InvalidArgument,
            "{error}"
        );
    }
}
