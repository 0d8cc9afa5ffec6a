//! Wills against a real Mosquitto: clients connect with a will beside a small workload, some
//! close their socket without DISCONNECT (as a dying device does), and a watcher must get each
//! of their wills once and none of the clients that disconnected cleanly; Mosquitto's own
//! client, subscribed to the same topics, must see the same wills. Over MQTT 5 with a will
//! delay, no will may come before the delay has passed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use loadgen::spec::{MqttVersion, Qos, Wills, WorkloadSpec};
use tests::load::{assert_nothing_lost, run};
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

/// One publisher -> one subscriber every 100 ms for 4 s, beside `wills`.
fn with_wills(port: u16, run_id: &str, wills: Wills) -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.port = port;
    spec.publishers = 1;
    spec.messages_per_publisher = 40;
    spec.warmup_messages = 0;
    spec.pacing = loadgen::spec::Pacing::OpenLoop {
        interval: Duration::from_millis(100),
    };
    spec.run_id = Some(run_id.to_string());
    spec.wills = Some(wills);
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_of_two_hundred_clients_dropped_each_leave_their_will_once() {
    skip_unless_installed!(
        tests::mosquitto::MOSQUITTO_BINARY,
        "/usr/bin/mosquitto_sub",
        "/usr/bin/mosquitto_pub"
    );
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    // Mosquitto's own client on the same topics, from before the run to after it: ready once
    // it has printed a message published after it started.
    let port = broker.port().to_string();
    let mut referee = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port])
        .args([
            "-t",
            "continuum-wills/wills200/#",
            "-q",
            "1",
            "-v",
            "-W",
            "120",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("mosquitto_sub runs");
    let (lines, seen) = std::sync::mpsc::channel();
    let stdout = referee.stdout.take().expect("its output");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let ready = (0..100).any(|_| {
        let _ = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(["-t", "continuum-wills/wills200/ready", "-m", "ready"])
            .status();
        seen.recv_timeout(Duration::from_millis(200))
            .is_ok_and(|line| line.ends_with(" ready"))
    });
    assert!(ready, "mosquitto_sub never subscribed");
    let spec = with_wills(
        broker.port(),
        "wills200",
        Wills {
            clients: 200,
            dropped: 50,
            after: Duration::from_secs(1),
            delay: None,
            qos: Qos::AtLeastOnce,
            retain: false,
        },
    );
    let (_, summary) = run(&spec).await;
    assert_nothing_lost(&summary);
    let wills = summary.wills.as_ref().expect("the watcher's verdict");
    assert!(wills.watched);
    assert_eq!((wills.connected, wills.failed), (200, 0));
    assert_eq!(
        (wills.dropped, wills.delivered, wills.missing()),
        (50, 50, 0),
        "each dropped client's will arrived: {wills:?}"
    );
    assert_eq!((wills.duplicates, wills.unexpected), (0, 0));
    assert_eq!(wills.disconnected, 150, "the others left cleanly");
    assert_eq!(wills.from_drop_ns.len(), 50);
    // The referee saw the same 50 wills, one per dropped client, none of the clean ones.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = referee.kill();
    let _ = referee.wait();
    let mut clients: Vec<String> = seen
        .try_iter()
        .map(|line| line.split(' ').nth(1).unwrap_or_default().to_string())
        .filter(|payload| payload != "ready")
        .collect();
    clients.sort_by_key(|c| c.parse::<u32>().unwrap_or(u32::MAX));
    let dropped: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    assert_eq!(clients, dropped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_two_second_will_delay_no_will_comes_before_it() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = with_wills(
        broker.port(),
        "willdelay",
        Wills {
            clients: 20,
            dropped: 5,
            after: Duration::from_secs(1),
            delay: Some(Duration::from_secs(2)),
            qos: Qos::AtLeastOnce,
            retain: true,
        },
    );
    spec.broker.protocol = MqttVersion::V5;
    let (_, summary) = run(&spec).await;
    assert_nothing_lost(&summary);
    let wills = summary.wills.as_ref().expect("the watcher's verdict");
    assert_eq!((wills.dropped, wills.delivered), (5, 5), "{wills:?}");
    assert_eq!((wills.duplicates, wills.unexpected), (0, 0));
    assert_eq!(wills.delay_ns, 2_000_000_000);
    assert_eq!(
        wills.before_delay(),
        0,
        "a will before its delay: {wills:?}"
    );
    assert!(wills.earliest_ms().is_some_and(|ms| ms >= 2_000.0));
    // Retained wills are cleared once checked: the broker keeps none of the run's.
    assert_eq!(wills.cleared, 20);
    let left = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &broker.port().to_string()])
        .args([
            "-t",
            "continuum-wills/willdelay/#",
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
