//! TCP against QUIC under the edge's delay and loss, on the real kernel: the controller
//! suite's tester and worker (their agents, their netem'd data plane) run a second plan
//! against the mqttv5 broker, started here in the worker's namespace with a TCP and a QUIC
//! listener on the worker's data address (an external broker to the plan, on the worker:
//! `node = "worker"`, so the worker's agent emulates its end of the link). Scenarios: the
//! edge's delay and jitter (2.5 ms and 0.5 ms between two nodes) with 0, 2 and 5 % loss,
//! half on each node's egress; the latency test over TCP and over QUIC, 3 repetitions
//! interleaved.
//!
//! Checked: every cell measured; every message delivered at QoS 1 (none lost); netem's loss
//! read back on both nodes as asked; the report's section "TCP and QUIC under the continuum's
//! links" has both transports for each loss level. The figures are reported as measured,
//! whichever transport they favour: the host test prints them.
//!
//! The broker comes from the host (`vm/initramfs.sh` packs `/usr/local/bin/mqttv5` with the
//! libraries it links, as [`MQTTV5`]); without it the part reports why it did not run.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use controller::plan::Plan;
use controller::results::{Manifest, NetemRecord};
use controller::run::{RunOptions, run_plan};
use domain::BrokerOptions;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::report;

/// Where the image holds the mqttv5 broker when the host had one.
pub const MQTTV5: &str = "/mqttv5";
const MQTT_PORT: u16 = 1883;
const QUIC_PORT: u16 = 14567;
/// The broker answering TCP within this (under TCG).
const BROKER_READY: Duration = Duration::from_secs(60);
/// The loss levels, percent between two nodes (half on each egress).
const LOSSES: [f64; 3] = [0.0, 2.0, 5.0];
const REPETITIONS: usize = 3;
/// 10 publishers x 20 messages (2 of them warm-up) every 250 ms to 1 subscriber, QoS 1: as
/// the controller suite's latency test (why every 250 ms: see its notes), shorter.
const PUBLISHERS: u64 = 10;
const MESSAGES: u64 = 20;

/// The scenario of a loss level.
fn scenario(loss: f64) -> String {
    format!("edge-loss-{loss}")
}

/// The plan's text after `header` (name, timeouts, PKI, the tester's and the worker's nodes).
fn plan_text(header: &str, worker: Ipv4Addr, ca: &Path) -> String {
    let mut text = format!(
        "{header}\n[[brokers]]\nname = \"mqttv5\"\nkind = \"external\"\nnode = \"worker\"\n\
         address = \"{worker}:{MQTT_PORT}\"\nquic_address = \"{worker}:{QUIC_PORT}\"\n"
    );
    for loss in LOSSES {
        text += &format!(
            "\n[[scenarios]]\nname = \"{}\"\ndelay = \"2.5ms\"\njitter = \"0.5ms\"\nloss_percent = {loss:.1}\n",
            scenario(loss)
        );
    }
    let test = format!(
        "\n[[tests]]\nkind = \"latency\"\nloadgen = [\"tester\"]\npublishers = {PUBLISHERS}\n\
         messages = {MESSAGES}\nwarmup = 2\ninterval = \"250ms\"\nqos = 1\n"
    );
    text += &test;
    text += &test;
    text += &format!(
        "[tests.workload.broker]\ntransport = \"quic\"\ntls_ca_file = \"{}\"\n",
        ca.display()
    );
    text
}

/// The broker process, stopped when dropped.
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts mqttv5 in the namespace `netns` (the worker's), listening on `worker`.
fn start_broker(
    netns: &File,
    worker: Ipv4Addr,
    dir: &Path,
) -> Result<(Broker, std::path::PathBuf)> {
    let tls = tests::mosquitto::tls_files_in(dir, IpAddr::V4(worker))?;
    let config = recipes::mqttv5::with_quic(
        recipes::mqttv5::config(
            &BrokerOptions::default(),
            SocketAddr::from((worker, MQTT_PORT)),
            None,
        ),
        &recipes::QuicListen {
            address: SocketAddr::from((worker, QUIC_PORT)),
            cert_file: &tls.cert,
            key_file: &tls.key,
        },
    );
    let config_path = dir.join(recipes::mqttv5::CONFIG_FILE);
    std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)?;
    let log = File::create(dir.join("mqttv5.log")).context("the broker's log")?;
    let mut command = Command::new(MQTTV5);
    command
        .args(["broker", "-c"])
        .arg(&config_path)
        .arg("--non-interactive")
        // Standard input inherited: the VM has no /dev/null to give it.
        .stdout(log.try_clone()?)
        .stderr(log);
    crate::common::spawn_in(&mut command, netns);
    let broker = Broker(command.spawn().context("start mqttv5")?);
    Ok((broker, tls.ca))
}

/// Until the broker's TCP listener accepts, from this (the VM's) namespace, which routes to
/// the worker.
async fn wait_ready(broker: &mut Broker, address: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + BROKER_READY;
    loop {
        if let Some(status) = broker.0.try_wait()? {
            bail!("mqttv5 exited: {status}");
        }
        if tokio::net::TcpStream::connect(address).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("mqttv5 not listening on {address} within {BROKER_READY:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the plan and its checks; `header` is the controller suite's plan header for the
/// tester and the worker, `worker_netns` the worker's namespace.
pub async fn run(header: &str, worker_netns: &File, worker: Ipv4Addr, work: &Path) -> Result<bool> {
    if !Path::new(MQTTV5).exists() {
        return Ok(report(
            "transports_skipped",
            true,
            json!({ "reason": format!("{MQTTV5} is not in the image: the host has no mqttv5") }),
        ));
    }
    let started = Instant::now();
    let dir = work.join("mqttv5");
    std::fs::create_dir_all(&dir)?;
    let (mut broker, ca) = start_broker(worker_netns, worker, &dir)?;
    let ready = wait_ready(&mut broker, SocketAddr::from((worker, MQTT_PORT))).await;
    let mut ok = report(
        "transports_broker",
        ready.is_ok(),
        json!({ "ready_after_s": started.elapsed().as_secs_f64(),
                "error": ready.as_ref().err().map(|e| format!("{e:#}")) }),
    );
    if ready.is_err() {
        let log = std::fs::read_to_string(dir.join("mqttv5.log")).unwrap_or_default();
        println!("VM: mqttv5's log:\n{log}");
        return Ok(false);
    }
    let text = plan_text(header, worker, &ca);
    std::fs::write(work.join("transports.toml"), &text)?;
    let plan = Plan::parse(&text, "transports.toml").context("the transports plan")?;
    let run_started = Instant::now();
    let summary = run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    )
    .await
    .context("run_plan")?;
    let cells = LOSSES.len() * 2 * REPETITIONS;
    ok &= report(
        "transports_run",
        summary.measured == cells
            && summary.failed == 0
            && summary.skipped == 0
            && !summary.interrupted,
        json!({ "measured": summary.measured, "failed": summary.failed,
                "skipped": summary.skipped, "expected_cells": cells,
                "run_s": run_started.elapsed().as_secs_f64() }),
    );
    ok &= check_netem(&summary.dir)?;
    ok &= check_section(&summary.dir)?;
    if let Ok(html) = std::fs::read(summary.dir.join("report.html")) {
        crate::common::artifact("transports-report.html", &html);
    }
    drop(broker);
    Ok(ok)
}

/// Each scenario's delay, jitter and loss, half on each node, asked and read back.
fn check_netem(dir: &Path) -> Result<bool> {
    let manifest = Manifest::read(&dir.join("manifest.json")).context("manifest.json")?;
    let mut entries = Vec::new();
    let mut pass = true;
    // Half of 2.5 ms and of 0.5 ms on each end (the kernel keeps ticks: within 1 µs).
    let (delay, jitter) = (Duration::from_micros(1250), Duration::from_micros(250));
    let close = |r: &NetemRecord, half: f64| {
        Duration::from_nanos(r.delay_ns).abs_diff(delay) < Duration::from_micros(1)
            && Duration::from_nanos(r.jitter_ns).abs_diff(jitter) < Duration::from_micros(1)
            && (r.loss_percent - half).abs() < 1e-6
    };
    for loss in LOSSES {
        for node in ["tester", "worker"] {
            let entry = manifest
                .netem
                .iter()
                .find(|e| e.scenario == scenario(loss) && e.node == node);
            let half = loss / 2.0;
            pass &= entry.is_some_and(|e| {
                close(&e.asked, half) && e.read_back.as_ref().is_some_and(|r| close(r, half))
            });
            entries.push(json!({ "scenario": scenario(loss), "node": node,
                "asked": entry.map(|e| &e.asked), "read_back": entry.and_then(|e| e.read_back.as_ref()) }));
        }
    }
    Ok(report(
        "transports_netem",
        pass,
        json!({ "per_egress": entries }),
    ))
}

/// The report's section: per loss level a TCP and a QUIC row, every message delivered and
/// none lost; their figures handed over in the check's details.
fn check_section(dir: &Path) -> Result<bool> {
    let report_md = std::fs::read_to_string(dir.join("report.md")).context("report.md")?;
    let Some(section) = report_md
        .split("## TCP and QUIC under the continuum's links")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
    else {
        return Ok(report(
            "transports_section",
            false,
            json!({ "error": "no section" }),
        ));
    };
    let expected = PUBLISHERS * MESSAGES * REPETITIONS as u64;
    let mut rows: Vec<Value> = Vec::new();
    let mut pass = true;
    for loss in LOSSES {
        for transport in ["TCP", "QUIC"] {
            let row = section.lines().find(|line| {
                line.contains(&format!("| {} |", scenario(loss)))
                    && line.contains(&format!("| {transport} | {REPETITIONS} |"))
            });
            let cells: Vec<&str> = row
                .map(|row| row.split('|').map(str::trim).collect())
                .unwrap_or_default();
            // | test | broker | scenario | point | transport | repetitions | p50 | p99 |
            // p99.9 | connect | reconnect | delivered / expected | lost | errors |
            let delivered = cells.len() == 16
                && cells[12] == format!("{expected} / {expected}")
                && cells[13] == "0"
                && cells[14] == "none";
            pass &= delivered;
            let cell = |i: usize| cells.get(i).copied().unwrap_or("-");
            rows.push(json!({ "loss_percent": loss, "transport": transport,
                "p50_ms": cell(7), "p99_ms": cell(8), "p999_ms": cell(9),
                "connect_p50_ms": cell(10), "delivered": cell(12), "lost": cell(13),
                "errors": cell(14) }));
        }
    }
    let shifts: Vec<&str> = section
        .lines()
        .filter(|line| line.contains("| p50 |") || line.contains("| p99 |"))
        .collect();
    pass &= shifts.len() == 2 * LOSSES.len();
    Ok(report(
        "transports_section",
        pass,
        json!({ "rows": rows, "shifts": shifts }),
    ))
}
