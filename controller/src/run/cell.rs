//! One cell: the test's workload against the deployed broker, run by one loadgen agent or
//! spread over several (the test's `spread`) with a start barrier on a shared timeline, while
//! the broker's node reports CPU and memory.

use std::collections::HashMap;
use std::time::Duration;

use loadgen::spec::Transport;
use loadgen::{RunResult, Summary, WorkloadSpec};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;

use super::agents::AgentHandle;
use super::deploy::Endpoints;
use super::load::run_load;
use crate::plan::{Cell, Plan, Timing};
use crate::results::MetricsRow;

/// Metrics sampling interval during a cell: a 10 s window holds 20 samples of the broker
/// (sampling costs the node CPU: more often would show in its own figures).
const METRICS_INTERVAL: Duration = Duration::from_millis(500);

/// How a cell ended.
#[derive(Debug)]
pub enum CellOutcome {
    /// Measured.
    Measured(Box<RunResult>),
    /// A saturation search ended: what it found, and the result of the probe at the rate
    /// it found (none when nothing was sustained).
    Searched(
        Box<loadgen::saturation::SaturationReport>,
        Option<Box<RunResult>>,
    ),
    /// Failed, with the reason.
    Failed(String),
}

/// The workload of `cell` (its test's workload at its point, `base`) against the broker at
/// `endpoints`: its MQTT listener, or its WebSocket one (and the product's path, unless the
/// test names one) for a test speaking WebSocket; with the login the product's anonymous
/// access asks for (ejabberd's), unless the test names a username or a password.
pub(super) fn workload(
    base: &WorkloadSpec,
    plan: &Plan,
    cell: &Cell,
    endpoints: Endpoints<'_>,
    run_id: &str,
) -> Result<WorkloadSpec, String> {
    let mut spec = base.clone();
    let entry = &plan.brokers[cell.broker];
    let broker = match spec.broker.transport {
        Transport::Tcp => endpoints.mqtt,
        Transport::WebSocket => {
            if spec.broker.websocket_path.is_none() {
                spec.broker.websocket_path = entry
                    .product()
                    .and_then(|product| recipes::websocket_path(product).ok())
                    .map(str::to_owned);
            }
            endpoints
                .websocket
                .ok_or_else(|| format!("broker {} reported no WebSocket listener", entry.name))?
        }
        Transport::Quic => {
            if let Some(pem) = endpoints.quic_ca_pem {
                // The agent made the listener's certificate: its CA is the one to trust.
                spec.broker.tls_ca_file = None;
                spec.broker.tls_ca_pem = Some(pem.to_owned());
            }
            endpoints
                .quic
                .ok_or_else(|| format!("broker {} has no QUIC listener", entry.name))?
        }
    };
    spec.broker.host = broker.ip().to_string();
    spec.broker.port = broker.port();
    let login = entry.product().and_then(recipes::anonymous_login);
    // A test that names its own login keeps it (a password alone is refused by validation).
    if let (Some(login), None, None) = (login, &spec.broker.username, &spec.broker.password) {
        spec.broker.username = Some(login.username.to_string());
        spec.broker.password = Some(login.password.to_string());
    }
    spec.run_id = Some(run_id.to_string());
    Ok(spec)
}

/// Runs one cell; metrics of `broker_name` on `broker_node` are collected meanwhile.
pub async fn run(
    plan: &Plan,
    cell: &Cell,
    spec: WorkloadSpec,
    agents: &HashMap<String, AgentHandle>,
    broker_watch: Option<(&str, &str)>,
    cell_id: &str,
    cancel: &CancellationToken,
) -> (CellOutcome, Vec<MetricsRow>) {
    let stop_metrics = CancellationToken::new();
    let metrics = broker_watch
        .and_then(|(node, broker)| {
            agents
                .get(node)
                .map(|agent| (agent.clone(), broker.to_string()))
        })
        .map(|(agent, broker)| {
            tokio::spawn(collect_metrics(
                agent,
                broker,
                cell_id.to_string(),
                stop_metrics.clone(),
            ))
        });
    let test = &plan.tests[cell.test];
    let load = async {
        if test.kind.timing() == Timing::Searched {
            let settings = test.search.clone().unwrap_or_default();
            return match super::search::run(plan, cell, &spec, settings, agents).await {
                Ok((report, at_rate)) => CellOutcome::Searched(report, at_rate),
                Err(reason) => CellOutcome::Failed(reason),
            };
        }
        match run_load(plan, cell, spec, agents).await {
            Ok(result) => CellOutcome::Measured(Box::new(result)),
            Err(reason) => CellOutcome::Failed(reason),
        }
    };
    // At the timeout or the cancel, `load` is dropped and with it its RunLoad streams: each
    // agent sees its caller go away and cancels the load, which gives its load slot back
    // (controller/tests/ended_loads.rs).
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(plan.timeouts.cell, load) => match outcome {
            Ok(outcome) => outcome,
            Err(_) => CellOutcome::Failed(format!("the cell took longer than {:?}", plan.timeouts.cell)),
        },
        _ = cancel.cancelled() => CellOutcome::Failed("interrupted (SIGINT/SIGTERM)".to_string()),
    };
    stop_metrics.cancel();
    let rows = match metrics {
        Some(task) => task.await.unwrap_or_default(),
        None => Vec::new(),
    };
    (outcome, rows)
}

/// The broker's and its node's samples until `stop`, as rows of `cell`.
async fn collect_metrics(
    agent: AgentHandle,
    broker: String,
    cell: String,
    stop: CancellationToken,
) -> Vec<MetricsRow> {
    let mut rows = Vec::new();
    let mut stream = match agent.agent.metrics(&broker, METRICS_INTERVAL).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::warn!(node = %agent.name, %error, "no metrics for this cell");
            return rows;
        }
    };
    loop {
        let sample = tokio::select! {
            _ = stop.cancelled() => break,
            sample = stream.next() => match sample {
                Some(Ok(sample)) => sample,
                _ => break,
            },
        };
        for process in sample.processes.iter().filter(|p| p.alive) {
            rows.push(MetricsRow {
                cell: cell.clone(),
                unix_ns: sample.unix_ns,
                node: agent.name.clone(),
                node_cpu_percent: sample.cpu_percent,
                node_memory_used_bytes: sample.memory_used_bytes,
                process: process.label.clone(),
                process_cpu_percent: process.cpu_percent,
                process_rss_bytes: process.rss_bytes,
            });
        }
    }
    rows
}

/// A one-line account of a measured cell: what its rate is (burst, sustained...) included.
pub fn one_line(summary: &Summary) -> String {
    let lost = summary
        .lost
        .map_or_else(|| "?".to_string(), |l| l.to_string());
    let transit = match &summary.latency_tail {
        Some(tail) => format!(
            " (transit p50 {:.3} ms p99 {:.3} ms{})",
            summary.transit_latency.p50_us / 1e3,
            summary.transit_latency.p99_us / 1e3,
            if tail.owner == loadgen::tail::TailOwner::Loadgen {
                ", tail is loadgen's lateness"
            } else {
                ""
            }
        ),
        None => String::new(),
    };
    format!(
        "latency p50 {:.3} ms p99 {:.3} ms{transit}, receive {:.0} msg/s {} (per-client median {}), lost {lost}{}{}",
        summary.latency.p50_us / 1e3,
        summary.latency.p99_us / 1e3,
        summary.receive_rate.msgs_per_s,
        summary.rate_kind.as_str(),
        summary
            .receive_rate_per_client
            .median()
            .map_or("n/a".to_string(), |r| format!("{r:.0}")),
        if summary.qos_violations.is_empty() {
            String::new()
        } else {
            format!(", QoS VIOLATED: {}", summary.qos_violations.join("; "))
        },
        if summary.generator.limited {
            ", GENERATOR-LIMITED"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-test plan measuring `product` natively; `workload` is the test's own table.
    fn plan(product: &str, workload: &str) -> Plan {
        let text = format!(
            "name = \"t\"\n[[nodes]]\nname = \"n\"\nagent = \"local\"\n\
             roles = [\"loadgen\", \"broker\"]\n[[scenarios]]\nname = \"local\"\n\
             [[brokers]]\nname = \"b\"\nkind = \"native\"\nproduct = \"{product}\"\nnode = \"n\"\n\
             [[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\n{workload}"
        );
        Plan::parse(&text, "plan.toml").expect("a valid plan")
    }

    fn login_sent(plan: &Plan) -> (Option<String>, Option<String>) {
        let cell = &plan.cells()[0];
        let base = &plan.workloads_of(cell.test).expect("workloads")[0].1;
        let endpoints = Endpoints {
            mqtt: "127.0.0.1:1883".parse().unwrap(),
            websocket: None,
            quic: None,
            quic_ca_pem: None,
        };
        let spec = workload(base, plan, cell, endpoints, "r").expect("a workload");
        (spec.broker.username, spec.broker.password)
    }

    #[test]
    fn a_quic_cell_of_a_deployed_broker_trusts_its_agents_ca_and_an_external_ones_its_own() {
        let quic = "[tests.workload.broker]\ntransport = \"quic\"\n";
        let native = plan("mqttv5", quic);
        let cell = &native.cells()[0];
        let base = &native.workloads_of(cell.test).expect("workloads")[0].1;
        let endpoints = Endpoints {
            mqtt: "127.0.0.1:1883".parse().unwrap(),
            websocket: None,
            quic: Some("127.0.0.1:14567".parse().unwrap()),
            quic_ca_pem: Some("AGENT CA"),
        };
        let spec = workload(base, &native, cell, endpoints, "r").expect("a workload");
        assert_eq!(spec.broker.port, 14567);
        assert_eq!(spec.broker.tls_ca_pem.as_deref(), Some("AGENT CA"));
        assert_eq!(spec.broker.tls_ca_file, None);
        // An external broker's cell keeps the test's CA file.
        let mut external = base.clone();
        external.broker.tls_ca_file = Some("/ca.pem".into());
        let endpoints = Endpoints {
            quic_ca_pem: None,
            ..endpoints
        };
        let spec = workload(&external, &native, cell, endpoints, "r").expect("a workload");
        assert_eq!(spec.broker.tls_ca_file, Some("/ca.pem".into()));
        assert_eq!(spec.broker.tls_ca_pem, None);
    }

    #[test]
    fn a_product_whose_anonymous_access_asks_a_login_gets_it_unless_the_test_names_one() {
        assert_eq!(
            login_sent(&plan("ejabberd", "")),
            (Some("continuum".into()), Some("anonymous".into()))
        );
        assert_eq!(login_sent(&plan("mosquitto", "")), (None, None));
        let own = "[tests.workload]\nbroker = { username = \"bob\", password = \"pw\" }\n";
        assert_eq!(
            login_sent(&plan("ejabberd", own)),
            (Some("bob".into()), Some("pw".into()))
        );
    }
}
