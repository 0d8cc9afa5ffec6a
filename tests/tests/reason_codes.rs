//! A broker's refusal by reason code, against a real Mosquitto whose ACL lets clients read but
//! not publish: over MQTT 5 it answers each QoS 1 and QoS 2 PUBLISH with reason 0x87 (not
//! authorized), which loadgen counts by name as the broker's answer, with every delivery the
//! refused messages owed counted lost; over MQTT 3.1.1 the broker has no way to say so, and the
//! same messages are only lost. A CONNACK refusal ends a run with the refusal named by its
//! code, and a subscription granted below the QoS asked is counted. (SUBACK refusals and a
//! broker's own DISCONNECT are counted by their reason codes too, but Mosquitto 2.0.11 gives
//! neither: it grants subscriptions its ACL denies reading, and closes the socket without a
//! DISCONNECT on a session takeover, on shutdown, above `max_qos` and above its maximum packet
//! size alike; the codec's tests decode both.)

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

/// A run whose connections the broker refuses ends with the refusal named by its code.
async fn refusal_of(spec: &WorkloadSpec) -> String {
    match loadgen::run(spec, tokio_util::sync::CancellationToken::new(), None).await {
        Ok(_) => panic!("the broker was to refuse {:?}", spec.broker.protocol),
        Err(error) => error.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connack_refusal_is_named_by_its_reason_code() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // Only client ids starting `continuum` (the harness's own) may connect.
    let closed = Mosquitto::start(MosquittoOptions {
        extra_config: vec!["clientid_prefixes continuum".to_string()],
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    for protocol in [MqttVersion::V5, MqttVersion::V311] {
        let mut spec = workload(closed.port(), protocol, Qos::AtLeastOnce);
        spec.connection.client_id_prefix = "device".to_string();
        let refused = refusal_of(&spec).await;
        assert!(
            refused.contains("the broker refused CONNECT: connack_refused_not_authorized"),
            "MQTT {protocol}: {refused}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_granted_qos_is_counted_as_the_brokers_answer() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // Mosquitto's `max_qos 1`: a QoS 2 subscription is granted QoS 1.
    let broker = Mosquitto::start(MosquittoOptions {
        extra_config: vec!["max_qos 1".to_string()],
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    let mut spec = workload(broker.port(), MqttVersion::V5, Qos::AtLeastOnce);
    spec.subscriber_qos = Some(Qos::ExactlyOnce);
    let (_, granted) = run(&spec).await;
    assert_eq!(granted.lost, Some(0), "{:?}", granted.errors);
    assert_eq!(
        granted.errors.get("suback_granted_qos_1_below_asked"),
        Some(&1),
        "{:?}",
        granted.errors
    );
}
