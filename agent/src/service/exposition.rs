//! The agent's page for a Prometheus server (`metrics_listen` in agent.toml): each load it
//! runs or ran lately, under the labels the controller gave it (run, cell, broker, scenario,
//! test, point, repetition) plus `node` and `load`; the CPU time and memory of each broker it
//! runs; the time left on each broker lease; and netem as it holds it per interface, with its
//! lease. Read-only: nothing here changes the node.

use std::future::Future;
use std::pin::Pin;

use exposition::{Exposition, Kind, Page, labels};
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use super::AgentService;
use super::load_board::LoadFigures;
use crate::netem::NetemOptions;

/// Every metric name the agent writes, for dashboards and their checks.
pub const METRIC_NAMES: [&str; 16] = [
    "continuum_agent_load_phase",
    "continuum_agent_load_published_messages",
    "continuum_agent_load_received_messages",
    "continuum_agent_load_delivered_messages",
    "continuum_agent_load_connections",
    "continuum_agent_load_latency_seconds_bucket",
    "continuum_agent_load_latency_seconds_count",
    "continuum_agent_load_latency_seconds_sum",
    "continuum_agent_broker_cpu_seconds_total",
    "continuum_agent_broker_memory_bytes",
    "continuum_agent_broker_lease_remaining_seconds",
    "continuum_agent_netem_delay_seconds",
    "continuum_agent_netem_jitter_seconds",
    "continuum_agent_netem_loss_ratio",
    "continuum_agent_netem_rate_bytes_per_second",
    "continuum_agent_netem_lease_remaining_seconds",
];

/// netem on one interface: what is applied, when its lease ends (Unix ns), whether it holds.
type NetemInForce = (String, NetemOptions, u64, bool);

/// A netem parameter: its name, help and how to read it.
type NetemGauge = (&'static str, &'static str, fn(&NetemOptions) -> f64);

/// A per-load figure: its name, help and how to read it.
type LoadGauge = (&'static str, &'static str, fn(&LoadFigures) -> Option<u64>);

impl Exposition for AgentService {
    fn render(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>> {
        Box::pin(async move {
            let node = labels(&[("node", &self.config.name)]);
            let mut page = Page::new();
            write_loads(&mut page, &self.loads.shown());
            write_brokers(
                &mut page,
                &node,
                &self.brokers.running_pids(),
                &self.brokers.leases_remaining(),
            );
            let in_force = self.netem.in_force().await;
            write_netem(&mut page, &node, &in_force, loadgen::clock::unix_now_ns());
            page.finish()
        })
    }
}

/// netem per interface as the agent holds it (`in_force`), and its lease at `now_unix_ns`.
fn write_netem(page: &mut Page, node: &str, in_force: &[NetemInForce], now_unix_ns: u64) {
    let series = |interface: &str| format!("{node},{}", labels(&[("interface", interface)]));
    page.family(
        "continuum_agent_netem_lease_remaining_seconds",
        Kind::Gauge,
        "Time until netem's lease ends and the agent clears it unless renewed; 0 once it ran \
         out.",
    );
    for (interface, _, expires_unix_ns, active) in in_force {
        let left = if *active {
            expires_unix_ns.saturating_sub(now_unix_ns) as f64 / 1e9
        } else {
            0.0
        };
        page.sample(
            "continuum_agent_netem_lease_remaining_seconds",
            &series(interface),
            left,
        );
    }
    let parameters: [NetemGauge; 4] = [
        (
            "continuum_agent_netem_delay_seconds",
            "netem's delay as the kernel holds it.",
            |o| o.latency_ns as f64 / 1e9,
        ),
        (
            "continuum_agent_netem_jitter_seconds",
            "netem's jitter as the kernel holds it.",
            |o| o.jitter_ns as f64 / 1e9,
        ),
        (
            "continuum_agent_netem_loss_ratio",
            "netem's loss as the kernel holds it, 0 to 1: the random loss, or the long-run mean \
             of its Gilbert-Elliott model.",
            |o| o.to_params().mean_loss_percent() / 100.0,
        ),
        (
            "continuum_agent_netem_rate_bytes_per_second",
            "netem's rate limit as the kernel holds it; 0 for none.",
            |o| o.rate as f64,
        ),
    ];
    for (name, help, value) in parameters {
        page.family(name, Kind::Gauge, help);
        // A lease that ran out was cleared from the kernel: its settings are no longer held.
        for (interface, options, _, _) in in_force.iter().filter(|(.., active)| *active) {
            page.sample(name, &series(interface), value(options));
        }
    }
}

/// Each load's phase, counts and (once ended) latency.
fn write_loads(page: &mut Page, loads: &[(String, LoadFigures)]) {
    page.family(
        "continuum_agent_load_phase",
        Kind::Gauge,
        "1 for a load's phase: preflight, connecting, publishing, draining, done or failed.",
    );
    for (series, figures) in loads {
        page.sample(
            "continuum_agent_load_phase",
            &format!("{series},phase=\"{}\"", figures.phase),
            1,
        );
    }
    let gauges: [LoadGauge; 4] = [
        (
            "continuum_agent_load_published_messages",
            "Messages this node's publishers wrote to the broker so far, warm-up included.",
            |f| Some(f.published),
        ),
        (
            "continuum_agent_load_received_messages",
            "PUBLISH packets this node's subscribers received so far, copies included.",
            |f| Some(f.received),
        ),
        (
            "continuum_agent_load_delivered_messages",
            "Distinct messages this node's subscribers received, once the load ended.",
            |f| f.delivered,
        ),
        (
            "continuum_agent_load_connections",
            "Connections this node's clients hold open now.",
            |f| Some(f.connected.0),
        ),
    ];
    for (name, help, value) in gauges {
        page.family(name, Kind::Gauge, help);
        for (series, figures) in loads {
            if let Some(value) = value(figures) {
                page.sample(name, series, value);
            }
        }
    }
    page.family(
        "continuum_agent_load_latency_seconds",
        Kind::Histogram,
        "Latency of the load's measured messages from their intended send time, once it ended.",
    );
    for (series, figures) in loads {
        if let Some(latency) = &figures.latency {
            page.histogram("continuum_agent_load_latency_seconds", series, latency);
        }
    }
}

/// Each running broker's CPU time and memory (its main process), and the broker leases.
fn write_brokers(
    page: &mut Page,
    node: &str,
    running: &[(String, u32)],
    leases: &[(String, std::time::Duration)],
) {
    let pids: Vec<Pid> = running.iter().map(|(_, pid)| Pid::from_u32(*pid)).collect();
    // Without /proc to read (sysinfo refused), the page has no broker usage, not a wrong one.
    let usage: Vec<(String, u64, u64)> = System::new().map_or_else(
        |_| Vec::new(),
        |mut system| {
            system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&pids),
                true,
                ProcessRefreshKind::nothing().with_cpu().with_memory(),
            );
            running
                .iter()
                .filter_map(|(broker, pid)| {
                    let process = system.process(Pid::from_u32(*pid))?;
                    Some((
                        labels(&[("broker", broker)]),
                        process.accumulated_cpu_time(),
                        process.memory(),
                    ))
                })
                .collect()
        },
    );
    page.family(
        "continuum_agent_broker_cpu_seconds_total",
        Kind::Counter,
        "CPU time the broker's process used since it started (rate() gives cores).",
    );
    for (broker, cpu_ms, _) in &usage {
        page.sample(
            "continuum_agent_broker_cpu_seconds_total",
            &format!("{node},{broker}"),
            *cpu_ms as f64 / 1e3,
        );
    }
    page.family(
        "continuum_agent_broker_memory_bytes",
        Kind::Gauge,
        "The broker's resident memory now.",
    );
    for (broker, _, memory) in &usage {
        page.sample(
            "continuum_agent_broker_memory_bytes",
            &format!("{node},{broker}"),
            memory,
        );
    }
    page.family(
        "continuum_agent_broker_lease_remaining_seconds",
        Kind::Gauge,
        "Time until a broker's lease ends and the agent stops it unless renewed.",
    );
    for (broker, left) in leases {
        page.sample(
            "continuum_agent_broker_lease_remaining_seconds",
            &format!("{node},{}", labels(&[("broker", broker)])),
            left.as_secs_f64(),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::service::load_board::LoadBoard;

    /// The page of a node with a load ended and one running, a broker (this test's own
    /// process, which has used CPU), its lease, and netem on one interface.
    fn page() -> String {
        let board = Arc::new(LoadBoard::default());
        let cell: BTreeMap<String, String> = [("run", "study"), ("cell", "c1")]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let mut result = loadgen::RunResult::empty(&loadgen::presets::latency(), "run-1");
        result.published = vec![7];
        result.received = 7;
        result.delivered_unique = vec![7];
        result.latency.record(300_000).expect("in range");
        board.begin("tester", "run-1", &cell).end(Some(&result));
        let running = board.begin("tester", "run-2", &BTreeMap::new());
        running.progress(&loadgen::Status {
            phase: loadgen::Phase::Publishing,
            progress: loadgen::Progress {
                published: 3,
                received: 2,
            },
            planned_publishes: 10,
            connected: (2, 2),
        });
        let node = labels(&[("node", "tester")]);
        let mut page = Page::new();
        write_loads(&mut page, &board.shown());
        write_brokers(
            &mut page,
            &node,
            &[("bench".to_string(), std::process::id())],
            &[("bench".to_string(), Duration::from_secs(30))],
        );
        let delay = NetemOptions::from_params(
            &domain::NetemParams::from_millis(5.0, 1.0, 2.0).expect("valid"),
        )
        .expect("valid");
        let now = 1_000_000_000_000;
        write_netem(
            &mut page,
            &node,
            &[
                ("eth0".to_string(), delay, now + 12_000_000_000, true),
                // Its lease ran out: the agent cleared it.
                ("eth1".to_string(), delay, now - 1_000_000_000, false),
            ],
            now,
        );
        page.finish()
    }

    #[test]
    fn the_page_shows_loads_brokers_and_netem_under_every_listed_name() {
        // Work this process does, so its CPU time is above nothing.
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(spin.elapsed());
        }
        let text = page();
        for name in METRIC_NAMES {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name}{{"))),
                "{name} has no sample: {text}"
            );
        }
        let ended = "cell=\"c1\",run=\"study\",node=\"tester\",load=\"run-1\"";
        for line in [
            format!("continuum_agent_load_phase{{{ended},phase=\"done\"}} 1"),
            format!("continuum_agent_load_published_messages{{{ended}}} 7"),
            format!("continuum_agent_load_delivered_messages{{{ended}}} 7"),
            format!("continuum_agent_load_latency_seconds_bucket{{{ended},le=\"0.0005\"}} 1"),
            format!("continuum_agent_load_latency_seconds_count{{{ended}}} 1"),
            "continuum_agent_load_phase{node=\"tester\",load=\"run-2\",phase=\"publishing\"} 1"
                .to_string(),
            "continuum_agent_load_published_messages{node=\"tester\",load=\"run-2\"} 3".to_string(),
            "continuum_agent_load_connections{node=\"tester\",load=\"run-2\"} 2".to_string(),
            "continuum_agent_broker_lease_remaining_seconds{node=\"tester\",broker=\"bench\"} 30"
                .to_string(),
            "continuum_agent_netem_delay_seconds{node=\"tester\",interface=\"eth0\"} 0.005"
                .to_string(),
            "continuum_agent_netem_lease_remaining_seconds{node=\"tester\",interface=\"eth0\"} 12"
                .to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing: {text}");
        }
        // netem whose lease ran out shows as gone, its lease at 0.
        assert!(
            text.lines()
                .any(|l| l == "continuum_agent_netem_lease_remaining_seconds{node=\"tester\",interface=\"eth1\"} 0"),
            "{text}"
        );
        assert!(
            !text.contains(
                "continuum_agent_netem_delay_seconds{node=\"tester\",interface=\"eth1\"}"
            )
        );
        // A running load has no distinct count or latency yet.
        assert!(
            !text.contains(
                "continuum_agent_load_delivered_messages{node=\"tester\",load=\"run-2\"}"
            )
        );
        let loss: f64 = sample(&text, "continuum_agent_netem_loss_ratio{");
        assert!((loss - 0.02).abs() < 1e-6, "{loss}");
        assert!(sample(&text, "continuum_agent_broker_cpu_seconds_total{") > 0.0);
        assert!(sample(&text, "continuum_agent_broker_memory_bytes{") > 1e6);
    }

    /// The value of the first line starting with `prefix`.
    fn sample(text: &str, prefix: &str) -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }
}
