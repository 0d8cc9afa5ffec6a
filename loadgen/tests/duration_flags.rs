//! Every duration flag of the `loadgen` binary goes through the spec's validation: at
//! u64::MAX seconds each is refused in one line naming the spec field, exit 1, before any
//! connection (the broker named here, port 1 of loopback, would refuse one anyway).

use std::process::Command;

const MAX: &str = "18446744073709551615s";

#[test]
fn every_duration_flag_at_u64_max_seconds_is_refused_naming_its_field() {
    let cases: [(&[&str], &str); 15] = [
        (&["latency", "--interval", MAX], "pacing.interval"),
        (&["latency", "--drain-timeout", MAX], "drain.timeout"),
        (&["latency", "--drain-idle", MAX], "drain.idle"),
        (
            &["latency", "--connect-timeout", MAX],
            "connection.connect_timeout",
        ),
        (&["latency", "--keep-alive", MAX], "connection.keep_alive"),
        (&["latency", "--coalescing", MAX], "engine.coalescing"),
        (&["throughput", "--duration", MAX], "duration"),
        (&["throughput", "--warmup", MAX], "warmup"),
        (
            &[
                "latency",
                "--churn-rate",
                "10",
                "--churn-connections",
                "10",
                "--churn-hold",
                MAX,
            ],
            "churn.hold",
        ),
        (
            &[
                "latency",
                "--persistent-session",
                "--offline-after",
                MAX,
                "--offline-gap",
                "1s",
            ],
            "connection.offline.after",
        ),
        (
            &[
                "latency",
                "--persistent-session",
                "--offline-after",
                "1s",
                "--offline-gap",
                MAX,
            ],
            "connection.offline.gap",
        ),
        (
            &["latency", "--reconnect-within", MAX],
            "connection.reconnect.within",
        ),
        (
            &[
                "latency",
                "--reconnect-within",
                "5s",
                "--reconnect-retry",
                MAX,
            ],
            "connection.reconnect.retry",
        ),
        (
            &["latency", "--reconnect-within", "5s", "--cut-all-at", MAX],
            "connection.reconnect.cut_all_at",
        ),
        (&["saturate", "--probe", MAX], "probe"),
    ];
    for (args, field) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .args(args)
            .args(["--broker", "127.0.0.1:1", "--no-progress"])
            .output()
            .expect("loadgen runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{field} = 584542046090years")),
            "{args:?}: {stderr:?} should name {field} and the value"
        );
    }
}
