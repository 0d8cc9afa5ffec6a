//! A real Prometheus server (Debian's `prometheus`, which `.ci/run` installs) scraping the
//! given targets every second, in this namespace or in a testbed node, and its HTTP API: an
//! instant query, and a query polled until its answer holds. Its data goes to a temporary
//! folder; it is killed when dropped.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use host::Netns;

use crate::netns::{Node, NodeProcess};

/// Debian's Prometheus server.
pub const PROMETHEUS: &str = "/usr/bin/prometheus";
/// How long it may take to become ready, and a polled query to hold.
const PATIENCE: Duration = Duration::from_secs(60);

/// One sample of a query's answer: its labels and value.
pub type Sample = (BTreeMap<String, String>, f64);

/// The server's process, wherever it runs.
#[derive(Debug)]
enum Server {
    Here(Child),
    /// Killed with its process group when dropped.
    InNode {
        _process: NodeProcess,
    },
}

/// A Prometheus server, killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    server: Server,
    /// Where its HTTP API listens, in `netns`.
    address: SocketAddr,
    netns: Netns,
    _data: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Server::Here(child) = &mut self.server {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Prometheus {
    /// One in this namespace, on loopback, scraping `targets` every second; ready.
    pub fn start(targets: &[SocketAddr]) -> Result<Prometheus> {
        let data = tempfile::tempdir()?;
        let address = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut command = Command::new(PROMETHEUS);
        configure(&mut command, targets, data.path(), address)?;
        let child = command.spawn().context("starting prometheus")?;
        Self::ready(Prometheus {
            server: Server::Here(child),
            address,
            netns: Netns::current()?,
            _data: data,
        })
    }

    /// One in `node`, on that namespace's loopback, scraping `targets` (addresses in the
    /// testbed) every second; ready.
    pub fn start_in(node: &Node, targets: &[SocketAddr]) -> Result<Prometheus> {
        let data = tempfile::tempdir()?;
        let address: SocketAddr = "127.0.0.1:9090".parse()?;
        let mut command = node.command(PROMETHEUS);
        configure(&mut command, targets, data.path(), address)?;
        let process = node.spawn(&mut command)?;
        Self::ready(Prometheus {
            server: Server::InNode { _process: process },
            address,
            netns: node.enter(Netns::current)??,
            _data: data,
        })
    }

    fn ready(self) -> Result<Prometheus> {
        let deadline = Instant::now() + PATIENCE;
        while self.get("/-/ready").is_none_or(|(status, _)| status != 200) {
            if Instant::now() > deadline {
                bail!("prometheus never got ready at {}", self.address);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(self)
    }

    /// Queries until `check` holds for the answer, or fails after a minute: Prometheus
    /// scrapes on its own schedule (its first scrape comes seconds after it is ready).
    pub fn wait_for(&self, promql: &str, check: impl Fn(&[Sample]) -> bool) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self.query(promql)?;
            if check(&answer) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{promql} never held: {answer:?}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The samples of an instant query.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>> {
        let (status, body) = self
            .get(&format!("/api/v1/query?query={}", encode(promql)))
            .context("prometheus does not answer")?;
        if status != 200 {
            bail!("{promql}: HTTP {status}: {body}");
        }
        let answer: serde_json::Value = serde_json::from_str(&body)?;
        let samples = answer["data"]["result"]
            .as_array()
            .with_context(|| format!("{promql}: not a vector: {body}"))?;
        samples
            .iter()
            .map(|sample| {
                let labels = sample["metric"]
                    .as_object()
                    .context("no labels")?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("no value in {sample}"))?;
                Ok((labels, value))
            })
            .collect()
    }

    /// A plain HTTP/1.0 GET from inside the server's namespace: status and body, or None
    /// when nothing answers.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream =
            host::netns::connect_in(&self.netns, self.address, Duration::from_secs(2)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n",
            self.address
        )
        .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    }
}

/// The server's arguments: a config scraping `targets` every second, its data folder and
/// its listen address.
fn configure(
    command: &mut Command,
    targets: &[SocketAddr],
    data: &std::path::Path,
    address: SocketAddr,
) -> Result<()> {
    let config = data.join("prometheus.yml");
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: continuum\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )?;
    command
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            data.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(())
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
