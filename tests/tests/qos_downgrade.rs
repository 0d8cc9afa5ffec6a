//! A QoS downgrade against a real Mosquitto: publishers at QoS 1 (or 2) and subscribers at a
//! lower QoS get each delivery at the lower of the two, as MQTT has it, and the run is judged
//! at that effective QoS; a subscription above the publish QoS delivers at the publish QoS.

use std::time::Duration;

use loadgen::spec::{MqttVersion, Pacing, Qos, WorkloadSpec};
use tests::load::run;
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

/// 10 publishers -> 2 subscribers of one topic, 20 messages each every 20 ms.
fn workload(port: u16, publish: Qos, subscribe: Qos) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.publishers = 10;
    spec.subscribers = 2;
    spec.messages_per_publisher = 20;
    spec.warmup_messages = 0;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(20),
    };
    spec.qos = publish;
    spec.subscriber_qos = Some(subscribe);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_come_at_the_lower_of_publish_and_subscription_qos() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    for (protocol, publish, subscribe) in [
        (MqttVersion::V311, Qos::AtLeastOnce, Qos::AtMostOnce),
        (MqttVersion::V5, Qos::ExactlyOnce, Qos::AtLeastOnce),
        (MqttVersion::V311, Qos::AtMostOnce, Qos::ExactlyOnce),
    ] {
        let mut spec = workload(broker.port(), publish, subscribe);
        spec.broker.protocol = protocol;
        let (_, summary) = run(&spec).await;
        let case = format!("{protocol} publish {publish:?} subscribe {subscribe:?}");
        assert_eq!(summary.subscriber_qos, Some(subscribe.level()), "{case}");
        // A delivery above the subscription's QoS would be counted and named a violation.
        assert!(
            !summary.errors.contains_key("qos_above_subscription"),
            "{case}: {:?}",
            summary.errors
        );
        assert!(
            summary.qos_violations.is_empty(),
            "{case}: {:?}",
            summary.qos_violations
        );
        assert_eq!(summary.expected_deliveries, 2 * 10 * 20, "{case}");
        assert!(summary.delivered_unique > 0, "{case}");
        if publish.min(subscribe) != Qos::AtMostOnce {
            assert_eq!(
                summary.lost,
                Some(0),
                "{case}: at QoS 1 or 2 nothing is lost"
            );
        }
    }
}
