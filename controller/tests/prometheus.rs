//! The run's metrics scraped by a real Prometheus server (`tests::prometheus`):
//! - a plan with `[metrics]` on a local agent and the embedded broker, Prometheus scraping
//!   the controller's listener on loopback;
//! - a plan on the namespace testbed, with the real `continuum-agent` on tester and worker
//!   serving `metrics_listen` too, Prometheus scraping all three from the controller's node.
//!
//! Afterwards Prometheus' HTTP API must hold each cell's series with the run's labels and the
//! very counts the cells recorded, from the controller and from the agent that ran the load.

use std::net::SocketAddr;

use controller::plan::Plan;
use controller::results::{CellStatus, read_record};
use controller::run::{RunOptions, event_channel, run_plan_observed};
use host::Folder;
use tests::agent_bed::{AGENT_PORT, AgentBed};
use tests::isolated_netns_test;
use tests::prometheus::{PROMETHEUS, Prometheus};
use tokio_util::sync::CancellationToken;

/// The port agents serve metrics on, on their testbed address.
const AGENT_METRICS_PORT: u16 = 9464;
/// The port the controller serves metrics on, on its testbed address.
const CONTROLLER_METRICS_PORT: u16 = 9465;

const PLAN: &str = r#"
name = "metrics-test"
repetitions = 2

[metrics]
listen = "127.0.0.1:0"
linger = "120s"

[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]

[[brokers]]
name = "embedded"
kind = "embedded"
node = "local"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["local"]
publishers = 5
messages = 8
warmup = 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_each_cells_counts_with_the_runs_labels() {
    if !tests::components_available(&[PROMETHEUS]) {
        return;
    }
    let results = tempfile::tempdir().expect("temp dir");
    let text = PLAN.replace(
        "repetitions = 2",
        &format!(
            "repetitions = 2\nresults_dir = {:?}",
            results.path().display().to_string()
        ),
    );
    let plan = Plan::parse(&text, "metrics.toml").expect("a valid plan");
    let (events, mut shown) = event_channel();
    let drained = tokio::spawn(async move { while shown.recv().await.is_some() {} });
    let (events, metrics) = controller::metrics::tap(&plan, events)
        .await
        .expect("the listener binds");
    let metrics = metrics.expect("the plan asks for metrics");
    let prometheus = Prometheus::start(&[metrics.address]).expect("prometheus starts");
    // Scraping before the run starts, so that no cell can end unseen.
    prometheus
        .wait_for("up{job=\"continuum\"}", |answer| {
            answer.iter().any(|(_, up)| *up == 1.0)
        })
        .expect("scraping");

    let summary = run_plan_observed(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
        Some(events),
    )
    .await
    .expect("the run completes");
    drained.await.expect("events drained");
    assert_eq!(summary.measured, 2, "{summary:?}");
    // The listener stays up (the plan's linger) until a scrape has seen the last cell.
    let stop = CancellationToken::new();
    let lingering = tokio::spawn({
        let stop = stop.clone();
        async move { metrics.finish(&stop).await }
    });
    let waiting = tokio::task::spawn_blocking(move || {
        prometheus
            .wait_for(
                "last_over_time(continuum_run_cells{state=\"measured\"}[10m])",
                |answer| answer.iter().any(|(_, measured)| *measured == 2.0),
            )
            .expect("the last cell scraped");
        prometheus
    });
    let prometheus = waiting.await.expect("the wait ends");
    stop.cancel();
    lingering.await.expect("the listener stops");

    let folder = Folder::open(&summary.dir).expect("the results folder");
    let delivered = query(
        &prometheus,
        "last_over_time(continuum_cell_delivered_messages[10m])",
    );
    assert_eq!(delivered.len(), 2, "one series per cell: {delivered:?}");
    for (labels, value) in &delivered {
        assert_eq!(labels["run"], "metrics-test");
        assert_eq!(labels["broker"], "embedded");
        assert_eq!(labels["scenario"], "local");
        assert_eq!(labels["test"], "latency");
        let record = read_record(&folder, &labels["cell"])
            .expect("readable")
            .expect("the cell's record");
        assert_eq!(record.status, CellStatus::Ok);
        assert_eq!(labels["repetition"], record.repetition.to_string());
        let figures = record.summary.expect("measured figures");
        assert_eq!(*value, figures.delivered_unique as f64, "{labels:?}");
        let published = query(
            &prometheus,
            &format!(
                "last_over_time(continuum_cell_published_messages{{cell=\"{}\"}}[10m])",
                labels["cell"]
            ),
        );
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].1, figures.published as f64);
        let latency = query(
            &prometheus,
            &format!(
                "last_over_time(continuum_cell_latency_seconds_count{{cell=\"{}\"}}[10m])",
                labels["cell"]
            ),
        );
        assert_eq!(latency.len(), 1);
        assert_eq!(latency[0].1, figures.latency.count as f64, "{labels:?}");
    }
    let measured = query(
        &prometheus,
        "last_over_time(continuum_run_cells{state=\"measured\"}[10m])",
    );
    assert_eq!(measured.len(), 1, "{measured:?}");
    assert_eq!(measured[0].1, 2.0);
    // The histogram's buckets answer a quantile query.
    let p99 = query(
        &prometheus,
        "histogram_quantile(0.99, last_over_time(continuum_cell_latency_seconds_bucket[10m]))",
    );
    assert_eq!(p99.len(), 2, "{p99:?}");
    assert!(p99.iter().all(|(_, v)| *v > 0.0 && *v < 10.0), "{p99:?}");
}

/// The answer of an instant query that must succeed.
fn query(prometheus: &Prometheus, promql: &str) -> Vec<tests::prometheus::Sample> {
    prometheus.query(promql).expect("prometheus answers")
}

/// Agents on tester (load) and worker (a native Mosquitto), each serving its metrics on its
/// testbed address; the controller's on its own.
#[test]
fn prometheus_scrapes_the_agents_and_the_controller_on_the_testbed() {
    isolated_netns_test!();
    if !tests::components_available(&[PROMETHEUS, tests::mosquitto::MOSQUITTO_BINARY]) {
        return;
    }
    let bed = AgentBed::start_with("promagents", |testbed, name| {
        Ok(format!(
            "metrics_listen = \"{}:{AGENT_METRICS_PORT}\"\n",
            testbed.node(name).addr()
        ))
    })
    .expect("agents on the testbed");
    let ip = |node: &str| bed.testbed.node(node).addr();
    let results = tempfile::tempdir().expect("temp dir");
    let text = format!(
        r#"name = "agent-metrics"
repetitions = 2
results_dir = "{results}"
pki_dir = "{pki}"

[timeouts]
connect = "10s"
deploy = "60s"
cell = "60s"

[metrics]
listen = "{controller}:{CONTROLLER_METRICS_PORT}"
linger = "120s"

[[nodes]]
name = "tester"
agent = "{tester}:{AGENT_PORT}"
data_address = "{tester}"
roles = ["loadgen"]

[[nodes]]
name = "worker"
agent = "{worker}:{AGENT_PORT}"
data_address = "{worker}"
roles = ["broker"]

[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 5
messages = 20
warmup = 1
interval = "100ms"
"#,
        results = results.path().display(),
        pki = bed.pki.path().display(),
        controller = ip("controller"),
        tester = ip("tester"),
        worker = ip("worker"),
    );
    let plan = Plan::parse(&text, "agent-metrics.toml").expect("a valid plan");
    let targets: Vec<SocketAddr> = [
        SocketAddr::new(ip("controller").into(), CONTROLLER_METRICS_PORT),
        SocketAddr::new(ip("tester").into(), AGENT_METRICS_PORT),
        SocketAddr::new(ip("worker").into(), AGENT_METRICS_PORT),
    ]
    .into();
    let prometheus = std::sync::Arc::new(
        Prometheus::start_in(bed.testbed.node("controller"), &targets).expect("prometheus starts"),
    );
    // Both agents scraped before the run starts (the controller's listener opens with it).
    prometheus
        .wait_for("up{job=\"continuum\"} == 1", |answer| answer.len() == 2)
        .expect("the agents scraped");

    let summary = bed
        .on_controller_node(|| async {
            let (events, mut shown) = event_channel();
            let drained = tokio::spawn(async move { while shown.recv().await.is_some() {} });
            let (events, metrics) = controller::metrics::tap(&plan, events)
                .await
                .map_err(anyhow::Error::msg)?;
            let metrics = metrics.expect("the plan asks for metrics");
            let summary = run_plan_observed(
                &plan,
                &text,
                RunOptions::default(),
                CancellationToken::new(),
                Some(events),
            )
            .await?;
            drained.await?;
            // Serving until Prometheus saw the last cell on the controller's page, then no
            // longer.
            let seen = CancellationToken::new();
            let lingering = tokio::spawn({
                let seen = seen.clone();
                async move { metrics.finish(&seen).await }
            });
            let waited = tokio::task::spawn_blocking({
                let measured = summary.measured as f64;
                let prometheus = std::sync::Arc::clone(&prometheus);
                move || {
                    prometheus.wait_for(
                        "last_over_time(continuum_run_cells{state=\"measured\"}[10m])",
                        |answer| answer.iter().any(|(_, m)| *m == measured),
                    )
                }
            })
            .await?;
            seen.cancel();
            lingering.await?;
            waited?;
            anyhow::Ok(summary)
        })
        .expect("the run completes");
    assert_eq!(summary.measured, 2, "{summary:?}");
    // The agents serve on after the run: their last scrape shows both loads ended.
    prometheus
        .wait_for(
            "last_over_time(continuum_agent_load_phase{phase=\"done\"}[10m])",
            |answer| answer.len() == 2,
        )
        .expect("both loads seen ended");

    let folder = Folder::open(&summary.dir).expect("the results folder");
    let delivered = query(
        &prometheus,
        "last_over_time(continuum_agent_load_delivered_messages[10m])",
    );
    assert_eq!(delivered.len(), 2, "one series per cell: {delivered:?}");
    for (labels, value) in &delivered {
        for (name, expected) in [
            ("run", "agent-metrics"),
            ("node", "tester"),
            ("broker", "mosquitto"),
            ("scenario", "local"),
            ("test", "latency"),
        ] {
            assert_eq!(
                labels.get(name).map(String::as_str),
                Some(expected),
                "{labels:?}"
            );
        }
        let record = read_record(&folder, &labels["cell"])
            .expect("readable")
            .expect("the cell's record");
        assert_eq!(record.status, CellStatus::Ok);
        assert_eq!(labels["repetition"], record.repetition.to_string());
        assert_eq!(labels["point"], record.point.label());
        let figures = record.summary.expect("measured figures");
        assert_eq!(*value, figures.delivered_unique as f64, "{labels:?}");
        // The agent's and the controller's series of one cell join on its labels.
        for (agent_metric, controller_metric, expected) in [
            (
                "continuum_agent_load_published_messages",
                "continuum_cell_published_messages",
                figures.published as f64,
            ),
            (
                "continuum_agent_load_latency_seconds_count",
                "continuum_cell_latency_seconds_count",
                figures.latency.count as f64,
            ),
        ] {
            for metric in [agent_metric, controller_metric] {
                let answer = query(
                    &prometheus,
                    &format!(
                        "last_over_time({metric}{{run=\"agent-metrics\",cell=\"{}\"}}[10m])",
                        labels["cell"]
                    ),
                );
                assert_eq!(answer.len(), 1, "{metric}: {answer:?}");
                assert_eq!(answer[0].1, expected, "{metric} of {labels:?}");
            }
        }
    }
    // The worker's agent showed its broker while it ran: memory, CPU time and a lease.
    let memory = query(
        &prometheus,
        "max_over_time(continuum_agent_broker_memory_bytes{node=\"worker\"}[10m])",
    );
    assert_eq!(memory.len(), 1, "{memory:?}");
    assert!(memory[0].1 > 100_000.0, "{memory:?}");
    let cpu = query(
        &prometheus,
        "max_over_time(continuum_agent_broker_cpu_seconds_total{node=\"worker\"}[10m])",
    );
    // Present; its value may be under one clock tick for so short a run.
    assert_eq!(cpu.len(), 1, "{cpu:?}");
    let lease = query(
        &prometheus,
        "max_over_time(continuum_agent_broker_lease_remaining_seconds{node=\"worker\"}[10m])",
    );
    assert_eq!(lease.len(), 1, "{lease:?}");
    assert!(lease[0].1 > 0.0, "{lease:?}");
}
