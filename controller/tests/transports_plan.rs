//! TCP against QUIC in one plan, end to end through the controller: the study's latency test
//! with `transports = ["tcp", "quic"]` and the broker's CA, so over TCP with TLS and over
//! QUIC, against one real mqttv5 broker with both listeners (`tests::mqttv5`, an external
//! broker to the plan), three repetitions interleaved. Every cell must deliver all it
//! published at QoS 1, and the report must set the two transports side by side ("TCP and
//! QUIC under the continuum's links"), naming the runs as the file numbers the test, with
//! the figures of the cells and QUIC's shift against TCP, saying that 3 repetitions against 3
//! cannot be tested. (Plain TCP against QUIC, two tests written by hand, is what the qemu
//! VM's check runs under loss: `tests/examples/vm_check/transports.rs`.)
//!
//! Then the same sweep against an mqttv5 the agent deploys: the agent opens the QUIC
//! listener with a certificate of its making, the test names no CA, and the controller sends
//! the agent's CA to loadgen; no results file holds it.

use controller::plan::Plan;
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, RunSummary, run_plan};
use tests::mqttv5::{MQTTV5_BINARY, Mqttv5};
use tokio_util::sync::CancellationToken;

const REPETITIONS: usize = 3;
/// 20 publishers x 6 messages (1 warm-up) to one subscriber, QoS 1, every 250 ms.
const PUBLISHERS: u64 = 20;
const MESSAGES: u64 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_plan_sets_tcp_and_quic_side_by_side() {
    if !tests::components_available(&[MQTTV5_BINARY]) {
        return;
    }
    let broker = Mqttv5::start_with_quic().expect("mqttv5 starts with a QUIC listener");
    let work = tempfile::tempdir().expect("temp dir");
    let text = format!(
        r#"name = "transports"
repetitions = {REPETITIONS}
order = "interleaved"
results_dir = "{results}"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen"]
[[brokers]]
name = "mqttv5"
kind = "external"
address = "{tls}"
quic_address = "127.0.0.1:{quic}"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = {PUBLISHERS}
messages = {MESSAGES}
warmup = 1
qos = 1
transports = ["tcp", "quic"]
[tests.workload.broker]
tls_ca_file = "{ca}"
"#,
        results = work.path().join("results").display(),
        tls = broker.tls_address(),
        quic = broker.quic_port(),
        ca = broker.ca_file().display(),
    );
    let summary = run_measured(&text, "transports.toml", REPETITIONS).await;
    let rows = results::read_rows(&summary.dir.join("summary.csv")).expect("summary.csv");
    for row in &rows {
        assert_eq!(row.status, CellStatus::Ok, "{}: {}", row.cell, row.reason);
    }
    let report = std::fs::read_to_string(summary.dir.join("report.md")).expect("report.md");
    let section = transports_section(&report);
    for transport in ["TCP+TLS", "QUIC"] {
        check_transport_row(&section, transport, REPETITIONS);
    }
    for figure in ["p50", "p99"] {
        let row = section
            .lines()
            .find(|line| line.contains(&format!("| {figure} |")))
            .unwrap_or_else(|| panic!("no shift row for {figure}"));
        assert!(row.contains("too few to test"), "{row}");
    }
    assert!(
        section.contains("3 against 3 (smallest p 0.100)"),
        "{section}"
    );
}

/// Runs the plan `text` (named `file`), whose one test sweeps two transports: every cell of
/// its `repetitions` measured, none failed.
async fn run_measured(text: &str, file: &str, repetitions: usize) -> RunSummary {
    let plan = Plan::parse(text, file).expect("a valid plan");
    let summary = run_plan(&plan, text, RunOptions::default(), CancellationToken::new())
        .await
        .expect("the run completes");
    assert_eq!(
        (summary.measured, summary.failed),
        (2 * repetitions, 0),
        "{summary:?}"
    );
    summary
}

/// The report's section "TCP and QUIC under the continuum's links", printed.
fn transports_section(report: &str) -> String {
    let section = report
        .split("## TCP and QUIC under the continuum's links")
        .nth(1)
        .unwrap_or_else(|| panic!("the report has no transports section:\n{report}"))
        .split("\n## ")
        .next()
        .unwrap_or_default();
    eprintln!("{section}");
    section.to_string()
}

/// `transport`'s row of the section: every message delivered (the warm-up too), none lost,
/// latency figures, and both runs named as the file's test 1.
fn check_transport_row(section: &str, transport: &str, repetitions: usize) {
    let expected = PUBLISHERS * MESSAGES * repetitions as u64;
    let row = section
        .lines()
        .find(|line| line.contains(&format!("| {transport} | {repetitions} |")))
        .unwrap_or_else(|| panic!("no {transport} row with {repetitions} repetitions"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // | test | broker | scenario | point | transport | repetitions | p50 | p99 | p99.9 |
    // connect | reconnect | delivered / expected | lost | errors |
    assert_eq!(cells.len(), 16, "{row}");
    assert_eq!(
        cells[12],
        format!("{expected} / {expected}"),
        "{transport}: {row}"
    );
    assert_eq!(cells[13], "0", "{transport}: {row}");
    for latency in &cells[7..=10] {
        assert!(
            latency.parse::<f64>().is_ok() || latency.contains('['),
            "{row}"
        );
    }
    assert!(
        row.starts_with("| latency (test 1, over tcp) / latency (test 1, over quic) |"),
        "{row}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployed_mqttv5_is_measured_over_quic_with_the_ca_its_agent_made() {
    if !tests::components_available(&[MQTTV5_BINARY]) {
        return;
    }
    const DEPLOYED_REPETITIONS: usize = 2;
    let work = tempfile::tempdir().expect("temp dir");
    let text = format!(
        r#"name = "deployed-quic"
repetitions = {DEPLOYED_REPETITIONS}
order = "interleaved"
results_dir = "{results}"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen", "broker"]
[[brokers]]
name = "mqttv5"
kind = "native"
product = "mqttv5"
node = "tester"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = {PUBLISHERS}
messages = {MESSAGES}
warmup = 1
qos = 1
transports = ["tcp", "quic"]
"#,
        results = work.path().join("results").display(),
    );
    let summary = run_measured(&text, "deployed-quic.toml", DEPLOYED_REPETITIONS).await;
    let report = std::fs::read_to_string(summary.dir.join("report.md")).expect("report.md");
    let section = transports_section(&report);
    for transport in ["TCP", "QUIC"] {
        check_transport_row(&section, transport, DEPLOYED_REPETITIONS);
    }
    let manifest = std::fs::read_to_string(summary.dir.join("manifest.json")).expect("manifest");
    assert!(
        manifest.contains("\"quic_address\": \"127.0.0.1:"),
        "{manifest}"
    );
    let deployed = report
        .lines()
        .find(|line| line.starts_with("| mqttv5 | tester |"))
        .expect("the broker as deployed");
    assert!(deployed.contains("; QUIC 127.0.0.1:"), "{deployed}");
    // The CA made for one deployment is sent, never stored.
    for entry in tests::files_under(&summary.dir).expect("the results folder") {
        let bytes = std::fs::read(&entry).expect("a results file");
        assert!(
            !String::from_utf8_lossy(&bytes).contains("BEGIN CERTIFICATE"),
            "{} holds a certificate",
            entry.display()
        );
    }
}

/// An mqttv5 the agent deploys delivering on a stream per topic (`quic_delivery`), and a
/// sweep whose QUIC run sends PUBLISH on a stream per topic and reads the broker's streams
/// (`quic_streams`): every message of both runs delivered, the QUIC run named by its mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployed_mqttv5_delivering_per_topic_is_read_on_its_streams() {
    if !tests::components_available(&[MQTTV5_BINARY]) {
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let text = format!(
        r#"name = "per-topic-quic"
repetitions = 1
results_dir = "{results}"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen", "broker"]
[[brokers]]
name = "mqttv5"
kind = "native"
product = "mqttv5"
node = "tester"
quic_delivery = "per_topic"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = {PUBLISHERS}
messages = {MESSAGES}
warmup = 1
qos = 1
transports = ["tcp", "quic"]
[tests.workload.broker]
quic_streams = "per_topic"
"#,
        results = work.path().join("results").display(),
    );
    let summary = run_measured(&text, "per-topic-quic.toml", 1).await;
    let report = std::fs::read_to_string(summary.dir.join("report.md")).expect("report.md");
    let section = transports_section(&report);
    for transport in ["TCP", "QUIC, a stream per topic"] {
        check_transport_row(&section, transport, 1);
    }
    let manifest = std::fs::read_to_string(summary.dir.join("manifest.json")).expect("manifest");
    assert!(
        manifest.contains("\"quic_delivery\": \"per_topic\"")
            && manifest.contains("\"quic_streams\": \"per_topic\""),
        "{manifest}"
    );
}
