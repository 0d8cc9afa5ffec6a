//! [`Brokers`]: the instances this agent runs, by name.
//!
//! Each name has a slot with an async lock, so a slow start (RabbitMQ takes seconds) blocks
//! only operations on that name. While a start or stop holds the lock, `status` reports what
//! the slot last showed (`Starting`, `Stopping`) instead of waiting.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::embedded::EmbeddedDriver;
use super::error::BrokerError;
use super::external::ExternalDriver;
use super::forward::ForwardDriver;
use super::install::InstallPaths;
use super::kubernetes::{Kubectl, KubernetesDriver};
use super::native::NativeDriver;
use super::{BrokerDriver, BrokerState, BrokerStatus, RunningBroker, UsageSampler};
use domain::{BrokerKind, BrokerSpec};

/// Where native brokers keep their files unless configured otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/continuum/brokers";

/// How [`Brokers`] runs native products and reaches the Kubernetes cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokersConfig {
    /// Parent of each native instance's directory (`<state_dir>/<name>/`).
    pub state_dir: PathBuf,
    /// Where product executables are looked for.
    pub install: InstallPaths,
    /// kubectl for Kubernetes brokers (`k3s kubectl --kubeconfig <file>` on the headnode).
    pub kubectl: Kubectl,
}

impl Default for BrokersConfig {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            install: InstallPaths::default(),
            kubectl: Kubectl::default(),
        }
    }
}

/// The brokers of this agent, by instance name.
#[derive(Debug)]
pub struct Brokers {
    native: NativeDriver,
    embedded: EmbeddedDriver,
    external: ExternalDriver,
    kubernetes: KubernetesDriver,
    forward: ForwardDriver,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

#[derive(Debug)]
struct Slot {
    /// The last status, shown while `instance` is locked by a start or stop.
    shown: Mutex<BrokerStatus>,
    instance: tokio::sync::Mutex<Option<Instance>>,
}

#[derive(Debug)]
struct Instance {
    spec: BrokerSpec,
    broker: Box<dyn RunningBroker>,
}

impl Slot {
    fn show(&self, status: BrokerStatus) {
        *self.shown.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }

    fn shown(&self) -> BrokerStatus {
        self.shown
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Brokers {
    /// An empty registry.
    pub fn new(config: BrokersConfig) -> Self {
        Self {
            native: NativeDriver::new(config.install, config.state_dir),
            embedded: EmbeddedDriver,
            external: ExternalDriver,
            kubernetes: KubernetesDriver::new(config.kubectl),
            forward: ForwardDriver,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Stops native brokers a previous agent left running (see
    /// [`NativeDriver::stop_leftovers`]); returns their names.
    pub async fn stop_leftovers(&self) -> Vec<String> {
        self.native.stop_leftovers().await
    }

    /// Where native products are looked for (for the Info RPC's capabilities).
    pub fn install_paths(&self) -> &InstallPaths {
        self.native.install_paths()
    }

    /// The driver for `kind`.
    pub fn driver(&self, kind: &BrokerKind) -> &dyn BrokerDriver {
        match kind {
            BrokerKind::Native { .. } => &self.native,
            BrokerKind::Embedded => &self.embedded,
            BrokerKind::External { .. } => &self.external,
            BrokerKind::Kubernetes { .. } => &self.kubernetes,
            BrokerKind::Forward { .. } => &self.forward,
        }
    }

    /// Starts `spec` and returns its status once it answers MQTT.
    ///
    /// Idempotent: if the same spec already runs under this name, nothing is started and its
    /// status is returned. A different spec under a running name is
    /// [`BrokerError::NameInUse`]. An instance of this name that died is cleaned up and
    /// started anew.
    #[tracing::instrument(skip_all, fields(broker = %spec.name))]
    pub async fn start(&self, spec: BrokerSpec) -> Result<BrokerStatus, BrokerError> {
        spec.validate()?;
        let slot = self.slot(&spec.name);
        let mut instance = slot.instance.lock().await;
        if let Some(current) = instance.as_mut() {
            let state = current.broker.check().await;
            if state == BrokerState::Running {
                if current.spec != spec {
                    return Err(BrokerError::NameInUse {
                        name: spec.name,
                        running: current.spec.summary(),
                    });
                }
                let status = status_of(&spec.name, state, current.broker.as_ref());
                slot.show(status.clone());
                return Ok(status);
            }
            if let Some(dead) = instance.take() {
                tracing::info!(?state, "replacing an instance that is no longer running");
                if let Err(error) = dead.broker.stop().await {
                    tracing::warn!("cleaning up the previous instance: {error}");
                }
            }
        }
        slot.show(BrokerStatus {
            name: spec.name.clone(),
            state: BrokerState::Starting,
            address: (spec.port != 0).then(|| spec.listen_address(spec.port)),
            websocket_address: None,
            quic: None,
            pid: None,
            detail: spec.summary(),
        });
        match self.driver(&spec.kind).start(&spec).await {
            Ok(broker) => {
                let status = status_of(&spec.name, BrokerState::Running, broker.as_ref());
                slot.show(status.clone());
                *instance = Some(Instance { spec, broker });
                Ok(status)
            }
            Err(error) => {
                slot.show(BrokerStatus {
                    name: spec.name.clone(),
                    state: BrokerState::Failed(error.to_string()),
                    address: None,
                    websocket_address: None,
                    quic: None,
                    pid: None,
                    detail: spec.summary(),
                });
                Err(error)
            }
        }
    }

    /// Stops the instance `name`. Idempotent: stopping a stopped or unknown name succeeds
    /// and reports `Stopped`.
    #[tracing::instrument(skip(self))]
    pub async fn stop(&self, name: &str) -> Result<BrokerStatus, BrokerError> {
        self.stop_held(name).await.map(|(status, _)| status)
    }

    /// [`Brokers::stop`], and whether it held an instance to stop.
    async fn stop_held(&self, name: &str) -> Result<(BrokerStatus, bool), BrokerError> {
        let Some(slot) = self.existing(name) else {
            let status = BrokerStatus {
                name: name.to_owned(),
                state: BrokerState::Stopped,
                address: None,
                websocket_address: None,
                quic: None,
                pid: None,
                detail: "no broker of this name was started by this agent".to_owned(),
            };
            return Ok((status, false));
        };
        let mut instance = slot.instance.lock().await;
        let Some(current) = instance.take() else {
            let mut status = slot.shown();
            status.state = BrokerState::Stopped;
            status.pid = None;
            slot.show(status.clone());
            return Ok((status, false));
        };
        let address = Some(current.broker.address());
        let websocket_address = current.broker.websocket_address();
        let quic = current.broker.quic_endpoint();
        let detail = current.broker.detail();
        slot.show(BrokerStatus {
            name: name.to_owned(),
            state: BrokerState::Stopping,
            address,
            websocket_address,
            quic: quic.clone(),
            pid: current.broker.pid(),
            detail: detail.clone(),
        });
        let result = current.broker.stop().await;
        let state = match &result {
            Ok(()) => BrokerState::Stopped,
            Err(error) => BrokerState::Failed(error.to_string()),
        };
        let status = BrokerStatus {
            name: name.to_owned(),
            state,
            address,
            websocket_address,
            quic,
            pid: None,
            detail,
        };
        slot.show(status.clone());
        result.map(|()| (status, true))
    }

    /// The status of `name` right now ([`BrokerError::Unknown`] if never started here).
    pub async fn status(&self, name: &str) -> Result<BrokerStatus, BrokerError> {
        let slot = self.existing(name).ok_or_else(|| BrokerError::Unknown {
            name: name.to_owned(),
        })?;
        // A start or stop in progress: report its phase rather than wait for it.
        let Ok(mut instance) = slot.instance.try_lock() else {
            return Ok(slot.shown());
        };
        let Some(current) = instance.as_mut() else {
            return Ok(slot.shown());
        };
        let state = current.broker.check().await;
        let status = status_of(name, state, current.broker.as_ref());
        slot.show(status.clone());
        Ok(status)
    }

    /// The status of every instance this agent knows, by name.
    pub async fn list(&self) -> Vec<BrokerStatus> {
        let mut names = self.names();
        names.sort();
        let mut statuses = Vec::with_capacity(names.len());
        for name in names {
            if let Ok(status) = self.status(&name).await {
                statuses.push(status);
            }
        }
        statuses
    }

    /// `(name, pid)` of every running broker with a PID, for the Metrics RPC. Reads the last
    /// known state, without probing.
    pub fn watched_pids(&self) -> Vec<(String, u32)> {
        let slots: Vec<Arc<Slot>> = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut pids: Vec<(String, u32)> = slots
            .iter()
            .map(|slot| slot.shown())
            .filter(|status| status.state == BrokerState::Running)
            .filter_map(|status| Some((status.name, status.pid?)))
            .collect();
        pids.sort();
        pids
    }

    /// The usage sampler of `name` if it runs without a process on this node (a pod), for
    /// the Metrics RPC. `None` if it has none, or while a start or stop holds it.
    pub fn usage_sampler(&self, name: &str) -> Option<Arc<dyn UsageSampler>> {
        let slot = self.existing(name)?;
        let instance = slot.instance.try_lock().ok()?;
        instance.as_ref()?.broker.usage_sampler()
    }

    /// Stops every instance, concurrently, for agent shutdown. Returns the failures.
    pub async fn stop_all(&self) -> Vec<(String, BrokerError)> {
        let names = self.names();
        let results =
            futures_util::future::join_all(names.iter().map(|name| self.stop_held(name))).await;
        let mut failed = Vec::new();
        for (name, result) in names.into_iter().zip(results) {
            match result {
                // Said so that a node's journal shows what a stop (a reboot) undid.
                Ok((_, true)) => tracing::info!(broker = %name, "broker stopped at shutdown"),
                Ok((_, false)) => {}
                Err(error) => failed.push((name, error)),
            }
        }
        failed
    }

    fn names(&self) -> Vec<String> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn existing(&self, name: &str) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn slot(&self, name: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(slots.entry(name.to_owned()).or_insert_with(|| {
            Arc::new(Slot {
                shown: Mutex::new(BrokerStatus {
                    name: name.to_owned(),
                    state: BrokerState::Stopped,
                    address: None,
                    websocket_address: None,
                    quic: None,
                    pid: None,
                    detail: String::new(),
                }),
                instance: tokio::sync::Mutex::new(None),
            })
        }))
    }
}

fn status_of(name: &str, state: BrokerState, broker: &dyn RunningBroker) -> BrokerStatus {
    let running = state == BrokerState::Running;
    BrokerStatus {
        name: name.to_owned(),
        state,
        address: Some(broker.address()),
        websocket_address: broker.websocket_address(),
        quic: broker.quic_endpoint(),
        pid: if running { broker.pid() } else { None },
        detail: broker.detail(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::ErrorCode;
    use crate::broker::readiness::{PROBE_TIMEOUT, probe};
    use crate::broker::test_support::{installed_or_skip, loopback_spec, tagged_processes};
    use domain::Product;
    use host::is_running;
    use host::poll::{Attempt, poll_until};
    use std::time::Duration;

    fn registry(state: &std::path::Path) -> Brokers {
        Brokers::new(BrokersConfig {
            state_dir: state.to_owned(),
            install: InstallPaths::default(),
            kubectl: Kubectl::default(),
        })
    }

    #[tokio::test]
    async fn start_is_idempotent_and_a_different_spec_is_refused() {
        let state = tempfile::tempdir().unwrap();
        let brokers = registry(state.path());
        let spec = loopback_spec("quick", BrokerKind::Embedded);

        let first = brokers.start(spec.clone()).await.unwrap();
        assert_eq!(first.state, BrokerState::Running);
        // In-process: no PID of its own (its threads are sampled instead).
        assert_eq!(first.pid, None);
        assert!(brokers.usage_sampler("quick").is_some());
        let again = brokers.start(spec.clone()).await.unwrap();
        assert_eq!(again.address, first.address, "no second broker was started");

        let mut other = spec.clone();
        other.options.max_inflight_messages = Some(7);
        let error = brokers.start(other).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::AlreadyExists, "{error}");
        assert!(brokers.watched_pids().is_empty());

        let stopped = brokers.stop("quick").await.unwrap();
        assert_eq!(stopped.state, BrokerState::Stopped);
        assert_eq!(stopped.address, first.address);
        let stopped_again = brokers.stop("quick").await.unwrap();
        assert_eq!(stopped_again.state, BrokerState::Stopped);
        assert_eq!(
            brokers.status("quick").await.unwrap().state,
            BrokerState::Stopped
        );
        assert!(brokers.watched_pids().is_empty());
        let address = first.address.unwrap();
        assert!(
            probe(address, PROBE_TIMEOUT).await.is_err(),
            "nothing answers on {address}"
        );
    }

    #[tokio::test]
    async fn concurrent_starts_of_one_spec_start_one_broker() {
        let state = tempfile::tempdir().unwrap();
        let brokers = registry(state.path());
        let spec = loopback_spec("twice", BrokerKind::Embedded);
        let (a, b) = tokio::join!(brokers.start(spec.clone()), brokers.start(spec));
        assert_eq!(a.unwrap().address, b.unwrap().address);
        assert!(brokers.stop_all().await.is_empty());
    }

    #[tokio::test]
    async fn unknown_names_and_bad_specs_are_clear_errors() {
        let state = tempfile::tempdir().unwrap();
        let brokers = registry(state.path());
        let error = brokers.status("nobody").await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::NotFound);
        assert_eq!(
            brokers.stop("nobody").await.unwrap().state,
            BrokerState::Stopped
        );

        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut taken = loopback_spec("taken", BrokerKind::Embedded);
        taken.port = holder.local_addr().unwrap().port();
        let error = brokers.start(taken).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument);
        assert!(error.to_string().starts_with("port: "), "{error}");

        let error = brokers
            .start(loopback_spec("bad name", BrokerKind::Embedded))
            .await
            .unwrap_err();
        assert!(error.to_string().starts_with("name: "), "{error}");
        assert_eq!(
            brokers.status("bad name").await.unwrap_err().code(),
            ErrorCode::NotFound
        );
    }

    #[tokio::test]
    async fn a_native_broker_is_idempotent_restarted_when_dead_and_stopped_by_stop_all() {
        let state = tempfile::tempdir().unwrap();
        let brokers = registry(state.path());
        if !installed_or_skip(brokers.install_paths(), Product::Mosquitto) {
            return;
        }
        let spec = loopback_spec(
            "native",
            BrokerKind::Native {
                product: Product::Mosquitto,
            },
        );
        let first = brokers.start(spec.clone()).await.unwrap();
        let pid = first.pid.unwrap();
        assert_eq!(brokers.start(spec.clone()).await.unwrap().pid, Some(pid));

        // The broker dies behind the agent's back: status says so, a start replaces it.
        host::kill(pid);
        let failed = poll_until(
            Duration::from_secs(10),
            Duration::from_millis(25),
            || async {
                match brokers.status("native").await.unwrap().state {
                    BrokerState::Failed(reason) => Attempt::Done(reason),
                    _ => Attempt::Retry(()),
                }
            },
        )
        .await
        .expect("death not noticed");
        assert!(failed.contains("mosquitto exited"), "{failed}");
        let second = brokers.start(spec).await.unwrap();
        assert_ne!(second.pid, Some(pid));

        assert!(brokers.stop_all().await.is_empty());
        assert!(!is_running(second.pid.unwrap()));
        assert_eq!(tagged_processes("native"), Vec::<u32>::new());
    }
}
