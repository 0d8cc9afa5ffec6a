//! MQTT 5 receive maximum against a real Mosquitto. A subscriber announces a receive maximum
//! of 3: the broker must then never have more than 3 QoS 1 deliveries unacknowledged at it
//! (MQTT 5 §3.3.4). What one read holds before any of it is acknowledged is a lower bound of
//! the broker's window, so a broker above the limit shows above it. Mosquitto 2.0.11 does not
//! honour it (its own log shows it sending two deliveries per acknowledgement to a client with
//! a receive maximum of 2): Continuum sees hundreds unacknowledged at once and names the
//! violation, as it must; without a receive maximum the same burst is no violation. On another
//! Mosquitto version (a later 2.0.x fixed its in-flight count) the verdict must still agree
//! with the figure.

use loadgen::spec::{MqttVersion, Pacing, Qos, WorkloadSpec};
use tests::load::run;
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const MOST: u16 = 3;

fn burst(port: u16, receive_maximum: Option<u16>) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker.protocol = MqttVersion::V5;
    spec.qos = Qos::AtLeastOnce;
    spec.publishers = 4;
    spec.subscribers = 1;
    spec.messages_per_publisher = 2_000;
    spec.warmup_messages = 0;
    spec.pacing = Pacing::Burst;
    spec.connection.receive_maximum = receive_maximum;
    spec
}

/// The installed Mosquitto's version, from its usage text (`mosquitto version 2.0.11`).
fn mosquitto_version() -> String {
    let usage = std::process::Command::new(tests::mosquitto::MOSQUITTO_BINARY)
        .arg("-h")
        .output()
        .expect("mosquitto runs");
    let text = String::from_utf8_lossy(&usage.stdout).to_string()
        + &String::from_utf8_lossy(&usage.stderr);
    text.split_whitespace()
        .skip_while(|word| *word != "version")
        .nth(1)
        .unwrap_or("unknown")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_beyond_a_subscribers_receive_maximum_are_seen_and_named() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let (_, open) = run(&burst(broker.port(), None)).await;
    let (_, capped) = run(&burst(broker.port(), Some(MOST))).await;
    for summary in [&open, &capped] {
        assert_eq!(summary.lost, Some(0), "{:?}", summary.errors);
    }
    assert!(open.qos_violations.is_empty(), "{:?}", open.qos_violations);
    assert!(
        capped.most_unacknowledged >= 1,
        "QoS 1 deliveries were read"
    );
    let version = mosquitto_version();
    if version == "2.0.11" {
        assert!(
            capped.most_unacknowledged > u64::from(MOST),
            "Mosquitto 2.0.11 sends past a receive maximum of {MOST}: {}",
            capped.most_unacknowledged
        );
    }
    let named = format!(
        "{} QoS 1/2 deliveries reached a subscriber at once, above its receive maximum {MOST}",
        capped.most_unacknowledged
    );
    if capped.most_unacknowledged > u64::from(MOST) {
        assert_eq!(capped.qos_violations, vec![named], "Mosquitto {version}");
    } else {
        assert!(capped.qos_violations.is_empty(), "Mosquitto {version}");
    }
    eprintln!(
        "unacknowledged at once: {} without a receive maximum, {} with {MOST}",
        open.most_unacknowledged, capped.most_unacknowledged
    );
}
