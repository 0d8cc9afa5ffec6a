//! Brokers the native driver deploys, loaded by loadgen on loopback: every message
//! arrives, and what loadgen counts equals what the broker counts in its own `$SYS` tree.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::broker::test_support::{installed_or_skip, loopback_spec, tagged_processes};
use ::tests::load::{assert_nothing_lost, run};
use ::tests::sys_snapshot::SysSnapshot;
use loadgen::Summary;
use loadgen::size::ByteSize;
use loadgen::spec::{Qos, WorkloadSpec};

/// The mqttv5 broker's counters of PUBLISH packets, every QoS, retained ones included.
const MQTTV5_RECEIVED: &str = "$SYS/broker/messages/publish/received";
const MQTTV5_SENT: &str = "$SYS/broker/messages/publish/sent";
/// How long the counters may take to show a finished load (the broker updates them every
/// second; a loaded machine can delay that).
const SETTLE_DEADLINE: Duration = Duration::from_secs(20);

/// The broker's received and sent counts since `before`, once its received count shows
/// `published` more (or at the deadline, whatever it shows then), and the deliveries the
/// readings from `before` on caused.
fn counted_since(address: SocketAddr, before: &SysSnapshot, published: u64) -> (u64, u64, u64) {
    let started = Instant::now();
    // The `before` reading's own deliveries came after the values it read.
    let mut readers = before.deliveries;
    loop {
        let now = SysSnapshot::read(address, &[MQTTV5_RECEIVED, MQTTV5_SENT]).unwrap();
        readers += now.deliveries;
        let received = now.get(MQTTV5_RECEIVED) - before.get(MQTTV5_RECEIVED);
        let sent = now.get(MQTTV5_SENT) - before.get(MQTTV5_SENT);
        if received >= published || started.elapsed() > SETTLE_DEADLINE {
            return (received, sent, readers);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `pairs` publisher/subscriber pairs, `messages` each, at `qos`, against `address`.
fn pairs_workload(address: SocketAddr, qos: Qos, pairs: u32, messages: u64) -> WorkloadSpec {
    let mut spec = loadgen::presets::throughput();
    spec.broker.host = address.ip().to_string();
    spec.broker.port = address.port();
    spec.qos = qos;
    spec.publishers = pairs;
    spec.subscribers = pairs;
    spec.messages_per_publisher = messages;
    spec.payload = ByteSize(32);
    spec.drain.idle = Duration::from_secs(3);
    spec
}

/// Checks one finished load against the broker's counters: every PUBLISH loadgen sent was
/// received by the broker, and every one loadgen received was sent (the readings' own
/// `$SYS` deliveries being the only others).
fn assert_counts_agree(address: SocketAddr, before: &SysSnapshot, summary: &Summary, what: &str) {
    let (received, sent, readers) = counted_since(address, before, summary.published);
    eprintln!(
        "{what}: loadgen published {} received {}; broker received {received} sent {sent} \
         (its $SYS readings took {readers})",
        summary.published, summary.received
    );
    assert_eq!(
        received, summary.published,
        "{what}: the broker's received count"
    );
    assert!(
        (summary.received..=summary.received + readers).contains(&sent),
        "{what}: the broker sent {sent}, loadgen received {} (+ at most {readers} $SYS)",
        summary.received
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqttv5_the_agent_deploys_counts_what_loadgen_counts_at_every_qos_and_1mb() {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::Mqttv5) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let spec = loopback_spec(
        "counted",
        BrokerKind::Native {
            product: Product::Mqttv5,
        },
    );
    let broker = tokio::time::timeout(Duration::from_secs(30), driver.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let address = broker.address();
    let read = move || {
        tokio::task::spawn_blocking(move || {
            SysSnapshot::read(address, &[MQTTV5_RECEIVED, MQTTV5_SENT]).unwrap()
        })
    };
    for qos in [Qos::AtMostOnce, Qos::AtLeastOnce, Qos::ExactlyOnce] {
        let before = read().await.unwrap();
        let (_, summary) = run(&pairs_workload(address, qos, 20, 500)).await;
        assert_eq!(summary.published, 20 * 500, "QoS {qos:?}");
        assert_nothing_lost(&summary);
        let what = format!("20 pairs x 500 at QoS {qos:?}");
        tokio::task::spawn_blocking(move || assert_counts_agree(address, &before, &summary, &what))
            .await
            .unwrap();
    }
    let before = read().await.unwrap();
    let mut megabyte = ::tests::load::megabyte_workload();
    megabyte.broker.host = address.ip().to_string();
    megabyte.broker.port = address.port();
    let (_, summary) = run(&megabyte).await;
    assert_nothing_lost(&summary);
    tokio::task::spawn_blocking(move || {
        assert_counts_agree(address, &before, &summary, "1 MB payloads at QoS 1")
    })
    .await
    .unwrap();

    tokio::time::timeout(Duration::from_secs(30), broker.stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    assert_eq!(tagged_processes("counted"), Vec::<u32>::new());
}
