//! Persistent sessions across an offline gap, against a real Mosquitto: the subscriber (clean
//! session off) disconnects a second into the run and comes back to its kept session a second
//! later, while the publishers go on at QoS 1. With a queue large enough Mosquitto keeps every
//! message for it: none lost. With a queue of 5, what the subscriber never got is exactly what
//! Mosquitto says it dropped (`$SYS/broker/publish/messages/dropped`).

use std::time::Duration;

use loadgen::Summary;
use loadgen::spec::{MqttVersion, OfflineGap, Pacing, Qos, WorkloadSpec};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};
use tokio_util::sync::CancellationToken;

const PUBLISHERS: u64 = 2;
const MESSAGES: u64 = 60;

/// 2 publishers -> 1 subscriber at QoS 1, a message each every 50 ms for 3 s; the subscriber
/// away from 1 s to 2 s.
fn workload(port: u16, protocol: MqttVersion) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker.protocol = protocol;
    spec.publishers = PUBLISHERS as u32;
    spec.qos = Qos::AtLeastOnce;
    spec.messages_per_publisher = MESSAGES;
    spec.warmup_messages = 1;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(50),
    };
    spec.connection.clean_session = false;
    spec.connection.offline = Some(OfflineGap {
        after: Duration::from_secs(1),
        gap: Duration::from_secs(1),
    });
    spec
}

async fn run(broker: &Mosquitto, spec: &WorkloadSpec) -> (Summary, u64) {
    let before = broker.counters_settled().expect("counters");
    let result = loadgen::run(spec, CancellationToken::new(), None)
        .await
        .expect("the run completes");
    let after = broker.counters_settled().expect("counters");
    let summary = Summary::of(&result);
    eprintln!("{}", loadgen::output::render_table(&summary));
    (summary, after.publish_dropped - before.publish_dropped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_session_loses_nothing_across_the_gap_at_qos_1() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    for protocol in [MqttVersion::V311, MqttVersion::V5] {
        let (summary, dropped) = run(&broker, &workload(broker.port(), protocol)).await;
        assert_eq!(summary.expected_deliveries, PUBLISHERS * MESSAGES);
        assert_eq!(
            summary.lost,
            Some(0),
            "MQTT {protocol}: {:?}",
            summary.errors
        );
        assert_eq!(dropped, 0);
        assert!(
            summary.qos_violations.is_empty(),
            "{:?}",
            summary.qos_violations
        );
        assert!(
            !summary.errors.contains_key("reconnect_failed"),
            "{:?}",
            summary.errors
        );
        // Messages kept during the gap arrive late: the latency's tail shows the absence.
        assert!(
            summary.latency.max_us > 500_000.0,
            "MQTT {protocol}: max {} µs",
            summary.latency.max_us
        );
        eprintln!(
            "MQTT {protocol}: {} of {} delivered ({} duplicates), Mosquitto dropped {dropped}, latency max {:.0} ms",
            summary.delivered_unique,
            summary.expected_deliveries,
            summary.duplicates,
            summary.latency.max_us / 1e3
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_small_queue_the_loss_is_what_mosquitto_dropped() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let options = MosquittoOptions {
        max_queued_messages: Some(5),
        ..MosquittoOptions::default()
    };
    let broker = Mosquitto::start(options).expect("mosquitto starts");
    let (summary, dropped) = run(&broker, &workload(broker.port(), MqttVersion::V311)).await;
    let lost = summary.lost.expect("a counted run");
    assert!(lost > 0, "a second away at 40 msg/s overflows a queue of 5");
    assert_eq!(
        lost, dropped,
        "every message not delivered is one Mosquitto dropped"
    );
    assert_eq!(
        summary.delivered_unique + lost,
        summary.expected_deliveries,
        "every message accounted for"
    );
    eprintln!(
        "queue 5: {} delivered, {lost} lost, Mosquitto dropped {dropped}",
        summary.delivered_unique
    );
}
