//! One loadgen process holds 10,000 connections (5,000 publisher/subscriber pairs) against a
//! real Mosquitto on loopback, at QoS 0 and at QoS 1: every connection made, no error, every
//! message delivered and counted by Mosquitto too. Prints the process's peak RSS and its
//! connect-time percentiles (figures, not assertions: memory and speed are the benchmarks').

use std::process::Command;

use tests::{Mosquitto, MosquittoOptions, raise_nofile_limit, skip_unless_installed};

const PAIRS: u32 = 5_000;

#[test]
fn one_loadgen_holds_ten_thousand_connections_at_qos0_and_qos1() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    // Mosquitto inherits this process's limit: 10,000 sockets and its own files.
    let limit = raise_nofile_limit().expect("RLIMIT_NOFILE");
    assert!(
        limit.soft >= 2 * u64::from(PAIRS) + 512,
        "this machine allows {} open files, fewer than the test needs",
        limit.soft
    );
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto");
    let dir = tempfile::tempdir().expect("temp dir");
    for qos in ["0", "1"] {
        let before = broker.counters_settled().expect("$SYS before");
        let raw = dir.path().join(format!("qos{qos}.json"));
        let (output, peak_rss) = tests::process::output_with_peak_rss(
            Command::new(env!("CARGO_BIN_EXE_loadgen")).args([
                "throughput",
                "--broker",
                &broker.addr().to_string(),
                "--clients",
                &PAIRS.to_string(),
                "--qos",
                qos,
                // 2 messages a second per pair while all 10,000 connections are held.
                "--rate",
                "10000",
                "--warmup",
                "1s",
                "--duration",
                "4s",
                "--json",
                "--no-progress",
                "--result",
                raw.to_str().expect("UTF-8 path"),
            ]),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "QoS {qos}: {stderr}");
        let after = broker.counters_settled().expect("$SYS after");
        let summary: loadgen::Summary =
            serde_json::from_slice(&output.stdout).expect("the JSON summary");
        let result: loadgen::RunResult =
            serde_json::from_str(&std::fs::read_to_string(&raw).expect("raw result"))
                .expect("the raw result");
        assert!(result.errors.is_empty(), "QoS {qos}: {:?}", result.errors);
        assert_eq!(
            result.connect_time.len(),
            2 * u64::from(PAIRS),
            "every connection made"
        );
        assert_eq!(summary.lost, Some(0), "QoS {qos}: lost messages");
        assert_eq!(summary.delivered_unique, summary.expected_deliveries);
        assert_eq!(
            (summary.published, summary.received),
            (
                after.publish_received - before.publish_received,
                after.publish_sent - before.publish_sent
            ),
            "QoS {qos}: loadgen's counts vs Mosquitto's $SYS"
        );
        let connect = &summary.connect_time;
        println!(
            "QoS {qos}: {} connections, {} messages delivered, peak RSS {:.1} MiB, connect time \
             p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
            result.connect_time.len(),
            summary.delivered_unique,
            peak_rss as f64 / (1024.0 * 1024.0),
            connect.p50_us / 1e3,
            connect.p99_us / 1e3,
            connect.max_us / 1e3
        );
    }
}
