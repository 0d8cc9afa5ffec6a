//! Running a workload from a test: its result and summary, with loadgen's table printed for
//! the test's log; and the workload shapes several tests share.

use std::time::Duration;

use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, WorkloadSpec};
use loadgen::{RunResult, Summary};
use tokio_util::sync::CancellationToken;

/// Runs `spec` on the caller's runtime to its end.
pub async fn run(spec: &WorkloadSpec) -> (RunResult, Summary) {
    let result = loadgen::run(spec, CancellationToken::new(), None)
        .await
        .expect("the run completes");
    summarised(result)
}

/// Runs `spec` on loadgen's own runtime, as the CLI and the agents run it (timed runs).
pub async fn run_dedicated(spec: WorkloadSpec) -> (RunResult, Summary) {
    let result = loadgen::run_dedicated(spec, Default::default(), CancellationToken::new(), None)
        .await
        .expect("the run completes");
    summarised(result)
}

pub fn summarised(result: RunResult) -> (RunResult, Summary) {
    let summary = Summary::of(&result);
    eprintln!("{}", loadgen::output::render_table(&summary));
    (result, summary)
}

/// The study's payload test shape with 1 MB payloads: 5 publishers -> one topic -> 1
/// subscriber, 6 messages each (1 warm-up) every 100 ms, QoS 1; the broker's port is the
/// caller's to set.
pub fn megabyte_workload() -> WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.publishers = 5;
    spec.payload = ByteSize(1_000_000);
    spec.messages_per_publisher = 6;
    spec.warmup_messages = 1;
    spec.pacing = Pacing::OpenLoop {
        interval: Duration::from_millis(100),
    };
    spec
}

/// Every expected delivery arrived, once, in a run without errors.
pub fn assert_nothing_lost(summary: &Summary) {
    assert_eq!(
        summary.received, summary.expected_deliveries,
        "every expected delivery arrived"
    );
    assert_eq!(summary.lost, Some(0));
    assert_eq!(summary.duplicates, 0);
    assert!(
        summary.qos_violations.is_empty(),
        "{:?}",
        summary.qos_violations
    );
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
}

/// For tests about a transport: loadgen judged the timed run steady and its rate sustained,
/// without errors; or it refused to judge because this shared machine starved it of CPU and
/// said so (every reason a wait for a CPU), the one other verdict let pass.
pub fn assert_transport_steady(summary: &Summary) {
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    let reasons = &summary.generator.reasons;
    if summary.rate_kind == loadgen::summary::RateKind::GeneratorLimited
        && !reasons.is_empty()
        && reasons.iter().all(|r| r.contains("waited for a CPU"))
    {
        eprintln!("not judged, the machine was oversubscribed: {reasons:?}");
        return;
    }
    let steady = summary.steadiness.as_ref().expect("a timed run is judged");
    assert!(steady.steady, "not steady: {:?}", steady.reasons);
    assert_eq!(
        summary.rate_kind,
        loadgen::summary::RateKind::Sustained,
        "{reasons:?}"
    );
}
