//! Topic trees against a real Mosquitto: publishers publish into `site/{site}/device/{id}/temp`,
//! subscribers read it through wildcard filters, and what arrives must be exactly the set the
//! filters match: each subscriber's deliveries are judged per (publisher, sequence) against the
//! publishers its filter matches (a message it should not get is an error), and the total
//! equals what the broker itself counts as sent.

use std::time::Duration;

use loadgen::size::ByteSize;
use loadgen::spec::{MqttVersion, Pacing, Qos, TopicTree, Topology, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const MESSAGES: u64 = 20;

/// 4 sites x 25 devices, one publisher per device's topic, `MESSAGES` each in a burst; four
/// subscribers: 0 and 2 read every device's temperature, 1 and 3 all of site 2.
fn tree_workload(port: u16) -> WorkloadSpec {
    let mut spec = loadgen::presets::throughput();
    spec.broker.port = port;
    spec.broker.protocol = MqttVersion::V5;
    spec.qos = Qos::AtLeastOnce;
    spec.publishers = 100;
    spec.subscribers = 4;
    spec.topology = Topology::Tree;
    spec.topics = Some(TopicTree {
        pattern: "site/{site}/device/{device}/temp".to_string(),
        counts: [("site".to_string(), 4), ("device".to_string(), 25)].into(),
        subscribe: vec!["site/+/device/+/temp".to_string(), "site/2/#".to_string()],
    });
    spec.messages_per_publisher = MESSAGES;
    spec.pacing = Pacing::Burst;
    spec.payload = ByteSize(32);
    spec.drain.idle = Duration::from_secs(3);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_tree_read_through_wildcards_delivers_exactly_the_matching_set() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let before = broker.counters_settled().expect("counters before");
    let (result, summary) = run(&tree_workload(broker.port())).await;
    let after = broker.counters_settled().expect("counters after");

    // Worked out by hand: two subscribers get all 100 devices, two get site 2's 25.
    let expected = (2 * 100 + 2 * 25) * MESSAGES;
    assert_eq!(summary.published, 100 * MESSAGES);
    assert_eq!(summary.expected_deliveries, expected);
    // Nothing lost, nothing twice, and nothing from a topic a subscriber's filter does not
    // match (that would be a foreign message, an error).
    assert_nothing_lost(&summary);
    assert_eq!(
        result.delivered_unique[60..75].iter().sum::<u64>(),
        15 * 4 * MESSAGES,
        "site 2's devices 10-24 reached all four subscribers"
    );
    assert_eq!(
        result.delivered_unique[0..50].iter().sum::<u64>(),
        50 * 2 * MESSAGES,
        "sites 0 and 1 reached only the two subscribers of every site"
    );
    assert_eq!(
        after.publish_received - before.publish_received,
        summary.published,
        "the broker's received count"
    );
    assert_eq!(
        after.publish_sent - before.publish_sent,
        summary.received,
        "the broker's sent count is what loadgen received"
    );
}
