//! What the will clients of a workload did and what their watcher got
//! ([`crate::spec::Wills`]): each dropped client's will once, none of a clean one's.

use serde::{Deserialize, Serialize};

/// The will clients' outcome and the watcher's verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WillOutcome {
    /// Will clients that connected, their will set.
    pub connected: u32,
    /// Will clients that could not connect.
    pub failed: u32,
    /// Connections closed without DISCONNECT at the drop time: wills owed.
    pub dropped: u32,
    /// Dropped clients whose will arrived (its first copy).
    pub delivered: u32,
    /// Copies of a will that had already arrived.
    pub duplicates: u64,
    /// Wills of clients that disconnected cleanly, or naming no client of the run: the broker
    /// published what it should not have.
    pub unexpected: u64,
    /// Clients that disconnected cleanly (DISCONNECT written) at the end.
    pub disconnected: u32,
    /// False when the watcher could not subscribe: nothing was judged.
    pub watched: bool,
    /// Per delivered will, ns from its client's drop (the socket closed) to its arrival at
    /// the watcher, sorted; one clock, the instance's, for both.
    pub from_drop_ns: Vec<u64>,
    /// How late the drop was behind its scheduled time, ns (loadgen's own delay).
    pub drop_late_ns: u64,
    /// The MQTT 5 will delay asked for, ns (0 without one).
    pub delay_ns: u64,
    /// Retained wills cleared after the check (an empty retained message each).
    pub cleared: u64,
}

impl WillOutcome {
    /// Dropped clients whose will never arrived.
    pub fn missing(&self) -> u32 {
        self.dropped.saturating_sub(self.delivered)
    }

    /// The `q`-quantile (0 to 1) of the time from drop to will, ms; nearest rank.
    pub fn from_drop_ms(&self, q: f64) -> Option<f64> {
        let last = self.from_drop_ns.len().checked_sub(1)?;
        let rank = ((q.clamp(0.0, 1.0) * self.from_drop_ns.len() as f64).ceil() as usize)
            .saturating_sub(1)
            .min(last);
        Some(self.from_drop_ns[rank] as f64 / 1e6)
    }

    /// The earliest will after its drop, ms: with a will delay, none may come before it.
    pub fn earliest_ms(&self) -> Option<f64> {
        self.from_drop_ns.first().map(|ns| *ns as f64 / 1e6)
    }

    /// Wills that arrived before the will delay had passed since their drop.
    pub fn before_delay(&self) -> usize {
        self.from_drop_ns
            .iter()
            .take_while(|ns| **ns < self.delay_ns)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank_and_early_wills_are_counted() {
        let outcome = WillOutcome {
            dropped: 5,
            delivered: 4,
            from_drop_ns: vec![1_000_000, 2_000_000, 3_000_000, 4_000_000],
            delay_ns: 2_500_000,
            ..WillOutcome::default()
        };
        assert_eq!(outcome.missing(), 1);
        assert_eq!(outcome.from_drop_ms(0.5), Some(2.0));
        assert_eq!(outcome.from_drop_ms(0.99), Some(4.0));
        assert_eq!(outcome.from_drop_ms(0.0), Some(1.0));
        assert_eq!(outcome.earliest_ms(), Some(1.0));
        assert_eq!(outcome.before_delay(), 2);
        assert_eq!(WillOutcome::default().from_drop_ms(0.5), None);
    }
}
