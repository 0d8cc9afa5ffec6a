//! MQTT 5 message expiry: publishers give every message an expiry interval, and messages a
//! broker held for an absent subscriber longer than that must not arrive: they are counted
//! expired, not lost.
//!
//! Which missing messages are expired is judged per publisher (MQTT keeps the order of one
//! topic's messages at one QoS, and each publisher publishes to one topic) and from the open-loop timetable (a message that never arrived has no
//! header to read): those after the last one the subscriber received before it left, and due
//! more than `expiry` before it came back, provided the broker kept its session. A message
//! before that last one was lost while the subscriber was there; a later, younger one was owed.

use std::time::Duration;

use super::validate::SpecError;
use super::{MqttVersion, Pacing, Qos, WorkloadSpec};

/// Brokers keep expiry in whole seconds (Mosquitto compares whole Unix seconds), so a message
/// may live up to a second past its interval before it is dropped.
pub const EXPIRY_GRANULARITY: Duration = Duration::from_secs(1);

/// Slack on "came back": the broker hands out the kept messages just after its CONNACK, so
/// a message a little younger than its interval by loadgen's clock may be a little older by
/// the broker's when a long queue is flushed.
pub const EXPIRY_RETURN_SLACK: Duration = Duration::from_millis(100);

/// The longest expiry interval accepted: the longest run (an expiry beyond it never fires).
pub const MAX_MESSAGE_EXPIRY: Duration = super::MAX_DURATION;

impl WorkloadSpec {
    /// The expiry interval publishes carry, in seconds, when the workload sets one.
    pub fn message_expiry_secs(&self) -> Option<u32> {
        self.connection
            .message_expiry
            .map(|expiry| u32::try_from(expiry.as_secs()).unwrap_or(u32::MAX))
    }

    /// Whether missing messages are judged against their expiry: an expiry, subscribers that
    /// go away, and deliveries at QoS 1 or 2 (at QoS 0 a broker queues nothing for an absent
    /// subscriber, so what it missed is lost whatever its expiry).
    pub fn judges_expiry(&self) -> bool {
        self.connection.message_expiry.is_some()
            && self.connection.offline.is_some()
            && self.effective_qos() != Qos::AtMostOnce
    }
}

/// The latest due time (run clock, ns, exclusive) of a message a subscriber back at
/// `back_ns` may have missed because it expired: `expiry` (plus [`EXPIRY_RETURN_SLACK`])
/// before it came back. `None` when it came back before anything could be that old.
pub fn expirable_until(back_ns: u64, expiry: Duration) -> Option<u64> {
    let expiry_ns = u64::try_from(expiry.as_nanos()).unwrap_or(u64::MAX);
    let slack_ns = u64::try_from(EXPIRY_RETURN_SLACK.as_nanos()).unwrap_or(0);
    let oldest_kept = back_ns.checked_sub(expiry_ns)?;
    Some(oldest_kept.saturating_add(slack_ns).min(back_ns))
}

/// Whether a message that arrived `age` after it left had outlived its expiry by more than
/// the brokers' whole-second clocks and the return slack allow: the broker should have
/// dropped it.
pub fn delivered_past_expiry(age: Duration, expiry: Duration) -> bool {
    age > expiry + EXPIRY_GRANULARITY + EXPIRY_RETURN_SLACK
}

/// `connection.message_expiry`: MQTT 5, whole seconds, and judged only where a timetable
/// tells when each missing message was due.
pub(super) fn validate_message_expiry(spec: &WorkloadSpec) -> Result<(), SpecError> {
    let Some(expiry) = spec.connection.message_expiry else {
        return Ok(());
    };
    let shown = humantime::format_duration(expiry);
    let refuse = |problem: &str| Err(SpecError::new("connection.message_expiry", &shown, problem));
    if spec.broker.protocol != MqttVersion::V5 {
        return refuse("message expiry is an MQTT 5 property: set broker.protocol = \"5\"");
    }
    if expiry.subsec_nanos() != 0 || expiry.is_zero() {
        return refuse("MQTT carries the interval in whole seconds: at least 1s, no fraction");
    }
    if expiry > MAX_MESSAGE_EXPIRY {
        return refuse(&format!(
            "at most {} (the longest run)",
            humantime::format_duration(MAX_MESSAGE_EXPIRY)
        ));
    }
    if spec.judges_expiry() {
        if !matches!(spec.pacing, Pacing::OpenLoop { .. } | Pacing::Rate { .. }) {
            return refuse(
                "with connection.offline needs an open-loop pacing (interval or rate): a missing message's due time tells whether it outlived its expiry",
            );
        }
        if spec.shard.as_ref().is_some_and(|shard| {
            shard.publishers != (0..spec.publishers) || shard.subscribers != (0..spec.subscribers)
        }) {
            return refuse(
                "with connection.offline is judged in one instance holding the whole workload: what each publisher sent bounds what could expire",
            );
        }
        if spec.topics.as_ref().is_some_and(|tree| tree.has_shared()) {
            return refuse(
                "with connection.offline is not judged for shared subscriptions: a group's member away does not tell what the group missed",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn what_may_have_expired_was_due_an_expiry_before_the_return() {
        // Back at 13 s, expiry 1 s: due before 12.1 s may have expired.
        assert_eq!(
            expirable_until(13 * S, Duration::from_secs(1)),
            Some(12 * S + 100_000_000)
        );
        // Back before anything could be that old, near the clock's origin.
        assert_eq!(expirable_until(S / 2, Duration::from_secs(1)), None);
    }

    #[test]
    fn a_delivery_is_past_expiry_only_beyond_the_whole_second_rounding() {
        let expiry = Duration::from_secs(1);
        assert!(!delivered_past_expiry(Duration::from_millis(1_900), expiry));
        assert!(!delivered_past_expiry(Duration::from_millis(2_100), expiry));
        assert!(delivered_past_expiry(Duration::from_millis(2_200), expiry));
    }

    fn spec_with(expiry: Duration) -> WorkloadSpec {
        let mut spec = crate::presets::latency();
        spec.broker.protocol = MqttVersion::V5;
        spec.qos = Qos::AtLeastOnce;
        spec.connection.clean_session = false;
        spec.connection.message_expiry = Some(expiry);
        spec.connection.offline = Some(super::super::OfflineGap {
            after: Duration::from_secs(1),
            gap: Duration::from_secs(3),
        });
        spec
    }

    #[test]
    fn bad_expiries_are_refused_naming_the_field() {
        let problem = |spec: WorkloadSpec| spec.validate().expect_err("refused").to_string();
        let mut v311 = spec_with(Duration::from_secs(1));
        v311.broker.protocol = MqttVersion::V311;
        assert!(
            problem(v311)
                .contains("connection.message_expiry = 1s: message expiry is an MQTT 5 property")
        );
        assert!(problem(spec_with(Duration::from_millis(1_500))).contains("whole seconds"));
        assert!(problem(spec_with(Duration::ZERO)).contains("whole seconds"));
        let mut burst = spec_with(Duration::from_secs(1));
        burst.pacing = Pacing::Burst;
        assert!(problem(burst).contains("open-loop pacing"));
        let mut part = spec_with(Duration::from_secs(1));
        part.shard = Some(super::super::Shard {
            publishers: 0..0,
            subscribers: 0..1,
        });
        assert!(problem(part).contains("one instance holding the whole workload"));
        spec_with(Duration::from_secs(1))
            .validate()
            .expect("an open loop with an absence is judged");
        let mut qos0 = spec_with(Duration::from_secs(1));
        qos0.qos = Qos::AtMostOnce;
        qos0.pacing = Pacing::Burst;
        assert!(!qos0.judges_expiry());
        qos0.validate().expect("QoS 0 only carries the property");
    }
}
