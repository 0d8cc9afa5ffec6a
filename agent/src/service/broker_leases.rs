//! Brokers held under a lease: started with one, a broker is stopped by the agent unless the
//! controller renews it in time, so a controller that died (SIGKILL, a lost laptop) leaves no
//! broker running on the node beyond the lease. Brokers started without a lease (by hand,
//! by older controllers) run until they are stopped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::broker::Brokers;

/// Longest lease a controller may ask for.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(600);

/// The leases of this agent's brokers, by name.
#[derive(Debug, Default)]
pub(crate) struct BrokerLeases {
    held: Mutex<HashMap<String, Held>>,
}

#[derive(Debug)]
struct Held {
    ttl: Duration,
    deadline: Arc<Mutex<Instant>>,
    /// Stops the broker once the deadline passed without a renewal.
    expiry: JoinHandle<()>,
}

impl BrokerLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds broker `name` for `ttl` from now (replacing any lease it had).
    pub(crate) fn hold(self: &Arc<Self>, brokers: &Arc<Brokers>, name: &str, ttl: Duration) {
        let deadline = Arc::new(Mutex::new(Instant::now() + ttl));
        let expiry = tokio::spawn({
            let (leases, brokers) = (Arc::clone(self), Arc::clone(brokers));
            let (name, deadline) = (name.to_string(), Arc::clone(&deadline));
            async move {
                loop {
                    let due = *deadline.lock().unwrap_or_else(PoisonError::into_inner);
                    tokio::time::sleep_until(due).await;
                    if Instant::now() >= *deadline.lock().unwrap_or_else(PoisonError::into_inner) {
                        break;
                    }
                }
                tracing::warn!(broker = %name, ?ttl, "the broker's lease ran out: stopping it");
                leases.lock().remove(&name);
                if let Err(error) = brokers.stop(&name).await {
                    tracing::error!(broker = %name, %error, "stopping a broker whose lease ran out");
                }
            }
        });
        let held = Held {
            ttl,
            deadline,
            expiry,
        };
        if let Some(previous) = self.lock().insert(name.to_string(), held) {
            previous.expiry.abort();
        }
    }

    /// Extends `name`'s lease by its length from now; false when it holds none (never had
    /// one, or it ran out and the broker was stopped).
    pub(crate) fn renew(&self, name: &str) -> bool {
        match self.lock().get(name) {
            Some(held) if !held.expiry.is_finished() => {
                *held.deadline.lock().unwrap_or_else(PoisonError::into_inner) =
                    Instant::now() + held.ttl;
                true
            }
            _ => false,
        }
    }

    /// The time left on each lease held, by broker name.
    pub(crate) fn remaining(&self) -> Vec<(String, Duration)> {
        let now = Instant::now();
        let mut left: Vec<_> = self
            .lock()
            .iter()
            .filter(|(_, held)| !held.expiry.is_finished())
            .map(|(name, held)| {
                let deadline = *held.deadline.lock().unwrap_or_else(PoisonError::into_inner);
                (name.clone(), deadline.saturating_duration_since(now))
            })
            .collect();
        left.sort();
        left
    }

    /// Drops `name`'s lease (it is being stopped anyway).
    pub(crate) fn release(&self, name: &str) {
        if let Some(held) = self.lock().remove(name) {
            held.expiry.abort();
        }
    }
}
