//! The controller end to end on a namespace testbed: agents (the real `continuum-agent`
//! binary) on tester, headnode and worker, real Mosquitto and RabbitMQ on the worker, and the
//! controller's `run_plan` on a node of its own, driven by plan files these tests write.
//!
//! The agents come from `tests::agent_bed`, which builds `continuum-agent` fresh for this
//! package (`tests::workspace`). Where a test needs the controller as a separate process that
//! can be SIGKILLed, the test binary re-executes itself for just
//! [`controller_process_for_the_sigkill_test`] with the plan's path in an environment variable
//! ([`HELPER_PLAN_VAR`]); that helper runs `run_plan` like `controller plan.toml` does.
//!
//! Every test runs isolated in its own network namespace (see `tests::netns`); traffic stays
//! between the testbed's nodes, all in 198.18.0.0/15.

mod report_svg;
use report_svg::check_svg;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use controller::plan::{Plan, TestKind};
use controller::results::{self, CellStatus, ResultsDir, SummaryRow};
use controller::run::{BROKER_LEASE, RunOptions, RunSummary, run_plan};
use proto::agent::v1 as pb;
use proto::client::connect_agent;
use proto::mtls::Credentials;
use tests::agent_bed::{AGENT_PORT, AGENTS, AgentBed, connect_when_ready};
use tests::netns::{established_to, link_bytes_received};
use tests::pki::CONTROLLER;
use tests::{isolated_netns_test, skip_unless_installed};
use tokio_util::sync::CancellationToken;
use tonic::Code;

/// Set (to a plan file) only in the re-executed helper process.
const HELPER_PLAN_VAR: &str = "CONTINUUM_E2E_CONTROLLER_PLAN";
/// The test the helper process runs.
const HELPER_TEST: &str = "controller_process_for_the_sigkill_test";
/// The broker port where a test needs to know it (each worker namespace is its own).
const MQTT_PORT: u16 = 1883;
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMIUM_FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1200,3000",
];

/// A testbed with agents on tester, headnode and worker (each with the roles given, all by
/// default), a controller node, nodes without agents, the PKI (tests::agent_bed::AgentBed) and a work
/// folder.
struct Bed {
    bed: AgentBed,
    work: tempfile::TempDir,
}

// The agent bed's testbed, PKI and agents, as `bed.testbed` and so on.
impl std::ops::Deref for Bed {
    type Target = AgentBed;

    fn deref(&self) -> &AgentBed {
        &self.bed
    }
}

impl std::ops::DerefMut for Bed {
    fn deref_mut(&mut self) -> &mut AgentBed {
        &mut self.bed
    }
}

impl Bed {
    fn start(prefix: &str, roles: &[(&str, &str)], bare_nodes: &[&str]) -> Result<Self> {
        let bed = AgentBed::start_with_nodes(prefix, bare_nodes, |_, name| {
            Ok(roles
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, roles)| format!("roles = [{roles}]\n"))
                .unwrap_or_default())
        })?;
        let bed = Bed {
            bed,
            work: tempfile::tempdir()?,
        };
        bed.wait_for_agents()?;
        Ok(bed)
    }

    fn ip(&self, node: &str) -> String {
        self.bed.testbed.node(node).addr().to_string()
    }

    fn address(&self, node: &str) -> String {
        format!("{}:{AGENT_PORT}", self.ip(node))
    }

    fn results_root(&self) -> PathBuf {
        self.work.path().join("results")
    }

    fn controller_credentials(&self) -> Result<Credentials> {
        self.bed.certificates.credentials(CONTROLLER)
    }

    /// Runs `f` in the controller node.
    fn on_controller<F, Fut, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future<Output = Result<T>>,
        T: Send,
    {
        self.bed.testbed.node("controller").run_in(f)?
    }

    /// Polls every agent from the controller node until it answers Info.
    fn wait_for_agents(&self) -> Result<()> {
        let credentials = self.controller_credentials()?;
        let addresses: Vec<String> = AGENTS.iter().map(|a| self.address(a)).collect();
        self.on_controller(|| async move {
            for address in &addresses {
                connect_when_ready(address, &credentials).await?;
            }
            Ok(())
        })
    }

    /// The PID of a node's agent process.
    fn agent_pid(&self, node: &str) -> u32 {
        self.bed
            .agents
            .iter()
            .find(|(name, _)| name == node)
            .map(|(_, process)| process.id())
            .expect("an agent on that node")
    }

    /// The top of a plan: name, repetitions, results and PKI folders, short timeouts.
    fn plan_header(&self, name: &str, repetitions: u32) -> String {
        format!(
            "name = \"{name}\"\nrepetitions = {repetitions}\nresults_dir = \"{}\"\npki_dir = \"{}\"\n\n\
             [timeouts]\nconnect = \"5s\"\ndeploy = \"60s\"\nnetem = \"10s\"\ncell = \"60s\"\n\n",
            self.results_root().display(),
            self.bed.pki.path().display()
        )
    }

    /// A `[[nodes]]` entry whose agent (and data plane) is the node's testbed address.
    fn node_entry(&self, name: &str, roles: &str) -> String {
        let ip = self.ip(name);
        format!(
            "[[nodes]]\nname = \"{name}\"\nagent = \"{ip}:{AGENT_PORT}\"\nroles = [{roles}]\ndata_address = \"{ip}\"\n\n"
        )
    }

    /// tester and headnode run load, the worker runs brokers.
    fn standard_nodes(&self) -> String {
        self.node_entry("tester", "\"loadgen\", \"netem\"")
            + &self.node_entry("headnode", "\"loadgen\", \"netem\"")
            + &self.node_entry("worker", "\"broker\", \"netem\"")
    }

    fn write_plan(&self, file: &str, text: &str) -> Result<PathBuf> {
        let path = self.work.path().join(file);
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Loads the plan at `path` and runs it with `run_plan` in the controller node.
    fn run(&self, path: &Path, resume: Option<PathBuf>) -> Result<RunSummary> {
        let plan = Plan::load(path)?;
        let text = std::fs::read_to_string(path)?;
        self.on_controller(|| async {
            Ok(run_plan(
                &plan,
                &text,
                RunOptions {
                    resume,
                    folder: None,
                },
                CancellationToken::new(),
            )
            .await?)
        })
    }

    /// From the controller node: the worker's broker `name` is stopped or unknown, and no
    /// node holds a qdisc.
    fn assert_nothing_left(&self, broker: &str) -> Result<()> {
        let credentials = self.controller_credentials()?;
        let addresses: Vec<(String, String)> = AGENTS
            .iter()
            .map(|a| ((*a).to_string(), self.address(a)))
            .collect();
        let broker = broker.to_string();
        self.on_controller(|| async move {
            for (name, address) in &addresses {
                let mut client = connect_when_ready(address, &credentials).await?;
                let netem = client
                    .read_netem(pb::ReadNetemRequest {
                        interface: "eth0".into(),
                    })
                    .await?
                    .into_inner();
                ensure!(!netem.present, "{name} still holds netem: {netem:?}");
                if name == "worker" {
                    match client
                        .get_broker(pb::GetBrokerRequest {
                            name: broker.clone(),
                        })
                        .await
                    {
                        Err(status) => ensure!(status.code() == Code::NotFound, "{status:?}"),
                        Ok(status) => {
                            let status = status.into_inner();
                            ensure!(
                                status.state() == pb::BrokerState::Stopped,
                                "broker {broker} left behind: {status:?}"
                            );
                            ensure!(
                                status.pid == 0 || !host::is_running(status.pid),
                                "broker {broker} process {} still runs",
                                status.pid
                            );
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

/// `summary.csv` of a run, row by row.
fn summary_rows(dir: &Path) -> Result<Vec<SummaryRow>> {
    Ok(results::read_rows(&ResultsDir::open(dir)?.summary_path())?)
}

/// Every cell id of the plan, each once.
fn plan_cell_ids(plan: &Plan) -> Vec<String> {
    let mut ids: Vec<String> = plan.cells().iter().map(|c| c.id(plan)).collect();
    ids.sort();
    ids
}

/// Rows per cell id.
fn rows_per_cell(rows: &[SummaryRow]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for row in rows {
        *counts.entry(row.cell.clone()).or_insert(0) += 1;
    }
    counts
}

/// Every `<svg …>…</svg>` inlined in an HTML page.
fn inline_svgs(html: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let Some(len) = rest[start..].find("</svg>") else {
            found.push(&rest[start..]);
            break;
        };
        let end = start + len + "</svg>".len();
        found.push(&rest[start..end]);
        rest = &rest[end..];
    }
    found
}

/// Takes a screenshot of `html` with headless Chromium in this (isolated: only `lo`)
/// namespace; returns the PNG's path and size.
fn screenshot(html: &Path) -> Result<(PathBuf, u64)> {
    let out = std::env::temp_dir().join("continuum-e2e");
    std::fs::create_dir_all(&out)?;
    // The page is self-contained: a copy beside the screenshot stays to look at.
    let page = out.join("report.html");
    std::fs::copy(html, &page)?;
    let png = out.join("report.png");
    let _ = std::fs::remove_file(&png);
    let profile = tempfile::tempdir()?;
    let mut command = Command::new(CHROMIUM);
    command
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()));
    let started = Instant::now();
    let output = host::blocking::run_with_deadline(&mut command, None, Duration::from_secs(90))?;
    ensure!(
        output.status.success(),
        "chromium exited with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let size = std::fs::metadata(&png)
        .with_context(|| format!("chromium wrote no {}", png.display()))?
        .len();
    eprintln!(
        "chromium: {} ({size} bytes) in {:.1} s",
        png.display(),
        started.elapsed().as_secs_f64()
    );
    Ok((png, size))
}

#[test]
fn a_plan_of_two_brokers_runs_end_to_end() {
    isolated_netns_test!();
    skip_unless_installed!(
        tests::mosquitto::MOSQUITTO_BINARY,
        tests::rabbitmq::RABBITMQ_SERVER
    );
    let bed = Bed::start("e2e", &[], &[]).expect("testbed with agents");
    let text = bed.plan_header("two-brokers", 2)
        + &bed.standard_nodes()
        + r#"[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"

[[brokers]]
name = "rabbitmq"
kind = "native"
product = "rabbitmq"
node = "worker"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 20
messages = 4
warmup = 1

[[tests]]
kind = "payload"
loadgen = ["tester"]
payloads = ["1KB", "1MB"]
publishers = 10
messages = 3
warmup = 1

# Publishers on the tester, subscribers on the headnode, one start barrier.
[[tests]]
kind = "burst"
loadgen = ["tester", "headnode"]
spread = "split"
clients = [10, 20]
messages = 200
"#;
    let path = bed.write_plan("plan.toml", &text).expect("plan file");
    let plan = Plan::load(&path).expect("a valid plan");
    let started = Instant::now();
    let summary = bed.run(&path, None).expect("the run");
    let took = started.elapsed();
    eprintln!("run: {summary:?} in {:.1} s", took.as_secs_f64());
    // 2 brokers x (latency 1 + payload 2 + burst 2 points) x 2 repetitions.
    assert_eq!(plan.cells().len(), 20);
    assert_eq!(
        (
            summary.measured,
            summary.failed,
            summary.skipped,
            summary.interrupted
        ),
        (20, 0, 0, false)
    );

    let rows = summary_rows(&summary.dir).expect("summary.csv");
    let mut ids: Vec<String> = rows.iter().map(|r| r.cell.clone()).collect();
    ids.sort();
    assert_eq!(ids, plan_cell_ids(&plan), "one row per cell, no more");
    for row in &rows {
        let cell = &row.cell;
        assert_eq!(row.status, CellStatus::Ok, "{cell}: {}", row.reason);
        assert_eq!(row.lost, Some(0), "{cell} lost messages");
        assert_eq!(row.delivered_unique, row.expected_deliveries, "{cell}");
        assert!(
            row.qos_violations.0.is_empty(),
            "{cell}: {:?}",
            row.qos_violations
        );
        assert!(
            summary
                .dir
                .join("cells")
                .join(cell)
                .join("result.json")
                .is_file(),
            "{cell} has no result.json"
        );
    }
    let throughput: Vec<_> = rows
        .iter()
        .filter(|r| r.test == TestKind::Burst)
        .map(|r| {
            format!(
                "{} {} pairs: {} published, receive {} msg/s",
                r.broker,
                r.point.label(),
                r.published.unwrap_or_default(),
                r.receive_rate_msgs_per_s.unwrap_or_default()
            )
        })
        .collect();
    eprintln!("{}", throughput.join("\n"));

    let manifest = ResultsDir::open(&summary.dir)
        .and_then(|r| r.read_manifest())
        .expect("manifest.json");
    let names: Vec<&str> = manifest.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, AGENTS);
    for node in &manifest.nodes {
        eprintln!(
            "{}: clock {} ns ± {} ns",
            node.name, node.clock_offset_ns, node.clock_error_bound_ns
        );
        assert!(node.clock_error_bound_ns < 1_000_000, "{node:?}");
        // Namespaces share one clock: the true offset, 0, lies within the bound.
        assert!(
            node.clock_offset_ns.unsigned_abs() <= node.clock_error_bound_ns,
            "{node:?}"
        );
    }

    let html_path = summary.dir.join("report.html");
    let html = std::fs::read_to_string(&html_path).expect("report.html");
    let markdown = std::fs::read_to_string(summary.dir.join("report.md")).expect("report.md");
    assert!(markdown.contains("mosquitto") && markdown.contains("rabbitmq"));
    let mut figures: Vec<PathBuf> = std::fs::read_dir(summary.dir.join("figures"))
        .expect("figures/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    figures.sort();
    assert!(!figures.is_empty(), "no figures");
    for figure in &figures {
        let svg = std::fs::read_to_string(figure).expect("figure");
        if let Err(problem) = check_svg(&svg) {
            panic!("{}: {problem}", figure.display());
        }
    }
    let inline = inline_svgs(&html);
    assert_eq!(inline.len(), figures.len(), "every figure inline, once");
    for (i, svg) in inline.iter().enumerate() {
        if let Err(problem) = check_svg(svg) {
            panic!("inline svg {i} of report.html: {problem}");
        }
    }
    eprintln!(
        "report: {} figures, report.html {} bytes, report.md {} bytes",
        figures.len(),
        html.len(),
        markdown.len()
    );

    if Path::new(CHROMIUM).exists() {
        let (png, size) = screenshot(&html_path).expect("a headless screenshot");
        assert!(size > 20_000, "{} is only {size} bytes", png.display());
        println!("screenshot: {}", png.display());
    } else {
        println!("no screenshot: {CHROMIUM} is not installed");
    }
}

/// Not a test of its own: with [`HELPER_PLAN_VAR`] set, this is the controller process of
/// [`sigkill_mid_run_then_resume_measures_every_cell_once`], running the plan like
/// `controller plan.toml` (a multi-threaded runtime, `run_plan`). Without it, it does nothing.
#[test]
fn controller_process_for_the_sigkill_test() {
    let Some(path) = std::env::var_os(HELPER_PLAN_VAR) else {
        return;
    };
    let path = PathBuf::from(path);
    let plan = Plan::load(&path).expect("the plan");
    let text = std::fs::read_to_string(&path).expect("the plan's text");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let summary = runtime
        .block_on(run_plan(
            &plan,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        ))
        .expect("the run");
    eprintln!("helper controller finished (it should have been killed): {summary:?}");
}

/// The one run folder under `root`, once it exists.
fn run_folder(root: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.is_dir())
        .collect();
    (dirs.len() == 1).then(|| dirs.remove(0))
}

/// Complete data rows in `summary.csv` (lines ending in a newline, header excluded).
fn complete_rows(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("summary.csv"))
        .map(|text| text.matches('\n').count().saturating_sub(1))
        .unwrap_or(0)
}

#[test]
fn sigkill_mid_run_then_resume_measures_every_cell_once() {
    // Also shows that a dead controller leaves no broker behind: its lease stops it, and the
    // resumed run deploys it afresh.
    isolated_netns_test!();
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let bed = Bed::start("resume", &[], &[]).expect("testbed with agents");
    let text = bed.plan_header("resume", 3)
        + &bed.standard_nodes()
        + r#"[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 20
messages = 8
warmup = 1

[[tests]]
kind = "burst"
loadgen = ["tester", "headnode"]
spread = "split"
clients = [10]
messages = 1000
"#;
    let path = bed.write_plan("plan.toml", &text).expect("plan file");
    let plan = Plan::load(&path).expect("a valid plan");
    let total = plan.cells().len();
    assert_eq!(total, 6);

    // The controller as a process of its own in the controller node.
    let log_path = bed.work.path().join("killed-controller.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let exe = std::env::current_exe().expect("this test binary");
    let mut command = bed.testbed.node("controller").command(exe);
    command
        .args(["--exact", HELPER_TEST, "--nocapture", "--test-threads=1"])
        .env(HELPER_PLAN_VAR, &path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    let started = Instant::now();
    let mut controller = bed
        .testbed
        .node("controller")
        .spawn(&mut command)
        .expect("the controller process");
    let deadline = started + Duration::from_secs(120);
    let dir = loop {
        if let Some(dir) = run_folder(&bed.results_root())
            && complete_rows(&dir) >= 2
        {
            break dir;
        }
        if let Some(status) = controller.child_mut().try_wait().expect("wait") {
            panic!(
                "the controller exited ({status}) before it was killed:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no 2 rows within 120 s:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    host::kill(controller.id());
    let status = controller.child_mut().wait().expect("reaped");
    let before = complete_rows(&dir);
    eprintln!(
        "controller SIGKILLed ({status}) after {:.1} s with {before} of {total} rows; its log:\n{}",
        started.elapsed().as_secs_f64(),
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    assert!(before < total, "the run had finished before the kill");

    // Its broker outlived it, and only its lease stops it: no controller will remove it.
    let killed_at = Instant::now();
    assert!(
        bed.assert_nothing_left("mosquitto").is_err(),
        "the broker was already gone when the controller died"
    );
    let lease_deadline = killed_at + BROKER_LEASE + Duration::from_secs(10);
    loop {
        match bed.assert_nothing_left("mosquitto") {
            Ok(()) => break,
            Err(left) => assert!(
                Instant::now() < lease_deadline,
                "the broker outlived its {BROKER_LEASE:?} lease: {left:#}"
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "the broker was stopped by its lease {:.1} s after the controller died (lease {BROKER_LEASE:?})",
        killed_at.elapsed().as_secs_f64()
    );

    // The agents outlived their controller.
    let credentials = bed.controller_credentials().expect("credentials");
    let addresses: Vec<String> = AGENTS.iter().map(|a| bed.address(a)).collect();
    bed.on_controller(|| async move {
        for address in &addresses {
            let mut client = connect_agent(address, None, &credentials).await?;
            client.info(pb::InfoRequest {}).await?;
        }
        Ok(())
    })
    .expect("every agent answers after the controller died");

    let resumed_at = Instant::now();
    let summary = bed.run(&path, Some(dir.clone())).expect("the resumed run");
    eprintln!(
        "resumed: {summary:?} in {:.1} s",
        resumed_at.elapsed().as_secs_f64()
    );
    assert_eq!(summary.dir, dir);
    assert_eq!(
        (summary.measured, summary.failed, summary.interrupted),
        (total - before, 0, false),
        "the resumed run measured only what was missing"
    );
    let rows = summary_rows(&dir).expect("summary.csv");
    let counts = rows_per_cell(&rows);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "cells measured twice: {twice:?}");
    assert_eq!(
        counts.keys().cloned().collect::<Vec<_>>(),
        plan_cell_ids(&plan),
        "every cell, none lost"
    );
    for row in &rows {
        assert_eq!(row.status, CellStatus::Ok, "{}: {}", row.cell, row.reason);
        assert_eq!(row.lost, Some(0), "{}", row.cell);
    }
    bed.assert_nothing_left("mosquitto")
        .expect("brokers and netem cleaned up after the resumed run");
    assert!(
        std::fs::read_to_string(dir.join("report.html"))
            .expect("report.html")
            .contains("mosquitto")
    );
}

/// Waits until the headnode's subscribers are connected to the broker and 2 MB more have
/// reached the node: the burst cell is under way.
fn wait_for_subscribers_receiving(pid: u32, subscribers: usize) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    while established_to(pid, MQTT_PORT) < subscribers {
        ensure!(
            Instant::now() < deadline,
            "the headnode never had {subscribers} connections to the broker"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let connected = Instant::now();
    let baseline = link_bytes_received(pid);
    while link_bytes_received(pid) < baseline + 2_000_000 {
        if established_to(pid, MQTT_PORT) < subscribers {
            bail!("the headnode's subscribers left before 2 MB arrived: the cell is too short");
        }
        ensure!(
            Instant::now() < deadline,
            "no messages reached the headnode"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(format!(
        "{subscribers} subscribers connected, {} bytes received {:.1} s later",
        link_bytes_received(pid) - baseline,
        connected.elapsed().as_secs_f64()
    ))
}

/// Mosquitto on the worker; a burst with publishers on the tester and subscribers on the
/// headnode (whose agent a test then loses), and a latency test on the tester alone.
fn headnode_load_plan(bed: &Bed, name: &str) -> String {
    bed.plan_header(name, 3)
        + &bed.standard_nodes()
        + &format!(
            r#"[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"
port = {MQTT_PORT}

[[scenarios]]
name = "local"

# Publishers on the tester, subscribers on the headnode, whose agent the test loses.
[[tests]]
kind = "burst"
loadgen = ["tester", "headnode"]
spread = "split"
clients = [50]
messages = 20000

[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 20
messages = 4
warmup = 1
"#
        )
}

/// The rows of a [`headnode_load_plan`] run that lost the headnode's agent, checked: the run
/// finished with the three burst cells (which need the headnode) failed naming it and the
/// three latency cells measured.
fn lost_headnode_rows(summary: &RunSummary) -> Vec<SummaryRow> {
    assert_eq!(
        (summary.measured, summary.failed, summary.interrupted),
        (3, 3, false)
    );
    let rows = summary_rows(&summary.dir).expect("summary.csv");
    for row in &rows {
        let (cell, status, reason) = (&row.cell, row.status, &row.reason);
        eprintln!("{cell}: {} {reason}", status.as_str());
        match row.test {
            TestKind::Burst => {
                assert_eq!(status, CellStatus::Failed, "{cell}");
                assert!(reason.contains("headnode"), "{cell}: {reason}");
            }
            _ => assert_eq!(status, CellStatus::Ok, "{cell}: {reason}"),
        }
    }
    rows
}

#[test]
fn an_agent_killed_mid_test_marks_its_cells_failed_and_the_run_finishes() {
    isolated_netns_test!();
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let mut bed = Bed::start("agentkill", &[], &[]).expect("testbed with agents");
    let text = headnode_load_plan(&bed, "agent-killed");
    let path = bed.write_plan("plan.toml", &text).expect("plan file");
    let plan = Plan::load(&path).expect("a valid plan");
    let headnode = bed.agent_pid("headnode");
    let started = Instant::now();
    let (run, watched) = std::thread::scope(|scope| {
        let run = scope.spawn(|| bed.run(&path, None));
        let watched = wait_for_subscribers_receiving(headnode, 50);
        // Kill it whatever the wait found, so the run cannot hang on it.
        host::kill(headnode);
        let killed_at = started.elapsed();
        (
            run.join().expect("the run's thread"),
            watched.map(|w| format!("{w}; SIGKILL at {:.1} s", killed_at.as_secs_f64())),
        )
    });
    let took = started.elapsed();
    let agent = bed
        .agents
        .iter_mut()
        .find(|(n, _)| n == "headnode")
        .map(|(_, p)| p)
        .expect("headnode agent");
    let status = agent.child_mut().wait().expect("reaped");
    eprintln!("headnode agent: {status}");
    eprintln!("{}", watched.expect("the burst cell was under way"));
    let summary = run.expect("the run returns after losing an agent");
    eprintln!("run: {summary:?} in {:.1} s", took.as_secs_f64());
    let rows = lost_headnode_rows(&summary);
    assert_eq!(rows_per_cell(&rows).len(), plan.cells().len());
    for row in rows.iter().filter(|r| r.test != TestKind::Burst) {
        assert_eq!(row.lost, Some(0), "{}", row.cell);
    }
    assert!(
        summary.dir.join("report.html").is_file(),
        "the report is written"
    );
}

#[test]
fn an_agent_that_stops_answering_fails_its_cells_within_the_deadline_and_the_run_finishes() {
    isolated_netns_test!();
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let bed = Bed::start("agentstop", &[], &[]).expect("testbed with agents");
    let text = headnode_load_plan(&bed, "agent-stopped");
    let path = bed.write_plan("plan.toml", &text).expect("plan file");
    let headnode = bed.agent_pid("headnode");
    let started = Instant::now();
    let (run, watched, stopped_at) = std::thread::scope(|scope| {
        let run = scope.spawn(|| bed.run(&path, None));
        let watched = wait_for_subscribers_receiving(headnode, 50);
        // Frozen, not dead: its sockets stay open and nothing answers on them (a hung node).
        host::send_signal(headnode, libc::SIGSTOP);
        let stopped_at = started.elapsed();
        (run.join().expect("the run's thread"), watched, stopped_at)
    });
    let took = started.elapsed();
    host::send_signal(headnode, libc::SIGCONT);
    eprintln!("{}", watched.expect("the burst cell was under way"));
    let summary = run.expect("the run returns after an agent stopped answering");
    eprintln!(
        "run: {summary:?}; SIGSTOP at {:.1} s, run over at {:.1} s",
        stopped_at.as_secs_f64(),
        took.as_secs_f64()
    );
    lost_headnode_rows(&summary);
    // Keep-alive (5 s, closed after 10 s unanswered) and the connect timeout bound each loss:
    // three burst cells, each failing within about 15 s of needing the frozen node.
    assert!(
        took - stopped_at < Duration::from_secs(90),
        "the run waited {:.1} s on a frozen agent",
        (took - stopped_at).as_secs_f64()
    );
}

/// `plan.toml` with one change applied, loaded: the error's text.
fn plan_error(dir: &Path, file: &str, text: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, text).expect("plan file");
    match Plan::load(&path) {
        Ok(_) => panic!("{file} was accepted:\n{text}"),
        Err(error) => {
            let message = error.to_string();
            eprintln!("{file}: {message}");
            assert!(
                message.contains(&path.display().to_string()),
                "names the file: {message}"
            );
            message
        }
    }
}

#[test]
fn plan_errors_name_the_place_before_anything_changes() {
    isolated_netns_test!();
    // The headnode's agent may only apply netem; "spare" is a node where no agent listens.
    let bed = Bed::start("planerr", &[("headnode", "\"netem\"")], &["spare"])
        .expect("testbed with agents");
    let dir = bed.work.path();
    let good_tail = r#"[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["tester"]
messages = 4
warmup = 1
"#;
    let nodes = bed.node_entry("tester", "\"loadgen\"") + &bed.node_entry("worker", "\"broker\"");
    let base = bed.plan_header("errors", 1) + &nodes;
    Plan::parse(&(base.clone() + good_tail), "good.toml").expect("the unchanged plan is valid");

    let message = plan_error(
        dir,
        "unknown-broker.toml",
        &(base.clone() + &good_tail.replace("\"mosquitto\"\nnode", "\"nosquitto\"\nnode")),
    );
    assert!(
        message.contains("brokers[0].product = \"nosquitto\"") && message.contains("unknown"),
        "{message}"
    );

    let text = base.clone()
        + &good_tail.replace(
            "node = \"worker\"\n",
            "node = \"worker\"\ncolour = \"blue\"\n",
        );
    let line = text
        .lines()
        .position(|l| l.starts_with("colour"))
        .expect("the line")
        + 1;
    let message = plan_error(dir, "unknown-field.toml", &text);
    assert!(
        message.contains("colour") && message.contains(&format!("line {line}")),
        "names the field and its line ({line}): {message}"
    );

    let message = plan_error(
        dir,
        "loss.toml",
        &(base.clone()
            + good_tail
            + "\n[[scenarios]]\nname = \"lossy\"\ndelay = \"5ms\"\njitter = \"1ms\"\nloss_percent = 200\n"),
    );
    assert!(
        message.contains("scenarios[1].loss_percent = 200"),
        "{message}"
    );

    let message = plan_error(
        dir,
        "not-loadgen.toml",
        &(base.clone() + &good_tail.replace("loadgen = [\"tester\"]", "loadgen = [\"worker\"]")),
    );
    assert!(
        message.contains("tests[0].loadgen = \"worker\"") && message.contains("loadgen role"),
        "{message}"
    );

    // Valid plans the testbed refuses: an agent that does not answer (the last node, so the
    // others have been reached first), and an agent without a role the plan gives its node.
    let unreachable = bed.plan_header("unreachable", 1)
        + &nodes
        + &bed.node_entry("spare", "\"netem\"")
        + good_tail;
    let missing_role = bed.plan_header("role", 1)
        + &nodes
        + &bed.node_entry("headnode", "\"loadgen\", \"netem\"")
        + &good_tail.replace(
            "loadgen = [\"tester\"]",
            "loadgen = [\"tester\", \"headnode\"]",
        );
    for (file, text, node, needle) in [
        (
            "unreachable.toml",
            unreachable,
            "spare",
            bed.address("spare"),
        ),
        (
            "missing-role.toml",
            missing_role,
            "headnode",
            "does not have that role".to_string(),
        ),
    ] {
        let path = bed.write_plan(file, &text).expect("plan file");
        let started = Instant::now();
        let error = bed.run(&path, None).expect_err("the run is refused");
        let took = started.elapsed();
        let message = format!("{error:#}");
        eprintln!("{file}: {message} (after {} ms)", took.as_millis());
        assert!(
            message.contains(&format!("node {node}")) && message.contains(&needle),
            "{message}"
        );
        assert!(took < Duration::from_secs(5), "refused in {took:?}");
        bed.assert_nothing_left("mosquitto")
            .expect("nothing changed on the reachable agents");
        for run in std::fs::read_dir(bed.results_root())
            .map(|d| d.filter_map(|e| e.ok()).collect::<Vec<_>>())
            .unwrap_or_default()
        {
            assert!(
                !run.path().join("manifest.json").exists()
                    && !run.path().join("summary.csv").exists(),
                "{} holds results of a refused run",
                run.path().display()
            );
        }
    }
}
