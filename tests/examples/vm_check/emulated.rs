//! The study on one machine, as a user runs it: a plan whose nodes say `agent = "namespace"`,
//! run by the controller as a process of its own (this program re-executed as `emulated run
//! PLAN`), which makes a namespace per node and the hub between them, starts each node's
//! agent inside its namespace and applies netem on the nodes' links, on this VM's kernel.
//!
//! In order:
//! 1. A long run is killed with SIGKILL mid-cell: what it leaves is listed (only its folder
//!    under `/run/continuum/emulated`; its namespaces ended with the process, its embedded
//!    broker with it).
//! 2. The study's run: tester (load) and worker (an embedded broker), the scenarios local,
//!    edge and cloud, the latency test (10 publishers every 250 ms), 3 repetitions
//!    interleaved, with the quickstart's `testbed.fallback = "local"` (so every edge and
//!    cloud cell measured also shows that with root and netem the nodes are emulated, not
//!    run on loopback). Its log says it removed the killed run's folder before it made anything;
//!    every cell is measured; each scenario's rise over local (the median of the paired
//!    rises) is its total one-way delay (half on each node's link, a message crosses both),
//!    within 10 %, as the controller suite checks it; afterwards no namespace, link, qdisc,
//!    process or folder of either run is left, each listed against the same list taken before.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use controller::plan::{Plan, TestKind};
use controller::results::{self, CellStatus};
use controller::run::{EMULATED_ROOT, RunOptions, run_plan};
use futures_util::TryStreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::report;

/// This suite's name on the payload's command line.
pub const SUITE: &str = "emulated";
const WORK_DIR: &str = "/tmp/emulated-vm";
const REPETITIONS: usize = 3;
/// The scenarios and their totals (Table II), ms.
const SCENARIOS: [(&str, f64); 3] = [("local", 0.0), ("edge", 2.5), ("cloud", 6.25)];
/// How far each rise may be from its total.
const TOLERANCE: f64 = crate::common::DELAY_TOLERANCE;

/// `emulated` runs the suite; `emulated run PLAN` is the controller it starts.
pub fn main(args: &[String]) -> ExitCode {
    if !crate::common::inside_the_vm() {
        return ExitCode::FAILURE;
    }
    if let [mode, plan] = args
        && mode == "run"
    {
        return controller_process(Path::new(plan));
    }
    crate::common::run_suite("warn,rumqttd=off", run)
}

/// The controller, as `controller PLAN` runs it: the plan on a runtime of its own.
fn controller_process(path: &Path) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn,rumqttd=off"))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let outcome = (|| -> Result<()> {
        let text = std::fs::read_to_string(path)?;
        let plan = Plan::parse(&text, &path.display().to_string())?;
        let runtime = tokio::runtime::Runtime::new()?;
        let summary = runtime.block_on(run_plan(
            &plan,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        ))?;
        eprintln!("emulated run: {summary:?}");
        Ok(())
    })();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("emulated run: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn plan_text(results: &Path, scenarios: &[&str], messages: u32) -> String {
    let mut text = format!(
        r#"name = "emulated"
repetitions = {REPETITIONS}
order = "interleaved"
results_dir = "{results}"
[timeouts]
connect = "60s"
deploy = "60s"
netem = "30s"
cell = "180s"
[testbed]
fallback = "local"
[[nodes]]
name = "tester"
agent = "namespace"
roles = ["loadgen", "netem"]
[[nodes]]
name = "worker"
agent = "namespace"
roles = ["broker", "netem"]
[[brokers]]
name = "embedded"
kind = "embedded"
node = "worker"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 10
messages = {messages}
warmup = 2
interval = "250ms"
"#,
        results = results.display()
    );
    for name in scenarios {
        text += &format!("[[scenarios]]\nname = \"{name}\"\n");
    }
    text
}

/// What the machine holds that a run could leave: namespaces, links and qdiscs in this
/// namespace, processes, and emulated runs' folders.
#[derive(Debug, PartialEq)]
struct Holdings {
    namespaces: Vec<u64>,
    links: Vec<String>,
    qdiscs: usize,
    processes: Vec<String>,
    folders: Vec<String>,
}

async fn holdings() -> Result<Holdings> {
    let (connection, handle, _) = rtnetlink::new_connection().context("netlink")?;
    tokio::spawn(connection);
    let mut links = Vec::new();
    let mut stream = handle.link().get().execute();
    while let Some(link) = stream.try_next().await? {
        for attribute in link.attributes {
            if let rtnetlink::packet_route::link::LinkAttribute::IfName(name) = attribute {
                links.push(name);
            }
        }
    }
    let mut qdiscs = 0;
    let mut stream = handle.qdisc().get().execute();
    while stream.try_next().await?.is_some() {
        qdiscs += 1;
    }
    let me = std::process::id();
    // User processes only: kernel threads (an empty command line) come and go on their own.
    let processes = host::running_processes()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty()))
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} {}", comm.trim())
        })
        .collect();
    let folders = std::fs::read_dir(EMULATED_ROOT)
        .map(|dir| {
            dir.flatten()
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default();
    Ok(Holdings {
        namespaces: host::netns::namespaces_in_use(),
        links,
        qdiscs,
        processes,
        folders,
    })
}

/// What the machine holds once the suites before this one are gone: the kernel destroys a
/// namespace, and the veth ends it held here, in a workqueue after its last process exits, so
/// the controller suite's links can outlive it by a moment. Waits (at most 30 s) until only
/// `lo` is left; a suite that leaked links shows them here and fails the comparisons below.
async fn settled_holdings() -> Result<Holdings> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = holdings().await?;
        if now.links == ["lo"] || Instant::now() >= deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn controller(plan: &Path, log: &Path) -> Result<std::process::Child> {
    let exe = std::env::current_exe().context("own executable")?;
    let log = std::fs::File::create(log).context("the controller's log")?;
    Command::new(exe)
        .args([SUITE, "run"])
        .arg(plan)
        // Inherited: the VM has no /dev/null to give it.
        .stdin(Stdio::inherit())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the controller")
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

async fn run() -> Result<bool> {
    let mut ok = true;
    let work = Path::new(WORK_DIR);
    std::fs::create_dir_all(work)?;
    let before = settled_holdings().await?;

    // 1. Killed mid-cell.
    let killed_plan = work.join("killed.toml");
    std::fs::write(
        &killed_plan,
        plan_text(&work.join("killed"), &["local"], 400),
    )?;
    let mut killed = controller(&killed_plan, &work.join("killed.log"))?;
    let started = Instant::now();
    // The manifest is written once every agent answered, before the first cell.
    let measuring = host::poll_until(Duration::from_secs(120), Duration::from_millis(250), || {
        let opened = std::fs::read_dir(work.join("killed"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| run.path().join("manifest.json").exists());
        async move {
            if opened {
                host::Attempt::Done(())
            } else {
                host::Attempt::Retry("the killed run has not opened its folder")
            }
        }
    })
    .await;
    // Into its first cell: the broker deployed, the load under way (the cell takes 100 s).
    tokio::time::sleep(Duration::from_secs(8)).await;
    killed.kill()?;
    killed.wait()?;
    let after_kill = holdings().await?;
    let left: Vec<&String> = after_kill
        .folders
        .iter()
        .filter(|f| !before.folders.contains(f))
        .collect();
    ok &= report(
        "killed_leaves_only_its_folder",
        measuring.is_ok()
            && left.len() == 1
            && after_kill.namespaces == before.namespaces
            && after_kill.links == before.links
            && after_kill.processes == before.processes,
        json!({ "killed_after_s": secs(started.elapsed()), "measuring": measuring.is_ok(),
                "left_folders": left, "namespaces_before": before.namespaces,
                "namespaces_after": after_kill.namespaces, "links": after_kill.links,
                "log": std::fs::read_to_string(work.join("killed.log")).unwrap_or_default() }),
    );

    // 2. The study.
    let scenarios: Vec<&str> = SCENARIOS.iter().map(|(name, _)| *name).collect();
    let study_plan = work.join("study.toml");
    std::fs::write(&study_plan, plan_text(&work.join("study"), &scenarios, 40))?;
    let started = Instant::now();
    let status = controller(&study_plan, &work.join("study.log"))?.wait()?;
    let log = std::fs::read_to_string(work.join("study.log")).unwrap_or_default();
    ok &= report(
        "run_exit",
        status.success(),
        json!({ "status": status.to_string(), "run_s": secs(started.elapsed()),
                "log_tail": log.lines().rev().take(20).collect::<Vec<_>>() }),
    );
    ok &= report(
        "leftovers_removed_first",
        log.contains("removed what a killed controller's emulated nodes left")
            && left.iter().all(|f| !Path::new(f).exists()),
        json!({ "folders": left }),
    );
    let dir = std::fs::read_dir(work.join("study"))?
        .flatten()
        .map(|e| e.path())
        .next()
        .context("the study's results folder")?;
    ok &= check_rises(&dir)?;
    match std::fs::read(dir.join("report.html")) {
        Ok(html) => crate::common::artifact("emulated-report.html", &html),
        Err(err) => println!("VM: report.html not handed over: {err}"),
    }
    let after = holdings().await?;
    ok &= report(
        "nothing_left",
        after == before,
        json!({ "before": format!("{before:?}"), "after": format!("{after:?}") }),
    );
    Ok(report("done", ok, json!({})))
}

/// Every cell measured; each scenario's paired rise over local is its total.
fn check_rises(dir: &Path) -> Result<bool> {
    let rows = results::read_rows(&dir.join("summary.csv")).context("summary.csv")?;
    let mut ok = report(
        "cells",
        rows.len() == SCENARIOS.len() * REPETITIONS
            && rows.iter().all(|r| r.status == CellStatus::Ok),
        json!({ "rows": rows.len(), "reasons": rows.iter().map(|r| r.reason.clone()).collect::<Vec<_>>() }),
    );
    let medians = |scenario: &str| -> Vec<f64> {
        let mut by_repetition: Vec<(u32, f64)> = rows
            .iter()
            .filter(|r| r.scenario == scenario && r.test == TestKind::Latency)
            .filter_map(|r| r.latency_p50_us.map(|us| (r.repetition, us / 1e3)))
            .collect();
        by_repetition.sort_by_key(|(repetition, _)| *repetition);
        by_repetition.into_iter().map(|(_, ms)| ms).collect()
    };
    let local = medians("local");
    for (name, total) in SCENARIOS.into_iter().skip(1) {
        let here = medians(name);
        let mut rises: Vec<f64> = here.iter().zip(&local).map(|(h, l)| h - l).collect();
        let per_repetition = rises.clone();
        rises.sort_by(f64::total_cmp);
        let added = if rises.len() == REPETITIONS {
            rises[REPETITIONS / 2]
        } else {
            f64::NAN
        };
        ok &= report(
            &format!("{name}_rise"),
            (added - total).abs() <= TOLERANCE * total,
            json!({ "median_ms_per_repetition": here, "local_median_ms_per_repetition": local,
                    "added_ms_per_repetition": per_repetition, "added_ms": added,
                    "expected_ms": total, "tolerance_ms": TOLERANCE * total,
                    "off_percent": (added - total) / total * 100.0 }),
        );
    }
    Ok(ok)
}
