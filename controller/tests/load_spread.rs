//! Load spread over three loadgen agents (`loadgen = [...]`, `weights`): plans run by
//! `run_plan` against the real `continuum-agent` on tester, headnode and worker (network
//! namespaces, `tests::agent_bed`) and a real Mosquitto the test starts in the worker's
//! namespace (an external broker to the plan, so the test can read its `$SYS` counters).
//! Every node runs its block of publishers and subscribers from one start barrier; the merged
//! counts must equal the broker's own, each node's share and CPU must be in the cell's
//! `result.json`, and an agent killed mid-cell must fail that cell naming it.

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use controller::plan::{Plan, TestKind};
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, RunSummary, run_plan};
use tests::agent_bed::{AGENT_PORT, AGENTS, AgentBed};
use tests::isolated_netns_test;
use tests::mosquitto::{MOSQUITTO_BINARY, Mosquitto, MosquittoOptions};
use tests::netns::{established_to, link_bytes_received};
use tokio_util::sync::CancellationToken;

/// The port of the worker's Mosquitto on the worker's testbed address.
const BROKER_PORT: u16 = 1884;

/// Mosquitto in the worker's namespace, listening on the worker's address too.
fn worker_mosquitto(bed: &AgentBed) -> Result<Mosquitto> {
    let worker = bed.testbed.node("worker");
    let options = MosquittoOptions {
        extra_config: vec![format!("listener {BROKER_PORT} {}", worker.addr())],
        ..MosquittoOptions::default()
    };
    worker.enter(|| Mosquitto::start(options))?
}

fn plan_text(bed: &AgentBed, results: &Path, tests: &str) -> String {
    let mut text = format!(
        "name = \"spread\"\nrepetitions = 1\npki_dir = \"{}\"\nresults_dir = \"{}\"\n\
         [timeouts]\nconnect = \"10s\"\ndeploy = \"60s\"\ncell = \"90s\"\n",
        bed.pki.path().display(),
        results.display()
    );
    for name in AGENTS {
        let ip = bed.testbed.node(name).addr();
        text += &format!(
            "[[nodes]]\nname = \"{name}\"\nagent = \"{ip}:{AGENT_PORT}\"\ndata_address = \"{ip}\"\n\
             roles = [\"loadgen\"]\n"
        );
    }
    text += &format!(
        "[[brokers]]\nname = \"mosquitto\"\nkind = \"external\"\naddress = \"{}:{BROKER_PORT}\"\n\
         [[scenarios]]\nname = \"local\"\n",
        bed.testbed.node("worker").addr()
    );
    text + tests
}

fn run(bed: &AgentBed, text: &str) -> Result<RunSummary> {
    let plan = Plan::parse(text, "spread.toml")?;
    bed.on_controller_node(|| async {
        Ok(run_plan(&plan, text, RunOptions::default(), CancellationToken::new()).await?)
    })
}

fn result_of(dir: &Path, cell: &str) -> Result<loadgen::RunResult> {
    let path = dir.join("cells").join(cell).join("result.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(serde_json::from_str(&text)?)
}

/// A node's share of a cell: its name, publisher and subscriber ranges.
type Share = (String, Range<u32>, Range<u32>);

/// Each instance of a result: its node and its publisher and subscriber ranges; fails when
/// one has no CPU figures.
fn shares(result: &loadgen::RunResult) -> Result<Vec<Share>> {
    result
        .instances
        .iter()
        .map(|i| {
            ensure!(
                i.cpu_capacity_milli > 0 && i.window_ms > 0.0,
                "instance {:?} has no CPU figures: {i:?}",
                i.node
            );
            Ok((
                i.node.clone().unwrap_or_default(),
                i.shard.publishers.clone(),
                i.shard.subscribers.clone(),
            ))
        })
        .collect()
}

fn share(node: &str, publishers: Range<u32>, subscribers: Range<u32>) -> Share {
    (node.to_string(), publishers, subscribers)
}

const SHARED_TESTS: &str = r#"
# 40 pairs at QoS 0: 20 on the tester, 10 on each of the others.
[[tests]]
kind = "burst"
loadgen = ["tester", "headnode", "worker"]
weights = [2, 1, 1]
clients = [40]
messages = 100
# 30 publishers at QoS 1 over three nodes to one subscriber on the tester: two thirds of the
# messages cross between namespaces, their latencies mapped through two agents' clocks.
[[tests]]
kind = "latency"
loadgen = ["tester", "headnode", "worker"]
publishers = 30
messages = 10
warmup = 1
interval = "100ms"
"#;

#[test]
fn three_agents_share_the_load_and_their_merged_counts_equal_the_brokers() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let bed = AgentBed::start_with("spread", |_, _| Ok(String::new()))?;
    let mosquitto = worker_mosquitto(&bed)?;
    let work = tempfile::tempdir()?;
    let before = mosquitto.counters_settled()?;
    let summary = run(
        &bed,
        &plan_text(&bed, &work.path().join("results"), SHARED_TESTS),
    )?;
    let after = mosquitto.counters_settled()?;
    assert_eq!(
        (summary.measured, summary.failed, summary.skipped),
        (2, 0, 0),
        "{summary:?}"
    );
    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let (mut published, mut received) = (0, 0);
    for row in &rows {
        assert_eq!(row.status, CellStatus::Ok, "{}: {}", row.cell, row.reason);
        assert_eq!(row.lost, Some(0), "{}: lost messages", row.cell);
        assert_eq!(
            row.delivered_unique, row.expected_deliveries,
            "{}",
            row.cell
        );
        let result = result_of(&summary.dir, &row.cell)?;
        published += result.published.iter().sum::<u64>();
        received += result.received;
    }
    // Every PUBLISH the three agents wrote reached the broker, and every one it wrote to
    // their subscribers was counted by them: nothing counted twice in the merge, nothing lost.
    assert_eq!(
        (published, received),
        (
            after.publish_received - before.publish_received,
            after.publish_sent - before.publish_sent
        ),
        "agents' merged counts vs Mosquitto's $SYS"
    );
    let burst = rows
        .iter()
        .find(|r| r.test == TestKind::Burst)
        .expect("burst row");
    assert_eq!(burst.expected_deliveries, Some(40 * 100));
    assert_eq!(
        shares(&result_of(&summary.dir, &burst.cell)?)?,
        vec![
            share("tester", 0..20, 0..20),
            share("headnode", 20..30, 20..30),
            share("worker", 30..40, 30..40),
        ]
    );
    let latency = rows
        .iter()
        .find(|r| r.test == TestKind::Latency)
        .expect("latency row");
    let result = result_of(&summary.dir, &latency.cell)?;
    assert_eq!(
        shares(&result)?,
        vec![
            share("tester", 0..10, 0..1),
            share("headnode", 10..20, 1..1),
            share("worker", 20..30, 1..1),
        ]
    );
    // One histogram holds all three nodes' messages: 30 publishers x (10 - 1 warm-up).
    assert_eq!(result.latency.len(), 30 * 9);
    // Namespaces share one clock: latencies mapped through the measured offsets stay those of
    // a broker next door (a millisecond-scale error in a mapping would show here).
    let p50 = latency.latency_p50_us.expect("a latency median");
    assert!(p50 > 0.0 && p50 < 20_000.0, "latency p50 {p50} us");
    eprintln!(
        "published {published}, received {received} (Mosquitto agrees); burst receive {:?} msg/s; latency p50 {p50} us",
        burst.receive_rate_msgs_per_s
    );
    Ok(())
}

#[test]
fn killing_one_of_three_agents_mid_cell_fails_that_cell_naming_it() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let mut bed = AgentBed::start_with("spreadkill", |_, _| Ok(String::new()))?;
    let _mosquitto = worker_mosquitto(&bed)?;
    let work = tempfile::tempdir()?;
    // 30 pairs, 10 on each node, offered 3000 msg/s for 20 s: long enough to be killed in.
    let text = plan_text(
        &bed,
        &work.path().join("results"),
        "[[tests]]\nkind = \"throughput\"\nloadgen = [\"tester\", \"headnode\", \"worker\"]\n\
         clients = [30]\nrate = 3000\nwarmup = \"1s\"\nduration = \"20s\"\n",
    );
    let headnode = bed
        .agents
        .iter()
        .find(|(name, _)| name == "headnode")
        .map(|(_, process)| process.id())
        .context("headnode agent")?;
    let started = Instant::now();
    let (summary, (killed_at, connected, received)) = std::thread::scope(|scope| {
        let run = scope.spawn(|| run(&bed, &text));
        // Its 20 clients (10 publishers, 10 subscribers) connected...
        let deadline = Instant::now() + Duration::from_secs(60);
        while established_to(headnode, BROKER_PORT) < 20 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let connected = established_to(headnode, BROKER_PORT);
        // ... and past the start barrier: its subscribers have received 100 KB since.
        let baseline = link_bytes_received(headnode);
        while link_bytes_received(headnode) < baseline + 100_000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let received = link_bytes_received(headnode) - baseline;
        host::kill(headnode);
        let killed_at = started.elapsed();
        (
            run.join().expect("the run's thread"),
            (killed_at, connected, received),
        )
    });
    let (_, process) = bed
        .agents
        .iter_mut()
        .find(|(name, _)| name == "headnode")
        .context("headnode agent")?;
    process.child_mut().wait()?;
    let summary = summary?;
    let took = started.elapsed();
    eprintln!(
        "headnode killed at {:.1} s with {connected} connections to the broker and {received} \
         bytes received under load; run ended at {:.1} s: {summary:?}",
        killed_at.as_secs_f64(),
        took.as_secs_f64()
    );
    assert_eq!(connected, 20, "the headnode's clients were connected");
    assert!(
        received >= 100_000,
        "the load was under way when it was killed"
    );
    assert_eq!((summary.measured, summary.failed), (0, 1), "{summary:?}");
    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let [row] = rows.as_slice() else {
        panic!("one row: {rows:?}");
    };
    assert_eq!(row.status, CellStatus::Failed);
    assert!(
        row.reason.starts_with("headnode: "),
        "the reason names the killed node: {}",
        row.reason
    );
    Ok(())
}

/// Two shared subscriptions on one filter of a 100-topic tree, their twelve members spread
/// four per node over the three agents (six per group, two of each group on every node).
const SHARED_GROUPS: &str = r#"
[[tests]]
kind = "custom"
loadgen = ["tester", "headnode", "worker"]
[tests.workload]
publishers = 100
subscribers = 12
topology = "tree"
qos = 1
payload = "32B"
messages_per_publisher = 10
pacing = { mode = "open-loop", interval = "50ms" }
broker = { protocol = "5" }
[tests.workload.topics]
pattern = "site/{site}/device/{device}/temp"
counts = { site = 4, device = 25 }
subscribe = ["$share/backend/site/+/device/+/temp", "$share/audit/site/+/device/+/temp"]
# The same tree retained, read late by 20 subscribers of the tester.
[[tests]]
kind = "custom"
loadgen = ["tester"]
[tests.workload]
publishers = 100
subscribers = 1
topology = "tree"
qos = 1
payload = "32B"
messages_per_publisher = 10
pacing = { mode = "burst" }
[tests.workload.topics]
pattern = "site/{site}/device/{device}/temp"
counts = { site = 4, device = 25 }
subscribe = ["site/#"]
[tests.workload.retain]
late_subscribers = 20
filter = "site/+/device/+/temp"
"#;

#[test]
fn a_shared_group_spread_over_three_agents_gets_every_message_once() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let bed = AgentBed::start_with("spreadshare", |_, _| Ok(String::new()))?;
    let mosquitto = worker_mosquitto(&bed)?;
    let work = tempfile::tempdir()?;
    let before = mosquitto.counters_settled()?;
    let summary = run(
        &bed,
        &plan_text(&bed, &work.path().join("results"), SHARED_GROUPS),
    )?;
    assert_eq!((summary.measured, summary.failed), (2, 0), "{summary:?}");
    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let row = &rows[0];
    let result = result_of(&summary.dir, &row.cell)?;
    // Every node held members of both groups.
    assert_eq!(
        shares(&result)?
            .iter()
            .map(|(node, _, subscribers)| (node.clone(), subscribers.clone()))
            .collect::<Vec<_>>(),
        vec![
            ("tester".to_string(), 0..4),
            ("headnode".to_string(), 4..8),
            ("worker".to_string(), 8..12),
        ]
    );
    let figures = loadgen::Summary::of(&result);
    assert_eq!(
        figures.expected_deliveries,
        2 * 100 * 10,
        "owed once per group"
    );
    assert_eq!((figures.lost, figures.duplicates), (Some(0), 0));
    assert_eq!(figures.shared_groups.len(), 2);
    for group in &figures.shared_groups {
        assert_eq!(group.members, 6, "{group:?}");
        assert_eq!((group.delivered, group.expected), (1000, 1000), "{group:?}");
        assert_eq!((group.lost, group.duplicates), (Some(0), 0), "{group:?}");
        assert!(group.share_min > 0, "every member took part: {group:?}");
    }
    let retained = result_of(&summary.dir, &rows[1].cell)?;
    let late = retained
        .retained
        .as_ref()
        .context("the late subscribers' verdict")?;
    assert_eq!(
        (
            late.late_subscribers,
            late.current,
            late.stale,
            late.missing,
            late.extra
        ),
        (20, 20 * 100, 0, 0, 0)
    );
    assert_eq!(late.left_after_clear, Some(0));
    let after = mosquitto.counters_settled()?;
    // Mosquitto leaves retained publishes out of its received count (see mosquitto_sys.rs);
    // what it sent is every delivery counted by the two cells' subscribers, plus the 2000
    // retained messages the late subscribers were owed and got.
    assert_eq!(
        (
            figures.published,
            figures.received + retained.received + 2000
        ),
        (
            after.publish_received - before.publish_received,
            after.publish_sent - before.publish_sent
        ),
        "the agents' merged counts vs Mosquitto's $SYS"
    );
    let report = std::fs::read_to_string(summary.dir.join("report.md"))?;
    assert!(
        report.contains("## Shared subscriptions")
            && report
                .contains("| $share/audit/site/+/device/+/temp | 1 | 6 | 1000 / 1000 | 0 | 0 |"),
        "{report}"
    );
    Ok(())
}
