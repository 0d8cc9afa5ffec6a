//! Wills through a whole run: a plan's `[tests.workload.wills]` reaches loadgen through the
//! in-process agent, a real Mosquitto publishes the dropped clients' wills, and the report's
//! wills table sums what each repetition's record holds.

use controller::plan::Plan;
use controller::results::{self, CellRecord, CellStatus};
use controller::run::{RunOptions, run_plan};
use tests::mosquitto::MOSQUITTO_BINARY;
use tokio_util::sync::CancellationToken;

const PLAN: &str = r#"
name = "wills"
repetitions = 2
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
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 2
messages = 20
warmup = 0
interval = "100ms"
[tests.workload.wills]
clients = 40
dropped = 10
after = "1s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_repetitions_wills_reach_the_report() {
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let text = format!(
        "results_dir = \"{}\"\n{PLAN}",
        work.path().join("results").display()
    );
    let plan = Plan::parse(&text, "wills.toml").expect("a valid plan");
    let summary = run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    )
    .await
    .expect("the run completes");
    let rows = results::read_rows(&summary.dir.join("summary.csv")).expect("summary.csv");
    assert_eq!(rows.len(), 2);
    let mut delivered = 0;
    for row in &rows {
        assert_eq!(row.status, CellStatus::Ok, "{}", row.reason);
        let path = summary
            .dir
            .join("cells")
            .join(&row.cell)
            .join("record.json");
        let record: CellRecord =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("record.json"))
                .expect("a record");
        let wills = record
            .summary
            .and_then(|s| s.wills)
            .expect("the watcher's verdict");
        assert_eq!((wills.connected, wills.dropped), (40, 10));
        assert_eq!((wills.duplicates, wills.unexpected), (0, 0), "{wills:?}");
        delivered += wills.delivered;
    }
    assert_eq!(
        delivered, 20,
        "each dropped client's will, in each repetition"
    );
    let report = std::fs::read_to_string(summary.dir.join("report.md")).expect("report");
    let section = report
        .split("## Wills: clients that vanished")
        .nth(1)
        .expect("the wills section");
    let row = section
        .lines()
        .find(|line| line.starts_with("| latency | mosquitto | local |"))
        .expect("its row");
    assert!(
        row.starts_with("| latency | mosquitto | local | 2 | 80 (0) | 20 | 20 | 0 | 0 | 0 |"),
        "{row}"
    );
}
