//! Churn against a real Mosquitto: a fleet of clients beside a small latency workload that
//! connect at a set rate, stay, and disconnect. Every accepted connection must be one the
//! broker counted: with clean session off each client leaves a session behind, so
//! `$SYS/broker/clients/total` grows by exactly the clients loadgen connected (the
//! workload's own and the preflight probe included), and `clients/connected` is back where it
//! was once they left. Arrivals a broker turns away are counted by kind.

use std::time::Duration;

use loadgen::spec::{Churn, Pacing, WorkloadSpec};
use tests::load::run;
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

/// 2 publishers -> 1 subscriber, 10 messages each every 100 ms: about a second of load that
/// the churn's messages-free clients arrive beside.
fn light_workload(port: u16) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.publishers = 2;
    spec.messages_per_publisher = 10;
    spec.warmup_messages = 1;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(100),
    };
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_connects_equal_what_mosquitto_counted() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = light_workload(broker.port());
    // Sessions stay behind: each accepted CONNECT is one more in clients/total.
    spec.connection.clean_session = false;
    spec.churn = Some(Churn {
        rate: 200.0,
        connections: 400,
        hold: Duration::from_millis(150),
    });
    let before = broker.counters_settled().expect("counters");
    let (result, summary) = run(&spec).await;
    let after = broker.counters_settled().expect("counters");

    let churn = summary.churn.as_ref().expect("a churn summary");
    assert_eq!(churn.attempted, 400);
    assert_eq!(churn.connected, 400, "{:?}", churn.failures);
    assert_eq!(churn.disconnected, 400);
    assert!(churn.failures.is_empty(), "{:?}", churn.failures);
    assert_eq!(churn.connect_time.count, 400);
    let achieved = churn.rate_achieved.expect("a rate");
    assert!(
        (achieved - 200.0).abs() < 200.0 * 0.05,
        "arrivals follow the schedule: {achieved:.1} /s"
    );
    // 400 arrivals 5 ms apart holding 150 ms: about 31 at once.
    assert!(
        (20..=60).contains(&churn.most_open),
        "at once: {}",
        churn.most_open
    );
    assert_eq!(summary.lost, Some(0), "the workload beside it lost nothing");

    let workload_clients = u64::from(spec.publishers + spec.subscribers) + 1;
    let total = |c: &tests::MosquittoCounters| c.clients_total.expect("clients/total");
    assert_eq!(
        total(&after) - total(&before),
        churn.connected + workload_clients,
        "every connection loadgen counted is a session Mosquitto kept"
    );
    assert_eq!(after.clients_connected, before.clients_connected);
    eprintln!(
        "churn: {} connected at {achieved:.1} /s, Mosquitto's clients/total +{}, connect p50 {:.0} µs p99 {:.0} µs, {} at once; result churn {:?}",
        churn.connected,
        total(&after) - total(&before),
        churn.connect_time.p50_us,
        churn.connect_time.p99_us,
        churn.most_open,
        result.churn.as_ref().map(|c| c.attempted)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_arrivals_over_a_brokers_limit_are_counted_by_kind() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // Mosquitto closes connections over its listener's max_connections before any CONNACK:
    // the workload's 3 clients fit, the fleet's 80 at once do not.
    let options = MosquittoOptions {
        extra_config: vec!["max_connections 12".to_string()],
        ..MosquittoOptions::default()
    };
    let broker = Mosquitto::start(options).expect("mosquitto starts");
    let mut spec = light_workload(broker.port());
    spec.churn = Some(Churn {
        rate: 400.0,
        connections: 200,
        hold: Duration::from_millis(200),
    });
    let (_, summary) = run(&spec).await;
    let churn = summary.churn.as_ref().expect("a churn summary");
    assert_eq!(churn.attempted, 200);
    let failed: u64 = churn.failures.values().sum();
    assert!(failed > 0, "over its limit Mosquitto turned some away");
    assert_eq!(
        churn.connected + failed,
        200,
        "each arrival was accepted or counted by kind: {:?}",
        churn.failures
    );
    eprintln!(
        "limit 12: {} connected, failures {:?}",
        churn.connected, churn.failures
    );
}
