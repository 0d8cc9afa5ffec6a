//! A controller killed with SIGKILL mid-cell while its in-process agents (`agent = "local"`,
//! the quickstart's fallback) run a native Mosquitto: within the broker lease no process of
//! that Mosquitto runs and the agents' folders (their keys, the broker's files) are gone, the
//! watchdog having done it; and when the watchdogs were killed too, the next run of the same
//! plan removes both before it runs, and completes.
//!
//! The real `controller` binary runs the plan, so that SIGKILL ends the whole process that
//! held the agents, as it does for a user.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use host::{Attempt, Marker, poll_until_blocking};

/// How long the first run may take to start its Mosquitto and connect the load to it.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a whole run of the plan may take (a 10 s cell and the setup around it).
const RUN_DEADLINE: Duration = Duration::from_secs(120);
/// The environment variable every process of a native broker carries.
const MARKER_VAR: &str = "CONTINUUM_BROKER_INSTANCE";

/// Two local nodes, Mosquitto on the worker; the cell sends for 10 s (200 messages every
/// 50 ms), long enough to be killed in and short enough to run in full afterwards.
fn plan_text(results: &Path) -> String {
    format!(
        r#"name = "killed-local"
repetitions = 1
results_dir = "{results}"
[timeouts]
connect = "20s"
cell = "60s"
[[nodes]]
name = "tester"
agent = "local"
roles = ["loadgen"]
[[nodes]]
name = "worker"
agent = "local"
roles = ["broker"]
[[brokers]]
name = "mosquitto"
kind = "native"
product = "mosquitto"
node = "worker"
[[tests]]
kind = "latency"
loadgen = ["tester"]
publishers = 5
messages = 200
warmup = 2
interval = "50ms"
[[scenarios]]
name = "local"
"#,
        results = results.display()
    )
}

/// A controller running `plan`, its output in `log`.
fn start_controller(plan: &Path, log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log)?;
    Command::new(env!("CARGO_BIN_EXE_controller"))
        .arg(plan)
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("spawning the controller")
}

/// The running children of `parent` whose command name is `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    host::running_processes()
        .into_iter()
        .filter(|&pid| host::parent_of(pid) == Some(parent))
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .collect()
}

/// What the killed run had: its Mosquitto, that broker's marker, and its agents' folders.
#[derive(Debug)]
struct Started {
    mosquitto: u32,
    marker: Marker,
    folders: Vec<PathBuf>,
}

impl Started {
    /// What of it is still there, or `None` when nothing is.
    fn remains(&self) -> Option<String> {
        let processes = self.marker.live_processes();
        let folders: Vec<&PathBuf> = self.folders.iter().filter(|f| f.exists()).collect();
        (!processes.is_empty() || !folders.is_empty() || host::is_running(self.mosquitto))
            .then(|| format!("Mosquitto's processes {processes:?}, folders {folders:?}"))
    }
}

/// Waits until `controller` runs a Mosquitto that the cell's clients are connected to; returns
/// it with its marker and the run's agent folders (those whose owner is `controller`).
fn wait_mid_cell(controller: &mut Child, log: &Path) -> Result<Started> {
    let pid = controller.id();
    let found = poll_until_blocking(START_DEADLINE, Duration::from_millis(50), || {
        if let Ok(Some(status)) = controller.try_wait() {
            return Attempt::Stop(format!("the controller exited ({status}) first"));
        }
        let Some(&mosquitto) = children_named(pid, "mosquitto").first() else {
            return Attempt::Retry("no Mosquitto under the controller yet".to_string());
        };
        let Ok(instance) = std::fs::read_link(format!("/proc/{mosquitto}/cwd")) else {
            return Attempt::Retry("Mosquitto's folder not readable yet".to_string());
        };
        // The cell's load is on: its clients connected.
        let connected = std::fs::read_to_string(instance.join("broker.log"))
            .is_ok_and(|log| log.contains("New client connected"));
        if connected {
            Attempt::Done((mosquitto, instance))
        } else {
            Attempt::Retry("no client connected to Mosquitto yet".to_string())
        }
    });
    let (mosquitto, instance) = found.map_err(|reason| {
        anyhow::anyhow!(
            "{reason}; the controller's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        )
    })?;
    let marker = std::fs::read(format!("/proc/{mosquitto}/environ"))?
        .split(|&byte| byte == 0)
        .find_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            entry
                .strip_prefix(&format!("{MARKER_VAR}="))
                .map(|value| Marker::new(MARKER_VAR, value))
        })
        .context("Mosquitto carries no marker")?;
    // <root>/run-*/state-worker/brokers/mosquitto
    let folder = instance
        .ancestors()
        .nth(3)
        .context("Mosquitto's folder is not an agent's")?;
    assert!(
        folder.join("ca.key").exists(),
        "the agent's folder {} holds the run's CA key",
        folder.display()
    );
    let root = folder.parent().context("a folder without a parent")?;
    let folders: Vec<PathBuf> = std::fs::read_dir(root)?
        .flatten()
        .map(|entry| entry.path())
        .filter(|folder| {
            std::fs::read_to_string(folder.join("owner"))
                .is_ok_and(|owner| owner.split_whitespace().next() == Some(&pid.to_string()))
        })
        .collect();
    assert_eq!(folders.len(), 2, "one folder per node: {folders:?}");
    Ok(Started {
        mosquitto,
        marker,
        folders,
    })
}

/// Runs `plan` to its end with the binary; fails unless its one cell was measured.
fn run_to_the_end(plan: &Path, log: &Path) -> Result<()> {
    let mut controller = start_controller(plan, log)?;
    let status = poll_until_blocking(
        RUN_DEADLINE,
        Duration::from_millis(100),
        || match controller.try_wait() {
            Ok(Some(status)) => Attempt::Done(status),
            Ok(None) => Attempt::Retry(format!("it did not end within {RUN_DEADLINE:?}")),
            Err(error) => Attempt::Stop(format!("waiting for it: {error}")),
        },
    );
    let output = std::fs::read_to_string(log).unwrap_or_default();
    let status = match status {
        Ok(status) => status,
        Err(reason) => {
            let _ = controller.kill();
            let _ = controller.wait();
            bail!("the next run: {reason}; its log:\n{output}");
        }
    };
    assert!(status.success(), "the next run failed ({status}): {output}");
    assert!(
        output.contains("1 cells measured, 0 failed"),
        "the next run measured its cell: {output}"
    );
    Ok(())
}

#[test]
fn a_killed_controllers_watchdog_stops_its_broker_and_removes_its_folders() -> Result<()> {
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let plan = work.path().join("plan.toml");
    std::fs::write(&plan, plan_text(&work.path().join("results")))?;
    let log = work.path().join("killed.log");
    let mut controller = start_controller(&plan, &log)?;
    let started = wait_mid_cell(&mut controller, &log);
    let _ = controller.kill();
    controller.wait()?;
    let started = started?;
    let killed = Instant::now();

    let lease = controller::run::BROKER_LEASE;
    let gone = poll_until_blocking(lease, Duration::from_millis(25), || {
        match started.remains() {
            None => Attempt::Done(()),
            Some(what) => Attempt::Retry(what),
        }
    });
    if let Err(what) = gone {
        // Not left for the next test: what the watchdog missed is killed here.
        started.marker.sweep_blocking(Duration::from_secs(10));
        bail!("{what} still there {lease:?} after SIGKILL of the controller");
    }
    eprintln!(
        "{:.2} s after SIGKILL, Mosquitto {} and the folders {:?} were gone",
        killed.elapsed().as_secs_f64(),
        started.mosquitto,
        started.folders
    );

    run_to_the_end(&plan, &work.path().join("next.log"))
}

#[test]
fn when_the_watchdogs_were_killed_too_the_next_run_removes_what_was_left() -> Result<()> {
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let plan = work.path().join("plan.toml");
    std::fs::write(&plan, plan_text(&work.path().join("results")))?;
    let log = work.path().join("killed.log");
    let mut controller = start_controller(&plan, &log)?;
    let started = wait_mid_cell(&mut controller, &log);
    // The watchdogs first (one per agent, each a shell in a session of its own), then the
    // controller: as if the machine's OOM killer or a cgroup kill took them all.
    let watchdogs = children_named(controller.id(), "sh");
    for &watchdog in &watchdogs {
        host::kill(watchdog);
    }
    let _ = controller.kill();
    controller.wait()?;
    let started = started?;
    assert_eq!(watchdogs.len(), 2, "one watchdog per agent: {watchdogs:?}");
    assert!(
        started.remains().is_some(),
        "with the watchdogs killed, the broker and the folders stay"
    );

    let next = run_to_the_end(&plan, &work.path().join("next.log"));
    let remains = started.remains();
    started.marker.sweep_blocking(Duration::from_secs(10));
    next?;
    assert_eq!(
        remains, None,
        "the next run stopped the Mosquitto the killed one left and removed its folders"
    );
    Ok(())
}
