//! SIGTERM and SIGINT stop the `loadgen` binary within a second, even while its pacer waits
//! the longest interval a spec may ask for (an hour), and it leaves with the figures of what
//! ran.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};

/// The bound is 1 s; this leaves room for a loaded 2-core machine.
const STOPPED_WITHIN: Duration = Duration::from_secs(3);

/// Starts an open-loop latency run against `broker` whose messages are an hour apart.
fn hour_apart_run(broker: &Mosquitto, result: &Path) -> Child {
    let interval = humantime::format_duration(loadgen::spec::MAX_DURATION).to_string();
    Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["latency", "--broker", &broker.addr().to_string()])
        .args(["--publishers", "2", "--interval", &interval])
        .arg("--result")
        .arg(result)
        .arg("--no-progress")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen starts")
}

/// Waits until the broker counted a message from the run (the only run it serves): its pacer
/// released the first and now sleeps towards the next, an hour away.
fn wait_until_publishing(broker: &Mosquitto, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let counters = broker.counters().expect("$SYS counters");
        if counters.publish_received >= 1 {
            return;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("loadgen ended before publishing: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "no message from loadgen within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `signal` and waits for the process to exit; returns how long that took.
fn stop_with(child: &mut Child, signal: libc::c_int) -> Duration {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let sent = Instant::now();
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return sent.elapsed();
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("loadgen still ran 20 s after signal {signal}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigterm_and_sigint_stop_an_hour_apart_run_within_a_second_with_its_figures() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let dir = tempfile::tempdir().expect("temp dir");
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        // A broker each: its counters tell when this run published.
        let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
        let result = dir.path().join(format!("{name}.json"));
        let mut child = hour_apart_run(&broker, &result);
        wait_until_publishing(&broker, &mut child);
        let took = stop_with(&mut child, signal);
        let output = child.wait_with_output().expect("output");
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("{name}: loadgen exited {took:?} after the signal");
        assert!(
            took < STOPPED_WITHIN,
            "{name}: exited {took:?} after the signal; stderr: {stderr}"
        );
        // It stopped, not died: a clean exit with the figures of what ran.
        assert!(
            output.status.success(),
            "{name}: {}; {stderr}",
            output.status
        );
        let saved = std::fs::read_to_string(&result).expect("the result file");
        let saved: serde_json::Value = serde_json::from_str(&saved).expect("result JSON");
        assert_eq!(
            saved["interrupted"],
            serde_json::Value::Bool(true),
            "{name}"
        );
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("latency"),
            "{name}: the figures are printed"
        );
    }
}

/// The most bytes loadgen's sockets to `port` hold that the peer has not taken
/// (`/proc/net/tcp`'s tx_queue).
fn most_unsent_to(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = u16::from_str_radix(fields.get(2)?.rsplit(':').next()?, 16).ok()?;
            let unsent = fields.get(4)?.split(':').next()?;
            (remote_port == port).then(|| u64::from_str_radix(unsent, 16).ok())?
        })
        .max()
        .unwrap_or(0)
}

fn signal_broker(broker: &Mosquitto, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(broker.pid()).expect("a pid");
    // SAFETY: kill(2) on the harness's own broker; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
}

#[test]
fn sigterm_stops_loadgen_within_a_second_while_its_broker_takes_nothing() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    // 100 MB/s offered: a frozen broker's socket is full within a second.
    let mut child = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["throughput", "--broker", &broker.addr().to_string()])
        .args(["--clients", "1", "--payload", "1MB", "--rate", "100"])
        .args(["--duration", "60s", "--no-progress"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadgen starts");
    wait_until_publishing(&broker, &mut child);
    // Frozen, as a broker that hangs or is cut off: its sockets stay open and take nothing.
    signal_broker(&broker, libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let unsent = most_unsent_to(broker.port());
        std::thread::sleep(Duration::from_millis(200));
        // Bytes waiting and none taken meanwhile: the publisher's write waits.
        if unsent > 0 && most_unsent_to(broker.port()) == unsent {
            break;
        }
        if Instant::now() > deadline {
            signal_broker(&broker, libc::SIGCONT);
            panic!("loadgen's socket never filled ({unsent} bytes unsent)");
        }
    }
    let took = stop_with(&mut child, libc::SIGTERM);
    signal_broker(&broker, libc::SIGCONT);
    let output = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("frozen broker: loadgen exited {took:?} after SIGTERM");
    assert!(
        took < STOPPED_WITHIN,
        "exited {took:?} after SIGTERM; stderr: {stderr}"
    );
    // The run itself stopped (its figures printed), not the one-second bound behind it.
    assert!(output.status.success(), "{}; {stderr}", output.status);
}
