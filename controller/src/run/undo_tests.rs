//! A run that fails at each of its phases still undoes everything it changed: netem
//! cleared, the broker removed, the local agents stopped.
//!
//! Real: two in-process agents (`agent = "local"`, one the broker's node, one the load's,
//! both on 127.0.0.1), the broker they deploy (Mosquitto where it is installed, else the
//! embedded one), the cell's load, the results folder, and the run's own phases and guards.
//! Injected (through the in-memory testbed, `testbed/memory.rs`, in front of the real
//! agents): the netem calls, since this machine's kernel may have no netem qdisc (a
//! stand-in records apply and clear per node), and the failure itself: an error writing the
//! manifest after netem is applied, a netem apply that fails on the second node, a lease
//! renewal that fails while a cell runs or only as it ends, an error or a panic after a
//! cell ran, and an error writing the report (each write fails for real: its file is made
//! unwritable). Two more stop a run once netem is in force: by its cancel token (as SIGINT
//! does) and by dropping its future, where only the guards' fallbacks act.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::testbed::memory::{Fault, MemoryNetem, MemoryTestbed};
use super::{RunError, RunEvent, RunOptions, RunSummary, event_channel, run_on};
use crate::plan::Plan;
use crate::results::CellStatus;

/// Every test run ends (undo included) well within this.
const RUN_WITHIN: Duration = Duration::from_secs(120);
/// Leases are renewed this often in these tests, to see a failed renewal within a cell.
const RENEW_EVERY: Duration = Duration::from_millis(100);
/// A renewal interval no cell here lasts: the only renewal is the check as a cell ends.
const NO_RENEWAL_IN_A_CELL: Duration = Duration::from_secs(3600);

fn plan(results: &std::path::Path) -> (Plan, String) {
    // Mosquitto where it is installed (as in CI); the embedded broker keeps the test
    // meaningful on a machine without it.
    let broker = if std::path::Path::new("/usr/sbin/mosquitto").exists() {
        "kind = \"native\"\nproduct = \"mosquitto\""
    } else {
        eprintln!("no /usr/sbin/mosquitto: the embedded broker stands in");
        "kind = \"embedded\""
    };
    let text = format!(
        r#"
name = "undo"
repetitions = 1
results_dir = {results:?}

[[nodes]]
name = "load"
agent = "local"
roles = ["loadgen", "netem"]

[[nodes]]
name = "server"
agent = "local"
roles = ["broker", "netem"]

[[brokers]]
name = "broker"
{broker}
node = "server"

[[scenarios]]
name = "edge"

[[tests]]
kind = "latency"
loadgen = ["load"]
publishers = 4
messages = 3
warmup = 1
"#,
        results = results.display().to_string()
    );
    let plan = Plan::parse(&text, "undo.toml").expect("valid plan");
    (plan, text)
}

/// What a run did, as its events and the stand-in netem saw it.
struct Ran {
    outcome: Result<Result<RunSummary, RunError>, tokio::task::JoinError>,
    events: Vec<RunEvent>,
    netem: Arc<MemoryNetem>,
}

/// Options writing into `folder`, and a testbed with `netem` and `fault` that knows it.
fn testbed(
    folder: &std::path::Path,
    netem: MemoryNetem,
    fault: Option<Fault>,
    renew_every: Duration,
) -> (RunOptions, Arc<MemoryTestbed>) {
    let options = RunOptions {
        resume: None,
        folder: Some(folder.to_path_buf()),
    };
    let testbed = MemoryTestbed {
        netem: Arc::new(netem),
        fault,
        folder: folder.to_path_buf(),
        renew_every,
    };
    (options, Arc::new(testbed))
}

async fn run_failing(fault: Option<Fault>, netem_fails_on: Option<&str>) -> Ran {
    let netem = MemoryNetem {
        fail_on: netem_fails_on.map(str::to_string),
        ..MemoryNetem::default()
    };
    run_with(fault, netem, NO_RENEWAL_IN_A_CELL).await
}

async fn run_with(fault: Option<Fault>, netem: MemoryNetem, renew_every: Duration) -> Ran {
    let results = tempfile::tempdir().expect("temp dir");
    let (plan, text) = plan(results.path());
    let (options, testbed) = testbed(&results.path().join("run"), netem, fault, renew_every);
    let netem = Arc::clone(&testbed.netem);
    let (sender, mut receiver) = event_channel();
    // A task of its own, as under `controller serve`: a panic of the run ends only it.
    let run = tokio::spawn(async move {
        let cancel = CancellationToken::new();
        run_on(&plan, &text, options, cancel, Some(sender), &*testbed).await
    });
    let collect = async {
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            events.push(event);
        }
        events
    };
    let (outcome, events) = tokio::time::timeout(RUN_WITHIN, async { tokio::join!(run, collect) })
        .await
        .expect("the run ends");
    drop(results);
    Ran {
        outcome,
        events,
        netem,
    }
}

/// Whether something accepts connections at `address`.
async fn listening(address: SocketAddr) -> bool {
    tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .is_ok_and(|connected| connected.is_ok())
}

/// Netem cleared on every node it reached, the broker removed and no longer answering,
/// both local agents stopped and no longer listening.
async fn assert_undone(ran: &Ran) {
    assert_eq!(
        ran.netem.held(),
        BTreeSet::new(),
        "netem left on nodes; calls: {:?}",
        ran.netem.log()
    );
    let log = ran.netem.log();
    assert!(
        log.contains(&"apply load".to_string()) && log.contains(&"clear load".to_string()),
        "netem reached the load node and was cleared there: {log:?}"
    );
    let broker = ran.events.iter().find_map(|e| match e {
        RunEvent::BrokerReady { address, .. } => Some(*address),
        _ => None,
    });
    let broker = broker.expect("the broker was deployed");
    assert!(
        ran.events
            .iter()
            .any(|e| matches!(e, RunEvent::BrokerRemoved { broker } if broker == "broker")),
        "the run's deploy guard removed the broker"
    );
    assert!(!listening(broker).await, "the broker at {broker} is gone");
    let agents: Vec<SocketAddr> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::LocalAgent { address, .. } => Some(*address),
            _ => None,
        })
        .collect();
    assert_eq!(agents.len(), 2, "both local agents started");
    for agent in agents {
        assert!(
            !listening(agent).await,
            "the local agent at {agent} stopped"
        );
    }
}

fn cells(ran: &Ran, status: CellStatus) -> usize {
    ran.events
        .iter()
        .filter(|e| matches!(e, RunEvent::Cell { status: s, .. } if *s == status))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_writing_the_manifest_after_netem_undoes_everything() {
    let ran = run_failing(Some(Fault::Manifest), None).await;
    assert!(
        matches!(ran.outcome, Ok(Err(RunError::Results(_)))),
        "the error is returned: {:?}",
        ran.outcome
    );
    assert_undone(&ran).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_lease_renewal_fails_the_cell_that_ran_and_still_undoes_everything() {
    // The broker node's agent stops answering renewals while the cell runs (its latency
    // test takes about a second; renewals come every 100 ms in these tests).
    let ran = run_with(
        None,
        MemoryNetem {
            renewal_fails_on: Some("server".into()),
            ..MemoryNetem::default()
        },
        RENEW_EVERY,
    )
    .await;
    assert!(
        ran.outcome.as_ref().is_ok_and(|r| r.is_ok()),
        "{:?}",
        ran.outcome
    );
    let failed: Vec<&String> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Cell {
                status: CellStatus::Failed,
                note,
                ..
            } => Some(note),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", ran.events);
    assert!(
        failed[0].contains("netem lease on node server could not be renewed"),
        "{}",
        failed[0]
    );
    assert_eq!(
        cells(&ran, CellStatus::Ok),
        0,
        "no cell is recorded as emulated"
    );
    // The renewal loop met the silence while the load ran (the check as the cell ends would
    // fail the cell too, so the note alone does not show the loop works).
    assert!(
        ran.netem
            .failed_before_load_ended
            .load(std::sync::atomic::Ordering::SeqCst),
        "{:?}",
        ran.netem.log()
    );
    assert_undone(&ran).await;
}

/// The cells recorded failed, with their notes.
fn failed_notes(ran: &Ran) -> Vec<&String> {
    ran.events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Cell {
                status: CellStatus::Failed,
                note,
                ..
            } => Some(note),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lapsing_in_a_cells_last_moment_fails_that_cell() {
    // No renewal comes while the cell runs (every hour); the lease on the broker's node is
    // gone once the load ended, so only the check as the cell ends can see it.
    let ran = run_with(
        None,
        MemoryNetem {
            renewal_fails_after_load_on: Some("server".into()),
            ..MemoryNetem::default()
        },
        NO_RENEWAL_IN_A_CELL,
    )
    .await;
    assert!(
        ran.outcome.as_ref().is_ok_and(|r| r.is_ok()),
        "{:?}",
        ran.outcome
    );
    let failed = failed_notes(&ran);
    assert_eq!(failed.len(), 1, "{:?}", ran.events);
    assert!(
        failed[0].contains("netem lease on node server could not be renewed (injected: no answer)"),
        "{}",
        failed[0]
    );
    assert_eq!(cells(&ran, CellStatus::Ok), 0, "not recorded as emulated");
    assert!(
        ran.netem
            .log()
            .contains(&"renewal failed server".to_string()),
        "{:?}",
        ran.netem.log()
    );
    assert_undone(&ran).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_netem_apply_failing_on_the_second_node_clears_the_first() {
    let ran = run_failing(None, Some("server")).await;
    let summary = ran.outcome.as_ref().expect("no panic").as_ref();
    let summary = summary.expect("a failed scenario fails its cells, not the run");
    assert_eq!((summary.measured, summary.failed), (0, 1), "{summary:?}");
    assert_eq!(cells(&ran, CellStatus::Failed), 1);
    assert_undone(&ran).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_a_cell_undoes_everything() {
    let ran = run_failing(Some(Fault::Cell), None).await;
    assert!(
        matches!(ran.outcome, Ok(Err(RunError::Results(_)))),
        "the error is returned: {:?}",
        ran.outcome
    );
    assert_undone(&ran).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_after_a_cell_undoes_everything_then_goes_on() {
    let ran = run_failing(Some(Fault::CellPanics), None).await;
    assert!(
        ran.outcome.as_ref().is_err_and(|e| e.is_panic()),
        "the panic reaches the run's task: {:?}",
        ran.outcome.as_ref().map(|_| ())
    );
    assert_undone(&ran).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_writing_the_report_leaves_nothing_behind() {
    let ran = run_failing(Some(Fault::Report), None).await;
    let summary = ran.outcome.as_ref().expect("no panic").as_ref();
    let summary = summary.expect("the measurements are on disk: the run succeeds");
    assert_eq!((summary.measured, summary.failed), (1, 0), "{summary:?}");
    assert!(
        ran.events
            .iter()
            .any(|e| matches!(e, RunEvent::ReportFailed { .. })),
        "the failure is reported"
    );
    assert_undone(&ran).await;
}

/// How a test stops a run once netem is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopBy {
    /// The run's token, as SIGINT or a `serve` Cancel does.
    Cancel,
    /// Dropping the run's future (an aborted task): only the guards' fallbacks can act.
    Abort,
}

async fn run_stopped(stop: StopBy) -> Ran {
    let results = tempfile::tempdir().expect("temp dir");
    let (plan, text) = plan(results.path());
    let folder = results.path().join("run");
    let (options, testbed) = testbed(&folder, MemoryNetem::default(), None, RENEW_EVERY);
    let netem = Arc::clone(&testbed.netem);
    let (sender, mut receiver) = event_channel();
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let run =
        tokio::spawn(
            async move { run_on(&plan, &text, options, token, Some(sender), &*testbed).await },
        );
    let abort = run.abort_handle();
    let collect = async {
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            if matches!(event, RunEvent::Netem { .. }) {
                match stop {
                    StopBy::Cancel => cancel.cancel(),
                    StopBy::Abort => abort.abort(),
                }
            }
            events.push(event);
        }
        events
    };
    let (outcome, events) = tokio::time::timeout(RUN_WITHIN, async { tokio::join!(run, collect) })
        .await
        .expect("the run ends");
    drop(results);
    Ran {
        outcome,
        events,
        netem,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_stops_and_undoes_everything() {
    let ran = run_stopped(StopBy::Cancel).await;
    let summary = ran.outcome.as_ref().expect("no panic").as_ref();
    let summary = summary.expect("a cancelled run ends normally");
    assert!(summary.interrupted, "{summary:?}");
    assert_undone(&ran).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_run_is_undone_by_its_guards_fallbacks() {
    let ran = run_stopped(StopBy::Abort).await;
    assert!(
        ran.outcome.as_ref().is_err_and(|e| e.is_cancelled()),
        "the run's task was aborted"
    );
    // The fallbacks do not wait: poll, with a deadline, until their detached undo is done.
    let addresses: Vec<SocketAddr> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            RunEvent::LocalAgent { address, .. } | RunEvent::BrokerReady { address, .. } => {
                Some(*address)
            }
            _ => None,
        })
        .collect();
    assert_eq!(addresses.len(), 3, "two local agents and the broker");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut open = Vec::new();
        for address in &addresses {
            if listening(*address).await {
                open.push(*address);
            }
        }
        let held = ran.netem.held();
        if open.is_empty() && held.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still listening: {open:?}; netem held on {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
