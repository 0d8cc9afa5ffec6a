//! MQTT over WebSocket end to end through the controller: a latency test and a sustained
//! throughput test whose workload says `transport = "websocket"`, against the native
//! Mosquitto and RabbitMQ the worker's agent deploys (each opening its WebSocket listener:
//! Mosquitto's websockets listener, RabbitMQ's web-mqtt plugin) and against an external
//! Mosquitto run here in the worker's namespace, whose `$SYS` counters the delivered counts
//! must equal; then the same tests over wss (TLS, with a CA this test makes) against that
//! Mosquitto. Real agents (`tests::agent_bed`), real brokers, network namespaces.

use anyhow::{Context, Result};
use controller::plan::{Plan, TestKind};
use controller::results::{self, CellStatus, SummaryRow};
use controller::run::{RunOptions, RunSummary, run_plan};
use loadgen::spec::Transport;
use loadgen::summary::RateKind;
use tests::agent_bed::{AGENT_PORT, AgentBed};
use tests::isolated_netns_test;
use tests::mosquitto::{
    MOSQUITTO_BINARY, Mosquitto, MosquittoOptions, ServerTlsFiles, tls_files_in,
};
use tests::netns::NODE_LINK;
use tests::rabbitmq::RABBITMQ_SERVER;
use tokio_util::sync::CancellationToken;

/// The external Mosquitto's listeners on the worker's testbed address.
const MQTT_PORT: u16 = 1883;
const WS_PORT: u16 = 9001;
const WSS_PORT: u16 = 9443;
/// The latency test: 10 publishers x 10 messages (1 warm-up) to one subscriber, at QoS 0:
/// Mosquitto 2.0.11's `$SYS` counts no QoS 1 PUBLISH it sends to a WebSocket client (its
/// log shows them sent), so only QoS 0 deliveries can be held to its counters.
const PUBLISHERS: u64 = 10;
const MESSAGES: u64 = 10;
/// The throughput test: 5 pairs offered 500 msg/s in all for 2 s after a 1 s warm-up, well
/// within what this 2-core machine sustains for every broker here.
const PAIRS: u64 = 5;
const RATE: u64 = 500;

/// Both tests, their workload over WebSocket; `broker` adds fields to the workload's
/// broker table (the wss test's CA).
fn websocket_tests(broker: &str) -> String {
    format!(
        r#"[[tests]]
kind = "latency"
loadgen = ["tester"]
qos = 0
publishers = {PUBLISHERS}
messages = {MESSAGES}
warmup = 1
interval = "50ms"
[tests.workload.broker]
transport = "websocket"
{broker}
[[tests]]
kind = "throughput"
loadgen = ["tester"]
clients = [{PAIRS}]
rate = {RATE}
duration = "2s"
warmup = "1s"
[tests.workload.broker]
transport = "websocket"
{broker}
"#
    )
}

fn header(name: &str, bed: &AgentBed, results: &std::path::Path) -> String {
    let node = |name: &str, roles: &str| {
        let ip = bed.testbed.node(name).addr();
        format!(
            "[[nodes]]\nname = \"{name}\"\nagent = \"{ip}:{AGENT_PORT}\"\nroles = [{roles}]\ndata_address = \"{ip}\"\n"
        )
    };
    format!(
        "name = \"{name}\"\nrepetitions = 1\npki_dir = \"{}\"\nresults_dir = \"{}\"\n\
         [timeouts]\nconnect = \"10s\"\ndeploy = \"60s\"\ncell = \"60s\"\n{}{}\
         [[scenarios]]\nname = \"local\"\n",
        bed.pki.path().display(),
        results.display(),
        node("tester", "\"loadgen\""),
        node("worker", "\"broker\""),
    )
}

fn run(bed: &AgentBed, text: &str) -> Result<RunSummary> {
    let plan = Plan::parse(text, "websocket.toml")?;
    bed.on_controller_node(|| async {
        Ok(run_plan(&plan, text, RunOptions::default(), CancellationToken::new()).await?)
    })
}

/// The result of a row's cell, as the controller wrote it.
fn result_of(summary: &RunSummary, row: &SummaryRow) -> Result<loadgen::RunResult> {
    let path = summary
        .dir
        .join("cells")
        .join(&row.cell)
        .join("result.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(serde_json::from_str(&text)?)
}

/// Every cell measured over WebSocket at `scheme` (ws or wss), nothing lost, the throughput
/// cells sustained; returns what each broker's subscribers received, by broker.
fn check_rows(
    summary: &RunSummary,
    scheme: &str,
) -> Result<std::collections::BTreeMap<String, u64>> {
    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let mut received = std::collections::BTreeMap::new();
    for row in &rows {
        assert_eq!(row.status, CellStatus::Ok, "{}: {}", row.cell, row.reason);
        let address = row.broker_address.as_deref().unwrap_or_default();
        assert!(
            address.starts_with(&format!("{scheme}://")),
            "{}: {address}",
            row.cell
        );
        let expected = match row.test {
            TestKind::Latency => PUBLISHERS * MESSAGES,
            TestKind::Throughput => row.expected_deliveries.unwrap_or(0),
            other => panic!("unexpected test {other:?}"),
        };
        assert!(expected > 0, "{}", row.cell);
        assert_eq!(row.expected_deliveries, Some(expected), "{}", row.cell);
        assert_eq!(row.delivered_unique, Some(expected), "{}", row.cell);
        assert_eq!(row.lost, Some(0), "{}", row.cell);
        if row.test == TestKind::Throughput {
            // Sustained, unless loadgen refused to judge because this shared machine
            // starved it of CPU (it says so): the only verdict besides sustained let pass.
            let starved = row.rate_kind == Some(RateKind::GeneratorLimited)
                && !row.generator_reasons.0.is_empty()
                && row
                    .generator_reasons
                    .0
                    .iter()
                    .all(|r| r.contains("waited for a CPU"));
            assert!(
                row.rate_kind == Some(RateKind::Sustained) || starved,
                "{}: {:?} {:?} {:?}",
                row.cell,
                row.rate_kind,
                row.steadiness_reasons,
                row.generator_reasons
            );
        }
        let result = result_of(summary, row)?;
        assert_eq!(result.spec.broker.transport, Transport::WebSocket);
        assert!(result.errors.is_empty(), "{:?}", result.errors);
        eprintln!(
            "{} {}: {} delivered, connect p50 {:?} us, latency p50 {:?} us, {:?}",
            row.cell, address, expected, row.connect_time_p50_us, row.latency_p50_us, row.rate_kind
        );
        *received.entry(row.broker.clone()).or_insert(0) += result.received;
    }
    Ok(received)
}

#[test]
fn websocket_tests_run_against_native_and_external_brokers_and_over_tls() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY, RABBITMQ_SERVER]) {
        return Ok(());
    }
    let bed = AgentBed::start_with("websocket", |_, _| Ok(String::new()))?;
    let worker = bed.testbed.node("worker");
    let tls = tempfile::tempdir()?;
    let ServerTlsFiles { ca, cert, key } = tls_files_in(tls.path(), worker.addr().into())?;
    // Mosquitto 2.0.11 binds a websockets listener by interface name only.
    let options = MosquittoOptions {
        extra_config: vec![
            format!("listener {MQTT_PORT} {}", worker.addr()),
            format!("listener {WS_PORT} {NODE_LINK}"),
            "protocol websockets".to_string(),
            format!("listener {WSS_PORT} {NODE_LINK}"),
            "protocol websockets".to_string(),
            format!("cafile {}", ca.display()),
            format!("certfile {}", cert.display()),
            format!("keyfile {}", key.display()),
        ],
        ..MosquittoOptions::default()
    };
    let mosquitto = worker.enter(|| Mosquitto::start(options))??;
    let work = tempfile::tempdir()?;
    let broker = worker.addr();

    // ws: the agent's native brokers open their listeners because a test speaks WebSocket.
    let text = header("websocket", &bed, &work.path().join("ws"))
        + &format!(
            r#"[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"
[[brokers]]
name = "rabbitmq"
kind = "native"
product = "rabbitmq"
node = "worker"
[[brokers]]
name = "external"
kind = "external"
address = "{broker}:{MQTT_PORT}"
websocket_address = "{broker}:{WS_PORT}"
"#
        )
        + &websocket_tests("");
    let before = mosquitto.counters_settled()?;
    let summary = run(&bed, &text)?;
    let after = mosquitto.counters_settled()?;
    assert_eq!(
        (summary.measured, summary.failed),
        (6, 0),
        "{summary:?}\nmosquitto log:\n{}",
        mosquitto.log()
    );
    let received = check_rows(&summary, "ws")?;
    assert_eq!(
        received.get("external").copied(),
        Some(after.publish_sent - before.publish_sent),
        "the external Mosquitto's own count of PUBLISH sent"
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(summary.dir.join("manifest.json"))?)?;
    let brokers = manifest["brokers"].as_array().context("manifest brokers")?;
    for record in brokers {
        let websocket = record["websocket_address"].as_str().unwrap_or_default();
        assert!(
            websocket.starts_with(&format!("{broker}:")),
            "each broker's WebSocket address is recorded: {record}"
        );
    }

    // wss: the same tests over TLS, trusting the test's CA.
    let text = header("websocket-tls", &bed, &work.path().join("wss"))
        + &format!(
            r#"[[brokers]]
name = "external"
kind = "external"
address = "{broker}:{MQTT_PORT}"
websocket_address = "{broker}:{WSS_PORT}"
"#
        )
        + &websocket_tests(&format!("tls_ca_file = \"{}\"", ca.display()));
    let before = mosquitto.counters_settled()?;
    let summary = run(&bed, &text)?;
    let after = mosquitto.counters_settled()?;
    assert_eq!((summary.measured, summary.failed), (2, 0), "{summary:?}");
    let received = check_rows(&summary, "wss")?;
    assert_eq!(
        received.get("external").copied(),
        Some(after.publish_sent - before.publish_sent)
    );
    Ok(())
}
