//! Clock offsets of agents, from 4-timestamp exchanges (as NTP does) over the agent's `Clock`
//! RPC. It lives beside the client, not in the controller, so whoever talks to agents (the
//! controller, the agent's own tests) measures offsets the same way.
//!
//! For one exchange, t1 is when the controller sent, t2 when the agent received, t3 when the
//! agent answered (agent clock) and t4 when the answer arrived (controller clock). The offset
//! (agent minus controller) is ((t2 - t1) + (t3 - t4)) / 2, and whatever the two one-way delays
//! were, the true offset lies within half the round trip (t4 - t1) - (t3 - t2) of it. The
//! exchange with the shortest round trip gives the tightest bound, so that one is kept.

use crate::agent::v1 as pb;
use crate::agent::v1::agent_client::AgentClient;
use tonic::transport::Channel;

/// One clock exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Controller sent (controller clock, Unix ns).
    pub t1: u64,
    /// Agent received (agent clock).
    pub t2: u64,
    /// Agent answered (agent clock).
    pub t3: u64,
    /// Answer arrived (controller clock).
    pub t4: u64,
}

impl ClockSample {
    /// Agent clock minus controller clock, ns.
    pub fn offset_ns(&self) -> i64 {
        let outbound = self.t2 as i128 - self.t1 as i128;
        let inbound = self.t3 as i128 - self.t4 as i128;
        ((outbound + inbound) / 2) as i64
    }

    /// Time on the wire both ways, the agent's processing excluded, ns.
    pub fn round_trip_ns(&self) -> u64 {
        let total = self.t4.saturating_sub(self.t1);
        total.saturating_sub(self.t3.saturating_sub(self.t2))
    }
}

/// An agent's clock offset and how far it may be off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// Agent clock minus controller clock, ns.
    pub offset_ns: i64,
    /// The true offset lies within `offset_ns ± error_bound_ns`.
    pub error_bound_ns: u64,
    /// Exchanges made.
    pub samples: u32,
}

impl ClockOffset {
    /// The estimate from the exchange with the shortest round trip; `None` without samples.
    pub fn estimate(samples: &[ClockSample]) -> Option<Self> {
        let best = samples.iter().min_by_key(|s| s.round_trip_ns())?;
        Some(ClockOffset {
            offset_ns: best.offset_ns(),
            error_bound_ns: best.round_trip_ns().div_ceil(2),
            samples: u32::try_from(samples.len()).unwrap_or(u32::MAX),
        })
    }

    /// A controller-clock instant on the agent's clock.
    pub fn to_agent_clock(&self, controller_unix_ns: u64) -> u64 {
        (controller_unix_ns as i128 + self.offset_ns as i128).max(0) as u64
    }
}

/// Makes `exchanges` Clock calls and estimates the agent's offset.
pub async fn measure(
    client: &mut AgentClient<Channel>,
    exchanges: u32,
) -> Result<ClockOffset, tonic::Status> {
    let mut samples = Vec::with_capacity(exchanges as usize);
    for _ in 0..exchanges.max(1) {
        let t1 = loadgen_model::clock::unix_now_ns();
        let reply = client
            .clock(pb::ClockRequest {
                client_send_unix_ns: t1,
            })
            .await?
            .into_inner();
        let t4 = loadgen_model::clock::unix_now_ns();
        if reply.client_send_unix_ns != t1 {
            return Err(tonic::Status::data_loss("the agent echoed another t1"));
        }
        samples.push(ClockSample {
            t1,
            t2: reply.agent_receive_unix_ns,
            t3: reply.agent_send_unix_ns,
            t4,
        });
    }
    ClockOffset::estimate(&samples).ok_or_else(|| tonic::Status::internal("no clock samples"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_delays_give_the_exact_offset() {
        // Agent 5 ms ahead; 1 ms each way; 0.2 ms processing.
        let sample = ClockSample {
            t1: 100_000_000,
            t2: 106_000_000,
            t3: 106_200_000,
            t4: 102_200_000,
        };
        assert_eq!(sample.offset_ns(), 5_000_000);
        assert_eq!(sample.round_trip_ns(), 2_000_000);
    }

    #[test]
    fn asymmetric_delays_stay_within_the_bound() {
        // True offset -3 ms; 0.1 ms out, 1.9 ms back.
        let true_offset: i64 = -3_000_000;
        let t1 = 500_000_000u64;
        let t2 = (t1 as i64 + 100_000 + true_offset) as u64;
        let t3 = t2 + 50_000;
        let t4 = (t3 as i64 - true_offset + 1_900_000) as u64;
        let estimate =
            ClockOffset::estimate(&[ClockSample { t1, t2, t3, t4 }]).expect("one sample");
        assert!(
            (estimate.offset_ns - true_offset).unsigned_abs() <= estimate.error_bound_ns,
            "{estimate:?}"
        );
        assert_eq!(estimate.error_bound_ns, 1_000_000);
    }

    #[test]
    fn the_shortest_round_trip_wins() {
        let slow = ClockSample {
            t1: 0,
            t2: 10,
            t3: 10,
            t4: 1_000_000,
        };
        let fast = ClockSample {
            t1: 0,
            t2: 10,
            t3: 10,
            t4: 100,
        };
        let estimate = ClockOffset::estimate(&[slow, fast]).expect("samples");
        assert_eq!(estimate.error_bound_ns, 50);
        assert_eq!(estimate.samples, 2);
        assert_eq!(ClockOffset::estimate(&[]), None);
    }
}
