//! Brokers: the MQTT broker a node runs for a benchmark, started, probed and stopped by the
//! agent's Broker RPCs through one trait, [`BrokerDriver`].
//!
//! A [`BrokerSpec`] names an instance and says how to run it: `native` (an installed product
//! with a generated config that lifts its limits), `embedded` (rumqttd inside the agent,
//! nothing to install), `external` (an address the agent only records and probes) or
//! `kubernetes` (a pinned official image on the k3s cluster, reached with kubectl). A
//! broker counts as started only once an MQTT 3.1.1 CONNECT gets an accepting CONNACK.
//! [`Brokers`] owns the running instances by name: starting the same spec twice is a no-op,
//! stopping twice too, and [`Brokers::stop_all`] undoes everything at agent shutdown. The
//! PID of each broker ([`BrokerStatus::pid`]) is what the Metrics RPC watches; a broker
//! with no process on this node (a pod) offers a [`UsageSampler`] instead.
//!
//! # Layout
//! - (in `domain::broker`): the [`BrokerSpec`] a request carries, and its validation.
//! - `ports.rs`: checking, choosing and reserving a broker's port.
//! - `error.rs`: [`BrokerError`] and the gRPC code each variant maps to; `error_code.rs`:
//!   [`ErrorCode`], apart so that kubectl's errors name codes too.
//! - `readiness.rs`: the CONNECT/CONNACK probe and the wait with a deadline;
//!   `websocket_probe.rs` the same inside a WebSocket upgrade.
//! - `registry.rs`: [`Brokers`], instances by name, idempotent start and stop.
//! - `install.rs`: [`InstallPaths`], where product executables are looked for.
//! - (in `recipes`, shared with the tests crate): each product's settings, command line,
//!   image, ports and probe, one file per product.
//! - `native.rs`: [`NativeDriver`], a recipe's plan with this node's executables and ports,
//!   and the running broker process; `native_tests.rs` starts real Mosquitto and RabbitMQ.
//!   `log_watch.rs`: the start's watch on its log for a port taken meanwhile.
//! - (in `host`, shared with the installers and the tests): process groups, markers, the
//!   `/proc` sweep.
//! - `embedded.rs`: [`EmbeddedDriver`], rumqttd on its own thread and runtime.
//! - `external.rs`: [`ExternalDriver`].
//! - `kubernetes/`: [`KubernetesDriver`], manifests, kubectl, pod metrics (see its Layout).
//! - `test_support.rs` (tests only): loopback specs, skip-or-fail for missing brokers, the
//!   `/proc` leftover check, a raw MQTT client.

mod embedded;
mod error;
mod error_code;
mod external;
mod forward;
mod install;
pub mod kubernetes;
mod log_watch;
mod native;
mod ports;
mod quic_listener;
mod readiness;
mod registry;
mod sockets;
#[cfg(test)]
mod test_support;
mod websocket_probe;

use domain::BrokerSpec;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

pub use embedded::EmbeddedDriver;
pub use error::BrokerError;
pub use error_code::ErrorCode;
pub use external::ExternalDriver;
pub use forward::ForwardDriver;
pub use install::InstallPaths;
pub use kubernetes::{Kubectl, KubectlError, KubernetesDriver};
pub use native::NativeDriver;
pub use readiness::{ProbeError, probe, wait_ready};
pub use registry::{Brokers, BrokersConfig};

/// A boxed, sendable future: what the object-safe driver traits return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Starts brokers of one kind. Implemented by [`NativeDriver`], [`EmbeddedDriver`],
/// [`ExternalDriver`] and [`KubernetesDriver`]; [`Brokers`] picks the driver from the spec's
/// kind.
pub trait BrokerDriver: Send + Sync + std::fmt::Debug {
    /// Starts the broker `spec` describes and returns once it answers MQTT. On failure
    /// nothing it started is left running.
    fn start<'a>(
        &'a self,
        spec: &'a BrokerSpec,
    ) -> BoxFuture<'a, Result<Box<dyn RunningBroker>, BrokerError>>;
}

/// A broker a driver started. Dropping it without [`RunningBroker::stop`] still kills what
/// it runs (process groups are SIGKILLed, the embedded server is told to stop), but only
/// `stop` is graceful and confirms that nothing is left.
pub trait RunningBroker: Send + std::fmt::Debug {
    /// The address its MQTT listener is bound to (port resolved).
    fn address(&self) -> SocketAddr;
    /// Where clients reach its MQTT-over-WebSocket listener, when the spec asked for one.
    fn websocket_address(&self) -> Option<SocketAddr> {
        None
    }
    /// Where clients reach its MQTT-over-QUIC listener and the CA they trust, when the spec
    /// asked for one.
    fn quic_endpoint(&self) -> Option<QuicEndpoint> {
        None
    }
    /// The PID whose CPU and memory are the broker's: the broker process (the Erlang VM or
    /// the JVM under a start script) for native brokers, the agent's own for the embedded
    /// one, none for an external one or a pod.
    fn pid(&self) -> Option<u32>;
    /// Where its CPU and memory come from when it has no process on this node (a pod on
    /// Kubernetes); `None` for the others.
    fn usage_sampler(&self) -> Option<Arc<dyn UsageSampler>> {
        None
    }
    /// Human-readable details: product, files, log.
    fn detail(&self) -> String;
    /// Its state right now: has the process exited, does the external address answer.
    fn check(&mut self) -> BoxFuture<'_, BrokerState>;
    /// Stops it gracefully, then by force, and confirms nothing it started survives.
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), BrokerError>>;
}

/// CPU and memory of a broker at one moment, as a process sample states them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// CPU, percent of one core (above 100 on several cores).
    pub cpu_percent: f64,
    /// Memory in use, bytes.
    pub memory_bytes: u64,
}

/// Samples the CPU and memory of a broker that has no process on this node.
pub trait UsageSampler: Send + Sync + std::fmt::Debug {
    /// Its usage now (or as recently as the source knows it); `Ok(None)` while the source
    /// has none yet, e.g. before the metrics API has scraped a new pod.
    fn sample(&self) -> BoxFuture<'_, Result<Option<Usage>, BrokerError>>;
}

/// The lifecycle state of a named instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerState {
    /// A start is in progress.
    Starting,
    /// It answered MQTT and (native, embedded) its process or thread is alive; an external
    /// broker answered a probe just now.
    Running,
    /// A stop is in progress.
    Stopping,
    /// It was stopped, or never started.
    Stopped,
    /// It failed to start, exited by itself, or (external) does not answer; with the reason.
    Failed(String),
}

/// A broker's MQTT-over-QUIC listener as its clients dial it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicEndpoint {
    /// Where clients connect (UDP).
    pub address: SocketAddr,
    /// The CA (PEM) that signed the certificate the agent made for the listener.
    pub ca_pem: String,
}

/// What the Broker RPCs report about one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerStatus {
    /// The instance name.
    pub name: String,
    /// Its state.
    pub state: BrokerState,
    /// Where clients connect, once known (not while a start on port 0 is in progress).
    pub address: Option<SocketAddr>,
    /// Where WebSocket clients connect, when the broker has such a listener.
    pub websocket_address: Option<SocketAddr>,
    /// Its QUIC listener, when it has one.
    pub quic: Option<QuicEndpoint>,
    /// The PID to watch, while it runs.
    pub pid: Option<u32>,
    /// Human-readable details.
    pub detail: String,
}
