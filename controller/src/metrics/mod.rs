//! A run's live metrics in Prometheus' text exposition format, for a Prometheus server to
//! scrape while a study runs (`[metrics] listen` in the plan).
//!
//! [`RunMetrics`] observes the run's events, as the terminal does, and keeps what a reader
//! of a dashboard wants: the run's progress in cells, the brokers deployed, netem as the
//! kernel read it back, and per measured cell its counts, rate, latency histogram and the
//! broker's CPU and memory. Labels name the run, cell, broker, scenario, test, point and
//! repetition. The `exposition` crate's listener serves them.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use exposition::{Exposition, Kind, MetricsListener, Page, labels};

pub use exposition::{LATENCY_BUCKETS_S, LatencyBuckets};

use crate::run::{MeasuredCell, RunCounts, RunEvent};

/// A run's metrics listener while it is up.
#[derive(Debug)]
pub struct MetricsHandle {
    /// Where it listens.
    pub address: std::net::SocketAddr,
    linger: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
    serving: tokio::task::JoinHandle<()>,
}

impl MetricsHandle {
    /// How long [`MetricsHandle::finish`] keeps serving.
    pub fn linger(&self) -> std::time::Duration {
        self.linger
    }

    /// Keeps serving for the plan's linger (so that a scrape sees the last cells), or until
    /// `cut` fires (Ctrl-C), then stops.
    pub async fn finish(self, cut: &tokio_util::sync::CancellationToken) {
        tokio::select! {
            () = tokio::time::sleep(self.linger) => {}
            () = cut.cancelled() => {}
        }
        self.stop.cancel();
        let _ = self.serving.await;
    }
}

/// When `plan` asks for metrics (`[metrics]`): binds its listener, serves the run's metrics
/// there and returns a sender for the run's events that feeds them and passes each event on
/// to `next`. Otherwise `next` itself, and no listener. Fails when the address cannot be
/// bound.
pub async fn tap(
    plan: &crate::plan::Plan,
    next: crate::run::RunEvents,
) -> Result<(crate::run::RunEvents, Option<MetricsHandle>), String> {
    let Some(entry) = &plan.metrics else {
        return Ok((next, None));
    };
    let listener = MetricsListener::bind(entry.listen, "metrics.listen").await?;
    let address = listener.address;
    let metrics = std::sync::Arc::new(RunMetrics::new(&plan.name));
    let stop = tokio_util::sync::CancellationToken::new();
    let serving = tokio::spawn(exposition::serve(
        listener,
        std::sync::Arc::clone(&metrics),
        stop.clone().cancelled_owned(),
    ));
    let (events, mut observed) = crate::run::event_channel();
    tokio::spawn(async move {
        while let Some(event) = observed.recv().await {
            metrics.observe(&event);
            // An observer that left does not stop the metrics.
            let _ = next.send(event).await;
        }
    });
    Ok((
        events,
        Some(MetricsHandle {
            address,
            linger: entry.linger,
            stop,
            serving,
        }),
    ))
}

/// Every metric name this module writes, for dashboards and their checks.
pub const METRIC_NAMES: [&str; 12] = [
    "continuum_run_cells",
    "continuum_broker_ready",
    "continuum_netem_info",
    "continuum_cell_published_messages",
    "continuum_cell_delivered_messages",
    "continuum_cell_lost_messages",
    "continuum_cell_receive_rate_messages_per_second",
    "continuum_cell_broker_cpu_percent",
    "continuum_cell_broker_peak_memory_bytes",
    "continuum_cell_latency_seconds_bucket",
    "continuum_cell_latency_seconds_count",
    "continuum_cell_latency_seconds_sum",
];

/// A per-cell gauge: its name, its help and how to read it from a cell.
type CellGauge = (&'static str, &'static str, fn(&CellSeries) -> Option<f64>);

/// What one measured cell left, ready to print.
#[derive(Debug, Clone)]
struct CellSeries {
    labels: String,
    published: u64,
    delivered: u64,
    lost: Option<u64>,
    receive_rate: f64,
    broker_cpu_percent: Option<f64>,
    broker_peak_memory_bytes: Option<f64>,
    latency: Option<LatencyBuckets>,
}

#[derive(Debug, Default)]
struct State {
    counts: RunCounts,
    brokers: BTreeMap<String, bool>,
    netem: BTreeMap<(String, String), (String, String)>,
    cells: BTreeMap<String, CellSeries>,
}

/// The metrics of one run, fed its events.
#[derive(Debug)]
pub struct RunMetrics {
    run: String,
    state: Mutex<State>,
}

impl RunMetrics {
    /// Metrics labelled `run="<run>"` (the plan's name).
    pub fn new(run: &str) -> Self {
        RunMetrics {
            run: run.to_string(),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in one event of the run.
    pub fn observe(&self, event: &RunEvent) {
        let mut state = self.lock();
        match event {
            RunEvent::Started { total, .. } => state.counts.total = *total,
            RunEvent::BrokerReady { broker, .. } => {
                state.brokers.insert(broker.clone(), true);
            }
            RunEvent::BrokerRemoved { broker } | RunEvent::BrokerUnavailable { broker, .. } => {
                state.brokers.insert(broker.clone(), false);
            }
            RunEvent::Netem {
                scenario,
                node,
                asked,
                read_back,
            } => {
                state.netem.insert(
                    (scenario.clone(), node.clone()),
                    (asked.clone(), read_back.clone()),
                );
            }
            RunEvent::NetemCleared { scenario, nodes } => {
                for node in nodes {
                    state.netem.remove(&(scenario.clone(), node.clone()));
                }
            }
            RunEvent::Cell {
                id,
                counts,
                measured,
                ..
            } => {
                state.counts = *counts;
                if let Some(measured) = measured {
                    state
                        .cells
                        .insert(id.clone(), self.cell_series(id, measured));
                }
            }
            _ => {}
        }
    }

    fn cell_series(&self, id: &str, measured: &MeasuredCell) -> CellSeries {
        let record = &measured.record;
        let labels = labels(&[
            ("run", &self.run),
            ("cell", id),
            ("broker", &record.broker),
            ("scenario", &record.scenario),
            ("test", record.test.name()),
            ("point", &record.point.label()),
            ("repetition", &record.repetition.to_string()),
        ]);
        let summary = record.summary.as_ref();
        CellSeries {
            labels,
            published: summary.map_or(0, |s| s.published),
            delivered: summary.map_or(0, |s| s.delivered_unique),
            lost: summary.and_then(|s| s.lost),
            receive_rate: summary.map_or(0.0, |s| s.receive_rate.msgs_per_s),
            broker_cpu_percent: record.usage.map(|u| u.cpu_percent),
            broker_peak_memory_bytes: record.usage.map(|u| u.peak_rss_mb * 1e6),
            latency: measured.latency.clone(),
        }
    }

    /// The metrics in Prometheus' text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let state = self.lock();
        let run = labels(&[("run", &self.run)]);
        let mut page = Page::new();
        page.family(
            "continuum_run_cells",
            Kind::Gauge,
            "Cells of the run by state: total, done, measured, failed, skipped.",
        );
        for (name, value) in [
            ("total", state.counts.total),
            ("done", state.counts.done),
            ("measured", state.counts.measured),
            ("failed", state.counts.failed),
            ("skipped", state.counts.skipped),
        ] {
            page.sample(
                "continuum_run_cells",
                &format!("{run},state=\"{name}\""),
                value,
            );
        }
        page.family(
            "continuum_broker_ready",
            Kind::Gauge,
            "1 while a broker is deployed and ready, 0 once removed or unavailable.",
        );
        for (broker, ready) in &state.brokers {
            page.sample(
                "continuum_broker_ready",
                &format!("{run},{}", labels(&[("broker", broker)])),
                u8::from(*ready),
            );
        }
        page.family(
            "continuum_netem_info",
            Kind::Gauge,
            "netem in force per scenario and node: what was asked and what the kernel holds.",
        );
        for ((scenario, node), (asked, read_back)) in &state.netem {
            let netem = labels(&[
                ("scenario", scenario),
                ("node", node),
                ("asked", asked),
                ("read_back", read_back),
            ]);
            page.sample("continuum_netem_info", &format!("{run},{netem}"), 1);
        }
        let cells: Vec<&CellSeries> = state.cells.values().collect();
        let gauges: [CellGauge; 6] = [
            (
                "continuum_cell_published_messages",
                "Messages the cell's publishers sent, warm-up included.",
                |c| Some(c.published as f64),
            ),
            (
                "continuum_cell_delivered_messages",
                "Distinct messages the cell's subscribers received.",
                |c| Some(c.delivered as f64),
            ),
            (
                "continuum_cell_lost_messages",
                "Deliveries owed that never arrived.",
                |c| c.lost.map(|l| l as f64),
            ),
            (
                "continuum_cell_receive_rate_messages_per_second",
                "Aggregate receive rate over the cell's window.",
                |c| Some(c.receive_rate),
            ),
            (
                "continuum_cell_broker_cpu_percent",
                "The broker's mean CPU over the cell's window, % of a core.",
                |c| c.broker_cpu_percent,
            ),
            (
                "continuum_cell_broker_peak_memory_bytes",
                "The broker's peak resident memory over the cell's window.",
                |c| c.broker_peak_memory_bytes,
            ),
        ];
        for (name, help, value) in &gauges {
            page.family(name, Kind::Gauge, help);
            for cell in &cells {
                if let Some(value) = value(cell) {
                    page.sample(name, &cell.labels, value);
                }
            }
        }
        page.family(
            "continuum_cell_latency_seconds",
            Kind::Histogram,
            "Latency of the cell's measured messages from their intended send time.",
        );
        for cell in &cells {
            if let Some(latency) = &cell.latency {
                page.histogram("continuum_cell_latency_seconds", &cell.labels, latency);
            }
        }
        page.finish()
    }
}

impl Exposition for RunMetrics {
    fn render(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>> {
        Box::pin(async move { RunMetrics::render(self) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dashboard shipped beside the code.
    const DASHBOARD: &str = include_str!("../../../dashboards/continuum-run.json");

    #[test]
    fn every_dashboard_query_names_metrics_this_module_writes() {
        let dashboard: serde_json::Value = serde_json::from_str(DASHBOARD).expect("JSON");
        assert!(dashboard["title"].is_string() && dashboard["schemaVersion"].is_number());
        let panels = dashboard["panels"].as_array().expect("panels");
        assert!(!panels.is_empty());
        let mut expressions: Vec<String> = Vec::new();
        for panel in panels {
            assert!(
                panel["type"].is_string() && panel["gridPos"].is_object(),
                "{panel}"
            );
            for target in panel["targets"].as_array().expect("targets") {
                expressions.push(target["expr"].as_str().expect("a PromQL expr").to_string());
            }
        }
        let variables = dashboard["templating"]["list"]
            .as_array()
            .expect("variables");
        expressions.extend(
            variables
                .iter()
                .filter_map(|v| v["query"]["query"].as_str().map(str::to_string)),
        );
        // A run with a broker, netem and a measured cell: every name the module lists has a
        // sample in the text, with the labels dashboards select on.
        let metrics = RunMetrics::new("dashboard-test");
        for event in sample_events() {
            metrics.observe(&event);
        }
        let text = metrics.render();
        for name in METRIC_NAMES {
            assert!(
                text.lines()
                    .any(|line| line.starts_with(&format!("{name}{{"))),
                "{name} has no sample: {text}"
            );
        }
        let label_names = [
            "run",
            "cell",
            "broker",
            "scenario",
            "test",
            "point",
            "repetition",
            "state",
            "node",
            "le",
            "asked",
            "read_back",
            // The agents' own (agent::service::METRIC_NAMES).
            "load",
            "phase",
            "interface",
        ];
        for expression in &expressions {
            let names: Vec<&str> = expression
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("continuum_"))
                .collect();
            assert!(!names.is_empty(), "{expression:?} names no metric");
            for name in names {
                assert!(
                    METRIC_NAMES.contains(&name) || agent_writes(name),
                    "{name} in {expression:?} is not a metric Continuum writes"
                );
            }
            // Label names in selectors and groupings: `name=` and `by (a, b)`.
            for selector in expression.split(['{', ',']).skip(1) {
                if let Some((label, _)) = selector.split_once('=') {
                    let label = label.trim();
                    assert!(label_names.contains(&label), "{label} in {expression:?}");
                }
            }
            if let Some((_, by)) = expression.split_once("by (") {
                for label in by.split(')').next().unwrap_or_default().split(',') {
                    assert!(
                        label_names.contains(&label.trim()),
                        "{label} in {expression:?}"
                    );
                }
            }
        }
        let legends = panels
            .iter()
            .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t["legendFormat"].as_str().map(str::to_string));
        for legend in legends {
            for label in legend
                .split("{{")
                .skip(1)
                .filter_map(|l| l.split("}}").next())
            {
                assert!(
                    label_names.contains(&label),
                    "legend {legend:?} uses {label}"
                );
            }
        }
    }

    /// True when the agent's page has metric `name`.
    #[cfg(feature = "local-agent")]
    fn agent_writes(name: &str) -> bool {
        agent::service::METRIC_NAMES.contains(&name)
    }

    /// Built without the agent crate, the agent's names cannot be looked up here: they are
    /// taken as written (the default build checks them).
    #[cfg(not(feature = "local-agent"))]
    fn agent_writes(name: &str) -> bool {
        name.starts_with("continuum_agent_")
    }

    /// A broker ready, netem in force and one measured latency cell.
    fn sample_events() -> Vec<RunEvent> {
        use crate::results::{CellRecord, CellStatus};
        let mut latency = loadgen::result::new_histogram();
        latency.record(300_000).expect("in range");
        let record = CellRecord {
            cell: "embedded/local/0-latency/-/1".into(),
            broker: "embedded".into(),
            scenario: "local".into(),
            test: crate::plan::TestKind::Latency,
            point: crate::plan::CellPoint::Single,
            repetition: 1,
            status: CellStatus::Ok,
            reason: String::new(),
            earlier_failures: 0,
            spec: None,
            summary: Some(loadgen::Summary {
                lost: Some(0),
                ..loadgen::Summary::of(&loadgen::RunResult::empty(
                    &loadgen::presets::latency(),
                    "sample",
                ))
            }),
            usage: Some(crate::results::usage::BrokerUsage {
                cpu_percent: 12.0,
                cpu_us_per_delivery: None,
                peak_rss_mb: 20.0,
                samples: 4,
            }),
            generator_limit: None,
            saturation: None,
        };
        vec![
            RunEvent::BrokerReady {
                broker: "embedded".into(),
                address: "127.0.0.1:1883".parse().expect("an address"),
            },
            RunEvent::Netem {
                scenario: "edge".into(),
                node: "worker".into(),
                asked: "delay 1ms".into(),
                read_back: "delay 1ms".into(),
            },
            RunEvent::Cell {
                id: record.cell.clone(),
                status: CellStatus::Ok,
                note: String::new(),
                counts: RunCounts {
                    total: 1,
                    done: 1,
                    measured: 1,
                    failed: 0,
                    skipped: 0,
                },
                measured: Some(std::sync::Arc::new(MeasuredCell {
                    record,
                    latency: Some(LatencyBuckets::of(&latency)),
                })),
            },
        ]
    }
}
