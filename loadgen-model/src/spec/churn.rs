//! Churn: a fleet of clients beside the workload that connect, stay for a while and
//! disconnect, at a set connection rate, as devices in the field do all day (emqtt-bench's
//! `conn` users ask for the same). It measures what a broker does with arrivals: how long
//! CONNECT takes, what it refuses and what fails, while the workload's messages show what
//! the churn costs them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most new connections per second one instance makes.
pub const MAX_CHURN_RATE: f64 = 100_000.0;
/// Most churn connections in one run.
pub const MAX_CHURN_CONNECTIONS: u64 = 10_000_000;

/// Clients that connect at `rate` per second, `connections` in all, each staying `hold`
/// and then disconnecting cleanly. Arrivals follow a fixed schedule from the start of
/// the measured run (open loop: a broker that is slow to accept does not slow them), each
/// with a client id of its own and the workload's connection options (clean session,
/// keep-alive, credentials, MQTT version, transport).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Churn {
    /// New connections per second.
    pub rate: f64,
    /// Connections made in all.
    pub connections: u64,
    /// How long each stays connected before its DISCONNECT.
    #[serde(with = "humantime_serde")]
    pub hold: Duration,
}

impl Churn {
    /// When arrival `n` (from 0) is due, after the churn's start; saturates (instead of
    /// panicking) for a rate so small that the time does not fit a `Duration`, which
    /// validation then refuses by its span.
    pub fn arrival(&self, n: u64) -> Duration {
        Duration::try_from_secs_f64(n as f64 / self.rate).unwrap_or(Duration::MAX)
    }

    /// How many churn connections can be open at once: arrivals within one hold (plus
    /// one), and at most all of them; what the open-file limit must allow for.
    pub fn most_open_at_once(&self) -> u64 {
        let within_hold = ((self.rate * self.hold.as_secs_f64()).ceil() as u64).saturating_add(1);
        within_hold.min(self.connections)
    }

    /// Time from the first arrival to the last one's DISCONNECT.
    pub fn span(&self) -> Duration {
        self.arrival(self.connections.saturating_sub(1))
            .saturating_add(self.hold)
    }
}
