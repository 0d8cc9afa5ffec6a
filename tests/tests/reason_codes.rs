//! A broker's refusal by reason code, against a real Mosquitto whose ACL lets clients read but
//! not publish: over MQTT 5 it answers each QoS 1 and QoS 2 PUBLISH with reason 0x87 (not
//! authorized), which loadgen counts by name as the broker's answer, with every delivery the
//! refused messages owed counted lost; over MQTT 3.1.1 the broker has no way to say so, and the
//! same messages are only lost.

use std::time::Duration;

use loadgen::spec::{MqttVersion, Pacing, Qos, WorkloadSpec};
use tests::load::run;
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

fn workload(port: u16, protocol: MqttVersion, qos: Qos) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker.protocol = protocol;
    spec.qos = qos;
    spec.publishers = 4;
    spec.messages_per_publisher = 10;
    spec.warmup_messages = 0;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(10),
    };
    spec.drain.idle = Duration::from_secs(1);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_refused_by_reason_code_are_counted_as_the_brokers_answer() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let acl = tempfile::NamedTempFile::new().expect("an ACL file");
    std::fs::write(acl.path(), "topic read #\n").expect("the ACL");
    // Mosquitto drops root for its own user before it reads the file.
    std::fs::set_permissions(
        acl.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("a readable ACL");
    let broker = Mosquitto::start(MosquittoOptions {
        extra_config: vec![format!("acl_file {}", acl.path().display())],
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    for (qos, refusal) in [
        (Qos::AtLeastOnce, "puback_refused_not_authorized"),
        (Qos::ExactlyOnce, "pubrec_refused_not_authorized"),
    ] {
        let (_, summary) = run(&workload(broker.port(), MqttVersion::V5, qos)).await;
        assert_eq!(summary.published, 40, "{qos:?}");
        assert_eq!(
            summary.errors.get(refusal),
            Some(&40),
            "{qos:?}: {:?}",
            summary.errors
        );
        assert_eq!(
            summary.acknowledged, 0,
            "{qos:?}: a refusal is no acknowledgement"
        );
        assert_eq!(
            summary.lost,
            Some(40),
            "{qos:?}: the refused messages reached no one"
        );
    }
    // MQTT 3.1.1 has no reason codes: Mosquitto acknowledges and drops, and the loss is all
    // there is to see.
    let (_, summary) = run(&workload(
        broker.port(),
        MqttVersion::V311,
        Qos::AtLeastOnce,
    ))
    .await;
    assert_eq!(summary.lost, Some(40));
    assert!(
        !summary.errors.keys().any(|k| k.contains("refused")),
        "{:?}",
        summary.errors
    );
}
