//! A custom test (`kind = "custom"`, the whole workload in `[tests.workload]`) end to end:
//! MQTT 5, QoS 2, one sensor topic fanned out to 20 subscribers, over TLS to a real Mosquitto
//! with a CA this test makes. The controller's `run_plan` drives the real `continuum-agent`
//! on the tester (network namespaces, `tests::agent_bed`); Mosquitto runs in the worker's
//! namespace as the plan's external broker, so its `$SYS` counters can be read; the report
//! must show the workload as run.

use anyhow::{Context, Result};
use controller::plan::{Plan, TestKind};
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, run_plan};
use tests::agent_bed::{AGENT_PORT, AgentBed};
use tests::isolated_netns_test;
use tests::mosquitto::{
    MOSQUITTO_BINARY, Mosquitto, MosquittoOptions, ServerTlsFiles, tls_files_in,
};
use tokio_util::sync::CancellationToken;

/// Mosquitto's TLS listener on the worker's testbed address.
const TLS_PORT: u16 = 8883;
/// The workload: 1 publisher, 20 subscribers of its topic, 50 messages (5 warm-up) each.
const SUBSCRIBERS: u64 = 20;
const MESSAGES: u64 = 50;

#[test]
fn a_custom_mqtt5_qos2_fan_out_over_tls_runs_end_to_end() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let bed = AgentBed::start_with("custom", |_, _| Ok(String::new()))?;
    let worker = bed.testbed.node("worker");
    // The broker's certificate names the worker's address, from a CA of this test's own.
    let tls = tempfile::tempdir()?;
    let ServerTlsFiles { ca, cert, key } = tls_files_in(tls.path(), worker.addr().into())?;
    let options = MosquittoOptions {
        extra_config: vec![
            format!("listener {TLS_PORT} {}", worker.addr()),
            format!("cafile {}", ca.display()),
            format!("certfile {}", cert.display()),
            format!("keyfile {}", key.display()),
        ],
        ..MosquittoOptions::default()
    };
    let mosquitto = worker.enter(|| Mosquitto::start(options))??;

    let work = tempfile::tempdir()?;
    let tester = bed.testbed.node("tester").addr();
    let text = format!(
        r#"name = "custom"
repetitions = 2
pki_dir = "{pki}"
results_dir = "{results}"
[timeouts]
connect = "10s"
cell = "60s"
[[nodes]]
name = "tester"
agent = "{tester}:{AGENT_PORT}"
roles = ["loadgen"]
[[brokers]]
name = "mosquitto-tls"
kind = "external"
address = "{broker}:{TLS_PORT}"
[[scenarios]]
name = "local"
[[tests]]
kind = "custom"
loadgen = ["tester"]
[tests.workload]
publishers = 1
subscribers = {SUBSCRIBERS}
topology = "fan-out"
qos = 2
payload = "256B"
messages_per_publisher = {MESSAGES}
warmup_messages = 5
pacing = {{ mode = "open-loop", interval = "20ms" }}
broker = {{ protocol = "5", tls_ca_file = "{ca}" }}
"#,
        pki = bed.pki.path().display(),
        results = work.path().join("results").display(),
        broker = worker.addr(),
        ca = ca.display(),
    );
    let plan = Plan::parse(&text, "custom.toml")?;
    let before = mosquitto.counters_settled()?;
    let summary = bed.on_controller_node(|| async {
        Ok(run_plan(
            &plan,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        )
        .await?)
    })?;
    let after = mosquitto.counters_settled()?;
    assert_eq!(
        (summary.measured, summary.failed),
        (2, 0),
        "{summary:?}\nmosquitto log:\n{}",
        mosquitto.log()
    );

    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let mut received = 0;
    for row in &rows {
        assert_eq!(row.test, TestKind::Custom);
        assert_eq!(row.status, CellStatus::Ok, "{}: {}", row.cell, row.reason);
        assert_eq!(row.expected_deliveries, Some(MESSAGES * SUBSCRIBERS));
        assert_eq!(
            row.delivered_unique, row.expected_deliveries,
            "{}",
            row.cell
        );
        assert_eq!(row.lost, Some(0), "{}", row.cell);
        assert_eq!(
            row.duplicates,
            Some(0),
            "QoS 2 is exactly once: {}",
            row.cell
        );
        assert!(row.qos_violations.0.is_empty(), "{}", row.cell);
        let path = summary
            .dir
            .join("cells")
            .join(&row.cell)
            .join("result.json");
        let result: loadgen::RunResult = serde_json::from_str(
            &std::fs::read_to_string(&path).with_context(|| path.display().to_string())?,
        )?;
        assert_eq!(result.spec.broker.protocol, loadgen::spec::MqttVersion::V5);
        assert_eq!(result.spec.qos, loadgen::spec::Qos::ExactlyOnce);
        assert!(result.errors.is_empty(), "{:?}", result.errors);
        received += result.received;
    }
    // Every PUBLISH Mosquitto wrote to the subscribers (over TLS: the only listener the
    // plan names) was counted by them.
    assert_eq!(received, after.publish_sent - before.publish_sent);
    assert_eq!(received, 2 * MESSAGES * SUBSCRIBERS);

    let markdown = std::fs::read_to_string(summary.dir.join("report.md"))?;
    let section: Vec<&str> = markdown
        .lines()
        .skip_while(|l| !l.starts_with("## Custom"))
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## Custom"))
        .collect();
    for field in [
        "| broker.protocol | 5 |",
        "| qos | 2 |",
        "| topology | fan-out |",
        &format!("| subscribers | {SUBSCRIBERS} |"),
        &format!("| broker.tls\\_ca\\_file | {} |", ca.display()),
        "| pacing.mode | open-loop |",
    ] {
        assert!(
            section.iter().any(|l| l.contains(field)),
            "the workload as run shows {field}:\n{}",
            section.join("\n")
        );
    }
    assert!(
        section.iter().any(
            |l| l.starts_with("| mosquitto-tls | local | 2 |") && l.contains("| 2000 / 2000 |")
        ),
        "{}",
        section.join("\n")
    );
    eprintln!("{}", section.join("\n"));
    Ok(())
}
