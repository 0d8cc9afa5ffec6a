//! Mosquitto's own message counters, read from its `$SYS` tree.
//!
//! Each broker gets one long-lived reader connection
//! (the private `mosquitto_sys_reader`) that subscribes to the few `$SYS` topics
//! below. Mosquitto recomputes `$SYS` on a timer
//! (`sys_interval 1` gives an update about every 2 s), always publishing
//! `$SYS/broker/uptime` first and then only the values that changed. So an
//! update *ends* when the next uptime arrives; the reader then freezes the
//! current values into a [`MosquittoCounters`].
//!
//! The reader is itself a client and perturbs some counters. Its own
//! deliveries are subtracted (see [`MosquittoCounters::harness_publishes`]):
//! Mosquitto 2.0 writes each `$SYS` message as it queues it, so a `sent`
//! value counts exactly the `$SYS` messages the reader received before that
//! value, including the earlier ones of the same update (observed: with two
//! topics the raw value was always "messages received so far + 1", the 1
//! being the update's uptime). With no other client, `publish_sent`
//! therefore stays 0; `tests/brokers.rs` checks that.
//!
//! Caution: `publish_received` misses QoS 2 and retained publishes (see the
//! field).
//!
//! QoS 0 drops, found by experiment (`tests/brokers.rs`,
//! `slow_subscriber_makes_mosquitto_drop_qos0`) and in 2.0.11's
//! `db__message_insert`: when an online subscriber does not keep up and its
//! queue holds `max_queued_messages`, each further QoS 0 message for it is
//! discarded and counted in `$SYS/broker/publish/messages/dropped`; with
//! `max_queued_messages 10`, 20000 x 1 KB publishes and a subscriber that never
//! reads gave received 20000, dropped 16152, sent 3837 (into the socket
//! buffers), and 11 still held for the subscriber (10 queued, 1 being written).

use std::collections::HashMap;

use anyhow::{Context, Result, anyhow};

use crate::mqtt_wire::ReceivedPublish;

const UPTIME: &str = "$SYS/broker/uptime";
/// Completed updates kept with their times (about two per second of sys_interval 1).
pub(crate) const HISTORY_LIMIT: usize = 4_096;

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
const PUBLISH_RECEIVED: &str = "$SYS/broker/publish/messages/received";
const PUBLISH_SENT: &str = "$SYS/broker/publish/messages/sent";
const PUBLISH_DROPPED: &str = "$SYS/broker/publish/messages/dropped";
const MESSAGES_RECEIVED: &str = "$SYS/broker/messages/received";
const MESSAGES_SENT: &str = "$SYS/broker/messages/sent";
const CLIENTS_CONNECTED: &str = "$SYS/broker/clients/connected";
const CLIENTS_TOTAL: &str = "$SYS/broker/clients/total";

/// Every topic the reader subscribes to. Deliberately few: each one that
/// changes costs a delivery to the reader in every update.
pub(crate) const TOPICS: [&str; 8] = [
    UPTIME,
    PUBLISH_RECEIVED,
    PUBLISH_SENT,
    PUBLISH_DROPPED,
    MESSAGES_RECEIVED,
    MESSAGES_SENT,
    CLIENTS_CONNECTED,
    CLIENTS_TOTAL,
];

/// Mosquitto's counters as of one `$SYS` update. All are totals since the
/// broker started; compare two readings to measure a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MosquittoCounters {
    /// `$SYS/broker/uptime`: seconds since start when the update was made.
    pub uptime_secs: u64,
    /// `$SYS/broker/publish/messages/received`: PUBLISH packets received
    /// from clients, counted on arrival, before routing (so including
    /// messages nobody subscribed to), but ONLY non-retained QoS 0 and QoS 1
    /// ones: 2.0.11 tests `(command & 0xF5) == PUBLISH`, a mask that keeps
    /// the retain bit and the high QoS bit, so QoS 2 and retained publishes
    /// are never counted (observed: +0 for 5 QoS 2 and for 3 retained
    /// publishes; pinned by `tests/brokers.rs`). For QoS 2 compare
    /// [`Self::publish_sent`] or the clients' own counts instead.
    pub publish_received: u64,
    /// `$SYS/broker/publish/messages/sent` minus [`Self::harness_publishes`]:
    /// PUBLISH packets written to the test's subscribers, including resends.
    /// Messages dropped for slow clients are not in it.
    pub publish_sent: u64,
    /// `$SYS/broker/publish/messages/dropped`: messages for a subscriber
    /// discarded because its queue was full. This DOES count QoS 0 messages
    /// to online clients whose `max_queued_messages` was reached (verified by
    /// experiment, see the module docs); it also counts QoS 1/2 messages
    /// refused for a full queue and messages for offline persistent sessions.
    pub publish_dropped: u64,
    /// `$SYS/broker/messages/received`: every MQTT packet received (CONNECT,
    /// PUBLISH, PUBACK, PINGREQ, ...), including the harness's readiness
    /// probe and the reader's CONNECT and SUBSCRIBE.
    pub messages_received: u64,
    /// `$SYS/broker/messages/sent` minus [`Self::harness_publishes`]: every
    /// MQTT packet written (CONNACK, PUBLISH, PUBACK, ...), still including the
    /// CONNACKs and SUBACK the harness's own connections got.
    pub messages_sent: u64,
    /// `$SYS/broker/clients/connected`: clients connected at the update,
    /// counting the harness's `$SYS` reader (so 1 when no test client is on).
    pub clients_connected: u64,
    /// `$SYS/broker/clients/total`: connected clients and the sessions kept for
    /// disconnected ones (clean session off), the harness's reader included;
    /// `None` until Mosquitto has published it.
    pub clients_total: Option<u64>,
    /// `$SYS` PUBLISHes the harness's reader had received when this update
    /// was computed; subtracted from the two `sent` figures above.
    pub harness_publishes: u64,
}

impl MosquittoCounters {
    /// True if both readings report the same traffic (uptime and the
    /// reader's own deliveries aside).
    pub fn same_traffic(&self, other: &Self) -> bool {
        Self {
            uptime_secs: 0,
            harness_publishes: 0,
            ..*self
        } == Self {
            uptime_secs: 0,
            harness_publishes: 0,
            ..*other
        }
    }
}

/// Values seen so far and the updates completed from them; fed by the
/// reader thread.
#[derive(Debug, Default)]
pub(crate) struct ReaderState {
    /// Latest payload of each subscribed topic, with the number of `$SYS`
    /// PUBLISHes the reader had received before it (0 for retained copies,
    /// which were computed before the reader existed).
    pub(crate) values: HashMap<String, (String, u64)>,
    /// PUBLISHes the reader has received in total.
    pub(crate) publishes_seen: u64,
    /// Number of updates completed.
    pub(crate) completed: u64,
    /// The most recently completed update, or why it could not be read.
    pub(crate) latest: Option<Result<MosquittoCounters, String>>,
    /// Every completed update with the wall-clock time its first message (the uptime)
    /// arrived, when Mosquitto computed it; the last [`HISTORY_LIMIT`] are kept.
    pub(crate) history: Vec<(u64, MosquittoCounters)>,
    /// When the update being received began (its uptime arrived), Unix ns.
    pub(crate) update_began_unix_ns: Option<u64>,
    /// Set when the reader's connection failed.
    pub(crate) failure: Option<String>,
}

impl ReaderState {
    /// Takes in one `$SYS` message; a live uptime completes the update before it.
    pub(crate) fn record(&mut self, publish: ReceivedPublish) {
        // Retained copies arrive once, at subscribe time, and all predate the
        // reader; only a live uptime marks the start of a new update.
        if publish.topic == UPTIME && !publish.retain {
            self.latest = Some(self.snapshot().map_err(|error| format!("{error:#}")));
            self.completed += 1;
            if let (Some(Ok(counters)), Some(began)) = (&self.latest, self.update_began_unix_ns) {
                if self.history.len() == HISTORY_LIMIT {
                    self.history.remove(0);
                }
                self.history.push((began, *counters));
            }
            self.update_began_unix_ns = Some(unix_now_ns());
        }
        let seen_before = if publish.retain {
            0
        } else {
            self.publishes_seen
        };
        let payload = String::from_utf8_lossy(&publish.payload).into_owned();
        self.values.insert(publish.topic, (payload, seen_before));
        self.publishes_seen += 1;
    }

    fn snapshot(&self) -> Result<MosquittoCounters> {
        // Mosquitto writes each $SYS message as it queues it, so a `sent`
        // value counts every message the reader got before that value itself,
        // including earlier ones of the same update.
        let minus_harness = |topic: &str| -> Result<(u64, u64)> {
            let raw = self.value(topic)?;
            let harness = self.values.get(topic).map_or(0, |(_, seen)| *seen);
            let sent = raw.checked_sub(harness).ok_or_else(|| {
                anyhow!("{topic} = {raw} is below the {harness} $SYS messages the reader received")
            })?;
            Ok((sent, harness))
        };
        let (publish_sent, harness_publishes) = minus_harness(PUBLISH_SENT)?;
        Ok(MosquittoCounters {
            uptime_secs: self.value(UPTIME)?,
            publish_received: self.value(PUBLISH_RECEIVED)?,
            publish_sent,
            publish_dropped: self.value(PUBLISH_DROPPED)?,
            messages_received: self.value(MESSAGES_RECEIVED)?,
            messages_sent: minus_harness(MESSAGES_SENT)?.0,
            clients_connected: self.value(CLIENTS_CONNECTED)?,
            clients_total: self.value(CLIENTS_TOTAL).ok(),
            harness_publishes,
        })
    }

    /// The leading integer of a topic's payload ("17" or "42 seconds").
    fn value(&self, topic: &str) -> Result<u64> {
        let (payload, _) = self
            .values
            .get(topic)
            .ok_or_else(|| anyhow!("{topic} has not been published yet"))?;
        let number = payload.split_whitespace().next().unwrap_or_default();
        number
            .parse()
            .with_context(|| format!("{topic} carries {payload:?}, not a count"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(topic: &str, value: &str) -> ReceivedPublish {
        ReceivedPublish {
            topic: topic.to_owned(),
            payload: value.as_bytes().to_vec(),
            qos: 0,
            retain: false,
        }
    }

    /// Records a live update that carries every topic, in which the test's
    /// clients received `received` messages and were sent none.
    fn full_update(state: &mut ReaderState, uptime: u64, received: &str) {
        state.record(live(UPTIME, &format!("{uptime} seconds")));
        for (topic, value) in [
            (PUBLISH_RECEIVED, received),
            (PUBLISH_DROPPED, "0"),
            (MESSAGES_RECEIVED, "5"),
            (CLIENTS_CONNECTED, "1"),
        ] {
            state.record(live(topic, value));
        }
        for topic in [PUBLISH_SENT, MESSAGES_SENT] {
            let only_the_harness = state.publishes_seen.to_string();
            state.record(live(topic, &only_the_harness));
        }
    }

    #[test]
    fn an_update_completes_when_the_next_uptime_arrives() {
        let mut state = ReaderState::default();
        full_update(&mut state, 2, "10");
        assert_eq!(state.completed, 1);
        assert!(
            state.latest.as_ref().unwrap().is_err(),
            "nothing before the first uptime"
        );
        state.record(live(UPTIME, "4 seconds"));
        let counters = state.latest.clone().unwrap().unwrap();
        assert_eq!(counters.uptime_secs, 2);
        assert_eq!(counters.publish_received, 10);
        assert_eq!(counters.publish_sent, 0);
        assert_eq!(counters.harness_publishes, 5);
    }

    #[test]
    fn the_readers_own_deliveries_are_subtracted() {
        let mut state = ReaderState::default();
        full_update(&mut state, 2, "10");
        // 7 messages of the first update, then uptime and publish/received
        // of this one, precede publish/sent (9); messages/sent follows it (10).
        state.record(live(UPTIME, "4 seconds"));
        state.record(live(PUBLISH_RECEIVED, "10"));
        state.record(live(PUBLISH_SENT, "12"));
        state.record(live(MESSAGES_SENT, "10"));
        state.record(live(UPTIME, "6 seconds"));
        let counters = state.latest.clone().unwrap().unwrap();
        assert_eq!(counters.harness_publishes, 9);
        assert_eq!(counters.publish_sent, 3);
        assert_eq!(counters.messages_sent, 0);
    }

    #[test]
    fn retained_values_need_no_correction() {
        let mut state = ReaderState::default();
        for (topic, value) in [
            (UPTIME, "0 seconds"),
            (PUBLISH_RECEIVED, "0"),
            (PUBLISH_SENT, "0"),
            (PUBLISH_DROPPED, "0"),
            (MESSAGES_RECEIVED, "0"),
            (MESSAGES_SENT, "0"),
            (CLIENTS_CONNECTED, "0"),
        ] {
            state.record(ReceivedPublish {
                retain: true,
                ..live(topic, value)
            });
        }
        state.record(live(UPTIME, "2 seconds"));
        let counters = state.latest.clone().unwrap().unwrap();
        assert_eq!(counters.publish_sent, 0);
        assert_eq!(counters.harness_publishes, 0);
    }

    #[test]
    fn a_sent_count_below_the_readers_own_is_reported() {
        let mut state = ReaderState::default();
        full_update(&mut state, 2, "10");
        state.record(live(UPTIME, "4 seconds"));
        state.record(live(PUBLISH_SENT, "3"));
        state.record(live(UPTIME, "6 seconds"));
        assert!(state.latest.clone().unwrap().is_err());
    }

    #[test]
    fn retained_uptime_does_not_start_an_update() {
        let mut state = ReaderState::default();
        state.record(ReceivedPublish {
            retain: true,
            ..live(UPTIME, "8 seconds")
        });
        assert_eq!(state.completed, 0);
    }

    #[test]
    fn a_payload_that_is_not_a_count_is_an_error() {
        let mut state = ReaderState::default();
        state.record(live(PUBLISH_RECEIVED, "lots"));
        assert!(state.value(PUBLISH_RECEIVED).is_err());
    }

    #[test]
    fn same_traffic_ignores_uptime_and_harness_deliveries() {
        let mut state = ReaderState::default();
        full_update(&mut state, 2, "10");
        state.record(live(UPTIME, "4 seconds"));
        let a = state.latest.clone().unwrap().unwrap();
        let b = MosquittoCounters {
            uptime_secs: 99,
            harness_publishes: 3,
            ..a
        };
        assert!(a.same_traffic(&b));
        assert!(!a.same_traffic(&MosquittoCounters {
            publish_received: 11,
            ..a
        }));
    }
}
