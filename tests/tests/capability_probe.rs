//! The capability probe against real brokers: what each says (MQTT 5 CONNACK) and does (a
//! round trip per feature) must match what is known of it: Mosquitto 2.0 speaks both
//! versions and supports everything probed; RabbitMQ 3.10 speaks 3.1.1 only, keeps retained
//! messages (delivered to exact subscriptions only) and matches wildcards, and has no shared
//! subscriptions. Both keep a session across a reconnect; Mosquitto holds an MQTT 5 will for
//! its delay.

use std::time::Duration;

use loadgen::spec::BrokerTarget;
use tests::{Mosquitto, MosquittoOptions, RabbitMq, skip_unless_installed};

fn target(port: u16) -> BrokerTarget {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_supports_everything_probed() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let caps = loadgen::probe::probe(&target(broker.port()), Duration::from_secs(5))
        .await
        .expect("mosquitto answers");
    eprintln!("{caps:#?}");
    assert!(caps.mqtt311 && caps.mqtt5, "{caps:?}");
    assert_eq!(caps.maximum_qos, Some(2));
    assert_eq!(
        (
            caps.wildcards,
            caps.shared_subscriptions,
            caps.retain,
            caps.retain_to_wildcards
        ),
        (Some(true), Some(true), Some(true), Some(true)),
        "{caps:?}"
    );
    // A session kept across a reconnect, a will held for its 1 s delay, and no expiry of
    // its own imposed on the session asked for.
    assert_eq!(
        (
            caps.kept_sessions,
            caps.will_delay,
            caps.session_expiry_secs
        ),
        (Some(true), Some(true), None),
        "{caps:?}"
    );
    assert_eq!(
        caps.summary().split("; topic aliases").next(),
        Some("MQTT 3.1.1 and 5; max QoS 2; retain yes; wildcards yes; shared subscriptions yes")
    );
    // The probe cleared its retained message.
    let left = std::process::Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &broker.port().to_string()])
        .args([
            "-t",
            "continuum-probe/#",
            "--retained-only",
            "-W",
            "1",
            "-v",
        ])
        .output()
        .expect("mosquitto_sub runs");
    assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_310_speaks_311_only_and_has_no_shared_subscriptions() {
    skip_unless_installed!(tests::rabbitmq::RABBITMQ_SERVER);
    let broker = RabbitMq::start().expect("rabbitmq starts");
    let caps = loadgen::probe::probe(&target(broker.port()), Duration::from_secs(5))
        .await
        .expect("rabbitmq answers");
    eprintln!("{caps:#?}");
    assert!(caps.mqtt311 && !caps.mqtt5, "{caps:?}");
    assert_eq!(caps.wildcards, Some(true), "{caps:?}");
    assert_eq!(caps.retain, Some(true), "{caps:?}");
    // 3.10 keeps retained messages but delivers them to exact subscriptions only.
    assert_eq!(caps.retain_to_wildcards, Some(false), "{caps:?}");
    assert_eq!(caps.shared_subscriptions, Some(false), "{caps:?}");
    // Clean session off keeps a session (its queue); will delays are MQTT 5, not probed.
    assert_eq!(
        (caps.kept_sessions, caps.will_delay),
        (Some(true), None),
        "{caps:?}"
    );
    let mut v5 = loadgen::presets::latency();
    v5.broker.protocol = loadgen::spec::MqttVersion::V5;
    assert!(caps.lacks(&v5).is_some_and(|why| why.contains("MQTT 5")));
    assert_eq!(caps.lacks(&loadgen::presets::latency()), None);
}
