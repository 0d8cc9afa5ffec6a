//! Reconnect storms: what clients do when their connection is lost mid-run (a broker
//! restart, a forced disconnect), as a fleet of devices does after an outage: every client
//! tries again at once, subscribers subscribe again, and publishers send their unacknowledged
//! QoS 1 messages again. The run measures how long the fleet takes to be whole again and
//! judges every message across the gap by the usual accounting.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a client does after its connection is lost, and optionally a storm loadgen makes
/// itself (every connection cut at one moment), for brokers whose restart a test cannot
/// control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reconnect {
    /// A client keeps trying this long after its connection was lost, then gives up
    /// (counted, and the client ends as it would without reconnecting).
    #[serde(with = "humantime_serde")]
    pub within: Duration,
    /// Between two attempts of one client.
    #[serde(with = "humantime_serde", default = "default_retry")]
    pub retry: Duration,
    /// Every connection of the run is closed at this time after the start barrier, without
    /// DISCONNECT (as a network outage or a broker's forced disconnect ends it), and
    /// reconnects at once: a storm against any broker.
    #[serde(
        default,
        with = "humantime_serde::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub cut_all_at: Option<Duration>,
}

fn default_retry() -> Duration {
    DEFAULT_RETRY
}

/// Between two attempts when the spec does not say.
pub const DEFAULT_RETRY: Duration = Duration::from_millis(100);
