//! loadgen deliberately made the limit: held to a tenth of a core by a cgroup quota, it must
//! say so in its figures instead of passing its own limit off as the broker's.

use std::process::{Command, Stdio};
use std::time::Duration;

use tests::{CpuQuota, Mosquitto, MosquittoOptions, skip_unless_installed};

#[test]
fn a_starved_generator_is_flagged_and_its_rate_is_not_called_sustained() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    if let Some(reason) = tests::cpu_quota_unavailable() {
        assert!(!tests::running_in_ci(), "CI needs a CPU quota: {reason}");
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let child = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--no-progress", "--json", "throughput", "--broker"])
        .arg(format!("127.0.0.1:{}", broker.port()))
        .args([
            "--clients",
            "10",
            "--rate",
            "40000",
            "--duration",
            "3s",
            "--warmup",
            "1s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen starts");
    // Before it has connected: the whole process, threads to come included.
    let quota = CpuQuota::limit(child.id(), 0.1).expect("quota");
    let output = child.wait_with_output().expect("loadgen ends");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON summary");
    let generator = &summary["generator"];
    eprintln!(
        "quota throttled loadgen for {:?}; generator: {generator:#}",
        Duration::from_nanos(quota.throttled_ns())
    );
    assert_eq!(generator["limited"], true, "{generator:#}");
    let reasons = generator["reasons"].to_string();
    assert!(
        reasons.contains("throttled") || reasons.contains("of the 0.1 CPU"),
        "{reasons}"
    );
    assert!(
        (generator["cpu_capacity"].as_f64().expect("a number") - 0.1).abs() < 0.01,
        "the quota is the capacity: {generator:#}"
    );
    assert_ne!(
        summary["rate_kind"], "sustained",
        "a generator that fell behind its schedule does not measure a sustained rate"
    );
}
