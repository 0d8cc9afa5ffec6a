//! Topic trees against a real Mosquitto: publishers publish into `site/{site}/device/{id}/temp`,
//! subscribers read it through wildcard filters, and what arrives must be exactly the set the
//! filters match: each subscriber's deliveries are judged per (publisher, sequence) against the
//! publishers its filter matches (a message it should not get is an error), and the total
//! equals what the broker itself counts as sent.

use std::time::Duration;

use loadgen::size::ByteSize;
use loadgen::spec::{MqttVersion, Pacing, Qos, TopicTree, Topology, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const MESSAGES: u64 = 20;

/// 4 sites x 25 devices, one publisher per device's topic, `MESSAGES` each in a burst; four
/// subscribers: 0 and 2 read every device's temperature, 1 and 3 all of site 2.
fn tree_workload(port: u16) -> WorkloadSpec {
    let mut spec = loadgen::presets::throughput();
    spec.broker.port = port;
    spec.broker.protocol = MqttVersion::V5;
    spec.qos = Qos::AtLeastOnce;
    spec.publishers = 100;
    spec.subscribers = 4;
    spec.topology = Topology::Tree;
    spec.topics = Some(TopicTree {
        pattern: "site/{site}/device/{device}/temp".to_string(),
        counts: [("site".to_string(), 4), ("device".to_string(), 25)].into(),
        subscribe: vec!["site/+/device/+/temp".to_string(), "site/2/#".to_string()],
    });
    spec.messages_per_publisher = MESSAGES;
    spec.pacing = Pacing::Burst;
    spec.payload = ByteSize(32);
    spec.drain.idle = Duration::from_secs(3);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_tree_read_through_wildcards_delivers_exactly_the_matching_set() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let before = broker.counters_settled().expect("counters before");
    let (result, summary) = run(&tree_workload(broker.port())).await;
    let after = broker.counters_settled().expect("counters after");

    // Worked out by hand: two subscribers get all 100 devices, two get site 2's 25.
    let expected = (2 * 100 + 2 * 25) * MESSAGES;
    assert_eq!(summary.published, 100 * MESSAGES);
    assert_eq!(summary.expected_deliveries, expected);
    // Nothing lost, nothing twice, and nothing from a topic a subscriber's filter does not
    // match (that would be a foreign message, an error).
    assert_nothing_lost(&summary);
    assert_eq!(
        result.delivered_unique[60..75].iter().sum::<u64>(),
        15 * 4 * MESSAGES,
        "site 2's devices 10-24 reached all four subscribers"
    );
    assert_eq!(
        result.delivered_unique[0..50].iter().sum::<u64>(),
        50 * 2 * MESSAGES,
        "sites 0 and 1 reached only the two subscribers of every site"
    );
    assert_eq!(
        after.publish_received - before.publish_received,
        summary.published,
        "the broker's received count"
    );
    assert_eq!(
        after.publish_sent - before.publish_sent,
        summary.received,
        "the broker's sent count is what loadgen received"
    );
}

/// The tree above read by two shared subscriptions on one filter, six members each
/// (subscribers 0, 2, 4, ... are `backend`, 1, 3, 5, ... `audit`), paced so that Mosquitto
/// spreads each group's messages over its members.
fn shared_workload(port: u16) -> WorkloadSpec {
    let mut spec = tree_workload(port);
    spec.subscribers = 12;
    spec.topics = Some(TopicTree {
        subscribe: vec![
            "$share/backend/site/+/device/+/temp".to_string(),
            "$share/audit/site/+/device/+/temp".to_string(),
        ],
        ..spec.topics.expect("a tree")
    });
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(50),
    };
    spec
}

/// Both groups got every message once, spread over their six members.
fn assert_each_group_got_everything_once(summary: &loadgen::Summary) {
    assert_eq!(
        summary.shared_groups.len(),
        2,
        "{:?}",
        summary.shared_groups
    );
    for group in &summary.shared_groups {
        assert_eq!(group.members, 6, "{group:?}");
        assert_eq!(group.expected, 100 * MESSAGES, "{group:?}");
        assert_eq!(group.delivered, 100 * MESSAGES, "{group:?}");
        assert_eq!((group.lost, group.duplicates), (Some(0), 0), "{group:?}");
        assert!(
            group.share_min > 0 && group.share_max < group.delivered,
            "every member took part, none took all: {group:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shared_groups_on_one_filter_each_get_every_message_once() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let before = broker.counters_settled().expect("counters before");
    let (_, summary) = run(&shared_workload(broker.port())).await;
    let after = broker.counters_settled().expect("counters after");
    // Owed once per group, not once per member.
    assert_eq!(summary.expected_deliveries, 2 * 100 * MESSAGES);
    assert_nothing_lost(&summary);
    assert_each_group_got_everything_once(&summary);
    assert_eq!(
        after.publish_sent - before.publish_sent,
        summary.received,
        "the broker's sent count is what loadgen received"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_spread_over_three_instances_is_judged_once_when_merged() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut whole = shared_workload(broker.port());
    whole.run_id = Some("shared3".to_string());
    // Three instances, as three loadgen agents: each holds a third of the publishers and
    // four subscribers, two members of each group.
    let part = |i: u32| {
        let mut spec = whole.clone();
        spec.shard = Some(loadgen::spec::Shard {
            publishers: i * 34..(i * 34 + 34).min(100),
            subscribers: i * 4..i * 4 + 4,
        });
        spec
    };
    let (first, second, third) = (part(0), part(1), part(2));
    let barrier = loadgen::StartBarrier {
        origin_unix_ns: Some(loadgen::clock::unix_now_ns()),
        start_at_ns: Some(3_000_000_000),
    };
    let cancel = tokio_util::sync::CancellationToken::new;
    let (a, b, c) = tokio::join!(
        loadgen::run_at(&first, barrier, cancel(), None),
        loadgen::run_at(&second, barrier, cancel(), None),
        loadgen::run_at(&third, barrier, cancel(), None),
    );
    let mut merged = a.expect("first instance");
    let alone = loadgen::Summary::of(&merged);
    assert_eq!(alone.shared_groups[0].members, 2);
    assert_eq!(
        alone.shared_groups[0].lost, None,
        "a part cannot judge loss"
    );
    merged.merge(&b.expect("second instance")).expect("merges");
    merged.merge(&c.expect("third instance")).expect("merges");
    let summary = loadgen::Summary::of(&merged);
    eprintln!("{}", loadgen::output::render_table(&summary));
    assert_eq!(summary.expected_deliveries, 2 * 100 * MESSAGES);
    assert_nothing_lost(&summary);
    assert_each_group_got_everything_once(&summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_subscribers_get_exactly_the_last_retained_value_of_each_topic() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = tree_workload(broker.port());
    spec.run_id = Some("retained100".to_string());
    spec.retain = Some(loadgen::spec::Retain {
        late_subscribers: 20,
        filter: "site/+/device/+/temp".to_string(),
        handling: 0,
        as_published: false,
    });
    let (_, summary) = run(&spec).await;
    assert_nothing_lost(&summary);
    let retained = summary
        .retained
        .as_ref()
        .expect("the late subscribers' verdict");
    assert_eq!((retained.late_subscribers, retained.failed), (20, 0));
    assert_eq!(retained.expected_each, 100);
    assert_eq!(
        (
            retained.current,
            retained.stale,
            retained.missing,
            retained.extra
        ),
        (20 * 100, 0, 0, 0),
        "each late subscriber got the last value of every topic, once"
    );
    assert_eq!(retained.all_received_ns.len(), 20);
    assert_eq!(retained.cleared, 100);
    assert_eq!(retained.left_after_clear, Some(0));
    // And the broker agrees, asked by its own client: nothing of the run is retained.
    let left = std::process::Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &broker.port().to_string()])
        .args([
            "-t",
            "continuum/retained100/#",
            "--retained-only",
            "-W",
            "2",
            "-v",
        ])
        .output()
        .expect("mosquitto_sub runs");
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "retained after the clean-up: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
