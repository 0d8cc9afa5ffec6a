//! A broker password in a plan reaches the broker and nothing else: a plan whose tests connect
//! to a real Mosquitto that checks passwords (`password_file`) runs through `run_plan` with
//! an in-process agent, its cells are measured (so the password was sent), and no file of the
//! results folder (manifest, summary, each cell's result, the reports) holds it.

use anyhow::{Result, ensure};
use controller::plan::Plan;
use controller::run::{RunOptions, run_plan};
use tests::mosquitto::{MOSQUITTO_BINARY, Mosquitto, MosquittoOptions};
use tokio_util::sync::CancellationToken;

const PASSWD_TOOL: &str = "/usr/bin/mosquitto_passwd";
const USERNAME: &str = "bench";
/// Unlikely to appear anywhere by chance.
const PASSWORD: &str = "pw-7f3a9c21e4b5";

#[test]
fn a_workload_password_reaches_the_broker_and_no_file_of_the_results() -> Result<()> {
    if !tests::components_available(&[MOSQUITTO_BINARY, PASSWD_TOOL]) {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let passwords = work.path().join("passwords");
    let made = std::process::Command::new(PASSWD_TOOL)
        .arg("-c")
        .arg("-b")
        .arg(&passwords)
        .args([USERNAME, PASSWORD])
        .output()?;
    ensure!(made.status.success(), "mosquitto_passwd: {made:?}");
    // Anonymous clients (the harness's $SYS reader) are let in; a client that names a user
    // must give its password.
    let mosquitto = Mosquitto::start(MosquittoOptions {
        extra_config: vec![format!("password_file {}", passwords.display())],
        ..MosquittoOptions::default()
    })?;
    let results = work.path().join("results");
    let plan_for = |password: &str| {
        format!(
            r#"name = "secrets"
repetitions = 1
results_dir = {results:?}
[timeouts]
cell = "60s"
[[nodes]]
name = "n"
agent = "local"
roles = ["loadgen"]
[[brokers]]
name = "mosquitto"
kind = "external"
address = "{address}"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["n"]
publishers = 2
messages = 5
warmup = 1
interval = "10ms"
[tests.workload]
broker = {{ username = "{USERNAME}", password = "{password}" }}
[[tests]]
kind = "custom"
loadgen = ["n"]
[tests.workload]
publishers = 1
subscribers = 1
qos = 1
payload = "64B"
messages_per_publisher = 5
pacing = {{ mode = "open-loop", interval = "10ms" }}
broker.username = "{USERNAME}"
broker.password = "{password}"
"#,
            results = results.display().to_string(),
            address = mosquitto.addr(),
        )
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let run = |text: String| -> Result<controller::run::RunSummary> {
        let plan = Plan::parse(&text, "secrets.toml")?;
        Ok(runtime.block_on(run_plan(
            &plan,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        ))?)
    };

    // The broker checks passwords: with a wrong one no cell is measured.
    let refused = run(plan_for("not-the-password"))?;
    assert_eq!(
        (refused.measured, refused.failed),
        (0, 2),
        "a wrong password is refused: {refused:?}"
    );

    let summary = run(plan_for(PASSWORD))?;
    assert_eq!(
        (summary.measured, summary.failed),
        (2, 0),
        "the password reached the broker: {summary:?}"
    );
    // Both runs' folders: a refused cell's error must not hold the password either.
    let files = tests::files_under(&results)?;
    for expected in ["manifest.json", "summary.csv", "report.md", "report.html"] {
        assert!(
            files.iter().any(|f| f.ends_with(expected)),
            "{expected} written: {files:?}"
        );
    }
    assert!(
        files.iter().filter(|f| f.ends_with("result.json")).count() >= 2,
        "each cell's result: {files:?}"
    );
    for file in &files {
        let bytes = std::fs::read(file)?;
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(PASSWORD),
            "{} holds the password",
            file.display()
        );
    }
    // Redacted, not dropped: the manifest still shows the plan as written, user included.
    let manifest = std::fs::read_to_string(summary.dir.join("manifest.json"))?;
    assert!(manifest.contains(USERNAME), "{manifest}");
    assert_eq!(
        manifest.matches("<redacted>").count(),
        4,
        "two in the plan, two in its text: {manifest}"
    );
    Ok(())
}

/// The same with the password read from a file (`password_file`) and from the controller's
/// environment (`password_env`): it reaches the broker, and neither it nor the file's
/// contents land in the results folder.
#[test]
fn a_password_read_from_a_file_or_the_environment_reaches_the_broker_and_no_file_of_the_results()
-> Result<()> {
    if !tests::components_available(&[MOSQUITTO_BINARY, PASSWD_TOOL]) {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let passwords = work.path().join("passwords");
    let made = std::process::Command::new(PASSWD_TOOL)
        .arg("-c")
        .arg("-b")
        .arg(&passwords)
        .args([USERNAME, PASSWORD])
        .output()?;
    ensure!(made.status.success(), "mosquitto_passwd: {made:?}");
    let mosquitto = Mosquitto::start(MosquittoOptions {
        extra_config: vec![format!("password_file {}", passwords.display())],
        ..MosquittoOptions::default()
    })?;
    let password_file = work.path().join("broker-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n"))?;
    let results = work.path().join("results");
    let text = format!(
        r#"name = "secrets"
repetitions = 1
results_dir = {results:?}
[timeouts]
cell = "60s"
[[nodes]]
name = "n"
agent = "local"
roles = ["loadgen"]
[[brokers]]
name = "mosquitto"
kind = "external"
address = "{address}"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["n"]
publishers = 2
messages = 5
warmup = 1
interval = "10ms"
[tests.workload]
broker = {{ username = "{USERNAME}", password_file = {password_file:?} }}
[[tests]]
kind = "latency"
loadgen = ["n"]
messages = 5
warmup = 1
interval = "10ms"
[tests.workload]
broker.username = "{USERNAME}"
broker.password_env = "CONTINUUM_BROKER_PASSWORD"
"#,
        results = results.display().to_string(),
        address = mosquitto.addr(),
        password_file = password_file.display().to_string(),
    );
    // The environment is given as a function, not set: tests share the process's environment.
    let environment = |name: &str| (name == "CONTINUUM_BROKER_PASSWORD").then(|| PASSWORD.into());
    let plan = Plan::parse(&text, "secrets.toml")?.read_credentials_with(&environment)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let summary = runtime.block_on(run_plan(
        &plan,
        &text,
        RunOptions::default(),
        CancellationToken::new(),
    ))?;
    assert_eq!(
        (summary.measured, summary.failed),
        (2, 0),
        "the password reached the broker: {summary:?}"
    );
    let files = tests::files_under(&results)?;
    for expected in ["manifest.json", "summary.csv", "report.md", "report.html"] {
        assert!(
            files.iter().any(|f| f.ends_with(expected)),
            "{expected} written: {files:?}"
        );
    }
    for file in &files {
        let bytes = std::fs::read(file)?;
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(PASSWORD),
            "{} holds the password",
            file.display()
        );
    }
    // The plan's text still says where the password came from; its parsed plan redacts it.
    let manifest = std::fs::read_to_string(summary.dir.join("manifest.json"))?;
    assert!(manifest.contains("password_file"), "{manifest}");
    assert!(manifest.contains("CONTINUUM_BROKER_PASSWORD"), "{manifest}");
    assert_eq!(
        manifest.matches("<redacted>").count(),
        2,
        "one per test in the plan, none in its text: {manifest}"
    );
    Ok(())
}
