//! A reconnect storm through the controller: a light latency test whose workload asks
//! `connection.reconnect` with a cut of every connection a second in, run by the real
//! `continuum-agent` on the tester against a Mosquitto in the worker's namespace (the plan's
//! external broker, so its `$SYS` can be read). The row's reconnect columns and the report's
//! section must hold what the fleet did; with clean session off every client came back to
//! the session it had, so Mosquitto's `clients/total` counts each client once, and its
//! PUBLISH count is what loadgen published plus what it sent again.

use anyhow::Result;
use controller::plan::Plan;
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, run_plan};
use tests::agent_bed::external_mosquitto;
use tests::isolated_netns_test;
use tests::mosquitto::MOSQUITTO_BINARY;
use tokio_util::sync::CancellationToken;

const PUBLISHERS: u64 = 2;
/// The publishers and the latency test's one subscriber.
const CONNECTIONS: u64 = PUBLISHERS + 1;

#[test]
fn a_storm_of_cut_connections_runs_through_an_agent_and_every_client_comes_back() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let (bed, mosquitto) = external_mosquitto::start("reconnect")?;
    let work = tempfile::tempdir()?;
    let text = external_mosquitto::plan(
        &bed,
        "reconnect",
        &work.path().join("results"),
        &format!(
            r#"[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = {PUBLISHERS}
messages = 30
warmup = 1
interval = "100ms"
[tests.workload.connection]
clean_session = false
reconnect = {{ within = "10s", cut_all_at = "1s" }}
"#
        ),
    );
    let plan = Plan::parse(&text, "reconnect.toml")?;
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
    assert_eq!(row.reconnect_lost, Some(CONNECTIONS));
    assert_eq!(
        row.reconnect_back,
        Some(CONNECTIONS),
        "{:?}",
        row.reconnect_failures
    );
    assert_eq!(row.reconnect_not_back, Some(0));
    let whole_again_ms = row.reconnect_full_ms.expect("every connection came back");
    assert!(whole_again_ms < 10_000.0, "{whole_again_ms} ms");
    assert_eq!(row.lost, Some(0), "nothing lost across the cut");
    assert!(row.errors.0.is_empty(), "{:?}", row.errors);

    // The publishers, the subscriber and the preflight probe: a reconnection resumed the
    // client's own session, it did not open another.
    let total = |c: &tests::MosquittoCounters| c.clients_total.unwrap_or_default();
    assert_eq!(
        total(&after) - total(&before),
        CONNECTIONS + 1,
        "clients/total counts each client once"
    );
    let published = row.published.unwrap_or_default();
    let resent = row.reconnect_resent.unwrap_or_default();
    let received = after.publish_received - before.publish_received;
    assert!(
        (published..=published + resent).contains(&received),
        "Mosquitto received {received} PUBLISH, loadgen published {published} and sent {resent} again"
    );
    let markdown = std::fs::read_to_string(summary.dir.join("report.md"))?;
    let section: Vec<&str> = markdown
        .lines()
        .skip_while(|l| !l.starts_with("## Reconnect storms"))
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## Reconnect storms"))
        .collect();
    assert!(
        section.iter().any(|l| l.starts_with(&format!(
            "| latency | mosquitto | local | 1 | {CONNECTIONS} / {CONNECTIONS} | 0 |"
        ))),
        "the report's reconnect section:\n{}",
        section.join("\n")
    );
    eprintln!("{}", section.join("\n"));
    eprintln!(
        "reconnect storm through the agent: {CONNECTIONS} cut and back in {whole_again_ms:.1} ms \
         (away p50 {:?} us, max {:?} us); Mosquitto clients/total +{}, PUBLISH received {received} \
         for {published} published and {resent} sent again",
        row.reconnect_away_p50_us,
        row.reconnect_away_max_us,
        total(&after) - total(&before)
    );
    Ok(())
}
