//! What a run's clients went through when their connections were lost: the figures of a
//! reconnect storm ([`crate::spec::Reconnect`]), kept by loadgen's reconnector and merged
//! with the rest of a [`crate::result::RunResult`].

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::result::new_histogram;

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
    /// Failed attempts by kind (`connect_io`, `connect_timeout`, a refusal by its reason code
    /// such as `connack_refused_server_busy`, ...).
    pub failures: BTreeMap<String, u64>,
    /// Reconnections whose CONNACK said the broker had kept the session.
    pub sessions_resumed: u64,
    /// Connections opened again over QUIC with 0-RTT data (`broker.quic_zero_rtt`): the
    /// client held a ticket from its previous connection.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zero_rtt_attempted: u64,
    /// Of those, the ones whose 0-RTT data the broker accepted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zero_rtt_accepted: u64,
    /// Of those, the ones whose 0-RTT data the broker rejected once the handshake was done
    /// (the client then sent CONNECT again on a full handshake). Tried but neither accepted
    /// nor rejected: no verdict within the attempt (the handshake failed or ran out of time).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zero_rtt_rejected: u64,
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
            .field("zero_rtt_attempted", &self.zero_rtt_attempted)
            .field("zero_rtt_accepted", &self.zero_rtt_accepted)
            .field("zero_rtt_rejected", &self.zero_rtt_rejected)
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

fn is_zero(count: &u64) -> bool {
    *count == 0
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
            zero_rtt_attempted: 0,
            zero_rtt_accepted: 0,
            zero_rtt_rejected: 0,
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
        self.zero_rtt_attempted += other.zero_rtt_attempted;
        self.zero_rtt_accepted += other.zero_rtt_accepted;
        self.zero_rtt_rejected += other.zero_rtt_rejected;
        self.resent += other.resent;
        self.time_away
            .add(&other.time_away)
            .map_err(|e| format!("reconnect histogram: {e:?}"))
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
