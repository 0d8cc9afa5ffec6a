//! The capability probe in a run: each broker's agent probes it once it is ready, the
//! manifest and the report record what it supports, and a cell whose workload needs what its
//! broker lacks is skipped with that reason instead of being measured into errors. Real
//! brokers through the in-process agent (`agent = "local"`): Mosquitto 2.0 (MQTT 3.1.1 and 5,
//! shared subscriptions), RabbitMQ 3.10 (3.1.1 only, no shared subscriptions) and the
//! embedded rumqttd (3.1.1 only here; its shared subscriptions deliver).

mod local_run;

use controller::results::{CellStatus, Manifest};
use local_run::LocalRun;
use tests::mosquitto::MOSQUITTO_BINARY;
use tests::rabbitmq::RABBITMQ_SERVER;

/// Tests 0 and 1 of both plans: 0, MQTT 3.1.1, which every broker runs; 1, MQTT 5 with a
/// shared subscription over a small tree.
const LATENCY_AND_SHARED_OVER_MQTT5: &str = r#"[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 4
messages = 3
warmup = 0
interval = "20ms"
[[tests]]
kind = "custom"
loadgen = ["tester"]
[tests.workload]
publishers = 4
subscribers = 2
topology = "tree"
qos = 1
payload = "32B"
messages_per_publisher = 10
pacing = { mode = "burst" }
broker = { protocol = "5" }
[tests.workload.topics]
pattern = "d/{n}"
counts = { n = 4 }
subscribe = ["$share/g/d/+"]
"#;

/// The plan, with [`LATENCY_AND_SHARED_OVER_MQTT5`] in its place.
const PLAN: &str = r#"
name = "probe"
repetitions = 1
[timeouts]
connect = "10s"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen", "broker"]
[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "tester"
[[brokers]]
name = "rabbitmq"
kind = "native"
product = "rabbitmq"
node = "tester"
[[brokers]]
name = "embedded"
kind = "embedded"
node = "tester"
[[scenarios]]
name = "local"
{LATENCY_AND_SHARED_OVER_MQTT5}# 2: the same over MQTT 3.1.1 (the $share convention).
[[tests]]
kind = "custom"
loadgen = ["tester"]
[tests.workload]
publishers = 4
subscribers = 2
topology = "tree"
qos = 1
payload = "32B"
messages_per_publisher = 10
pacing = { mode = "burst" }
[tests.workload.topics]
pattern = "d/{n}"
counts = { n = 4 }
subscribe = ["$share/g/d/+"]
"#;

/// `plan` with its `{LATENCY_AND_SHARED_OVER_MQTT5}` filled in.
fn with_shared_tests(plan: &str) -> String {
    plan.replace(
        "{LATENCY_AND_SHARED_OVER_MQTT5}",
        LATENCY_AND_SHARED_OVER_MQTT5,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_needing_what_a_broker_lacks_are_skipped_naming_it() {
    if !tests::components_available(&[MOSQUITTO_BINARY, RABBITMQ_SERVER]) {
        return;
    }
    let run = LocalRun::of(&with_shared_tests(PLAN), "probe.toml").await;
    let rows = &run.rows;
    let status = |broker: &str, test: &str| {
        let row = rows
            .iter()
            .find(|r| r.cell.starts_with(&format!("{broker}/local/{test}")))
            .unwrap_or_else(|| panic!("a row for {broker} {test}"));
        (row.status, row.reason.clone())
    };
    for broker in ["mosquitto", "rabbitmq", "embedded"] {
        assert_eq!(status(broker, "0-latency").0, CellStatus::Ok, "{broker}");
    }
    assert_eq!(status("mosquitto", "1-custom").0, CellStatus::Ok);
    assert_eq!(status("mosquitto", "2-custom").0, CellStatus::Ok);
    assert_eq!(
        status("rabbitmq", "1-custom"),
        (
            CellStatus::Skipped,
            "broker rabbitmq: needs MQTT 5, which the broker refused (probe)".to_string()
        )
    );
    assert_eq!(
        status("rabbitmq", "2-custom"),
        (
            CellStatus::Skipped,
            "broker rabbitmq: needs shared subscriptions, which the broker did not deliver (probe)"
                .to_string()
        )
    );
    assert_eq!(status("embedded", "1-custom").0, CellStatus::Skipped);
    // rumqttd's shared subscriptions deliver, as the probe's round trip found: the cell ran
    // and the group got every message once.
    assert_eq!(status("embedded", "2-custom").0, CellStatus::Ok);
    let ran = rows
        .iter()
        .find(|r| r.cell.starts_with("embedded/local/2-custom"))
        .expect("its row");
    assert_eq!((ran.lost, ran.duplicates), (Some(0), Some(0)));
    let manifest: Manifest = serde_json::from_str(&run.text("manifest.json")).expect("a manifest");
    let caps = |name: &str| {
        manifest
            .brokers
            .iter()
            .find(|b| b.name == name)
            .and_then(|b| b.capabilities.clone())
            .unwrap_or_else(|| panic!("{name} was probed"))
    };
    assert!(caps("mosquitto").mqtt5 && caps("mosquitto").shared_subscriptions == Some(true));
    assert!(caps("rabbitmq").mqtt311 && !caps("rabbitmq").mqtt5);
    assert_eq!(caps("rabbitmq").shared_subscriptions, Some(false));
    assert!(!caps("embedded").mqtt5);
    let report = run.text("report.md");
    assert!(
        report.contains(
            "| rabbitmq | MQTT 3.1.1 only; max QoS ?; retain exact subscriptions only; wildcards yes; shared subscriptions no; kept sessions yes |"
        ),
        "{report}"
    );
}

/// ejabberd and rmqtt through the same run: both speak MQTT 5, and both refuse a shared
/// subscription (ejabberd's `mod_mqtt` ends the session on a `$share/` filter, DISCONNECT
/// "shared subscriptions not supported", which the probe takes as a refusal; rmqtt runs
/// without its shared-subscription plugin, as `rmqttd` does by default). ejabberd is probed with the login its anonymous access asks for: without it the
/// probe learns nothing and the cell would run into errors instead.
const NEWER_PLAN: &str = r#"
name = "probe-newer"
repetitions = 1
[timeouts]
connect = "10s"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen", "broker"]
[[brokers]]
name = "ejabberd"
kind = "native"
product = "ejabberd"
node = "tester"
[[brokers]]
name = "rmqtt"
kind = "native"
product = "rmqtt"
node = "tester"
[[scenarios]]
name = "local"
{LATENCY_AND_SHARED_OVER_MQTT5}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ejabberd_and_rmqtt_refuse_shared_subscriptions_and_their_cells_say_so() {
    if !tests::components_available(&["/usr/sbin/ejabberdctl", recipes::rmqtt::PROGRAMS[0]]) {
        return;
    }
    let run = LocalRun::of(&with_shared_tests(NEWER_PLAN), "probe-newer.toml").await;
    for broker in ["ejabberd", "rmqtt"] {
        let row = |test: &str| {
            run.rows
                .iter()
                .find(|r| r.cell.starts_with(&format!("{broker}/local/{test}")))
                .unwrap_or_else(|| panic!("a row for {broker} {test}"))
        };
        assert_eq!(row("0-latency").status, CellStatus::Ok, "{broker}");
        let shared = row("1-custom");
        eprintln!("{broker}: {:?} {}", shared.status, shared.reason);
        assert_eq!(
            (shared.status, shared.reason.clone()),
            (
                CellStatus::Skipped,
                format!(
                    "broker {broker}: needs shared subscriptions, which the broker did not \
                     deliver (probe)"
                )
            ),
            "{broker}"
        );
    }
    let manifest: Manifest = serde_json::from_str(&run.text("manifest.json")).expect("a manifest");
    for broker in &manifest.brokers {
        let caps = broker.capabilities.clone().expect("probed");
        assert!(caps.mqtt311 && caps.mqtt5, "{}: {caps:?}", broker.name);
        assert_eq!(caps.shared_subscriptions, Some(false), "{}", broker.name);
    }
    let ejabberd = manifest
        .brokers
        .iter()
        .find(|b| b.name == "ejabberd")
        .and_then(|b| b.capabilities.clone())
        .expect("ejabberd was probed");
    assert!(
        ejabberd.notes.iter().any(|note| note.starts_with(
            "shared subscription: DISCONNECT (broker_disconnect_shared_subscriptions_not_supported)"
        )),
        "{:?}",
        ejabberd.notes
    );
}
