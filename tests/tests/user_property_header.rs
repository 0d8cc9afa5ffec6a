//! The measurement header in an MQTT 5 user property, against a real Mosquitto: with
//! `header_in = "user-property"` a 4-byte payload (too small for any header in the payload)
//! is timed and accounted like any other, the payload Mosquitto delivers is exactly those 4
//! bytes (its own client says so), and each PUBLISH is the property's 53 bytes longer than
//! the same message with nothing in it.

use std::time::Duration;

use loadgen::header::HeaderPlace;
use loadgen::size::ByteSize;
use loadgen::spec::{MqttVersion, Pacing, Qos, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const MESSAGES: u64 = 200;

fn workload(port: u16, run_id: &str, payload: u64, header_in: HeaderPlace) -> WorkloadSpec {
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
    spec.payload = ByteSize(payload);
    spec.header_in = header_in;
    spec.run_id = Some(run_id.to_string());
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_in_a_user_property_times_payloads_too_small_for_one() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    // Mosquitto's own subscriber reads the first message of the property run: its payload
    // length and its user properties.
    let port = broker.port().to_string();
    // Line-buffered, so that its debug line about the SUBACK arrives when it is printed.
    let mut watcher = std::process::Command::new("stdbuf")
        .args([
            "-oL",
            "mosquitto_sub",
            "-V",
            "mqttv5",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
        ])
        .args(["-t", "continuum/property/#", "-C", "1", "-W", "30", "-d"])
        .args(["-F", "%l %P"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("mosquitto_sub runs");
    let output = watcher.stdout.take().expect("its output");
    let (subscribed, suback) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let lines = std::io::BufRead::lines(std::io::BufReader::new(output));
        for line in lines.map_while(Result::ok) {
            if line.contains("received SUBACK") {
                let _ = subscribed.send(());
            }
            seen.push(line);
        }
        seen
    });
    // The run publishes once mosquitto_sub has its SUBACK (its debug output says so).
    suback
        .recv_timeout(Duration::from_secs(20))
        .expect("mosquitto_sub subscribed");
    let (_, property) = run(&workload(
        broker.port(),
        "property",
        4,
        HeaderPlace::UserProperty,
    ))
    .await;
    let _ = watcher.wait();
    let seen = reader.join().expect("its output read");
    assert!(
        seen.iter()
            .any(|line| line.starts_with("4 ") && line.contains("continuum-header:")),
        "mosquitto_sub saw {seen:?}"
    );

    assert_nothing_lost(&property);
    assert_eq!(property.delivered_unique, 4 * MESSAGES);
    assert_eq!(
        property.latency.count,
        4 * MESSAGES,
        "every message timed from its property"
    );

    // The same messages with a 4-byte payload and no header anywhere cannot be timed; a
    // 20-byte payload holds the 16-byte header and the same 4 bytes of device data.
    let (_, in_payload) = run(&workload(
        broker.port(),
        "payload1",
        20,
        HeaderPlace::Payload,
    ))
    .await;
    assert_nothing_lost(&in_payload);
    let per_message = |s: &loadgen::Summary| s.bytes_per_publish.expect("bytes per message");
    let extra = per_message(&property) - per_message(&in_payload);
    // 53 bytes of property in place of 16 bytes of header.
    assert!(
        (extra - 37.0).abs() < 0.5,
        "the property costs {extra:.2} bytes per message more than the header in the payload"
    );
    eprintln!(
        "bytes per PUBLISH: {:.1} with the header in a property (4 B payload), {:.1} in a 20 B payload",
        per_message(&property),
        per_message(&in_payload)
    );
}
