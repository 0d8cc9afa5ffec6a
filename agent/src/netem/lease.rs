//! A lease on applied netem: if its holder stops renewing it (a controller that died, a
//! network partition), a background task clears the qdisc by itself, so no node stays
//! impaired after a run ends badly. Releasing and dropping the lease clear it too.
//!
//! The clear action is injected, so the timing logic is tested without a kernel. A failed
//! clear is retried a few times: a transient netlink error must not leave a link impaired.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tracing::{info, warn};

use super::error::NetemError;

/// How often the clear action is tried before the lease gives up.
pub const CLEAR_ATTEMPTS: u32 = 3;
/// Pause between two attempts.
const CLEAR_RETRY_DELAY: Duration = Duration::from_millis(200);

/// How a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Not renewed within its time to live; the qdisc was cleared by the lease's task.
    Expired,
    /// Released by its holder, which cleared the qdisc.
    Released,
    /// Dropped by its holder; the lease's task cleared the qdisc.
    Dropped,
}

/// Why a lease operation failed.
#[derive(Debug, Error)]
pub enum LeaseError {
    /// The lease had already ended (with `Expired`, its qdisc is cleared or being cleared).
    #[error("the lease has already ended ({0:?})")]
    Ended(LeaseEnd),
    /// Releasing ran the clear action, and it failed every attempt: the qdisc may still be
    /// in place.
    #[error("clearing netem on release failed: {0}")]
    Clear(#[source] NetemError),
    /// The lease's task stopped before clearing (its runtime is shutting down).
    #[error("the lease's task stopped before clearing")]
    TaskGone,
}

/// Keeps applied netem in place only while renewed within `ttl`.
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    ttl: Duration,
}

#[derive(Debug)]
struct Shared {
    phase: Mutex<Phase>,
    wake: Notify,
}

#[derive(Debug)]
enum Phase {
    Active {
        deadline: Instant,
    },
    /// Decided to end; the task is clearing. `reply` receives the result on release.
    Ending {
        why: LeaseEnd,
        reply: Option<oneshot::Sender<Result<(), NetemError>>>,
    },
    Ended(LeaseEnd),
}

impl Shared {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        // No code panics while holding the lock; if one did, the phase is still consistent.
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Lease {
    /// Starts a lease of `ttl` whose end runs `clear` on a task of its own, until it succeeds
    /// or [`CLEAR_ATTEMPTS`] attempts failed.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start<F, Fut>(ttl: Duration, clear: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), NetemError>> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            phase: Mutex::new(Phase::Active {
                deadline: Instant::now() + ttl,
            }),
            wake: Notify::new(),
        });
        tokio::spawn(watch(Arc::clone(&shared), clear));
        Self { shared, ttl }
    }

    /// Extends the lease to `ttl` from now. Fails once the lease has ended: the caller must
    /// then apply again rather than believe the netem is still there.
    pub fn renew(&self) -> Result<(), LeaseError> {
        match &mut *self.shared.phase() {
            Phase::Active { deadline } => {
                *deadline = Instant::now() + self.ttl;
                Ok(())
            }
            Phase::Ending { why, .. } | Phase::Ended(why) => Err(LeaseError::Ended(*why)),
        }
    }

    /// Ends the lease now and clears the qdisc, reporting whether clearing succeeded.
    pub async fn release(self) -> Result<(), LeaseError> {
        let (reply, result) = oneshot::channel();
        {
            let mut phase = self.shared.phase();
            match &*phase {
                Phase::Active { .. } => {
                    *phase = Phase::Ending {
                        why: LeaseEnd::Released,
                        reply: Some(reply),
                    };
                }
                Phase::Ending { why, .. } | Phase::Ended(why) => {
                    return Err(LeaseError::Ended(*why));
                }
            }
        }
        self.shared.wake.notify_one();
        match result.await {
            Ok(cleared) => cleared.map_err(LeaseError::Clear),
            Err(_) => Err(LeaseError::TaskGone),
        }
    }

    /// Whether the lease is still in force (not expired, released or dropped).
    pub fn is_active(&self) -> bool {
        matches!(*self.shared.phase(), Phase::Active { .. })
    }

    /// The time to live each renewal grants.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut phase = self.shared.phase();
        if let Phase::Active { .. } = *phase {
            *phase = Phase::Ending {
                why: LeaseEnd::Dropped,
                reply: None,
            };
            drop(phase);
            self.shared.wake.notify_one();
        }
    }
}

/// The lease's task: waits for the deadline (which renewals move) or an explicit end, then
/// clears.
async fn watch<F, Fut>(shared: Arc<Shared>, mut clear: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), NetemError>>,
{
    let why = loop {
        // Created before reading the phase, so a wake-up in between is not lost.
        let woken = shared.wake.notified();
        let deadline = match &*shared.phase() {
            Phase::Active { deadline } => *deadline,
            Phase::Ending { why, .. } => break *why,
            Phase::Ended(_) => return,
        };
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {
                let mut phase = shared.phase();
                // Renewed meanwhile: the loop sleeps again until the new deadline.
                if let Phase::Active { deadline } = *phase
                    && Instant::now() >= deadline
                {
                    *phase = Phase::Ending { why: LeaseEnd::Expired, reply: None };
                }
            }
            () = woken => {}
        }
    };
    let mut result = clear().await;
    for attempt in 2..=CLEAR_ATTEMPTS {
        let Err(error) = &result else { break };
        warn!(?why, %error, attempt, "clearing netem failed; retrying");
        tokio::time::sleep(CLEAR_RETRY_DELAY).await;
        result = clear().await;
    }
    let reply = match std::mem::replace(&mut *shared.phase(), Phase::Ended(why)) {
        Phase::Ending { reply, .. } => reply,
        _ => None,
    };
    match (reply, result) {
        (Some(reply), result) => {
            // The releaser may have given up waiting; nothing else wants the result.
            let _ = reply.send(result);
        }
        (None, Ok(())) => info!(?why, "netem lease ended; cleared"),
        (None, Err(error)) => warn!(?why, %error, "netem lease ended but clearing failed"),
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    /// A lease whose clear action reports the (paused) time it ran.
    fn leased(ok: bool) -> (Lease, mpsc::UnboundedReceiver<Instant>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let lease = Lease::start(TTL, move || {
            let _ = tx.send(Instant::now());
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(NetemError::UnknownInterface { iface: "x".into() })
                }
            }
        });
        (lease, rx)
    }

    #[tokio::test(start_paused = true)]
    async fn clears_once_when_not_renewed() {
        let start = Instant::now();
        let (lease, mut cleared) = leased(true);
        tokio::time::sleep(TTL - Duration::from_millis(1)).await;
        assert!(lease.is_active());
        assert!(cleared.try_recv().is_err(), "cleared before the deadline");
        let at = cleared.recv().await.expect("cleared");
        assert_eq!(at - start, TTL);
        assert!(!lease.is_active());
        assert!(matches!(
            lease.renew(),
            Err(LeaseError::Ended(LeaseEnd::Expired))
        ));
        // Dropping an expired lease does not clear a second time.
        drop(lease);
        assert!(cleared.recv().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn each_renewal_grants_a_full_ttl() {
        let start = Instant::now();
        let (lease, mut cleared) = leased(true);
        for _ in 0..3 {
            tokio::time::sleep(TTL * 8 / 10).await;
            lease.renew().expect("still active");
        }
        let at = cleared.recv().await.expect("cleared");
        assert_eq!(at - start, TTL * 24 / 10 + TTL);
        assert!(matches!(
            lease.release().await,
            Err(LeaseError::Ended(LeaseEnd::Expired))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn release_clears_at_once_and_reports_the_result() {
        let start = Instant::now();
        let (lease, mut cleared) = leased(true);
        tokio::time::sleep(Duration::from_secs(1)).await;
        lease.release().await.expect("released");
        assert_eq!(
            cleared.recv().await.expect("cleared") - start,
            Duration::from_secs(1)
        );
        assert!(cleared.recv().await.is_none(), "cleared twice");

        let (failing, mut tried) = leased(false);
        assert!(matches!(
            failing.release().await,
            Err(LeaseError::Clear(NetemError::UnknownInterface { .. }))
        ));
        let mut attempts = 0;
        while tried.recv().await.is_some() {
            attempts += 1;
        }
        assert_eq!(attempts, CLEAR_ATTEMPTS);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_clears_at_once() {
        let start = Instant::now();
        let (lease, mut cleared) = leased(true);
        drop(lease);
        assert_eq!(cleared.recv().await.expect("cleared"), start);
        assert!(cleared.recv().await.is_none(), "cleared twice");
    }
}
