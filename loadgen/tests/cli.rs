//! The `loadgen` binary as a user meets it: one-line errors with exit codes, and the output
//! files of a real run against Mosquitto.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tests::{Mosquitto, MosquittoOptions, free_loopback_port, skip_unless_installed};

fn loadgen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(args)
        .arg("--no-progress")
        .output()
        .expect("loadgen runs")
}

/// The process failed with `code` and printed exactly one line containing `expected`.
fn assert_one_line_error(output: &Output, code: i32, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one line, got: {stderr}"
    );
    assert!(
        stderr.contains(expected),
        "{stderr:?} should name {expected:?}"
    );
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

#[test]
fn bad_input_is_one_line_naming_the_problem() {
    assert_one_line_error(&loadgen(&["latency", "--frobnicate"]), 2, "--frobnicate");
    assert_one_line_error(
        &loadgen(&["throughput", "--clients", "0"]),
        1,
        "publishers = 0",
    );
    assert_one_line_error(
        &loadgen(&["latency", "--interval", "0s"]),
        1,
        "pacing.interval = 0s",
    );
    assert_one_line_error(
        &loadgen(&["payload", "--size", "300MB"]),
        1,
        "payload = 300MB",
    );
    assert_one_line_error(&loadgen(&["payload", "--size", "9B"]), 1, "payload = 9B");
    assert_one_line_error(&loadgen(&["latency", "--qos", "3"]), 2, "QoS");
    assert_one_line_error(
        &loadgen(&["latency", "--transport", "carrier-pigeon"]),
        2,
        "is not a transport (tcp, websocket or quic)",
    );
    assert_one_line_error(
        &loadgen(&["latency", "--quic-streams", "per-topic"]),
        1,
        "broker.quic_streams = \"per_topic\": only with broker.transport = \"quic\"",
    );
    assert_one_line_error(
        &loadgen(&["latency", "--quic-streams", "many"]),
        2,
        "is not a QUIC stream mode (single, per-topic or per-publish)",
    );
    assert_one_line_error(
        &loadgen(&["latency", "--websocket-path", "/ws"]),
        1,
        "broker.websocket_path = \"/ws\": only with broker.transport = \"websocket\"",
    );
    assert_one_line_error(
        &loadgen(&[
            "latency",
            "--churn-rate",
            "0",
            "--churn-connections",
            "10",
            "--churn-hold",
            "1s",
        ]),
        1,
        "churn.rate = 0",
    );
    assert_one_line_error(
        &loadgen(&["latency", "--offline-after", "1s", "--offline-gap", "2s"]),
        1,
        "connection.offline = 2s: needs connection.clean_session = false",
    );
    assert_one_line_error(
        &loadgen(&[
            "latency",
            "--reconnect-within",
            "1s",
            "--reconnect-retry",
            "2s",
        ]),
        1,
        "connection.reconnect.retry = 2s: above 0 and at most connection.reconnect.within (1s)",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = dir.path().join("bad.toml");
    std::fs::write(&spec, "publishers = 1\npublisherz = 2\n").expect("write spec");
    let output = loadgen(&["run", utf8(&spec)]);
    assert_one_line_error(&output, 1, "unknown field `publisherz`");
    assert_one_line_error(&output, 1, "(line 2)");
}

/// Runs loadgen to its end and returns its output with the child's own peak RSS, bytes.
fn loadgen_with_peak_rss(args: &[&str]) -> (Output, u64) {
    tests::process::output_with_peak_rss(
        Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .args(args)
            .arg("--no-progress"),
    )
}

/// Counts that would need gigabytes are refused before anything is allocated: a one-line
/// error naming the field, and the process stays small.
#[test]
fn counts_that_would_exhaust_memory_are_refused_before_allocating() {
    for (args, expected) in [
        (
            &["throughput", "--clients", "4000000000"][..],
            "publishers = 4000000000",
        ),
        (
            &["payload", "--size", "200MB", "--publishers", "10000"][..],
            "payload = 200MB",
        ),
    ] {
        let (output, peak_rss) = loadgen_with_peak_rss(args);
        assert_one_line_error(&output, 1, expected);
        eprintln!("{args:?}: peak RSS {} KiB", peak_rss / 1024);
        assert!(
            peak_rss < 64 << 20,
            "{args:?} peaked at {} MiB",
            peak_rss >> 20
        );
    }
}

#[test]
fn an_unreachable_broker_fails_within_seconds() {
    // A loopback port nobody listens on: the connection is refused.
    let port = free_loopback_port().expect("free port");
    let started = Instant::now();
    let output = loadgen(&["latency", "--broker", &format!("127.0.0.1:{port}")]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_one_line_error(
        &output,
        1,
        &format!("broker 127.0.0.1:{port}: cannot connect"),
    );
}

#[test]
fn a_refusing_broker_fails_with_its_reason() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // Anonymous clients are let in (the harness's readiness probe is one), but a username
    // that is not in the (empty) password file is refused.
    let dir = tempfile::tempdir().expect("temp dir");
    let passwords = dir.path().join("passwords");
    std::fs::write(&passwords, "").expect("password file");
    let broker = Mosquitto::start(MosquittoOptions {
        extra_config: vec![format!("password_file {}", utf8(&passwords))],
        ..MosquittoOptions::default()
    })
    .expect("mosquitto starts");
    let address = broker.addr().to_string();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "wrong\n").expect("secret file");
    let output = loadgen(&[
        "latency",
        "--broker",
        &address,
        "--username",
        "bob",
        "--password-file",
        utf8(&secret),
    ]);
    assert_one_line_error(
        &output,
        1,
        "refused CONNECT: connack_refused_not_authorized",
    );
    // A password on the command line is no longer accepted at all.
    let output = loadgen(&["latency", "--broker", &address, "--password", "wrong"]);
    assert_one_line_error(&output, 2, "--password");
}

/// Fields in each CSV line of `text`, header included, read by the csv crate loadgen
/// writes with.
fn csv_fields(text: &str) -> Vec<usize> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes())
        .records()
        .map(|record| record.expect("a CSV record").len())
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_run_writes_json_csv_histograms_and_a_raw_result() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let (csv, hgrm, raw) = (
        dir.path().join("runs.csv"),
        dir.path().join("hgrm"),
        dir.path().join("result.json"),
    );
    let address = broker.addr().to_string();
    let mut args = vec![
        "throughput",
        "--clients",
        "10",
        "--messages",
        "200",
        "--broker",
        &address,
    ];
    args.extend([
        "--csv",
        utf8(&csv),
        "--hgrm",
        utf8(&hgrm),
        "--result",
        utf8(&raw),
    ]);

    let table = loadgen(&args);
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("per client") && table.contains("lost         0"),
        "{table}"
    );

    args.push("--json");
    let json = loadgen(&args);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&json.stdout).expect("stdout is JSON");
    assert_eq!(summary["published"], 2_000);
    assert_eq!(summary["lost"], 0);
    assert!(summary["latency"]["p50_us"].as_f64().expect("p50") > 0.0);
    assert!(
        summary["receive_rate"]["msgs_per_s"]
            .as_f64()
            .expect("rate")
            > 0.0
    );
    assert!(
        summary["receive_rate_per_client"]["median_msgs_per_s"]
            .as_f64()
            .expect("median")
            > 0.0
    );

    let csv = read(&csv);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "a header and one row per run:\n{csv}");
    assert!(
        rows[0].contains("latency_p50_us") && rows[0].contains("receive_rate_msgs_per_s"),
        "{}",
        rows[0]
    );
    let fields = csv_fields(&csv);
    assert!(fields.iter().all(|n| *n == fields[0]), "{csv}");

    let latency = read(&hgrm.join("latency.hgrm"));
    assert!(
        latency.contains("Total count    =         2000"),
        "{latency}"
    );
    assert!(
        latency.lines().any(|line| line.contains("1.000000000000")),
        "the distribution reaches 100 %"
    );

    // A result merged with itself would count its clients twice: refused, naming why.
    let merged = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["merge", utf8(&raw), utf8(&raw)])
        .output()
        .expect("merge runs");
    assert_one_line_error(&merged, 1, "counted twice");

    // The same result with a 40-byte latency histogram that declares a 4 GiB payload:
    // refused before the histogram is allocated, and the process stays small.
    let mut crafted: serde_json::Value =
        serde_json::from_str(&read(&raw)).expect("the raw result is JSON");
    let mut header = Vec::new();
    header.extend(0x1c84_9313u32.to_be_bytes()); // V2, uncompressed
    header.extend(u32::MAX.to_be_bytes()); // the payload length it declares
    header.extend(0u32.to_be_bytes());
    header.extend(3u32.to_be_bytes());
    header.extend(1u64.to_be_bytes());
    header.extend(3_600_000_000_000u64.to_be_bytes());
    header.extend(1f64.to_be_bytes());
    assert_eq!(header.len(), 40);
    use base64::Engine;
    crafted["latency"] = base64::engine::general_purpose::STANDARD
        .encode(&header)
        .into();
    let crafted_path = dir.path().join("crafted.json");
    std::fs::write(&crafted_path, crafted.to_string()).expect("crafted result written");
    let (merged, peak_rss) = tests::process::output_with_peak_rss(
        Command::new(env!("CARGO_BIN_EXE_loadgen")).args(["merge", utf8(&crafted_path)]),
    );
    assert_one_line_error(&merged, 1, "payload");
    eprintln!(
        "merge of a crafted histogram: peak RSS {} KiB",
        peak_rss / 1024
    );
    assert!(peak_rss < 64 << 20, "peaked at {} MiB", peak_rss >> 20);
}
