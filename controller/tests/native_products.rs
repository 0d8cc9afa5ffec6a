//! The products added beside the study's, each deployed by an agent and measured through
//! the controller: the study's latency, payload (1 KB, 10 KB, 1 MB) and burst tests and one
//! sustained throughput test, on two nodes whose agents run on loopback (`agent = "local"`).
//! Every cell is measured, delivers every message it expects with none lost, and after the
//! run no process of the broker is left. (Their `$SYS` counters against loadgen's counts,
//! and a broker left by a killed agent, are the native driver's tests in the agent crate.)

use std::path::Path;

use controller::plan::{Plan, TestKind};
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, run_plan};
use domain::Product;
use tokio_util::sync::CancellationToken;

/// The environment variable every process of a native broker carries.
const MARKER_VAR: &str = "CONTINUUM_BROKER_INSTANCE";

/// The plan: `product` on the worker, the study's tests, short, one repetition.
fn plan_text(product: Product, results: &Path) -> String {
    format!(
        r#"name = "product-{product}"
repetitions = 1
results_dir = "{results}"
[timeouts]
connect = "20s"
deploy = "60s"
cell = "120s"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen"]
[[nodes]]
name = "worker"
agent = "local"
roles = ["broker"]
[[brokers]]
name = "{product}"
kind = "native"
product = "{product}"
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
payloads = ["1KB", "10KB", "1MB"]
publishers = 5
messages = 3
warmup = 1
[[tests]]
kind = "burst"
loadgen = ["tester"]
clients = [10]
messages = 200
[[tests]]
kind = "throughput"
loadgen = ["tester"]
clients = [10]
rate = 1000
duration = "2s"
warmup = "1s"
"#,
        results = results.display()
    )
}

/// Processes still carrying a marker of a broker named `name` started by this process's
/// agents (markers begin with the agent's PID and the instance name).
fn leftovers(name: &str) -> Vec<u32> {
    let prefix = format!("{MARKER_VAR}={}-{name}-", std::process::id());
    host::running_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&byte| byte == 0)
                    .any(|entry| entry.starts_with(prefix.as_bytes()))
            })
        })
        .collect()
}

/// The first of `programs` that is installed, or the first of them (to be reported missing).
fn installed_one<'a>(programs: &[&'a str]) -> &'a str {
    let found = programs
        .iter()
        .find(|path| tests::require_binary(path).is_none());
    found.or(programs.first()).copied().unwrap_or_default()
}

async fn the_study_measures(product: Product, programs: &[&str]) {
    if !tests::components_available(&[installed_one(programs)]) {
        return;
    }
    // As the agent judges it: Java alone is not ActiveMQ, whose launcher and MQTT libraries
    // must be there too.
    if let Err(missing) = agent::broker::InstallPaths::default().check(product) {
        assert!(
            !tests::running_in_ci(),
            "CI must install every broker, but {missing}"
        );
        eprintln!("SKIPPED: {missing}");
        return;
    }
    let results = tempfile::tempdir().expect("temp dir");
    let text = plan_text(product, results.path());
    let plan = Plan::parse(&text, "product.toml").expect("a valid plan");
    let summary = run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    )
    .await
    .expect("the run");
    eprintln!("{product}: {summary:?}");
    // latency 1 + payload 3 + burst 1 + throughput 1.
    assert_eq!(
        (summary.measured, summary.failed, summary.skipped),
        (6, 0, 0),
        "{product}"
    );
    let rows = results::read_rows(&summary.dir.join("summary.csv")).expect("summary.csv");
    assert_eq!(rows.len(), 6);
    for row in &rows {
        let cell = &row.cell;
        assert_eq!(row.status, CellStatus::Ok, "{cell}: {}", row.reason);
        assert_eq!(row.lost, Some(0), "{cell} lost messages");
        assert!(row.expected_deliveries.is_some_and(|n| n > 0), "{cell}");
        assert_eq!(row.delivered_unique, row.expected_deliveries, "{cell}");
        assert!(
            row.qos_violations.0.is_empty(),
            "{cell}: {:?}",
            row.qos_violations
        );
        if row.test == TestKind::Throughput {
            eprintln!(
                "{cell}: offered {:?} msg/s, received {:?} msg/s ({:?})",
                row.offered_rate_msgs_per_s, row.receive_rate_msgs_per_s, row.rate_kind
            );
        }
    }
    let payloads: Vec<Option<u64>> = rows
        .iter()
        .filter(|row| row.test == TestKind::Payload)
        .map(|row| row.payload_bytes)
        .collect();
    assert_eq!(payloads.len(), 3);
    for size in [1_000, 10_000, 1_000_000] {
        assert!(payloads.contains(&Some(size)), "{payloads:?}");
    }
    let left = leftovers(product.as_str());
    assert!(left.is_empty(), "{product} processes left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mqttv5_broker_runs_the_study_through_the_controller() {
    the_study_measures(Product::Mqttv5, recipes::mqttv5::PROGRAMS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aedes_runs_the_study_through_the_controller() {
    the_study_measures(Product::Aedes, recipes::aedes::PROGRAMS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqtt_runs_the_study_through_the_controller() {
    the_study_measures(Product::Amqtt, recipes::amqtt::PROGRAMS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activemq_runs_the_study_through_the_controller() {
    the_study_measures(Product::ActiveMq, recipes::activemq::JAVA_PROGRAMS).await;
}

/// The controller's workloads log in as ejabberd's anonymous access asks (any username and
/// password); `ejabberdctl` is the file that says the package is installed (`erl` alone is
/// Erlang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ejabberd_runs_the_study_through_the_controller() {
    the_study_measures(Product::Ejabberd, &["/usr/sbin/ejabberdctl"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmqtt_runs_the_study_through_the_controller() {
    the_study_measures(Product::Rmqtt, recipes::rmqtt::PROGRAMS).await;
}
