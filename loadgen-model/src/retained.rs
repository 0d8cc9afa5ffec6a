//! What the late subscribers of a retaining workload found ([`crate::spec::Retain`]), and
//! whether the run left anything retained behind.

use serde::{Deserialize, Serialize};

/// The late subscribers' verdicts, summed over them, and the clean-up's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetainedOutcome {
    /// Late subscribers that connected and subscribed.
    pub late_subscribers: u32,
    /// Late subscribers that could not connect or subscribe.
    pub failed: u32,
    /// Topics each late subscriber's filter matches: retained messages it is owed.
    pub expected_each: u64,
    /// Retained messages that carried their topic's last value.
    pub current: u64,
    /// Retained messages that carried an older value of their topic.
    pub stale: u64,
    /// Topics a late subscriber got no retained message for.
    pub missing: u64,
    /// Retained messages beyond one per owed topic (a second copy, or a topic not owed).
    pub extra: u64,
    /// Per late subscriber that got a message for every owed topic, ns from starting to
    /// connect to the last of them.
    pub all_received_ns: Vec<u64>,
    /// Topics cleared after the check (an empty retained message each).
    pub cleared: u64,
    /// Retained messages a fresh subscriber to the late subscribers' filter still got after
    /// the clean-up; `None` when the clean-up could not run, or when that filter carried no
    /// retained message to the late subscribers (a check through it would prove nothing).
    pub left_after_clear: Option<u64>,
}

impl RetainedOutcome {
    /// The slowest late subscriber's time to its last retained message, ms, when each got
    /// all of them.
    pub fn slowest_all_received_ms(&self) -> Option<f64> {
        (self.all_received_ns.len() == self.late_subscribers as usize && self.late_subscribers > 0)
            .then(|| self.all_received_ns.iter().max().copied().unwrap_or(0) as f64 / 1e6)
    }

    /// The median late subscriber's time to its last retained message, ms.
    pub fn median_all_received_ms(&self) -> Option<f64> {
        let mut times = self.all_received_ns.clone();
        times.sort_unstable();
        times.get(times.len() / 2).map(|ns| *ns as f64 / 1e6)
    }
}
