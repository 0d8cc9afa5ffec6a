//! The `controller` binary on input that once aborted it or a server: each is refused with a
//! one-line error naming the field, before anything is allocated or started (peak RSS, from
//! `wait4`, stays small), and nothing is written.

use std::process::Command;

use tests::process::output_with_peak_rss;

/// A plan with one embedded broker and a latency test on this machine, `top` keys before
/// it and `extra` TOML after it.
fn plan(top: &str, extra: &str, results: &std::path::Path) -> String {
    format!(
        "{top}name = \"bounds\"\nresults_dir = {:?}\n\n[[nodes]]\nname = \"n\"\nagent = \"local\"\nroles = [\"broker\", \"loadgen\"]\n\n[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n\n[[scenarios]]\nname = \"local\"\n\n[[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\n{extra}",
        results.display().to_string()
    )
}

#[test]
fn sizes_that_would_exhaust_memory_are_refused_by_the_binary_with_little_memory() {
    let work = tempfile::tempdir().expect("temp dir");
    let results = work.path().join("results");
    let burst = "\n[[tests]]\nkind = \"burst\"\nloadgen = [\"n\"]\n";
    let cases = [
        (
            plan("repetitions = 4000000000\n", "", &results),
            "repetitions = 4000000000: at most 1000",
        ),
        (
            plan("", &format!("{burst}clients = [4000000000]\n"), &results),
            "tests[1].clients = 4000000000: at most 100000",
        ),
        (
            plan(
                "",
                "\n[[tests]]\nkind = \"payload\"\nloadgen = [\"n\"]\npayloads = [\"1GB\"]\npublishers = 10000\n",
                &results,
            ),
            "tests[1].payloads = 1000MB: over MQTT's packet limit",
        ),
        (
            plan(
                "",
                "\n[[tests]]\nkind = \"payload\"\nloadgen = [\"n\"]\npayloads = [\"200MB\"]\npublishers = 10000\n",
                &results,
            ),
            "tests[1].payloads = 200MB",
        ),
        (
            plan(
                "",
                "\n[timeouts]\ndeploy = \"18446744073709551615s\"\n",
                &results,
            ),
            "timeouts.deploy",
        ),
    ];
    for (index, (text, expected)) in cases.iter().enumerate() {
        let path = work.path().join(format!("plan-{index}.toml"));
        std::fs::write(&path, text).expect("plan written");
        let (output, peak_rss) =
            output_with_peak_rss(Command::new(env!("CARGO_BIN_EXE_controller")).arg(&path));
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!(
            "{expected}: exit {:?}, peak RSS {} KiB: {}",
            output.status.code(),
            peak_rss / 1024,
            stderr.trim()
        );
        assert_eq!(
            output.status.code(),
            Some(1),
            "refused, not aborted: {stderr}"
        );
        let lines: Vec<&str> = stderr.lines().filter(|line| !line.is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(
            lines[0].contains(expected),
            "{stderr}\n  should contain: {expected}"
        );
        assert!(
            lines[0].contains(&format!("plan-{index}.toml")),
            "names the file: {stderr}"
        );
        assert!(
            peak_rss < 64 << 20,
            "{expected}: peaked at {} MiB",
            peak_rss >> 20
        );
    }
    assert!(
        !results.exists(),
        "a refused plan created its results folder"
    );
}
