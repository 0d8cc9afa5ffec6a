//! Reconnecting lost connections ([`crate::spec::Reconnect`]): one [`Reconnector`] per run,
//! shared by its clients, tries again until the policy's deadline and keeps the storm's
//! figures: losses, reconnections, attempts and failures by kind, sessions the broker kept,
//! messages sent again, and each client's time away.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;
use crate::codec::Codec;
use crate::result::new_histogram;
use crate::session::{self, KeptSession, Session};
use crate::spec::{Qos, Reconnect, WorkloadSpec};
use crate::transport::Dialer;

/// What a run's clients went through when their connections were lost; times on the run
/// clock.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconnectOutcome {
    /// Connections lost mid-run (closed by the broker, failed, or cut by the storm).
    pub lost: u64,
    /// Lost connections that were open again (CONNACK, and SUBACK for subscribers).
    pub reconnected: u64,
    /// Lost connections that were not back within the policy's `within`.
    pub gave_up: u64,
    /// Lost connections still trying when the run ended.
    pub interrupted: u64,
    /// CONNECTs tried, failed ones included.
    pub attempts: u64,
    /// Failed attempts by kind (`connect_io`, `connect_timeout`, `connect_refused`, ...).
    pub failures: BTreeMap<String, u64>,
    /// Reconnections whose CONNACK said the broker had kept the session.
    pub sessions_resumed: u64,
    /// QoS 1 messages sent again (DUP) after a reconnect: sent but not acknowledged when
    /// the connection was lost.
    pub resent: u64,
    /// Per reconnection, from the loss to the connection being open again, ns.
    #[serde(with = "crate::histogram_v2")]
    pub time_away: Histogram<u64>,
    /// The first loss (0 when none).
    pub first_lost_ns: u64,
    /// The last reconnection (0 when none).
    pub last_back_ns: u64,
}

impl std::fmt::Debug for ReconnectOutcome {
    // The histogram's own Debug lists every bucket: its count and extremes say enough.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconnectOutcome")
            .field("lost", &self.lost)
            .field("reconnected", &self.reconnected)
            .field("gave_up", &self.gave_up)
            .field("interrupted", &self.interrupted)
            .field("attempts", &self.attempts)
            .field("failures", &self.failures)
            .field("sessions_resumed", &self.sessions_resumed)
            .field("resent", &self.resent)
            .field(
                "time_away_ns",
                &(
                    self.time_away.len(),
                    self.time_away.min(),
                    self.time_away.max(),
                ),
            )
            .field("first_lost_ns", &self.first_lost_ns)
            .field("last_back_ns", &self.last_back_ns)
            .finish()
    }
}

impl ReconnectOutcome {
    /// Nothing lost yet.
    pub fn empty() -> Self {
        ReconnectOutcome {
            lost: 0,
            reconnected: 0,
            gave_up: 0,
            interrupted: 0,
            attempts: 0,
            failures: BTreeMap::new(),
            sessions_resumed: 0,
            resent: 0,
            time_away: new_histogram(),
            first_lost_ns: 0,
            last_back_ns: 0,
        }
    }

    /// From the first loss to the last reconnection, when every lost connection came back;
    /// `None` when nothing was lost or some did not come back.
    pub fn full_reconnection_ns(&self) -> Option<u64> {
        (self.lost > 0 && self.reconnected == self.lost)
            .then(|| self.last_back_ns.saturating_sub(self.first_lost_ns))
    }

    /// Adds another instance's clients (their run clocks share one origin).
    pub(crate) fn merge(&mut self, other: &ReconnectOutcome) -> Result<(), String> {
        if other.lost > 0 {
            self.first_lost_ns = if self.lost == 0 {
                other.first_lost_ns
            } else {
                self.first_lost_ns.min(other.first_lost_ns)
            };
        }
        self.last_back_ns = self.last_back_ns.max(other.last_back_ns);
        self.lost += other.lost;
        self.reconnected += other.reconnected;
        self.gave_up += other.gave_up;
        self.interrupted += other.interrupted;
        self.attempts += other.attempts;
        for (kind, count) in &other.failures {
            *self.failures.entry(kind.clone()).or_insert(0) += count;
        }
        self.sessions_resumed += other.sessions_resumed;
        self.resent += other.resent;
        self.time_away
            .add(&other.time_away)
            .map_err(|e| format!("reconnect histogram: {e:?}"))
    }
}

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
        let fields = crate::engine::connect_fields(&self.spec, client_id);
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

    /// The figures, once every client is done.
    pub(crate) fn outcome(&self) -> ReconnectOutcome {
        self.outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn update(&self, change: impl FnOnce(&mut ReconnectOutcome)) {
        change(&mut self.outcome.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storm(
        lost: u64,
        reconnected: u64,
        first_lost_ns: u64,
        last_back_ns: u64,
    ) -> ReconnectOutcome {
        let mut outcome = ReconnectOutcome::empty();
        outcome.lost = lost;
        outcome.reconnected = reconnected;
        outcome.attempts = lost + 1;
        outcome.first_lost_ns = first_lost_ns;
        outcome.last_back_ns = last_back_ns;
        for _ in 0..reconnected {
            outcome
                .time_away
                .record(last_back_ns - first_lost_ns)
                .expect("in range");
        }
        outcome
    }

    #[test]
    fn instances_merge_into_one_storm_from_the_first_loss_to_the_last_return() {
        let mut merged = storm(4, 4, 2_000, 9_000);
        merged.merge(&storm(2, 2, 1_000, 5_000)).expect("merges");
        assert_eq!(
            (merged.lost, merged.reconnected, merged.attempts),
            (6, 6, 8)
        );
        assert_eq!(merged.time_away.len(), 6);
        assert_eq!(merged.full_reconnection_ns(), Some(8_000));
        // An instance that lost nothing does not move the first loss to 0.
        merged.merge(&ReconnectOutcome::empty()).expect("merges");
        assert_eq!(merged.full_reconnection_ns(), Some(8_000));
    }

    #[test]
    fn the_fleet_is_whole_again_only_when_every_lost_connection_came_back() {
        assert_eq!(storm(3, 2, 1_000, 4_000).full_reconnection_ns(), None);
        assert_eq!(ReconnectOutcome::empty().full_reconnection_ns(), None);
    }
}
