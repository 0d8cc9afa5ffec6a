//! loadgen over MQTT-over-QUIC against a real broker that speaks it: the mqttv5 broker with the
//! agent's config and a QUIC listener (`tests::mqttv5`). As over TCP, every message must
//! arrive and the broker's `$SYS` counts of PUBLISH packets received and sent must equal
//! loadgen's: for the study's latency test, 1 MB payloads, a sustained rate judged steady by
//! loadgen, and churn; a burst at QoS 1 counted the same; a reconnect storm over QUIC
//! brings every connection back and accounts for every message, with 0-RTT accepted by the
//! same broker and rejected by one restarted behind its address; refusals name the field or
//! the reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use domain::QuicDelivery;
use loadgen::Summary;
use loadgen::size::ByteSize;
use loadgen::spec::{
    Churn, Pacing, Qos, QuicStreams, Reconnect, TopicTree, Topology, Transport, WorkloadSpec,
};
use tests::load::{assert_nothing_lost, assert_transport_steady, megabyte_workload, run};
use tests::mqttv5::{MQTTV5_BINARY, Mqttv5};
use tests::ports::LOOPBACK;
use tests::skip_unless_installed;
use tests::sys_snapshot::{SysCounter, SysSnapshot};
use tests::udp_relay::UdpRelay;
use tokio_util::sync::CancellationToken;

/// `spec` over QUIC to `broker`'s QUIC listener, trusting its test CA.
fn over_quic(mut spec: WorkloadSpec, broker: &Mqttv5) -> WorkloadSpec {
    spec.broker.host = "127.0.0.1".to_string();
    spec.broker.port = broker.quic_port();
    spec.broker.transport = Transport::Quic;
    spec.broker.tls_ca_file = Some(broker.ca_file().to_path_buf());
    spec
}

/// The study's latency test, shortened: 100 publishers at 4 msg/s each to one subscriber,
/// 8 messages each (2 of them warm-up), QoS 1.
fn latency_workload() -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.messages_per_publisher = 8;
    spec
}

/// How long the broker's counters may take to show a finished load (it updates them every
/// second; a loaded machine can delay that).
const SETTLE_DEADLINE: Duration = Duration::from_secs(20);

/// Runs `spec` and checks the broker's PUBLISH counts since before the run against loadgen's:
/// received equal to what loadgen published; sent equal to what loadgen received, plus at most
/// the `$SYS` publishes the readings themselves were sent.
async fn counted_run(broker: &Mqttv5, spec: WorkloadSpec, dedicated: bool) -> Summary {
    counted_run_losing_at_goodbye(broker, spec, dedicated, 0).await
}

/// [`counted_run`], where the broker may have received up to `goodbye_losses` fewer PUBLISH
/// than loadgen sent: QoS 0 messages on streams of their own, which mqttv5 drops when it
/// handles the DISCONNECT on the control stream first (it reads its streams apart).
async fn counted_run_losing_at_goodbye(
    broker: &Mqttv5,
    spec: WorkloadSpec,
    dedicated: bool,
    goodbye_losses: u64,
) -> Summary {
    let [received, sent] = Mqttv5::counters();
    let before = broker.read_counters().expect("counters before");
    let summary = if dedicated {
        tests::load::run_dedicated(spec).await.1
    } else {
        run(&spec).await.1
    };
    let started = Instant::now();
    let mut readers = before.deliveries + 2;
    let (broker_received, broker_sent) = loop {
        let now = broker.read_counters().expect("counters after");
        readers += now.deliveries + 2;
        let counts = (
            now.get(&received) - before.get(&received),
            now.get(&sent) - before.get(&sent),
        );
        let caught_up =
            counts.0 + goodbye_losses >= summary.published && counts.1 >= summary.received;
        if caught_up || started.elapsed() > SETTLE_DEADLINE {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "{}: loadgen published {} received {}; mqttv5 received {broker_received} sent \
         {broker_sent} (its $SYS readings took at most {readers}); latency p50 {:.0} µs p99 \
         {:.0} µs; connect p50 {:.0} µs p99 {:.0} µs",
        summary.broker,
        summary.published,
        summary.received,
        summary.latency.p50_us,
        summary.latency.p99_us,
        summary.connect_time.p50_us,
        summary.connect_time.p99_us,
    );
    assert!(
        (summary.published - goodbye_losses..=summary.published).contains(&broker_received),
        "the broker received {broker_received} of the {} loadgen published (at most \
         {goodbye_losses} fewer)",
        summary.published
    );
    assert!(
        (summary.received..=summary.received + readers).contains(&broker_sent),
        "the broker sent {broker_sent}, loadgen received {} (+ at most {readers} $SYS)",
        summary.received
    );
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latency_run_over_quic_delivers_everything_and_mqttv5_counts_the_same() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    // The same workload over TCP first, to compare connect time and latency.
    let mut tcp = latency_workload();
    tcp.broker.port = broker.address().port();
    let over_tcp = counted_run(&broker, tcp, false).await;
    assert_nothing_lost(&over_tcp);
    let summary = counted_run(&broker, over_quic(latency_workload(), &broker), false).await;
    assert_eq!(
        summary.broker,
        format!("mqtt+quic://127.0.0.1:{}", broker.quic_port())
    );
    assert_eq!(summary.published, 100 * 8);
    assert_eq!(
        summary.acknowledged, summary.published,
        "QoS 1: all acknowledged"
    );
    assert_eq!(
        summary.latency.count,
        100 * 6,
        "every measured message timed"
    );
    assert_eq!(
        summary.connect_time.count, 101,
        "every client's handshake timed"
    );
    let on_host = summary
        .broker_on_host
        .as_ref()
        .expect("mqttv5's process found on this host by its UDP socket");
    assert_eq!(on_host.command, "mqttv5");
    assert_nothing_lost(&summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_megabyte_payloads_over_quic_arrive_whole() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let summary = counted_run(&broker, over_quic(megabyte_workload(), &broker), false).await;
    assert_eq!(summary.published, 5 * 6);
    assert_nothing_lost(&summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sustained_run_over_quic_is_steady_at_qos_1() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let mut spec = loadgen::presets::throughput();
    spec.publishers = 10;
    spec.subscribers = 10;
    spec.qos = Qos::AtLeastOnce;
    spec.payload = ByteSize(32);
    spec.messages_per_publisher = 0;
    spec.duration = Some(Duration::from_secs(4));
    spec.warmup = Some(Duration::from_secs(1));
    spec.pacing = Pacing::Rate { rate: 1_000 };
    let summary = counted_run(&broker, over_quic(spec, &broker), true).await;
    assert_eq!(summary.lost, Some(0));
    assert_transport_steady(&summary);
}

/// The broker's count of clients connected now (the reading client included).
fn read_connected(broker: &Mqttv5) -> u64 {
    let connected = SysCounter::Topic("$SYS/broker/clients/connected".into());
    SysSnapshot::read(broker.address(), std::slice::from_ref(&connected))
        .expect("clients/connected")
        .get(&connected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_over_quic_connects_and_leaves_every_client() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let mut spec = loadgen::presets::latency();
    spec.publishers = 2;
    spec.messages_per_publisher = 10;
    spec.warmup_messages = 1;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(100),
    };
    spec.churn = Some(Churn {
        rate: 100.0,
        connections: 200,
        hold: Duration::from_millis(150),
    });
    let connected_before = read_connected(&broker);
    let summary = counted_run(&broker, over_quic(spec, &broker), false).await;
    let churn = summary.churn.as_ref().expect("a churn summary");
    assert_eq!(churn.attempted, 200);
    assert_eq!(churn.connected, 200, "{:?}", churn.failures);
    assert_eq!(churn.disconnected, 200);
    assert!(churn.failures.is_empty(), "{:?}", churn.failures);
    assert_eq!(churn.connect_time.count, 200, "each QUIC handshake timed");
    assert_eq!(summary.lost, Some(0), "the workload beside it lost nothing");
    // Every churned client is gone from the broker too: its connected count is back where it
    // was (or below: a count taken on the broker's 1 s timer may still hold an earlier
    // reading's client, never 200 churned ones).
    let started = Instant::now();
    let connected_after = loop {
        let now = read_connected(&broker);
        if now <= connected_before || started.elapsed() > SETTLE_DEADLINE {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        connected_after <= connected_before,
        "clients connected to mqttv5: {connected_before} before the churn, {connected_after} after"
    );
    eprintln!(
        "churn over QUIC: {} connected, connect p50 {:.0} µs p99 {:.0} µs, {} at once",
        churn.connected, churn.connect_time.p50_us, churn.connect_time.p99_us, churn.most_open
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_quic_at_qos_1_is_counted_exactly() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let mut spec = loadgen::presets::throughput();
    spec.publishers = 5;
    spec.subscribers = 5;
    spec.qos = Qos::AtLeastOnce;
    spec.messages_per_publisher = 2_000;
    spec.warmup_messages = 100;
    assert_eq!(spec.pacing, Pacing::Burst);
    let summary = counted_run(&broker, over_quic(spec, &broker), false).await;
    assert_eq!(summary.published, 5 * 2_000);
    assert_eq!(summary.acknowledged, summary.published);
    assert_nothing_lost(&summary);
}

/// Publisher and subscriber pairs of a reconnect storm.
const STORM_PAIRS: u32 = 4;

/// A storm's workload: [`STORM_PAIRS`] pairs at QoS 1 with kept sessions, `messages` each at
/// 50 msg/s, every client back within 20 s of a loss; loadgen cuts every connection at
/// `cut_all_at`.
fn storm_workload(messages: u64, cut_all_at: Option<Duration>) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.publishers = STORM_PAIRS;
    spec.subscribers = STORM_PAIRS;
    spec.topology = Topology::Pairs;
    spec.qos = Qos::AtLeastOnce;
    spec.messages_per_publisher = messages;
    spec.warmup_messages = 1;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(20),
    };
    spec.connection.clean_session = false;
    spec.connection.reconnect = Some(Reconnect {
        within: Duration::from_secs(20),
        retry: Duration::from_millis(100),
        cut_all_at,
    });
    spec
}

/// Every connection cut by loadgen at one moment, over QUIC, with 0-RTT or without: each comes
/// back through a new QUIC handshake, and every message is accounted for, delivered or lost.
/// (This mqttv5 keeps no session of a client that left, as the capability probe finds, so
/// what its subscribers missed while away is lost, and counted as such.)
async fn storm_over_quic(
    broker: &Mqttv5,
    zero_rtt: bool,
    streams: QuicStreams,
) -> loadgen::result::ReconnectOutcome {
    let mut spec = over_quic(storm_workload(150, Some(Duration::from_secs(1))), broker);
    spec.broker.quic_zero_rtt = zero_rtt;
    spec.broker.quic_streams = streams;
    let result = loadgen::run(&spec, CancellationToken::new(), None)
        .await
        .expect("the run completes");
    every_connection_back(
        &result,
        &format!("reconnect storm over QUIC ({streams}), 0-RTT {zero_rtt}"),
    )
}

/// The storm of `result`, once every connection lost came back once and every message is
/// accounted for: acknowledged in the end, delivered or counted lost.
fn every_connection_back(
    result: &loadgen::result::RunResult,
    what: &str,
) -> loadgen::result::ReconnectOutcome {
    let summary = Summary::of(result);
    let storm = result.reconnect.clone().expect("the storm is reported");
    let connections = u64::from(2 * STORM_PAIRS);
    eprintln!(
        "{what}: {storm:?}; time away p50 {:.2} ms; \
         delivered {} of {}, lost {:?}",
        summary
            .reconnect
            .as_ref()
            .map_or(0.0, |r| r.time_away.p50_us / 1e3),
        summary.delivered_unique,
        summary.expected_deliveries,
        summary.lost
    );
    assert_eq!(storm.lost, connections, "{storm:?}");
    assert_eq!(storm.reconnected, connections, "{storm:?}");
    assert_eq!((storm.gave_up, storm.interrupted), (0, 0), "{storm:?}");
    assert_eq!(
        storm.time_away.len(),
        connections,
        "each time away measured"
    );
    assert_eq!(
        summary.published,
        u64::from(STORM_PAIRS) * result.spec.messages_per_publisher
    );
    assert_eq!(
        summary.acknowledged, summary.published,
        "every QoS 1 message acknowledged, in the end"
    );
    let lost = summary.lost.expect("the whole workload ran here");
    assert_eq!(
        summary.delivered_unique + lost,
        summary.expected_deliveries,
        "every message delivered or lost"
    );
    storm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_storm_over_quic_brings_every_connection_back() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let storm = storm_over_quic(&broker, false, QuicStreams::Single).await;
    assert_eq!(
        (storm.zero_rtt_attempted, storm.zero_rtt_accepted),
        (0, 0),
        "no 0-RTT unless asked"
    );
}

/// With `quic_zero_rtt`, each of the 8 clients comes back with a ticket of its own first
/// connection, sends CONNECT as early data, and mqttv5 (early data on) accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_0_rtt_every_client_resumes_with_its_own_ticket_and_mqttv5_accepts() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let storm = storm_over_quic(&broker, true, QuicStreams::Single).await;
    // Every reconnect attempt (8, unless one had to be tried again) held a ticket.
    assert_eq!(storm.zero_rtt_attempted, storm.attempts, "{storm:?}");
    assert_eq!(
        storm.zero_rtt_accepted, storm.zero_rtt_attempted,
        "mqttv5 takes early data: {storm:?}"
    );
}

/// 0-RTT with PUBLISH on a stream per topic: each client's CONNECT goes as early data on
/// the control stream, each publisher opens its topic's stream again on the new connection,
/// and everything is accounted for as with one stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_0_rtt_and_a_stream_per_topic_every_client_resumes_and_publishes_again() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let storm = storm_over_quic(&broker, true, QuicStreams::PerTopic).await;
    assert_eq!(storm.zero_rtt_attempted, storm.attempts, "{storm:?}");
    assert_eq!(
        (storm.zero_rtt_accepted, storm.zero_rtt_rejected),
        (storm.zero_rtt_attempted, 0),
        "mqttv5 takes early data: {storm:?}"
    );
    let streams = broker.data_streams_accepted().expect("mqttv5's log");
    assert_eq!(
        streams,
        2 * STORM_PAIRS as usize,
        "each publisher opened its topic's stream on both of its connections"
    );
}

/// A broker restarted behind its address knows no ticket of the one before. Two mqttv5
/// processes with one certificate stand behind a UDP relay; once every client is connected
/// through it to the first (and holds its tickets), the relay sends new connections to the
/// second, and loadgen cuts every connection at 3 s. Each client comes back with its ticket
/// and CONNECT as 0-RTT data; the second broker, whose ticket keys are its own, rejects the
/// early data once the handshake is done, and the client sends CONNECT again at once on a
/// full handshake. Every connection comes back, every message is accounted for. (The cut is
/// loadgen's: a broker stopped with Ctrl-C may exit before its QUIC goodbyes leave, and its
/// clients would then wait for QUIC's idle timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_rejects_0_rtt_and_every_client_comes_back_on_a_full_handshake() {
    skip_unless_installed!(MQTTV5_BINARY);
    let first = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let second = Mqttv5::start_with_the_certificate_of(&first).expect("a second mqttv5 starts");
    let relay = UdpRelay::start(SocketAddr::from((LOOPBACK, first.quic_port())))
        .await
        .expect("the relay starts");
    let mut spec = over_quic(storm_workload(250, Some(Duration::from_secs(3))), &first);
    spec.broker.port = relay.address().port();
    spec.broker.quic_zero_rtt = true;
    let run =
        tokio::spawn(async move { loadgen::run(&spec, CancellationToken::new(), None).await });

    // Connected and with its tickets: a client the first broker has answered a dozen times
    // (its tickets come with the end of the handshake, before CONNACK). The first flow is
    // loadgen's preflight probe, done before any client connects.
    let connections = 2 * STORM_PAIRS as usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    let clients_answered = |answers: Vec<u64>| answers.iter().skip(1).filter(|&&n| n >= 12).count();
    while clients_answered(relay.replies_per_flow()) < connections {
        assert!(
            Instant::now() < deadline && !run.is_finished(),
            "every client answered by the first broker within 30 s: {:?}",
            relay.replies_per_flow()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    relay.point_at(SocketAddr::from((LOOPBACK, second.quic_port())));
    let before = relay.replies_per_flow();
    eprintln!("answers per flow from the first broker: {before:?}");

    let result = run
        .await
        .expect("the run's task")
        .expect("the run completes");
    let storm = every_connection_back(&result, "the broker restarted behind its address");
    assert_eq!(
        (
            storm.zero_rtt_attempted,
            storm.zero_rtt_rejected,
            storm.zero_rtt_accepted
        ),
        (connections as u64, connections as u64, 0),
        "each client came back with its ticket and the new broker rejected every one: {storm:?}"
    );
    assert!(
        storm.failures.is_empty(),
        "a rejection is not a failed attempt, the full handshake follows at once: {storm:?}"
    );
    // Each client through the relay twice more: with 0-RTT (rejected), then on a full
    // handshake, both to the second broker.
    assert_eq!(
        relay.replies_per_flow().len() - before.len(),
        2 * connections
    );
}

/// Twelve publishers, each on a topic of its own in a tree, and one subscriber reading them
/// all through a wildcard, at `qos` over QUIC with PUBLISH on streams of the clients' own
/// (`streams`), against mqttv5 delivering every way it can: on the control stream, on a
/// stream it opens per topic, on one per message (the last two refused by the single-stream
/// mode). At QoS 1 every message arrives once and mqttv5's counts equal loadgen's; at QoS 0
/// mqttv5 may drop a publisher's last message when it handles the goodbye first, which
/// loadgen counts lost, and everything mqttv5 received was delivered. Its log counts the
/// clients' own streams: one per publisher, or one per message.
async fn streams_against_every_delivery(streams: QuicStreams, qos: Qos) {
    const PUBLISHERS: u32 = 12;
    const MESSAGES: u64 = 20;
    for delivery in [
        QuicDelivery::ControlOnly,
        QuicDelivery::PerTopic,
        QuicDelivery::PerPublish,
    ] {
        let broker = Mqttv5::start_with_quic_delivering(delivery).expect("mqttv5 starts");
        let mut spec = loadgen::presets::latency();
        spec.publishers = PUBLISHERS;
        spec.subscribers = 1;
        spec.topology = Topology::Tree;
        spec.topics = Some(TopicTree {
            pattern: "site/{site}".to_string(),
            counts: BTreeMap::from([("site".to_string(), PUBLISHERS)]),
            subscribe: vec!["site/+".to_string()],
        });
        spec.qos = qos;
        spec.messages_per_publisher = MESSAGES;
        spec.warmup_messages = 2;
        spec.pacing = Pacing::OpenLoop {
            interval: Duration::from_millis(20),
        };
        let mut spec = over_quic(spec, &broker);
        spec.broker.quic_streams = streams;
        // At QoS 0 nothing holds a publisher's goodbye until its last message is handled.
        let goodbye_losses = match qos {
            Qos::AtMostOnce => u64::from(PUBLISHERS),
            _ => 0,
        };
        let summary = counted_run_losing_at_goodbye(&broker, spec, false, goodbye_losses).await;
        let published = u64::from(PUBLISHERS) * MESSAGES;
        assert_eq!(summary.published, published, "{delivery:?}");
        if qos == Qos::AtMostOnce {
            let lost = summary.lost.expect("the whole workload ran here");
            assert!(lost <= goodbye_losses, "{delivery:?}: {lost} lost");
            assert_eq!(
                summary.delivered_unique + lost,
                summary.expected_deliveries,
                "{delivery:?}: every message delivered or lost"
            );
        } else {
            assert_eq!(summary.acknowledged, published, "{delivery:?}");
            assert_nothing_lost(&summary);
        }
        let opened = broker.data_streams_accepted().expect("mqttv5's log");
        eprintln!(
            "PUBLISH on {streams} streams, mqttv5 delivering {delivery:?}: {} delivered, \
             {opened} client streams beside the control streams",
            summary.delivered_unique
        );
        let expected = match streams {
            QuicStreams::PerTopic => u64::from(PUBLISHERS),
            QuicStreams::PerPublish => published,
            QuicStreams::Single => 0,
        };
        assert_eq!(opened as u64, expected, "{streams} against {delivery:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_per_topic_delivers_exactly_however_mqttv5_delivers() {
    skip_unless_installed!(MQTTV5_BINARY);
    streams_against_every_delivery(QuicStreams::PerTopic, Qos::AtLeastOnce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_per_publish_delivers_exactly_however_mqttv5_delivers() {
    skip_unless_installed!(MQTTV5_BINARY);
    // At QoS 0 mqttv5 delivers each message on a unidirectional stream of its own.
    streams_against_every_delivery(QuicStreams::PerPublish, Qos::AtMostOnce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_without_a_ca_is_refused_naming_the_field() {
    let mut spec = latency_workload();
    spec.broker.transport = Transport::Quic;
    let error = spec.validate().expect_err("QUIC needs a CA");
    let shown = error.to_string();
    assert!(shown.contains("broker.transport"), "{shown}");
    assert!(shown.contains("broker.tls_ca_file"), "{shown}");
    let error = loadgen::run(&spec, CancellationToken::new(), None)
        .await
        .expect_err("refused before any connection");
    assert!(error.to_string().contains("broker.tls_ca_file"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_to_the_brokers_tcp_port_fails_as_unreachable() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let mut spec = over_quic(latency_workload(), &broker);
    // Its TCP port: no QUIC listener on that UDP port.
    spec.broker.port = broker.address().port();
    spec.connection.connect_timeout = Duration::from_secs(3);
    let started = Instant::now();
    let error = loadgen::run(&spec, CancellationToken::new(), None)
        .await
        .expect_err("nothing answers QUIC there");
    let shown = error.to_string();
    eprintln!("after {:?}: {shown}", started.elapsed());
    assert!(
        matches!(error, loadgen::LoadgenError::BrokerUnreachable { .. }),
        "{shown}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bounded by the connect timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_delivering_on_streams_of_its_own_fails_the_run_saying_so() {
    skip_unless_installed!(MQTTV5_BINARY);
    // Also the check that the test broker's delivery is what it was asked to be.
    for delivery in [QuicDelivery::PerTopic, QuicDelivery::PerPublish] {
        let broker = Mqttv5::start_with_quic_delivering(delivery).expect("mqttv5 starts");
        let mut spec = over_quic(latency_workload(), &broker);
        spec.publishers = 2;
        let result = loadgen::run(&spec, CancellationToken::new(), None)
            .await
            .expect("the run completes, with what it lost");
        let (_, summary) = tests::load::summarised(result);
        assert!(
            summary.errors.contains_key("broker_opened_a_quic_stream"),
            "{delivery:?}: errors must say why: {:?}",
            summary.errors
        );
        assert!(
            summary.lost.is_some_and(|lost| lost > 0),
            "{delivery:?}: what the broker put on its own streams is lost: {:?}",
            summary.lost
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quic_a_clean_disconnect_leaves_no_will_and_a_dropped_client_leaves_one() {
    skip_unless_installed!(MQTTV5_BINARY);
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts");
    let mut spec = loadgen::presets::latency();
    spec.publishers = 1;
    spec.messages_per_publisher = 30;
    spec.warmup_messages = 0;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(100),
    };
    spec.run_id = Some("quicwills".to_string());
    spec.wills = Some(loadgen::spec::Wills {
        clients: 40,
        dropped: 10,
        after: Duration::from_secs(1),
        delay: None,
        qos: Qos::AtLeastOnce,
        retain: false,
    });
    let (_, summary) = run(&over_quic(spec, &broker)).await;
    assert_nothing_lost(&summary);
    let wills = summary.wills.as_ref().expect("the watcher's verdict");
    assert!(wills.watched);
    assert_eq!((wills.connected, wills.failed), (40, 0));
    assert_eq!(
        (wills.dropped, wills.delivered, wills.missing()),
        (10, 10, 0),
        "each dropped client's will arrived: {wills:?}"
    );
    // A DISCONNECT the broker never read would have sent these clients' wills.
    assert_eq!(
        (wills.duplicates, wills.unexpected),
        (0, 0),
        "no will of a client that said goodbye"
    );
    assert_eq!(wills.disconnected, 30, "the others left cleanly");
}
