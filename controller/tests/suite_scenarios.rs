//! The Open MQTT Benchmark Suite's four scenarios as test kinds, run at a tiny scale against
//! a real Mosquitto through the in-process agent: every cell measured with every message
//! accounted for, and the report's suite table showing what the cells' records hold.

mod local_run;

use controller::results::{CellRecord, CellStatus};
use local_run::LocalRun;
use tests::mosquitto::MOSQUITTO_BINARY;

const PLAN: &str = r#"
name = "suite"
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
[[scenarios]]
name = "local"
[[tests]]                # 10 -> 10
kind = "p2p"
loadgen = ["tester"]
scale = 0.0002
warmup = "1s"
duration = "2s"
[[tests]]                # 5 -> 2 subscribers of all five topics
kind = "fan-out"
loadgen = ["tester"]
scale = 0.002
warmup = "1s"
duration = "2s"
[[tests]]                # 20 -> 2 members of $share/benchmark/test/#
kind = "fan-in-shared"
loadgen = ["tester"]
scale = 0.0004
subscribers = 2
warmup = "1s"
duration = "2s"
[[tests]]                # 200 arrivals, all open through the window
kind = "connections"
loadgen = ["tester"]
scale = 0.0002
warmup = "1s"
duration = "2s"
"#;

/// The cells of the report's suite table, by scenario name (first column).
fn suite_rows(report: &str) -> Vec<Vec<String>> {
    let section = report
        .split("## Open MQTT Benchmark Suite scenarios")
        .nth(1)
        .expect("the suite's section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| Scenario"))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suites_scenarios_run_on_mosquitto_and_fill_the_suites_table() {
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return;
    }
    let run = LocalRun::of(PLAN, "suite.toml").await;
    let rows = &run.rows;
    assert_eq!(rows.len(), 4);
    let record = |test: &str| -> CellRecord {
        let row = rows
            .iter()
            .find(|r| r.cell.starts_with(&format!("mosquitto/local/{test}")))
            .unwrap_or_else(|| panic!("a row for {test}"));
        assert_eq!(row.status, CellStatus::Ok, "{test}: {}", row.reason);
        run.record(&row.cell)
    };
    let report = run.text("report.md");
    let table = suite_rows(&report);
    for (test, scenario, publishers, subscribers) in [
        ("0-p2p", "p2p", 10, 10),
        ("1-fan-out", "fan-out", 5, 2),
        ("2-fan-in-shared", "fan-in-shared", 20, 2),
        ("3-connections", "connections", 1, 1),
    ] {
        let record = record(test);
        let figures = record.summary.expect("measured");
        assert_eq!(
            (figures.publishers, figures.subscribers),
            (publishers, subscribers),
            "{test}"
        );
        assert_eq!((figures.qos, figures.payload_bytes), (1, 16), "{test}");
        // QoS 1 on loopback: every message owed arrived, once.
        assert!(figures.expected_deliveries > 0, "{test}");
        assert_eq!(
            (figures.lost, figures.duplicates),
            (Some(0), 0),
            "{test}: {figures:?}"
        );
        let row = table
            .iter()
            .find(|row| row[0] == scenario)
            .unwrap_or_else(|| panic!("a row for {scenario} in {table:?}"));
        assert_eq!(row[1], "mosquitto");
        let arrivals = figures.churn.as_ref().map_or(0, |churn| churn.connected);
        assert_eq!(
            row[4],
            (u64::from(publishers) + u64::from(subscribers) + arrivals).to_string(),
            "{scenario}: connections"
        );
        assert_eq!(
            row[11],
            format!(
                "{} / {}",
                figures.delivered_unique, figures.expected_deliveries
            ),
            "{scenario}"
        );
        assert_eq!(
            (row[12].as_str(), row[13].as_str()),
            ("0", "0"),
            "{scenario}"
        );
    }
    // Each arrival was either accepted or counted as failed, and those accepted stayed.
    let connections = record("3-connections").summary.expect("measured");
    let churn = connections.churn.expect("arrivals");
    let failed: u64 = churn.failures.values().sum();
    assert_eq!((churn.attempted, churn.connected + failed), (200, 200));
    assert_eq!(
        churn.disconnected, churn.connected,
        "each left after its hold"
    );
    // The shared group got every message once, spread over its two members.
    let fan_in = record("2-fan-in-shared").summary.expect("measured");
    let group = fan_in.shared_groups.first().expect("the shared group");
    assert_eq!((group.lost, group.duplicates), (Some(0), 0));
    assert_eq!((group.members, group.delivered), (2, group.expected));
}
