//! A churn fleet through the controller: a light latency test whose workload adds
//! `[tests.workload.churn]`, run by the real `continuum-agent` on the tester against a
//! Mosquitto in the worker's namespace (the plan's external broker, so its `$SYS` can be
//! read). The row's churn columns must hold what the fleet did, and with clean session off
//! every connection loadgen counted is a session Mosquitto kept (`clients/total`).

use anyhow::Result;
use controller::plan::Plan;
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, run_plan};
use tests::agent_bed::external_mosquitto;
use tests::isolated_netns_test;
use tests::mosquitto::MOSQUITTO_BINARY;
use tokio_util::sync::CancellationToken;

const ARRIVALS: u64 = 200;
const PUBLISHERS: u64 = 2;

#[test]
fn a_churn_fleet_runs_through_an_agent_and_mosquitto_counts_its_connections() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let (bed, mosquitto) = external_mosquitto::start("churn")?;
    let work = tempfile::tempdir()?;
    let text = external_mosquitto::plan(
        &bed,
        "churn",
        &work.path().join("results"),
        &format!(
            r#"[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = {PUBLISHERS}
messages = 10
warmup = 1
interval = "100ms"
[tests.workload]
connection = {{ clean_session = false }}
churn = {{ rate = 100, connections = {ARRIVALS}, hold = "200ms" }}
"#
        ),
    );
    let plan = Plan::parse(&text, "churn.toml")?;
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
    assert_eq!((summary.measured, summary.failed), (1, 0), "{summary:?}");

    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let row = &rows[0];
    assert_eq!(row.status, CellStatus::Ok, "{}", row.reason);
    assert_eq!(row.churn_rate_asked, Some(100.0));
    assert_eq!(row.churn_attempted, Some(ARRIVALS));
    assert_eq!(
        row.churn_connected,
        Some(ARRIVALS),
        "{:?}",
        row.churn_failures
    );
    assert_eq!(row.churn_disconnected, Some(ARRIVALS));
    assert!(row.churn_failures.0.is_empty(), "{:?}", row.churn_failures);
    let achieved = row.churn_rate_achieved.unwrap_or_default();
    assert!((achieved - 100.0).abs() < 5.0, "{achieved:.1} /s");
    assert_eq!(row.lost, Some(0));

    // The fleet, the workload's publishers and subscriber, and the preflight probe.
    let total = |c: &tests::MosquittoCounters| c.clients_total.unwrap_or_default();
    assert_eq!(
        total(&after) - total(&before),
        ARRIVALS + PUBLISHERS + 1 + 1,
        "clients/total counts every session loadgen opened"
    );
    let markdown = std::fs::read_to_string(summary.dir.join("report.md"))?;
    let section: Vec<&str> = markdown
        .lines()
        .skip_while(|l| !l.starts_with("## Churn"))
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## Churn"))
        .collect();
    assert!(
        section.iter().any(
            |l| l.starts_with("| latency | mosquitto | local | 1 | 100, ")
                && l.contains(&format!("| {ARRIVALS} / {ARRIVALS} | {ARRIVALS} | none |"))
        ),
        "the report's churn section:\n{}",
        section.join("\n")
    );
    eprintln!("{}", section.join("\n"));
    eprintln!(
        "churn through the agent: {ARRIVALS} connected at {achieved:.1} /s, connect p50 {:?} us p99 {:?} us, {:?} at once; Mosquitto clients/total +{}",
        row.churn_connect_p50_us,
        row.churn_connect_p99_us,
        row.churn_most_open,
        total(&after) - total(&before)
    );
    Ok(())
}
