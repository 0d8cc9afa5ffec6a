//! The Open MQTT Benchmark Suite's scenarios as test kinds: what a plan's `scale` and
//! fields make of them, and the values refused with their TOML path.

use std::time::Duration;

use loadgen::size::ByteSize;
use loadgen::spec::{MqttVersion, Pacing, Qos, Topology};

use super::*;

/// One local node, one embedded broker, a local scenario and one test of `kind` with
/// `fields` (TOML lines); `top` goes before the nodes.
fn plan(top: &str, kind: &str, fields: &str) -> String {
    format!(
        "name = \"t\"\n{top}\n[[nodes]]\nname = \"n\"\nagent = \"local\"\nroles = [\"loadgen\", \"broker\"]\n\
         [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n\
         [[scenarios]]\nname = \"local\"\n\
         [[tests]]\nkind = \"{kind}\"\nloadgen = [\"n\"]\n{fields}"
    )
}

fn workload(kind: &str, fields: &str) -> loadgen::WorkloadSpec {
    let plan = Plan::parse(&plan("", kind, fields), "plan.toml")
        .unwrap_or_else(|error| panic!("{kind} with {fields:?}: {error}"));
    plan.first_workload(0).expect("a workload")
}

fn error_of(kind: &str, fields: &str) -> String {
    Plan::parse(&plan("", kind, fields), "plan.toml")
        .expect_err("invalid")
        .to_string()
}

#[test]
fn a_hundredth_of_point_to_point_is_500_pairs_at_the_suites_rate_qos_and_payload() {
    let spec = workload("p2p", "scale = 0.01\nduration = \"5s\"\nwarmup = \"1s\"\n");
    assert_eq!((spec.publishers, spec.subscribers), (500, 500));
    assert_eq!(spec.topology, Topology::Pairs);
    assert_eq!((spec.qos, spec.payload), (Qos::AtLeastOnce, ByteSize(16)));
    assert_eq!(
        spec.pacing,
        Pacing::OpenLoop {
            interval: Duration::from_secs(1)
        }
    );
    assert_eq!(spec.broker.protocol, MqttVersion::V311);
    assert_eq!(
        (spec.duration, spec.warmup),
        (Some(Duration::from_secs(5)), Some(Duration::from_secs(1)))
    );
    assert_eq!(spec.connection.keep_alive, Duration::from_secs(300));
}

#[test]
fn without_a_scale_a_scenario_is_the_suites_size_and_60_seconds() {
    let spec = workload("fan-out", "");
    assert_eq!((spec.publishers, spec.subscribers), (5, 1_000));
    assert_eq!(spec.duration, Some(Duration::from_secs(60)));
    assert_eq!(
        spec.pacing,
        Pacing::OpenLoop {
            interval: Duration::from_millis(20)
        }
    );
}

#[test]
fn fan_in_keeps_a_topic_per_publisher_when_the_plan_sets_the_counts() {
    let spec = workload(
        "fan-in-shared",
        "scale = 0.01\npublishers = 40\nsubscribers = 3\n",
    );
    assert_eq!((spec.publishers, spec.subscribers), (40, 3));
    assert_eq!(spec.broker.protocol, MqttVersion::V5);
    let tree = spec.topics.expect("a topic tree");
    assert_eq!(tree.counts["publisher"], 40);
    assert_eq!(tree.subscribe, vec!["$share/benchmark/test/#".to_string()]);
}

#[test]
fn connections_are_all_open_through_the_measured_window() {
    let spec = workload(
        "connections",
        "scale = 0.001\nduration = \"3s\"\nwarmup = \"1s\"\n",
    );
    let churn = spec.churn.clone().expect("arrivals");
    assert_eq!((churn.connections, churn.rate), (1_000, 5_000.0));
    // The warm-up is the ramp (the last of 1,000 arrivals at 5,000/s) plus the plan's.
    let warmup = Duration::from_micros(199_800) + Duration::from_secs(1);
    assert_eq!(spec.warmup, Some(warmup));
    assert_eq!(churn.hold, warmup + Duration::from_secs(3));
    assert_eq!((spec.publishers, spec.subscribers), (1, 1));
}

#[test]
fn bad_scales_and_overlong_holds_are_refused_naming_the_field() {
    for (written, shown) in [
        ("0", "0"),
        ("-0.5", "-0.5"),
        ("1.5", "1.5"),
        ("nan", "NaN"),
        ("inf", "inf"),
    ] {
        assert_eq!(
            error_of("p2p", &format!("scale = {written}\n")),
            format!(
                "plan.toml: tests[0].scale = {shown}: a fraction of the suite's client counts: \
                 more than 0, at most 1 (0.01 is 500 -> 500 point to point)"
            ),
        );
    }
    // Each arrival holds through warm-up and window: over loadgen's longest schedule, the
    // plan's duration is what made it so.
    let long = Plan::parse(
        &plan(
            "[timeouts]\ncell = \"3h\"",
            "connections",
            "scale = 0.001\nduration = \"1h\"\nwarmup = \"10s\"\n",
        ),
        "plan.toml",
    )
    .expect_err("too long")
    .to_string();
    assert!(
        long.starts_with("plan.toml: tests[0].duration = "),
        "named by the plan's field: {long}"
    );
}

#[test]
fn a_cell_timeout_must_cover_the_arrivals_leaving_after_the_window() {
    // 1,000,000 arrivals at 5,000/s: the last arrives at 200 s and holds through the
    // window (210 s of warm-up, 300 s measured), so the load ends at 710 s, not at 510 s.
    let fields = "duration = \"300s\"\n";
    let short = Plan::parse(
        &plan("[timeouts]\ncell = \"11m\"", "connections", fields),
        "plan.toml",
    )
    .expect_err("the arrivals outlast the cell")
    .to_string();
    assert!(
        short.starts_with("plan.toml: timeouts.cell = 11m: tests[0] (connections) needs 11m 49s"),
        "{short}"
    );
    Plan::parse(
        &plan("[timeouts]\ncell = \"13m\"", "connections", fields),
        "plan.toml",
    )
    .expect("room for the arrivals and the margin");
}

#[test]
fn a_scale_too_large_for_one_loadgen_is_named_by_scale() {
    // 500 members each tracking 50,000 publishers: over loadgen's delivery tracks.
    let error = error_of("fan-in-shared", "");
    assert!(
        error.starts_with("plan.toml: tests[0].scale = 1: at this scale subscribers = 500: "),
        "{error}"
    );
    workload("fan-in-shared", "scale = 0.1\n");
}

#[test]
fn a_suite_scenarios_shape_is_not_the_workload_tables() {
    assert_eq!(
        error_of("p2p", "scale = 0.01\n[tests.workload]\npublishers = 5\n"),
        "plan.toml: tests[0].workload.publishers = (set): set tests[0].publishers (the scenario keeps its shape)"
    );
    assert_eq!(
        error_of(
            "fan-in-shared",
            "scale = 0.01\n[tests.workload.topics]\npattern = \"x/{n}\"\ncounts = { n = 3 }\nsubscribe = [\"x/#\"]\n"
        ),
        "plan.toml: tests[0].workload.topics = (set): the scenario's topics are its own"
    );
    assert_eq!(
        error_of(
            "connections",
            "scale = 0.001\n[tests.workload.churn]\nrate = 10.0\nconnections = 10\nhold = \"1s\"\n"
        ),
        "plan.toml: tests[0].workload.churn.hold = (set): each arrival holds through the ramp, the warm-up and the measured window"
    );
    // What is not the shape may be laid over it.
    let spec = workload("p2p", "scale = 0.01\n[tests.workload]\nqos = 2\n");
    assert_eq!(spec.qos, Qos::ExactlyOnce);
}

#[test]
fn arrivals_outlasting_loadgens_longest_schedule_are_named_by_duration() {
    let error = Plan::parse(
        &plan(
            "[timeouts]\ncell = \"3h\"",
            "connections",
            "duration = \"55m\"\n",
        ),
        "plan.toml",
    )
    .expect_err("the last arrival leaves after an hour")
    .to_string();
    assert!(
        error.starts_with(
            "plan.toml: tests[0].duration = 55m: each arrival stays through the measured window, \
             so the last of 1000000 at 5000/s leaves 1h 1m 49s after the first arrives"
        ),
        "{error}"
    );
}

#[test]
fn churn_in_a_counted_test_must_fit_the_cell_timeout() {
    // 3,000 arrivals at 1/s: 50 minutes, whatever the counted load beside them takes.
    let error = Plan::parse(
        &plan(
            "",
            "latency",
            "[tests.workload.churn]\nrate = 1.0\nconnections = 3000\nhold = \"1s\"\n",
        ),
        "plan.toml",
    )
    .expect_err("the churn outlasts the cell")
    .to_string();
    assert!(
        error.starts_with("plan.toml: timeouts.cell = 10m: tests[0] (latency) needs 50m"),
        "{error}"
    );
}
