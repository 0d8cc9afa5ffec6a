//! loadgen against real brokers: its counts must equal the broker's own counters, loss must
//! equal what the broker says it dropped, and 1 MB payloads must make it through.

use std::time::Duration;

use loadgen::Summary;
use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, Qos, Topology, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, RabbitMq, skip_unless_installed};
use tokio_util::sync::CancellationToken;

/// A burst workload of `pairs` publisher/subscriber pairs against 127.0.0.1:`port`.
fn pairs_workload(port: u16, qos: Qos, pairs: u32, messages: u64) -> WorkloadSpec {
    let mut spec = loadgen::presets::throughput();
    spec.broker.port = port;
    spec.qos = qos;
    spec.publishers = pairs;
    spec.subscribers = pairs;
    spec.messages_per_publisher = messages;
    spec.payload = ByteSize(32);
    spec.drain.idle = Duration::from_secs(3);
    spec
}

/// The study's payload test shape with 1 MB payloads, against `port`.
fn megabyte_workload(port: u16) -> WorkloadSpec {
    let mut spec = tests::load::megabyte_workload();
    spec.broker.port = port;
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_counts_what_loadgen_counts_at_every_qos() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    // QoS 2 is checked against the broker's log below: $SYS leaves QoS 2 publishes out.
    for qos in [Qos::AtMostOnce, Qos::AtLeastOnce] {
        let before = broker.counters_settled().expect("counters before");
        let (_, summary) = run(&pairs_workload(broker.port(), qos, 20, 500)).await;
        let after = broker.counters_settled().expect("counters after");
        assert_eq!(summary.published, 20 * 500, "QoS {qos:?}");
        assert_eq!(
            after.publish_received - before.publish_received,
            summary.published,
            "broker's received count, QoS {qos:?}"
        );
        assert_eq!(
            after.publish_sent - before.publish_sent,
            summary.received,
            "broker's sent count, QoS {qos:?}"
        );
        assert_eq!(after.publish_dropped, before.publish_dropped, "QoS {qos:?}");
        if qos != Qos::AtMostOnce {
            assert_eq!(
                summary.acknowledged, summary.published,
                "every QoS {qos:?} publish acknowledged"
            );
        }
        assert_nothing_lost(&summary);
    }
}

/// Lines of Mosquitto's debug log that record `action` ("Received PUBLISH from", "Sending
/// PUBLISH to") for clients of run `run_id`.
fn logged(log: &str, action: &str, run_id: &str) -> u64 {
    log.lines()
        .filter(|line| line.contains(action) && line.contains(&format!("-{run_id}-")))
        .count() as u64
}

/// A Mosquitto that logs every packet to a file it flushes line by line (its stdout is
/// block-buffered, so the last lines of a run may not be there yet). Returns the broker, the
/// folder that must outlive it, and the log's path.
fn debug_logging_broker() -> (Mosquitto, tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    // Mosquitto started as root drops to its own user, which must be able to write here.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let log = dir.path().join("debug.log");
    let broker = Mosquitto::start(MosquittoOptions {
        extra_config: vec![
            "log_type all".to_string(),
            format!("log_dest file {}", log.display()),
        ],
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    (broker, dir, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_counts_what_loadgen_counts_at_qos2() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // Mosquitto 2.0 leaves QoS 2 out of $SYS/broker/publish/messages/received (it tests
    // `(command & 0xF5) == PUBLISH`, and 0xF5 keeps the QoS 2 bit), so the broker's own
    // record here is its debug log, one line per PUBLISH received and sent.
    let (broker, _dir, log_file) = debug_logging_broker();
    let mut spec = pairs_workload(broker.port(), Qos::ExactlyOnce, 10, 200);
    spec.run_id = Some("qos2count".to_string());
    let before = broker.counters_settled().expect("counters before");
    let (_, summary) = run(&spec).await;
    let after = broker.counters_settled().expect("counters after");
    let log = std::fs::read_to_string(&log_file).expect("debug log");
    assert_eq!(summary.published, 2_000);
    assert_eq!(
        logged(&log, "Received PUBLISH from", "qos2count"),
        summary.published
    );
    assert_eq!(
        logged(&log, "Sending PUBLISH to", "qos2count"),
        summary.received
    );
    assert_eq!(after.publish_sent - before.publish_sent, summary.received);
    assert_eq!(summary.acknowledged, summary.published);
    assert_nothing_lost(&summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_silently_drops_qos2_beyond_its_inflight_limit_and_loadgen_sees_it() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // An MQTT 3.1.1 publisher cannot learn the broker's in-flight limit (20 by default). Past
    // it, Mosquitto 2.0 completes the QoS 2 handshake but never forwards the message, and
    // counts no drop: only an end-to-end count can see it.
    let (broker, _dir, log_file) = debug_logging_broker();
    let mut spec = pairs_workload(broker.port(), Qos::ExactlyOnce, 1, 500);
    spec.connection.inflight = 100;
    spec.run_id = Some("qos2drop".to_string());
    let before = broker.counters_settled().expect("counters before");
    let (_, summary) = run(&spec).await;
    let after = broker.counters_settled().expect("counters after");
    let log = std::fs::read_to_string(&log_file).expect("debug log");
    assert_eq!(
        summary.acknowledged, summary.published,
        "the broker completed every handshake"
    );
    assert_eq!(
        logged(&log, "Received PUBLISH from", "qos2drop"),
        500,
        "and received every PUBLISH"
    );
    let forwarded = logged(&log, "Sending PUBLISH to", "qos2drop");
    assert_eq!(
        forwarded, summary.received,
        "loadgen received what the broker forwarded"
    );
    let lost = summary.lost.expect("whole workload");
    assert!(
        lost > 0,
        "Mosquitto is expected to lose some of 500 QoS 2 messages sent 100 at a time"
    );
    assert_eq!(lost, 500 - forwarded);
    assert_eq!(
        after.publish_dropped, before.publish_dropped,
        "the broker counted no drop"
    );
    assert_eq!(
        summary.qos_violations,
        vec![format!("QoS 2 lost {lost} deliveries")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_drops_for_a_slow_subscriber_are_the_loss_loadgen_reports() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions {
        max_queued_messages: Some(10),
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    let mut spec = pairs_workload(broker.port(), Qos::AtMostOnce, 1, 20_000);
    spec.payload = ByteSize(1_000);
    spec.subscriber_rate_limit = Some(20_000);
    let before = broker.counters_settled().expect("counters before");
    let (_, summary) = run(&spec).await;
    let after = broker.counters_settled().expect("counters after");
    let dropped = after.publish_dropped - before.publish_dropped;
    assert!(
        dropped > 0,
        "the slow subscriber must make Mosquitto drop (dropped {dropped})"
    );
    assert_eq!(
        after.publish_received - before.publish_received,
        summary.published
    );
    assert_eq!(
        summary.lost,
        Some(dropped),
        "loadgen's loss equals Mosquitto's drop count"
    );
    assert_eq!(summary.received + dropped, summary.published);
    assert!(summary.qos_violations.is_empty(), "loss is legal at QoS 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_carries_1mb_payloads_at_qos1() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let (result, summary) = run(&megabyte_workload(broker.port())).await;
    assert_eq!(summary.published, 30);
    assert_nothing_lost(&summary);
    assert_eq!(
        result.latency.len(),
        25,
        "every measured 1 MB message has a latency"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_preset_reports_sub_millisecond_medians_on_loopback() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = loadgen::presets::latency();
    spec.broker.port = broker.port();
    spec.messages_per_publisher = 8;
    let (_, summary) = run(&spec).await;
    assert_nothing_lost(&summary);
    assert_eq!(summary.latency.count, 100 * 6);
    eprintln!(
        "latency preset on loopback: p50 {:.1} µs, p99 {:.1} µs, send delay p50 {:.1} µs",
        summary.latency.p50_us, summary.latency.p99_us, summary.send_delay.p50_us
    );
    assert!(
        summary.latency.p50_us < 1_000.0,
        "median {} µs",
        summary.latency.p50_us
    );
    assert!(summary.latency.min_us > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt5_runs_end_to_end() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    for qos in [Qos::AtLeastOnce, Qos::ExactlyOnce] {
        let mut spec = pairs_workload(broker.port(), qos, 4, 300);
        spec.broker.protocol = loadgen::spec::MqttVersion::V5;
        spec.topology = Topology::FanOut;
        spec.publishers = 2;
        let before = broker.counters_settled().expect("counters before");
        let (_, summary) = run(&spec).await;
        let after = broker.counters_settled().expect("counters after");
        if qos == Qos::AtLeastOnce {
            // $SYS leaves QoS 2 publishes out of this counter (see the QoS 2 test above).
            assert_eq!(
                after.publish_received - before.publish_received,
                summary.published
            );
        }
        assert_eq!(after.publish_sent - before.publish_sent, summary.received);
        assert_eq!(
            summary.expected_deliveries,
            2 * 300 * 2,
            "each message reaches its 2 subscribers"
        );
        assert_eq!(summary.lost, Some(0));
        assert_eq!(summary.received, summary.expected_deliveries);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_counts_what_loadgen_counts_and_carries_1mb() {
    skip_unless_installed!(tests::rabbitmq::RABBITMQ_SERVER);
    let broker = RabbitMq::start().expect("rabbitmq starts");
    // RabbitMQ 3.10 grants QoS 2 subscriptions as QoS 1 and treats QoS 2 publishes as QoS 1:
    // deliveries must still be complete.
    for qos in [Qos::AtMostOnce, Qos::AtLeastOnce, Qos::ExactlyOnce] {
        let before = broker.counters_settled().expect("counters before");
        let (_, summary) = run(&pairs_workload(broker.port(), qos, 10, 300)).await;
        let after = broker.counters_settled().expect("counters after");
        assert_eq!(summary.published, 10 * 300, "QoS {qos:?}");
        assert_eq!(
            after.messages_received - before.messages_received,
            summary.published,
            "RabbitMQ's received count, QoS {qos:?}"
        );
        assert_eq!(
            after.messages_delivered - before.messages_delivered,
            summary.received,
            "RabbitMQ's delivered count, QoS {qos:?}"
        );
        assert_eq!(summary.received, summary.published, "QoS {qos:?}");
        assert_eq!(summary.lost, Some(0), "QoS {qos:?}");
    }
    let (_, summary) = run(&megabyte_workload(broker.port())).await;
    assert_eq!(summary.published, 30);
    assert_nothing_lost(&summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_at_one_start_barrier_merge_into_the_whole_run() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    // Publishers on one instance, subscribers on the other, as agents on two nodes would.
    let mut whole = loadgen::presets::latency();
    whole.broker.port = broker.port();
    whole.publishers = 20;
    whole.subscribers = 2;
    whole.messages_per_publisher = 10;
    whole.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(50),
    };
    whole.run_id = Some("barrier".to_string());
    let shard = |publishers: std::ops::Range<u32>, subscribers: std::ops::Range<u32>| {
        let mut spec = whole.clone();
        spec.shard = Some(loadgen::spec::Shard {
            publishers,
            subscribers,
        });
        spec
    };
    let (publishing, subscribing) = (shard(0..20, 0..0), shard(0..0, 0..2));
    let origin = loadgen::clock::unix_now_ns();
    let barrier = loadgen::StartBarrier {
        origin_unix_ns: Some(origin),
        start_at_ns: Some(2_000_000_000),
    };
    let (published, received) = tokio::join!(
        loadgen::run_at(&publishing, barrier, CancellationToken::new(), None),
        loadgen::run_at(&subscribing, barrier, CancellationToken::new(), None),
    );
    let (mut merged, received) = (
        published.expect("publishing shard"),
        received.expect("subscribing shard"),
    );
    assert_eq!(
        Summary::of(&received).lost,
        None,
        "one shard alone cannot judge loss"
    );
    merged.merge(&received).expect("shards of one run merge");
    let summary = Summary::of(&merged);
    assert_eq!(summary.published, 200);
    assert_eq!(summary.expected_deliveries, 400);
    assert_nothing_lost(&summary);
    assert_eq!(
        summary.latency.count,
        2 * 20 * 8,
        "measured messages at both subscribers"
    );
    // Both instances stamped on one timeline: latencies are small and positive.
    assert!(
        summary.latency.min_us > 0.0 && summary.latency.p50_us < 5_000.0,
        "{:?}",
        summary.latency
    );
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    // Nothing was published before the barrier: the first publish window starts at 2 s.
    assert!(
        summary.publish_rate.window_start_ms >= 2_000.0,
        "{:?}",
        summary.publish_rate
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_start_barrier_is_an_error_not_a_late_start() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let spec = pairs_workload(broker.port(), Qos::AtMostOnce, 2, 10);
    let barrier = loadgen::StartBarrier {
        origin_unix_ns: Some(loadgen::clock::unix_now_ns() - 5_000_000_000),
        start_at_ns: Some(1_000_000_000),
    };
    let error = loadgen::run_at(&spec, barrier, CancellationToken::new(), None)
        .await
        .expect_err("4 s late");
    assert!(
        matches!(error, loadgen::LoadgenError::StartMissed { .. }),
        "{error}"
    );
}
