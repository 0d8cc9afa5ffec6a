//! Wills through a whole run: a plan's `[tests.workload.wills]` reaches loadgen through the
//! in-process agent, a real Mosquitto publishes the dropped clients' wills, and the report's
//! wills table sums what each repetition's record holds.

mod local_run;

use controller::results::CellStatus;
use local_run::LocalRun;
use tests::mosquitto::MOSQUITTO_BINARY;

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
    let run = LocalRun::of(PLAN, "wills.toml").await;
    let rows = &run.rows;
    assert_eq!(rows.len(), 2);
    let mut delivered = 0;
    for row in rows {
        assert_eq!(row.status, CellStatus::Ok, "{}", row.reason);
        let wills = run
            .record(&row.cell)
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
    let report = run.text("report.md");
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
