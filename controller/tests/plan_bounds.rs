//! `controller plan.toml` refuses, in one line naming the TOML path and exit 1, the plan
//! values that once scheduled endless loads or gave two cells one id, before any agent,
//! broker or results folder exists.

use std::process::Command;

/// A plan with one embedded broker on this machine and `tests` as its tests.
fn plan(results: &std::path::Path, tests: &str) -> String {
    format!(
        "name = \"bounds\"\nresults_dir = {:?}\n\n[[nodes]]\nname = \"n\"\nagent = \"local\"\n\
         roles = [\"broker\", \"loadgen\"]\n\n[[brokers]]\nname = \"b\"\nkind = \"embedded\"\n\
         node = \"n\"\n\n[[scenarios]]\nname = \"local\"\n\n{tests}",
        results.display().to_string()
    )
}

#[test]
fn endless_durations_and_duplicate_points_are_refused_by_the_binary() {
    let work = tempfile::tempdir().expect("temp dir");
    let results = work.path().join("results");
    let cases = [
        (
            "[[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\ninterval = \"18446744073709551615s\"\n",
            "tests[0].interval = \"584542046090years",
        ),
        (
            "[[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\n[tests.workload]\n\
             drain = { timeout = \"18446744073709551615s\" }\n",
            "tests[0].workload.drain.timeout = 584542046090years",
        ),
        (
            "[[tests]]\nkind = \"burst\"\nloadgen = [\"n\"]\nclients = [1, 1]\n",
            "tests[0].clients[1] = 1: the same count as tests[0].clients[0]",
        ),
        (
            "[[tests]]\nkind = \"payload\"\nloadgen = [\"n\"]\npayloads = [\"1KB\", \"1000B\"]\n",
            "tests[0].payloads[1] = \"1KB\": the same size (1000 B) as tests[0].payloads[0]",
        ),
    ];
    for (index, (tests, expected)) in cases.iter().enumerate() {
        let path = work.path().join(format!("plan-{index}.toml"));
        std::fs::write(&path, plan(&results, tests)).expect("plan written");
        let output = Command::new(env!("CARGO_BIN_EXE_controller"))
            .arg(&path)
            .output()
            .expect("controller runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{expected}: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(
            lines[0].contains(expected),
            "{stderr}\n  should contain: {expected}"
        );
        assert!(!results.exists(), "nothing written for {expected}");
    }
}
