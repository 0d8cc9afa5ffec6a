//! The Open MQTT Benchmark Suite's scenarios (emqx/mqttbs), scaled to the nodes at hand.
//!
//! The suite runs four scenarios at QoS 1 with 16 B payloads, MQTT 3.1.1 (fan-in through a
//! shared subscription: MQTT 5), keep-alive 300 s and clean sessions: point to point (50,000
//! publishers -> 50,000 subscribers, one topic each, 1 msg/s per publisher), fan-out (5
//! publishers at 50 msg/s each -> 1,000 subscribers of all 5 topics), fan-in (50,000
//! publishers on `test/1..50000` at 1 msg/s -> 500 subscribers of `$share/benchmark/test/#`)
//! and connections (1,000,000 clients connecting at 5,000/s and staying). A `scale` sets the
//! client counts as a fraction of the suite's (at least one each); the rates per client and
//! the connection rate stay the suite's, so a scaled run offers the same load per client.
//!
//! Where Continuum differs, it says so: fan-out subscribers read the 5 topics through one
//! `+` filter (a tree subscriber takes one filter), the measured window is 60 s after a 10 s
//! warm-up unless the plan says otherwise (the suite holds 30 minutes), and the connections
//! scenario keeps one publisher -> subscriber pair at 1 msg/s beside the arriving clients, so
//! what the connections cost messages is measured too.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::presets::latency;
use crate::size::ByteSize;
use crate::spec::{Churn, MqttVersion, Pacing, Qos, TopicTree, Topology, WorkloadSpec};

/// The suite's payload.
pub const SUITE_PAYLOAD: ByteSize = ByteSize(16);
/// The suite's keep-alive.
pub const SUITE_KEEP_ALIVE: Duration = Duration::from_secs(300);
/// The measured window unless the plan sets `duration` (the suite's is 30 minutes).
pub const SUITE_DURATION: Duration = Duration::from_secs(60);
/// The warm-up unless the plan sets `warmup`.
pub const SUITE_WARMUP: Duration = Duration::from_secs(10);
/// Point to point at full scale: publishers, and as many subscribers.
pub const P2P_PAIRS: u32 = 50_000;
/// Fan-out: publishers (not scaled: "a few publishers").
pub const FAN_OUT_PUBLISHERS: u32 = 5;
/// Fan-out at full scale: subscribers, each reading every publisher's topic.
pub const FAN_OUT_SUBSCRIBERS: u32 = 1_000;
/// Fan-out: each publisher's interval (50 msg/s).
pub const FAN_OUT_INTERVAL: Duration = Duration::from_millis(20);
/// Fan-in at full scale: publishers, one topic each.
pub const FAN_IN_PUBLISHERS: u32 = 50_000;
/// Fan-in at full scale: members of the one shared group.
pub const FAN_IN_SUBSCRIBERS: u32 = 500;
/// Fan-in: the shared subscription, as the suite writes it (below the run's prefix here).
pub const FAN_IN_FILTER: &str = "$share/benchmark/test/#";
/// Connections at full scale.
pub const CONNECTIONS: u64 = 1_000_000;
/// New connections per second (not scaled: the broker's arrival rate is the question).
pub const CONNECTION_RATE: f64 = 5_000.0;
/// The interval of point to point, fan-in and the connections scenario's pair (1 msg/s).
pub const ONE_PER_SECOND: Duration = Duration::from_secs(1);

/// One of the suite's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SuiteScenario {
    /// Point to point: N publishers -> N subscribers, a topic per pair, 1 msg/s each.
    PointToPoint,
    /// Fan-out: 5 publishers at 50 msg/s -> N subscribers of all 5 topics.
    FanOut,
    /// Fan-in: N publishers at 1 msg/s, each on its own topic, -> M members of one shared
    /// subscription (MQTT 5).
    FanInShared,
    /// Connections: N clients arriving at 5,000/s and staying through the measured window.
    Connections,
}

/// The client counts of a scenario at a scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteCounts {
    /// Publishers.
    pub publishers: u32,
    /// Subscribers.
    pub subscribers: u32,
    /// Arriving connections (the connections scenario), 0 otherwise.
    pub connections: u64,
}

/// `full` scaled by `scale`, rounded, at least 1.
fn scaled(full: u64, scale: f64) -> u64 {
    ((full as f64 * scale).round() as u64).max(1)
}

/// [`scaled`] for a client count (the suite's counts fit a `u32` at every scale up to 1).
fn scaled_clients(full: u32, scale: f64) -> u32 {
    u32::try_from(scaled(u64::from(full), scale)).unwrap_or(u32::MAX)
}

impl SuiteScenario {
    /// The client counts at `scale` (a fraction of the suite's, checked by the plan).
    pub fn counts(self, scale: f64) -> SuiteCounts {
        let (publishers, subscribers, connections) = match self {
            SuiteScenario::PointToPoint => {
                let pairs = scaled_clients(P2P_PAIRS, scale);
                (pairs, pairs, 0)
            }
            SuiteScenario::FanOut => (
                FAN_OUT_PUBLISHERS,
                scaled_clients(FAN_OUT_SUBSCRIBERS, scale),
                0,
            ),
            SuiteScenario::FanInShared => (
                scaled_clients(FAN_IN_PUBLISHERS, scale),
                scaled_clients(FAN_IN_SUBSCRIBERS, scale),
                0,
            ),
            SuiteScenario::Connections => (1, 1, scaled(CONNECTIONS, scale)),
        };
        SuiteCounts {
            publishers,
            subscribers,
            connections,
        }
    }

    /// The scenario's workload with `counts` clients, before a plan's overrides; the
    /// connections scenario is finished by [`SuiteScenario::settle`] once the plan's
    /// warm-up and duration are known.
    pub fn workload(self, counts: SuiteCounts) -> WorkloadSpec {
        let mut spec = WorkloadSpec {
            publishers: counts.publishers,
            subscribers: counts.subscribers,
            qos: Qos::AtLeastOnce,
            payload: SUITE_PAYLOAD,
            header_in: Default::default(),
            messages_per_publisher: 0,
            warmup_messages: 0,
            duration: Some(SUITE_DURATION),
            warmup: Some(SUITE_WARMUP),
            pacing: Pacing::OpenLoop {
                interval: ONE_PER_SECOND,
            },
            ..latency()
        };
        spec.connection.keep_alive = SUITE_KEEP_ALIVE;
        match self {
            SuiteScenario::PointToPoint => spec.topology = Topology::Pairs,
            SuiteScenario::FanOut => {
                spec.topology = Topology::Tree;
                spec.topics = Some(one_level_tree("fan-out/{publisher}", "fan-out/+", &counts));
                spec.pacing = Pacing::OpenLoop {
                    interval: FAN_OUT_INTERVAL,
                };
            }
            SuiteScenario::FanInShared => {
                spec.broker.protocol = MqttVersion::V5;
                spec.topology = Topology::Tree;
                spec.topics = Some(one_level_tree("test/{publisher}", FAN_IN_FILTER, &counts));
            }
            SuiteScenario::Connections => {
                spec.topology = Topology::Pairs;
                spec.churn = Some(Churn {
                    rate: CONNECTION_RATE,
                    connections: counts.connections,
                    hold: Duration::ZERO,
                });
            }
        }
        spec
    }

    /// Finishes the connections scenario once the plan's fields are laid over it: its
    /// warm-up becomes the ramp (the last arrival) plus the plan's warm-up, and each client
    /// holds for that warm-up and the measured window, so every connection is open
    /// throughout the window. Other scenarios are left as they are.
    pub fn settle(self, spec: &mut WorkloadSpec) {
        if self != SuiteScenario::Connections {
            return;
        }
        let Some(churn) = spec.churn.as_mut() else {
            return;
        };
        let ramp = churn.arrival(churn.connections.saturating_sub(1));
        let warmup = ramp.saturating_add(spec.warmup.unwrap_or_default());
        churn.hold = warmup.saturating_add(spec.duration.unwrap_or_default());
        spec.warmup = Some(warmup);
    }
}

/// A tree of one counted level, a topic per publisher, read through `filter`.
fn one_level_tree(pattern: &str, filter: &str, counts: &SuiteCounts) -> TopicTree {
    TopicTree {
        pattern: pattern.to_string(),
        counts: BTreeMap::from([("publisher".to_string(), counts.publishers)]),
        subscribe: vec![filter.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [SuiteScenario; 4] = [
        SuiteScenario::PointToPoint,
        SuiteScenario::FanOut,
        SuiteScenario::FanInShared,
        SuiteScenario::Connections,
    ];

    #[test]
    fn scale_one_is_the_suite_and_a_hundredth_is_five_hundred_pairs() {
        let full = SuiteScenario::PointToPoint.counts(1.0);
        assert_eq!((full.publishers, full.subscribers), (50_000, 50_000));
        let small = SuiteScenario::PointToPoint.counts(0.01);
        assert_eq!((small.publishers, small.subscribers), (500, 500));
        let fan_in = SuiteScenario::FanInShared.counts(0.01);
        assert_eq!((fan_in.publishers, fan_in.subscribers), (500, 5));
        let fan_out = SuiteScenario::FanOut.counts(0.01);
        assert_eq!((fan_out.publishers, fan_out.subscribers), (5, 10));
        assert_eq!(SuiteScenario::Connections.counts(0.01).connections, 10_000);
        // Never scaled to nobody.
        let tiny = SuiteScenario::FanInShared.counts(1e-6);
        assert_eq!((tiny.publishers, tiny.subscribers), (1, 1));
    }

    #[test]
    fn every_scenario_is_valid_at_small_scales_and_offers_the_suites_rates() {
        for scenario in ALL {
            for scale in [0.001, 0.01] {
                let mut spec = scenario.workload(scenario.counts(scale));
                scenario.settle(&mut spec);
                spec.validate()
                    .unwrap_or_else(|e| panic!("{scenario:?} at {scale}: {e}"));
                assert_eq!((spec.qos, spec.payload), (Qos::AtLeastOnce, SUITE_PAYLOAD));
                assert_eq!(spec.connection.keep_alive, SUITE_KEEP_ALIVE);
            }
        }
        let fan_out = SuiteScenario::FanOut.workload(SuiteScenario::FanOut.counts(0.01));
        assert_eq!(
            fan_out.pacing,
            Pacing::OpenLoop {
                interval: Duration::from_millis(20)
            },
            "50 msg/s per publisher"
        );
        let fan_in = SuiteScenario::FanInShared.workload(SuiteScenario::FanInShared.counts(0.01));
        assert_eq!(fan_in.broker.protocol, MqttVersion::V5);
        let tree = fan_in.topics.expect("a tree");
        assert_eq!(tree.subscribe, vec!["$share/benchmark/test/#".to_string()]);
        assert_eq!(tree.counts["publisher"], 500, "a topic per publisher");
    }

    #[test]
    fn every_connection_stays_open_through_the_measured_window() {
        let scenario = SuiteScenario::Connections;
        let mut spec = scenario.workload(scenario.counts(0.001));
        spec.warmup = Some(Duration::from_secs(2));
        spec.duration = Some(Duration::from_secs(5));
        scenario.settle(&mut spec);
        let churn = spec.churn.clone().expect("churn");
        // 1,000 arrivals at 5,000/s: the last at 199.8 ms.
        let ramp = Duration::from_micros(199_800);
        assert_eq!(spec.warmup, Some(ramp + Duration::from_secs(2)));
        let window_end = spec.warmup.unwrap_or_default() + Duration::from_secs(5);
        assert_eq!(
            churn.hold, window_end,
            "the first arrival leaves as the window ends"
        );
        let last_leaves = churn.arrival(churn.connections - 1) + churn.hold;
        assert!(last_leaves >= window_end);
    }
}
