//! Reconnecting lost connections ([`crate::spec::Reconnect`]): one [`Reconnector`] per run,
//! shared by its clients, tries again until the policy's deadline and keeps the storm's
//! figures: losses, reconnections, attempts and failures by kind, sessions the broker kept,
//! messages sent again, and each client's time away ([`ReconnectOutcome`], a result type of
//! `loadgen-model`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;
use crate::codec::Codec;
use crate::session::{self, KeptSession, Session, StampReads};
use crate::spec::{Qos, Reconnect, WorkloadSpec};
use crate::transport::{Dialer, ZeroRttCounts};

pub use loadgen_model::reconnect::ReconnectOutcome;

/// The run's reconnecting: its policy, where the broker is, and the figures so far.
pub(crate) struct Reconnector {
    policy: Reconnect,
    spec: Arc<WorkloadSpec>,
    dialer: Dialer,
    codec: Codec,
    clock: RunClock,
    /// The storm's moment on the run clock, when loadgen makes it.
    cut_at_ns: Option<u64>,
    outcome: Mutex<ReconnectOutcome>,
}

impl std::fmt::Debug for Reconnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnector")
            .field("policy", &self.policy)
            .field("cut_at_ns", &self.cut_at_ns)
            .finish()
    }
}

impl Reconnector {
    /// The reconnector of a run starting at `start_ns`, when its spec asks for one.
    pub(crate) fn of(
        spec: &Arc<WorkloadSpec>,
        dialer: &Dialer,
        codec: Codec,
        clock: RunClock,
        start_ns: u64,
    ) -> Option<Arc<Self>> {
        let policy = spec.connection.reconnect?;
        Some(Arc::new(Reconnector {
            policy,
            spec: spec.clone(),
            dialer: dialer.clone(),
            codec,
            clock,
            cut_at_ns: policy
                .cut_all_at
                .map(|at| start_ns.saturating_add(crate::clock::saturating_nanos(at))),
            outcome: Mutex::new(ReconnectOutcome::empty()),
        }))
    }

    /// When loadgen cuts every connection itself, as an instant; `None` when it does not.
    pub(crate) fn cut_at(&self) -> Option<tokio::time::Instant> {
        self.cut_at_ns
            .map(|at| tokio::time::Instant::from_std(self.clock.instant_at(at)))
    }

    /// The run clock now.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Opens `client_id`'s connection again after it was lost at `lost_ns`, and subscribes
    /// to `subscription` when the broker did not keep the session (a kept one holds the
    /// subscription, and its queued messages may come before any SUBACK). Tries every `retry` until `within` after the loss; `None` when
    /// it gave up or `stop` fired first.
    pub(crate) async fn reconnect(
        &self,
        client_id: &str,
        subscription: Option<(&str, Qos)>,
        lost_ns: u64,
        stop: &CancellationToken,
    ) -> Option<Session> {
        self.update(|o| {
            o.first_lost_ns = if o.lost == 0 {
                lost_ns
            } else {
                o.first_lost_ns.min(lost_ns)
            };
            o.lost += 1;
        });
        let deadline_ns =
            lost_ns.saturating_add(crate::clock::saturating_nanos(self.policy.within));
        let fields = crate::session::connect_fields(&self.spec, client_id);
        loop {
            let left = Duration::from_nanos(deadline_ns.saturating_sub(self.now_ns()));
            if left.is_zero() {
                self.update(|o| o.gave_up += 1);
                return None;
            }
            self.update(|o| o.attempts += 1);
            let attempt = session::open_with(
                &self.dialer,
                self.codec,
                &fields,
                subscription,
                KeptSession::HoldsTheSubscription,
                match subscription {
                    Some(_) => StampReads::Yes,
                    None => StampReads::No,
                },
                self.spec.connection.connect_timeout.min(left),
            );
            let opened = tokio::select! {
                opened = attempt => opened,
                () = stop.cancelled() => {
                    self.update(|o| o.interrupted += 1);
                    return None;
                }
            };
            match opened {
                Ok(session) => {
                    let back_ns = self.now_ns();
                    self.update(|o| {
                        o.reconnected += 1;
                        o.sessions_resumed += u64::from(session.session_present);
                        o.time_away
                            .saturating_record(back_ns.saturating_sub(lost_ns).max(1));
                        o.last_back_ns = o.last_back_ns.max(back_ns);
                    });
                    return Some(session);
                }
                Err(failure) => {
                    self.update(|o| {
                        *o.failures.entry(failure.kind().to_string()).or_insert(0) += 1
                    });
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.policy.retry) => {}
                () = stop.cancelled() => {
                    self.update(|o| o.interrupted += 1);
                    return None;
                }
            }
        }
    }

    /// Counts messages a publisher sent again.
    pub(crate) fn note_resent(&self, messages: u64) {
        self.update(|o| o.resent += messages);
    }

    /// The figures, once every client is done, with the dialer's 0-RTT counts.
    pub(crate) fn outcome(&self, zero_rtt: Option<ZeroRttCounts>) -> ReconnectOutcome {
        let mut outcome = self
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(counts) = zero_rtt {
            outcome.zero_rtt_attempted = counts.attempted;
            outcome.zero_rtt_accepted = counts.accepted;
            outcome.zero_rtt_rejected = counts.rejected;
        }
        outcome
    }

    fn update(&self, change: impl FnOnce(&mut ReconnectOutcome)) {
        change(&mut self.outcome.lock().unwrap_or_else(PoisonError::into_inner));
    }
}
