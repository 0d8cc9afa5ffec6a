//! Topic aliases against a real Mosquitto (MQTT 5, its topic alias maximum 10): with
//! `connection.topic_alias`, each publisher's topic travels whole in its connection's first
//! PUBLISH only, and the bytes the publishers write per message drop by the topic's length
//! less the alias property's 3 bytes, every message still delivered.

use std::time::Duration;

use loadgen::spec::{MqttVersion, Pacing, Qos, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const MESSAGES: u64 = 200;

fn workload(port: u16, alias: bool) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker.protocol = MqttVersion::V5;
    spec.qos = Qos::AtLeastOnce;
    spec.publishers = 4;
    spec.subscribers = 1;
    spec.messages_per_publisher = MESSAGES;
    spec.warmup_messages = 0;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(5),
    };
    // A long topic, as fleets name theirs.
    spec.topic_prefix = "factory-7/hall-b/line-3/press-12/telemetry".to_string();
    spec.run_id = Some(format!("aliases{}", u8::from(alias)));
    spec.connection.topic_alias = alias;
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_alias_saves_the_topics_length_on_every_message_after_the_first() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let whole = workload(broker.port(), false);
    let (_, plain) = run(&whole).await;
    let (_, aliased) = run(&workload(broker.port(), true)).await;
    for summary in [&plain, &aliased] {
        assert_nothing_lost(summary);
        assert_eq!(summary.delivered_unique, 4 * MESSAGES);
    }
    assert!(!aliased.errors.contains_key("topic_alias_not_allowed"));
    let topic_len = whole.topic_of("aliases0", 0).len() as f64;
    let per_message = |s: &loadgen::Summary| s.bytes_per_publish.expect("bytes per message");
    let saved = per_message(&plain) - per_message(&aliased);
    // Every message but each connection's first sends no topic and 3 bytes of alias: the
    // saving is the topic's length less 3, less what the first message and the few packets
    // beside (DISCONNECT) spread over 200 messages take back.
    let expected = topic_len - 3.0;
    assert!(
        (saved - expected).abs() < 1.0,
        "saved {saved:.2} bytes per message, expected about {expected} ({} -> {})",
        per_message(&plain),
        per_message(&aliased)
    );
}
