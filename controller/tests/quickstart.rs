//! The quickstart's path on a machine without brokers and without netem: the shipped
//! quickstart plan, with its optional native brokers swapped for products no machine here has
//! (EMQX, HiveMQ, VerneMQ), runs its nodes on agents on loopback (its testbed.fallback),
//! still measures the embedded broker, skips the missing ones with the reason (and how to
//! install them) said at the start and in the report, and skips the scenarios that need a
//! link, saying why once. Where root and netem are at hand it emulates
//! the nodes instead: the VM check (tests/examples/vm_check/emulated.rs) runs that path.

use controller::plan::Plan;
use controller::run::{RunEvent, RunOptions, event_channel, run_plan_observed};
use tokio_util::sync::CancellationToken;

/// The quickstart's entry of an optional native `product` on the worker: those beyond three
/// are left out, as no more products are absent from every machine.
fn optional_entry(product: &str) -> String {
    format!(
        "[[brokers]]\nname = \"{product}\"\nkind = \"native\"\nproduct = \"{product}\"\n\
         node = \"worker\"\noptional = true\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_runs_with_no_broker_installed() {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/quickstart.toml"
    ))
    .expect("quickstart.toml");
    let results = tempfile::tempdir().expect("temp dir");
    // Short: one repetition of the latency and payload tests; brokers nobody has installed.
    let text = shipped
        .replace("\"mosquitto\"", "\"emqx\"")
        .replace("\"rabbitmq\"", "\"hivemq\"")
        .replace("\"mqttv5\"", "\"vernemq\"")
        .replace(&optional_entry("aedes"), "")
        .replace(&optional_entry("amqtt"), "")
        .replace(&optional_entry("activemq"), "")
        .replace(&optional_entry("ejabberd"), "")
        .replace(&optional_entry("rmqtt"), "")
        .replace(
            "repetitions = 2",
            &format!(
                "repetitions = 1\nresults_dir = {:?}",
                results.path().display().to_string()
            ),
        )
        .replace("clients = [50, 100]", "clients = [20]");
    for binary in [
        "/usr/bin/emqx",
        "/opt/hivemq/bin/run.sh",
        "/opt/vernemq/bin/vernemq",
    ] {
        assert!(
            !std::path::Path::new(binary).exists(),
            "this test needs {binary} to be absent"
        );
    }
    let plan = Plan::parse(&text, "quickstart.toml").expect("valid plan");
    if controller::run::emulation_lacks(&plan).await.is_none() {
        assert!(
            !tests::running_in_ci(),
            "CI's machine has no netem: the quickstart must fall back there"
        );
        eprintln!("SKIPPED: this machine can emulate the quickstart's nodes (root and netem)");
        return;
    }
    let (sender, mut receiver) = event_channel();
    let collect = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = receiver.recv().await {
            events.push(event);
        }
        events
    });
    let summary = run_plan_observed(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
        Some(sender),
    )
    .await
    .expect("the run completes");
    let events = collect.await.expect("events collected");
    // Said once, before the first broker: the missing products cannot run (3 brokers x 3
    // scenarios x 6 cells), and edge and cloud cannot run on one machine for the embedded
    // broker (2 scenarios x 6 cells), of 72.
    let announcements: Vec<&RunEvent> = events
        .iter()
        .filter(|e| matches!(e, RunEvent::Runnable { .. }))
        .collect();
    assert_eq!(announcements.len(), 1, "one announcement");
    let RunEvent::Runnable {
        runnable: can,
        total,
        not_runnable: not,
    } = announcements[0]
    else {
        unreachable!("filtered to Runnable");
    };
    assert_eq!((*can, *total), (6, 72));
    assert_eq!(not.len(), 5, "{not:?}");
    let (unlinked, uninstalled): (Vec<_>, Vec<_>) = not
        .iter()
        .partition(|(reason, _)| reason.contains("no link to emulate"));
    assert!(
        unlinked.len() == 2 && unlinked.iter().all(|(_, cells)| *cells == 6),
        "{not:?}"
    );
    for (product, install) in [
        ("emqx", "/opt/emqx"),
        ("hivemq", "/opt/hivemq"),
        ("vernemq", "/opt/vernemq"),
    ] {
        assert!(
            uninstalled.iter().any(|(reason, cells)| *cells == 18
                && reason.contains(&format!("{product} is not installed on node worker"))
                && reason.contains(install)),
            "{product}: {not:?}"
        );
    }
    // The terminal's closing table: one line per measured test and point of the embedded
    // broker, under a header.
    let glance = controller::report::glance::table(&summary.dir).expect("a table");
    let lines: Vec<&str> = glance.lines().collect();
    assert!(lines[0].starts_with("broker"), "{glance}");
    assert_eq!(lines.len(), 1 + 6, "{glance}");
    assert!(
        lines[1..].iter().all(|l| l.starts_with("embedded")),
        "{glance}"
    );
    // Each rate says what it is (paced, sustained, or generator-limited in a debug build).
    assert!(glance.contains(" paced"), "{glance}");
    // Embedded: latency (1) + payload (3 sizes) + throughput (1 point) + saturation (1),
    // local scenario only.
    assert_eq!((summary.measured, summary.failed), (6, 0), "{summary:?}");
    let report = std::fs::read_to_string(summary.dir.join("report.md")).expect("report.md");
    assert!(
        report.contains("emqx") && report.contains("hivemq") && report.contains("vernemq"),
        "the skipped brokers are named"
    );
    assert!(
        report.contains("no link to emulate"),
        "the skipped scenarios say why"
    );
    // The emulation check has nothing to check: one line, not a row of "n/a" per broker.
    let check = report
        .split("## Emulation check")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an emulation check section");
    assert_eq!(
        check.trim(),
        "- edge, cloud: not measured in this run (see \"Not measured\"), so nothing to check.",
        "{check}"
    );
    let csv = std::fs::read_to_string(summary.dir.join("summary.csv")).expect("summary.csv");
    let skipped_native = csv
        .lines()
        .filter(|l| {
            ["emqx", "hivemq", "vernemq"]
                .iter()
                .any(|product| l.contains(&format!(",{product},")))
                && l.contains(",skipped,")
        })
        .count();
    assert_eq!(
        skipped_native,
        3 * 3 * 6,
        "every cell of the missing brokers is skipped, with its reason"
    );
    assert!(summary.dir.join("report.html").exists());
    // The quickstart shows sustained figures only, and the saturation point.
    assert!(
        report.contains("## Sustained throughput vs clients"),
        "{report}"
    );
    assert!(report.contains("## Saturation point"), "{report}");
    assert!(
        !report.contains("BURST"),
        "no burst figure in the quickstart: {report}"
    );
}
