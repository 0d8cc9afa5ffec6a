//! Reconnect storms against a real Mosquitto: every client loses its connection at once and
//! comes back (the policy of `connection.reconnect`), subscribers to their kept sessions,
//! publishers sending their unacknowledged QoS 1 messages again. Two outages:
//! - Mosquitto restarted (SIGTERM, started again on the same port) with persistence on: it
//!   saves the sessions and their queues and loads them again;
//! - every connection cut by loadgen itself at one moment, against a broker that stays up.
//!
//! Both at QoS 1 with clean session off: every message is accounted for, with none lost
//! (duplicates are QoS 1's right), every connection back, and the time until the whole
//! fleet was back reported.

use std::time::Duration;

use loadgen::Summary;
use loadgen::result::{ReconnectOutcome, RunResult};
use loadgen::spec::{Pacing, Qos, Reconnect, Topology, WorkloadSpec};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};
use tokio_util::sync::CancellationToken;

const PAIRS: u32 = 4;
/// Messages per publisher at a message every 20 ms: 3 s.
const PACED_MESSAGES: u64 = 150;
/// Messages per publisher in the burst: several seconds at full speed on a 2-core machine,
/// every publisher's window of 20 full all along.
const BURST_MESSAGES: u64 = 20_000;

/// 4 publishers -> 4 subscribers in pairs at QoS 1, `messages` each every 20 ms (or as fast
/// as the window allows), clean session off, reconnecting within 20 s.
fn workload(
    port: u16,
    messages: u64,
    pacing: Pacing,
    cut_all_at: Option<Duration>,
) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.publishers = PAIRS;
    spec.subscribers = PAIRS;
    spec.topology = Topology::Pairs;
    spec.qos = Qos::AtLeastOnce;
    spec.messages_per_publisher = messages;
    spec.warmup_messages = 1;
    spec.pacing = pacing;
    spec.connection.clean_session = false;
    spec.connection.reconnect = Some(Reconnect {
        within: Duration::from_secs(20),
        retry: Duration::from_millis(100),
        cut_all_at,
    });
    spec
}

/// The checks both outages share: every connection lost once and back, nothing lost.
fn assert_whole_again(result: &RunResult, summary: &Summary) -> ReconnectOutcome {
    eprintln!("{}", loadgen::output::render_table(summary));
    let storm = result
        .reconnect
        .clone()
        .expect("a reconnecting run reports its storm");
    let connections = u64::from(2 * PAIRS);
    assert_eq!(storm.lost, connections, "{storm:?}");
    assert_eq!(storm.reconnected, connections, "{storm:?}");
    assert_eq!((storm.gave_up, storm.interrupted), (0, 0), "{storm:?}");
    assert_eq!(
        storm.sessions_resumed, connections,
        "Mosquitto kept every session: {storm:?}"
    );
    let whole_again = storm
        .full_reconnection_ns()
        .expect("every connection came back");
    assert!(
        whole_again > 0 && whole_again < 20_000_000_000,
        "{whole_again} ns"
    );
    let messages = result.spec.messages_per_publisher;
    assert_eq!(summary.expected_deliveries, u64::from(PAIRS) * messages);
    assert_eq!(summary.lost, Some(0), "{:?}", summary.errors);
    assert_eq!(
        summary.delivered_unique, summary.expected_deliveries,
        "every message accounted for"
    );
    assert!(
        summary.qos_violations.is_empty(),
        "{:?}",
        summary.qos_violations
    );
    for kind in [
        "connection_closed",
        "read_failed",
        "write_failed",
        "reconnect_gave_up",
    ] {
        assert!(!summary.errors.contains_key(kind), "{:?}", summary.errors);
    }
    eprintln!(
        "{} connections lost and back in {:.0} ms (each away p50 {:.0} ms, max {:.0} ms); \
         {} attempts ({:?} failed), {} messages sent again, {} duplicates",
        storm.lost,
        whole_again as f64 / 1e6,
        storm.time_away.value_at_quantile(0.5) as f64 / 1e6,
        storm.time_away.max() as f64 / 1e6,
        storm.attempts,
        storm.failures,
        storm.resent,
        summary.duplicates
    );
    storm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_mosquitto_restart_every_client_is_back_and_nothing_is_lost() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let mut broker = Mosquitto::start(MosquittoOptions {
        persistence: true,
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    let pid_before = broker.pid();
    let paced = Pacing::OpenLoop {
        interval: Duration::from_millis(20),
    };
    let spec = workload(broker.port(), PACED_MESSAGES, paced, None);
    let run =
        tokio::spawn(async move { loadgen::run(&spec, CancellationToken::new(), None).await });
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let restarted = std::time::Instant::now();
    tokio::task::block_in_place(|| broker.restart()).expect("mosquitto restarts");
    eprintln!("Mosquitto down and up again in {:?}", restarted.elapsed());
    let result = run
        .await
        .expect("the run's task")
        .expect("the run completes");
    let summary = Summary::of(&result);
    let storm = assert_whole_again(&result, &summary);
    assert!(
        storm.attempts >= storm.lost,
        "at least one attempt per loss: {storm:?}"
    );
    // A new process said "session present" to all 8: it had them from its database.
    assert_ne!(broker.pid(), pid_before, "Mosquitto was restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_of_every_connection_mid_burst_loses_nothing_with_kept_sessions() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let before = broker.counters_settled().expect("counters");
    let cut_at = Duration::from_millis(300);
    let spec = workload(broker.port(), BURST_MESSAGES, Pacing::Burst, Some(cut_at));
    let result = loadgen::run(&spec, CancellationToken::new(), None)
        .await
        .expect("the run completes");
    let after = broker.counters_settled().expect("counters");
    let summary = Summary::of(&result);
    let storm = assert_whole_again(&result, &summary);
    assert!(
        storm.resent > 0,
        "the cut caught unacknowledged messages in full windows, and they went out again: \
         {storm:?}"
    );
    // What Mosquitto received: every message once, plus what was sent again.
    let received = after.publish_received - before.publish_received;
    assert!(
        received >= summary.published && received <= summary.published + storm.resent,
        "Mosquitto received {received}, loadgen published {} and sent {} again",
        summary.published,
        storm.resent
    );
}
