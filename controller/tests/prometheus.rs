//! The run's metrics scraped by a real Prometheus server (Debian's `prometheus`, which
//! `.ci/run` installs): a plan with `[metrics]` runs on a local agent and the embedded broker
//! while Prometheus scrapes the controller's listener every second; afterwards its HTTP API
//! must hold each cell's series with the run's labels and the very counts the cells recorded.
//! Everything on loopback; Prometheus keeps its data in a temporary folder.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use controller::plan::Plan;
use controller::results::{CellStatus, read_record};
use controller::run::{RunOptions, event_channel, run_plan_observed};
use host::Folder;
use tokio_util::sync::CancellationToken;

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A Prometheus server on loopback, killed when dropped.
struct Prometheus {
    child: Child,
    address: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts one scraping `target` every second, and waits until it is ready.
    fn start(target: SocketAddr, data: &std::path::Path) -> Prometheus {
        let config = data.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
                 - job_name: continuum\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("config written");
        let address = free_loopback_port();
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                data.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let prometheus = Prometheus { child, address };
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(address, "/-/ready").is_none_or(|(status, _)| status != 200) {
            assert!(Instant::now() < deadline, "prometheus never got ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    /// The samples of an instant query, as (labels, value).
    /// Queries until `check` holds for the answer, or fails after a minute: Prometheus
    /// scrapes on its own schedule (its first scrape comes seconds after it is ready).
    fn wait_for(&self, promql: &str, check: impl Fn(&[(BTreeMap<String, String>, f64)]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = self.query(promql);
            if check(&answer) {
                return;
            }
            assert!(Instant::now() < deadline, "{promql} never held: {answer:?}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let (status, body) = get(
            self.address,
            &format!("/api/v1/query?query={}", encode(promql)),
        )
        .expect("prometheus answers");
        assert_eq!(status, 200, "{promql}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        answer["data"]["result"]
            .as_array()
            .expect("a vector")
            .iter()
            .map(|sample| {
                let labels = sample["metric"]
                    .as_object()
                    .expect("labels")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .expect("a number");
                (labels, value)
            })
            .collect()
    }
}

/// A loopback address no one listens on now.
fn free_loopback_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain HTTP/1.0 GET: status and body, or None when nothing answers.
fn get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

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
    let data = tempfile::tempdir().expect("temp dir");
    let prometheus = Prometheus::start(metrics.address, data.path());
    // Scraping before the run starts, so that no cell can end unseen.
    prometheus.wait_for("up{job=\"continuum\"}", |answer| {
        answer.iter().any(|(_, up)| *up == 1.0)
    });

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
        prometheus.wait_for(
            "last_over_time(continuum_run_cells{state=\"measured\"}[10m])",
            |answer| answer.iter().any(|(_, measured)| *measured == 2.0),
        );
        prometheus
    });
    let prometheus = waiting.await.expect("the wait ends");
    stop.cancel();
    lingering.await.expect("the listener stops");

    let folder = Folder::open(&summary.dir).expect("the results folder");
    let delivered = prometheus.query("last_over_time(continuum_cell_delivered_messages[10m])");
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
        let published = prometheus.query(&format!(
            "last_over_time(continuum_cell_published_messages{{cell=\"{}\"}}[10m])",
            labels["cell"]
        ));
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].1, figures.published as f64);
        let latency = prometheus.query(&format!(
            "last_over_time(continuum_cell_latency_seconds_count{{cell=\"{}\"}}[10m])",
            labels["cell"]
        ));
        assert_eq!(latency.len(), 1);
        assert_eq!(latency[0].1, figures.latency.count as f64, "{labels:?}");
    }
    let measured = prometheus.query("last_over_time(continuum_run_cells{state=\"measured\"}[10m])");
    assert_eq!(measured.len(), 1, "{measured:?}");
    assert_eq!(measured[0].1, 2.0);
    // The histogram's buckets answer a quantile query.
    let p99 = prometheus.query(
        "histogram_quantile(0.99, last_over_time(continuum_cell_latency_seconds_bucket[10m]))",
    );
    assert_eq!(p99.len(), 2, "{p99:?}");
    assert!(p99.iter().all(|(_, v)| *v > 0.0 && *v < 10.0), "{p99:?}");
}
