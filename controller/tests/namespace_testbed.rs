//! Nodes emulated on this machine (`agent = "namespace"`): the controller makes a namespace
//! per node and the hub between them, starts each node's agent inside its namespace, runs
//! the plan (a real Mosquitto on the worker, started by the worker's agent, load from the
//! tester, so every message crosses the hub), and leaves nothing behind: no namespace, no
//! agent thread, no broker process. Run inside a private namespace of the test's own (the
//! namespaces it makes hang below it).
//!
//! Mosquitto, not the embedded broker: rumqttd 0.20 cannot stop its router thread, which
//! stays parked in the worker's namespace (and so keeps it) until the controller exits.
//!
//! This machine's kernel has no netem, so the plan here has the `local` scenario only; a plan
//! with `edge` is refused before anything is made, in one line that names what is missing.
//! The impaired scenarios are run in the qemu VM, whose kernel has netem.

use std::time::Duration;

use anyhow::Result;
use controller::plan::Plan;
use controller::results::{self, CellStatus};
use controller::run::{RunOptions, run_plan};
use tests::isolated_netns_test;
use tokio_util::sync::CancellationToken;

fn plan_text(results: &std::path::Path, scenarios: &[&str]) -> String {
    plan_with_messages(results, scenarios, 20)
}

/// The plan, each publisher sending `messages` (every 50 ms).
fn plan_with_messages(results: &std::path::Path, scenarios: &[&str], messages: u32) -> String {
    let mut text = format!(
        r#"name = "emulated"
repetitions = 1
results_dir = "{results}"
[timeouts]
connect = "20s"
cell = "60s"
[[nodes]]
name = "tester"
agent = "namespace"
roles = ["loadgen", "netem"]
[[nodes]]
name = "worker"
agent = "namespace"
roles = ["broker", "netem"]
[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 5
messages = {messages}
warmup = 2
interval = "50ms"
"#,
        results = results.display()
    );
    for name in scenarios {
        text += &format!("[[scenarios]]\nname = \"{name}\"\n");
    }
    text
}

/// The threads of this process that run an emulated node's agent.
fn agent_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|comm| comm.trim().to_string())
        .filter(|comm| comm.starts_with("agent-"))
        .collect()
}

/// This process's threads and descriptors in each of `namespaces`, to say what holds one.
fn holders(namespaces: &[u64]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(meta) = std::fs::metadata(task.path().join("ns/net")) else {
            continue;
        };
        if namespaces.contains(&meta.ino()) {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            found.push(format!("thread {} in {}", comm.trim(), meta.ino()));
        }
    }
    for fd in std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let target = target.to_string_lossy().to_string();
            if target.starts_with("net:[") {
                found.push(format!("fd {:?} -> {target}", fd.file_name()));
            }
        }
    }
    found
}

#[test]
fn emulated_nodes_run_a_plan_and_leave_nothing_behind() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let text = plan_text(&work.path().join("results"), &["local"]);
    let plan = Plan::parse(&text, "emulated.toml")?;
    let before = host::netns::namespaces_of_this_process_tree();
    let runtime = tokio::runtime::Runtime::new()?;
    let summary = runtime.block_on(run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    ))?;
    let rows = results::read_rows(&summary.dir.join("summary.csv"))?;
    let row = &rows[0];
    assert_eq!(
        (summary.measured, summary.failed),
        (1, 0),
        "{summary:?}: {}",
        row.reason
    );
    assert_eq!(row.status, CellStatus::Ok, "{}", row.reason);
    assert_eq!(row.lost, Some(0));
    assert_eq!(row.latency_count, Some(5 * 18));
    // The broker listened on the worker's link address and the load dialled it from the
    // tester's namespace: the manifest names the address the plan never gave.
    let manifest = std::fs::read_to_string(summary.dir.join("manifest.json"))?;
    assert!(
        manifest.contains("198.18.0.6"),
        "the worker's data address (second node's link) in the manifest:\n{manifest}"
    );
    // A process still running in a node's namespace (its Mosquitto) would keep it: the
    // namespaces' end says no broker outlived the run either.
    let after = host::netns::namespaces_of_this_process_tree();
    assert_eq!(
        after,
        before,
        "every namespace of the run ended with it (before {before:?}, after {after:?}); \
         held by: {:?}",
        holders(&after)
    );
    assert!(agent_threads().is_empty(), "{:?}", agent_threads());
    eprintln!(
        "emulated tester -> worker: {} latencies, p50 {:?} us; namespaces in use before and after: {}",
        row.latency_count.unwrap_or_default(),
        row.latency_p50_us,
        before.len()
    );
    Ok(())
}

#[test]
fn an_impaired_scenario_without_netem_is_refused_before_anything_is_made() -> Result<()> {
    isolated_netns_test!(Ok(()));
    let runtime = tokio::runtime::Runtime::new()?;
    if runtime.block_on(agent::netem::netem_available()) == agent::netem::NetemCapability::Available
    {
        eprintln!("skipped: this kernel has netem, so nothing is refused here (the VM runs it)");
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let results_dir = work.path().join("results");
    let text = plan_text(&results_dir, &["local", "edge"]);
    let plan = Plan::parse(&text, "emulated.toml")?;
    let before = host::netns::namespaces_of_this_process_tree();
    let error = runtime
        .block_on(run_plan(
            &plan,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        ))
        .expect_err("edge needs netem");
    let message = error.to_string();
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("scenarios edge") && message.contains("netem missing"),
        "{message}"
    );
    assert_eq!(
        host::netns::namespaces_of_this_process_tree(),
        before,
        "no namespace was made"
    );
    assert!(agent_threads().is_empty());
    let written: Vec<_> = std::fs::read_dir(&results_dir)
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "nothing written: {written:?}");
    eprintln!("refused: {message}");
    Ok(())
}

/// The PIDs of `root`'s descendants named `name`.
fn descendants_named(root: u32, name: &str) -> Vec<u32> {
    host::descendants(root)
        .into_iter()
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .collect()
}

#[test]
fn after_a_sigkill_of_the_controller_the_next_run_removes_what_it_left() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    // 400 messages every 50 ms: the cell runs for 20 s, long enough to be killed in.
    let long = plan_with_messages(&work.path().join("killed"), &["local"], 400);
    let plan_path = work.path().join("long.toml");
    std::fs::write(&plan_path, &long)?;
    let log = std::fs::File::create(work.path().join("killed.log"))?;
    let mut controller = std::process::Command::new(env!("CARGO_BIN_EXE_controller"))
        .arg(&plan_path)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let pid = controller.id();
    let mosquitto =
        host::poll_until_blocking(Duration::from_secs(60), Duration::from_millis(100), || {
            match descendants_named(pid, "mosquitto").first() {
                Some(&broker) => host::Attempt::Done(broker),
                None => host::Attempt::Retry("no Mosquitto under the controller yet"),
            }
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}: {}",
                std::fs::read_to_string(work.path().join("killed.log")).unwrap_or_default()
            )
        })?;
    // Let the cell start sending through it.
    std::thread::sleep(Duration::from_secs(2));
    controller.kill()?;
    controller.wait()?;
    assert!(
        host::is_running(mosquitto),
        "the killed controller's Mosquitto outlived it (an orphan now), keeping its namespace"
    );
    let folders = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(controller::run::EMULATED_ROOT)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let left: Vec<_> = folders()
        .into_iter()
        .filter(|f| {
            std::fs::read_to_string(f.join("owner"))
                .is_ok_and(|owner| owner.split_whitespace().next() == Some(&pid.to_string()))
        })
        .collect();
    assert_eq!(
        left.len(),
        1,
        "the killed run's folder stays: {:?}",
        folders()
    );
    let kept = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{mosquitto}/ns/net"))?.ino()
    };
    assert!(host::netns::namespaces_in_use().contains(&kept));

    let text = plan_text(&work.path().join("next"), &["local"]);
    let plan = Plan::parse(&text, "next.toml")?;
    let runtime = tokio::runtime::Runtime::new()?;
    let summary = runtime.block_on(run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    ))?;
    assert_eq!((summary.measured, summary.failed), (1, 0), "{summary:?}");
    assert!(
        !host::is_running(mosquitto),
        "the next run stopped the Mosquitto the killed one left"
    );
    assert!(
        !left[0].exists(),
        "and removed its folder {}",
        left[0].display()
    );
    assert!(
        !host::netns::namespaces_in_use().contains(&kept),
        "the worker's namespace, kept by that Mosquitto, ended with it"
    );
    eprintln!(
        "SIGKILL of controller {pid} left Mosquitto {mosquitto} and {}; the next run removed both",
        left[0].display()
    );
    Ok(())
}

#[test]
fn without_root_the_binary_refuses_in_one_line_before_anything_is_made() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the test drops from root to nobody, and this is not root");
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    // Readable by nobody, who runs the controller.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755))?;
    let results_dir = work.path().join("results");
    let path = work.path().join("emulated.toml");
    std::fs::write(&path, plan_text(&results_dir, &["local"]))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    // A copy nobody may run wherever the checkout is (a home folder may be 0700).
    let binary = work.path().join("controller");
    std::fs::copy(env!("CARGO_BIN_EXE_controller"), &binary)?;
    let output = std::process::Command::new(&binary)
        .arg(&path)
        .uid(65_534)
        .gid(65_534)
        .env_remove("HOME")
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].contains("needs root"), "{stderr}");
    assert!(!results_dir.exists(), "nothing written");
    eprintln!("as nobody: {}", lines[0]);
    Ok(())
}
