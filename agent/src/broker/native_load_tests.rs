//! Brokers the native driver deploys, loaded by loadgen on loopback: every message
//! arrives, and what loadgen counts equals what the broker counts in its own `$SYS` tree.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::broker::test_support::{installed_or_skip, loopback_spec, tagged_processes};
use ::tests::load::{assert_nothing_lost, run};
use ::tests::sys_snapshot::{SysCounter, SysSnapshot};
use loadgen::Summary;
use loadgen::size::ByteSize;
use loadgen::spec::{Qos, WorkloadSpec};

/// Where a product's `$SYS` tree counts PUBLISH packets.
struct SysCounters {
    /// Those received from clients.
    received: SysCounter,
    /// Those delivered to clients, where it counts them.
    sent: Option<SysCounter>,
}

impl SysCounters {
    /// The mqttv5 broker's: every QoS, retained ones included.
    fn mqttv5() -> Self {
        Self {
            received: topic("$SYS/broker/messages/publish/received"),
            sent: Some(topic("$SYS/broker/messages/publish/sent")),
        }
    }

    /// aedes-stats': its "publish/sent" counts each message published to the broker by a
    /// client (its `publish` event, `$SYS` excluded); it counts no deliveries.
    fn aedes(instance: &str) -> Self {
        let id = recipes::aedes::broker_id(instance);
        Self {
            received: topic(&format!("$SYS/{id}/messages/publish/sent")),
            sent: None,
        }
    }

    /// amqtt's: PUBLISH packets in and out, every QoS; broadcast every second, not retained.
    fn amqtt() -> Self {
        Self {
            received: topic("$SYS/broker/messages/publish/received"),
            sent: Some(topic("$SYS/broker/messages/publish/sent")),
        }
    }

    /// rmqtt's counter plugin's, in the JSON its `$SYS` plugin publishes every second (node
    /// 0): clients' messages published and delivered ("custom"; the `$SYS` publishes and
    /// their deliveries are counted apart, as "system").
    fn rmqtt() -> Self {
        let metrics = |key: &str| SysCounter::JsonKey {
            topic: "$SYS/brokers/0/metrics".into(),
            key: key.into(),
        };
        Self {
            received: metrics("messages.publish.custom"),
            sent: Some(metrics("messages.delivered.custom")),
        }
    }

    fn counters(&self) -> Vec<SysCounter> {
        std::iter::once(self.received.clone())
            .chain(self.sent.clone())
            .collect()
    }

    fn read(&self, address: SocketAddr) -> SysSnapshot {
        SysSnapshot::read(address, &self.counters()).unwrap()
    }
}

fn topic(name: &str) -> SysCounter {
    SysCounter::Topic(name.into())
}

/// How long the counters may take to show a finished load (the brokers update them every
/// second; a loaded machine can delay that).
const SETTLE_DEADLINE: Duration = Duration::from_secs(20);

/// The broker's received and sent counts since `before`, once they show at least what
/// loadgen `published` and `delivered` (or at the deadline, whatever they show then), and a
/// bound on the `$SYS` deliveries the readings from `before` on caused.
fn counted_since(
    address: SocketAddr,
    counters: &SysCounters,
    before: &SysSnapshot,
    published: u64,
    delivered: u64,
) -> (u64, Option<u64>, u64) {
    let started = Instant::now();
    // The `before` reading's own deliveries came after the values it read; and each reading
    // may be sent one more update of each topic between taking its values and leaving.
    let slack = counters.counters().len() as u64;
    let mut readers = before.deliveries + slack;
    loop {
        let now = counters.read(address);
        readers += now.deliveries + slack;
        let received = now.get(&counters.received) - before.get(&counters.received);
        let sent = counters
            .sent
            .as_ref()
            .map(|counter| now.get(counter) - before.get(counter));
        // A broker counts a delivery after writing it, and may update its counters between
        // reading the two: both must have caught up.
        let caught_up = received >= published && sent.is_none_or(|sent| sent >= delivered);
        if caught_up || started.elapsed() > SETTLE_DEADLINE {
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
/// received by the broker, and (where it counts them) every one loadgen received was sent,
/// the readings' own `$SYS` deliveries being the only others.
fn assert_counts_agree(
    address: SocketAddr,
    counters: &SysCounters,
    before: &SysSnapshot,
    summary: &Summary,
    what: &str,
) {
    let (received, sent, readers) = counted_since(
        address,
        counters,
        before,
        summary.published,
        summary.received,
    );
    eprintln!(
        "{what}: loadgen published {} received {}; broker received {received} sent {sent:?} \
         (its $SYS readings took {readers})",
        summary.published, summary.received
    );
    assert_eq!(
        received, summary.published,
        "{what}: the broker's received count"
    );
    if let Some(sent) = sent {
        assert!(
            (summary.received..=summary.received + readers).contains(&sent),
            "{what}: the broker sent {sent}, loadgen received {} (+ at most {readers} $SYS)",
            summary.received
        );
    }
}

/// `product`, deployed by the native driver on loopback: 20 pairs x 500 messages at each QoS
/// and the study's 1 MB payload test deliver everything, and its `$SYS` counters (where it
/// has them) agree with loadgen's counts; after the stop none of its processes is left.
async fn counts_what_loadgen_counts(product: Product, counters: Option<SysCounters>) {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, product) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let name = counted(product);
    let spec = loopback_spec(&name, BrokerKind::Native { product });
    let broker = tokio::time::timeout(Duration::from_secs(90), driver.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let address = broker.address();
    let counters = std::sync::Arc::new(counters);
    let read = |counters: &std::sync::Arc<Option<SysCounters>>| {
        let counters = counters.clone();
        tokio::task::spawn_blocking(move || counters.as_ref().as_ref().map(|c| c.read(address)))
    };
    for qos in [Qos::AtMostOnce, Qos::AtLeastOnce, Qos::ExactlyOnce] {
        let before = read(&counters).await.unwrap();
        let workload = logged_in(pairs_workload(address, qos, 20, 500), product);
        let (_, summary) = run(&workload).await;
        assert_eq!(summary.published, 20 * 500, "{product}, QoS {qos:?}");
        assert_nothing_lost(&summary);
        let what = format!("{product}: 20 pairs x 500 at QoS {qos:?}");
        let counters = counters.clone();
        tokio::task::spawn_blocking(move || {
            if let (Some(counters), Some(before)) = (counters.as_ref(), before) {
                assert_counts_agree(address, counters, &before, &summary, &what);
            }
        })
        .await
        .unwrap();
    }
    let before = read(&counters).await.unwrap();
    let mut megabyte = ::tests::load::megabyte_workload();
    megabyte.broker.host = address.ip().to_string();
    megabyte.broker.port = address.port();
    let (_, summary) = run(&logged_in(megabyte, product)).await;
    assert_nothing_lost(&summary);
    let what = format!("{product}: 1 MB payloads at QoS 1");
    tokio::task::spawn_blocking(move || {
        if let (Some(counters), Some(before)) = (counters.as_ref(), before) {
            assert_counts_agree(address, counters, &before, &summary, &what);
        }
    })
    .await
    .unwrap();

    tokio::time::timeout(Duration::from_secs(30), broker.stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    assert_eq!(tagged_processes(&name), Vec::<u32>::new());
}

/// `workload` with the login `product`'s anonymous access asks for, if any.
fn logged_in(mut workload: WorkloadSpec, product: Product) -> WorkloadSpec {
    if let Some(login) = recipes::anonymous_login(product) {
        workload.broker.username = Some(login.username.into());
        workload.broker.password = Some(login.password.into());
    }
    workload
}

/// The instance name of `product`'s test: one per product, as a test run in one process
/// (`cargo test`) runs several at once.
fn counted(product: Product) -> String {
    format!("counted-{product}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqttv5_the_agent_deploys_counts_what_loadgen_counts_at_every_qos_and_1mb() {
    counts_what_loadgen_counts(Product::Mqttv5, Some(SysCounters::mqttv5())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqtt_the_agent_deploys_counts_what_loadgen_counts_at_every_qos_and_1mb() {
    counts_what_loadgen_counts(Product::Amqtt, Some(SysCounters::amqtt())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aedes_the_agent_deploys_counts_what_loadgen_counts_at_every_qos_and_1mb() {
    let counters = SysCounters::aedes(&counted(Product::Aedes));
    counts_what_loadgen_counts(Product::Aedes, Some(counters)).await;
}

/// ActiveMQ has no `$SYS` tree (its statistics are behind JMX, which the recipe keeps
/// closed): every message must still arrive, at every QoS and at 1 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activemq_the_agent_deploys_delivers_everything_at_every_qos_and_1mb() {
    counts_what_loadgen_counts(Product::ActiveMq, None).await;
}

/// ejabberd's counters are behind its admin interfaces (ejabberdctl over Erlang
/// distribution, or the HTTP API), which the recipe keeps closed: every message must still
/// arrive, at every QoS and at 1 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ejabberd_the_agent_deploys_delivers_everything_at_every_qos_and_1mb() {
    counts_what_loadgen_counts(Product::Ejabberd, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmqtt_the_agent_deploys_counts_what_loadgen_counts_at_every_qos_and_1mb() {
    counts_what_loadgen_counts(Product::Rmqtt, Some(SysCounters::rmqtt())).await;
}
