//! MQTT 5 message expiry against a real Mosquitto: publishers at QoS 1 give every message an
//! expiry of 1 s, and the subscriber (clean start off) is away for 3 s. What Mosquitto held
//! for it longer than 1 s must not arrive: those messages are counted expired, not lost, and
//! every younger one arrives. With an expiry longer than the absence, the same run delivers
//! everything.

use std::time::Duration;

use loadgen::Summary;
use loadgen::spec::{MqttVersion, OfflineGap, Pacing, Qos, WorkloadSpec};
use tests::load::run;
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const PUBLISHERS: u64 = 2;
const MESSAGES: u64 = 120;
/// Messages per second over all publishers (each every 50 ms).
const RATE: u64 = 40;
const GAP: Duration = Duration::from_secs(3);

/// 2 publishers -> 1 subscriber for 6 s; the subscriber away from 1 s to 4 s.
fn workload(port: u16, expiry: Duration, run_id: &str) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker.protocol = MqttVersion::V5;
    spec.publishers = PUBLISHERS as u32;
    spec.qos = Qos::AtLeastOnce;
    spec.messages_per_publisher = MESSAGES;
    spec.warmup_messages = 1;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(50),
    };
    spec.run_id = Some(run_id.to_string());
    spec.connection.clean_session = false;
    spec.connection.message_expiry = Some(expiry);
    spec.connection.offline = Some(OfflineGap {
        after: Duration::from_secs(1),
        gap: GAP,
    });
    spec
}

fn past_expiry(summary: &Summary) -> u64 {
    summary
        .errors
        .get(loadgen::summary::DELIVERED_PAST_EXPIRY)
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_held_past_their_expiry_are_counted_expired_not_lost() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");

    let (_, short) = run(&workload(broker.port(), Duration::from_secs(1), "expiry1s")).await;
    assert_eq!(short.expected_deliveries, PUBLISHERS * MESSAGES);
    assert_eq!(
        short.lost,
        Some(0),
        "every message younger than 1 s at the return arrives: {:?}",
        short.errors
    );
    assert_eq!(
        short.delivered_unique + short.expired,
        short.expected_deliveries,
        "every message delivered or expired"
    );
    // Due in the absence's first second (at least 2 s old at the return, so past Mosquitto's
    // whole-second expiry whatever the rounding): surely dropped. At most the absence less
    // the expiry, plus a second for the rounding and the reconnect.
    let surely = RATE * (GAP.as_secs() - 2) - PUBLISHERS;
    let at_most = RATE * GAP.as_secs();
    assert!(
        (surely..=at_most).contains(&short.expired),
        "expired {} (expected {surely} to {at_most})",
        short.expired
    );
    assert_eq!(past_expiry(&short), 0, "{:?}", short.errors);
    assert!(
        short.qos_violations.is_empty(),
        "{:?}",
        short.qos_violations
    );

    let (_, long) = run(&workload(
        broker.port(),
        Duration::from_secs(60),
        "expiry60s",
    ))
    .await;
    assert_eq!(long.lost, Some(0), "{:?}", long.errors);
    assert_eq!(
        long.expired, 0,
        "nothing outlives a 60 s expiry in a 3 s absence"
    );
    assert_eq!(long.delivered_unique, PUBLISHERS * MESSAGES);
    eprintln!(
        "expiry 1 s: {} delivered, {} expired, 0 lost; expiry 60 s: {} delivered",
        short.delivered_unique, short.expired, long.delivered_unique
    );
}
