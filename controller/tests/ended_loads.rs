//! A cell that times out ends its load on the agent: ten cells in a row whose messages are
//! the longest interval apart (an hour) each fail at the cell timeout, and the cells beside
//! them still run. Each dropped RunLoad must give back one of the agent's 8 process-wide load
//! slots; before, the ninth such load was refused (`this agent already serves 8 loads`) and
//! so was every later cell. The agent is the in-process one (`agent = "local"`); the broker a
//! real Mosquitto on loopback.

use std::time::{Duration, Instant};

use controller::plan::Plan;
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, run_plan};
use tests::mosquitto::{MOSQUITTO_BINARY, Mosquitto, MosquittoOptions};
use tokio_util::sync::CancellationToken;

/// Hung cells: more than the agent's 8 load slots.
const HUNG_CELLS: usize = 10;
/// Each cell's timeout. The issue's scenario says 5 s; 2 s keeps ten of them well under a
/// minute and still leaves the load time to connect and publish its first message.
const CELL_TIMEOUT: &str = "2s";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_that_time_out_free_the_agents_load_slots() {
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return;
    }
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let work = tempfile::tempdir().expect("temp dir");
    let interval = humantime::format_duration(loadgen::spec::MAX_DURATION);
    let text = format!(
        r#"name = "ended-loads"
repetitions = {HUNG_CELLS}
results_dir = "{results}"
[timeouts]
connect = "10s"
cell = "{CELL_TIMEOUT}"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen"]
[[brokers]]
name = "mosquitto"
kind = "external"
address = "{broker}"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 1
messages = 2
warmup = 0
interval = "{interval}"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 1
messages = 3
warmup = 0
interval = "10ms"
"#,
        results = work.path().join("results").display(),
        broker = broker.addr(),
    );
    let plan = Plan::parse(&text, "ended-loads.toml").expect("a valid plan");
    let began = Instant::now();
    let summary = run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    )
    .await
    .expect("the run completes");
    let took = began.elapsed();
    eprintln!("{HUNG_CELLS} hung and {HUNG_CELLS} short cells in {took:?}");
    let rows = results::read_rows(&summary.dir.join("summary.csv")).expect("summary.csv");
    let (hung, short): (Vec<_>, Vec<_>) = rows
        .iter()
        .partition(|row| row.cell.contains("/0-latency/"));
    assert_eq!((hung.len(), short.len()), (HUNG_CELLS, HUNG_CELLS));
    for row in &hung {
        assert_eq!(row.status, CellStatus::Failed, "{}", row.reason);
        assert!(row.reason.contains("took longer than"), "{}", row.reason);
    }
    // Every short cell ran, the last ones after nine and ten hung loads too.
    for row in &short {
        assert_eq!(row.status, CellStatus::Ok, "{}", row.reason);
    }
    assert_eq!(
        (summary.measured, summary.failed),
        (HUNG_CELLS, HUNG_CELLS),
        "{summary:?}"
    );
    // Each hung cell ends at its timeout, not later.
    assert!(
        took < Duration::from_secs(2 * HUNG_CELLS as u64 + 30),
        "took {took:?}"
    );
}
