//! MQTT 5 subscription options for retained messages, against a real Mosquitto: retain
//! handling 0, 1 and 2 on the late subscribers' SUBSCRIBE (every subscribe, a new subscription
//! only, never), and retain-as-published on the workload's live subscriptions. Every live
//! delivery's RETAIN flag is checked: cleared without retain-as-published (MQTT §3.3.1.3), set
//! with it; the two runs expect opposite flags, so the check can fail either way.

use std::time::Duration;

use loadgen::Summary;
use loadgen::spec::{MqttVersion, Pacing, Qos, Retain, Topology, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

const TOPICS: u64 = 10;
const LATE: u32 = 5;

fn workload(port: u16, run_id: &str, handling: u8, as_published: bool) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.broker.protocol = MqttVersion::V5;
    spec.qos = Qos::AtLeastOnce;
    spec.topology = Topology::Pairs;
    spec.publishers = TOPICS as u32;
    spec.subscribers = TOPICS as u32;
    spec.messages_per_publisher = 20;
    spec.warmup_messages = 0;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(10),
    };
    spec.run_id = Some(run_id.to_string());
    spec.retain = Some(Retain {
        late_subscribers: LATE,
        filter: "#".to_string(),
        handling,
        as_published,
    });
    spec
}

fn wrong_flags(summary: &Summary) -> u64 {
    summary
        .errors
        .get(loadgen::summary::RETAIN_FLAG_WRONG)
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_handling_and_retain_as_published_are_what_the_subscription_asked() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let owed = u64::from(LATE) * TOPICS;
    for (handling, as_published, current) in [
        (0, false, owed),
        // Each late subscriber subscribes twice: the second, to a subscription that exists,
        // must bring no copy (an extra).
        (1, true, owed),
        (2, false, 0),
    ] {
        let run_id = format!("handling{handling}");
        let (_, summary) = run(&workload(broker.port(), &run_id, handling, as_published)).await;
        assert_nothing_lost(&summary);
        assert_eq!(
            wrong_flags(&summary),
            0,
            "live RETAIN flags {} retain-as-published: {:?}",
            if as_published { "with" } else { "without" },
            summary.qos_violations
        );
        let retained = summary.retained.as_ref().expect("a verdict");
        assert_eq!(
            (retained.late_subscribers, retained.failed),
            (LATE, 0),
            "handling {handling}"
        );
        assert_eq!(
            retained.expected_each * u64::from(LATE),
            current,
            "handling {handling}"
        );
        assert_eq!(
            (
                retained.current,
                retained.stale,
                retained.missing,
                retained.extra
            ),
            (current, 0, 0, 0),
            "handling {handling}: {retained:?}"
        );
        assert_eq!(retained.cleared, TOPICS, "handling {handling}");
        eprintln!("retain handling {handling}, as published {as_published}: {retained:?}");
    }
}

/// Retain-as-published is asked by the workload's subscriptions only: the will watcher's live
/// wills, retained ones included, still arrive with RETAIN cleared, and each counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_as_published_leaves_the_will_watcher_alone() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = workload(broker.port(), "rapwills", 0, true);
    spec.wills = Some(loadgen::spec::Wills {
        clients: 4,
        dropped: 2,
        after: Duration::from_millis(100),
        delay: None,
        qos: Qos::AtLeastOnce,
        retain: true,
    });
    let (_, summary) = run(&spec).await;
    assert_nothing_lost(&summary);
    let wills = summary.wills.as_ref().expect("the wills' verdict");
    assert_eq!(
        (wills.dropped, wills.delivered, wills.unexpected),
        (2, 2, 0),
        "{wills:?}"
    );
}
