//! Child processes of the testbed: bounded command runs, instance markers,
//! and the sweep that proves a broker left nothing running.
//!
//! Every process a broker driver starts carries the environment variable
//! [`INSTANCE_MARKER_VAR`] set to the instance's id. Descendants inherit it,
//! including ones that detach (epmd, Erlang's port helpers), so
//! [`live_processes_of`] finds the whole tree by reading `/proc/*/environ`,
//! and teardown can kill by PID whatever is still alive.
//!
//! Zombies do not count as running: an Erlang helper orphaned by the VM is
//! reaped by PID 1, which in some sandboxes does so only every few seconds,
//! so it may show as `<defunct>` for a while after its broker is gone.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Environment variable that tags every process of one broker instance.
pub const INSTANCE_MARKER_VAR: &str = "CONTINUUM_TESTBED_INSTANCE";

/// How often loops in this crate re-check a condition they wait for.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// A fresh id for one broker instance: `ct-<test process pid>-<n>`.
///
/// Unique across the tests of one process and across processes, so it can
/// name an Erlang node and tag processes without two tests ever clashing.
pub fn new_instance_id() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("ct-{}-{n}", std::process::id())
}

/// Runs `command` to completion, killing it (and its process group) if it
/// takes longer than `timeout`.
///
/// `input`, if given, is written to the child's stdin from a separate thread
/// (so a large input cannot deadlock against the child's output) and stdin is
/// closed afterwards. stdout and stderr are captured.
pub fn run_with_deadline(
    command: &mut Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Output> {
    let description = format!("{command:?}");
    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout also kills what the command spawned.
        .process_group(0);
    let mut child = command
        .spawn()
        .with_context(|| format!("spawning {description}"))?;

    let writer = match (input, child.stdin.take()) {
        (Some(bytes), Some(mut stdin)) => Some(thread::spawn(move || stdin.write_all(&bytes))),
        _ => None,
    };
    let stdout_reader = spawn_reader(child.stdout.take());
    let stderr_reader = spawn_reader(child.stderr.take());

    let status = wait_with_deadline(&mut child, timeout);
    if status.is_none() {
        kill_group_and_reap(&mut child);
    }
    let stdout = join_reader(stdout_reader);
    let stderr = join_reader(stderr_reader);
    let write_result = writer.map(|handle| handle.join());

    let Some(status) = status else {
        bail!(
            "{description} did not finish within {timeout:?}; stdout: {}; stderr: {}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    if let Some(result) = write_result {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(error).with_context(|| format!("writing stdin of {description}"));
            }
            Err(_) => bail!("the thread writing stdin of {description} panicked"),
        }
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

fn spawn_reader(pipe: Option<impl Read + Send + 'static>) -> Option<thread::JoinHandle<Vec<u8>>> {
    pipe.map(|mut pipe| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            // A read error only truncates what we show; the exit status decides.
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    })
}

fn join_reader(reader: Option<thread::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    reader
        .and_then(|handle| handle.join().ok())
        .unwrap_or_default()
}

/// Waits for `child` to exit for at most `timeout`; `None` if it is still running.
pub fn wait_with_deadline(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
            // An error from try_wait means the child is no longer ours to wait for.
            Ok(None) | Err(_) => return None,
        }
    }
}

/// SIGKILLs `child`'s process group (the child must lead its own group) and
/// reaps the child.
pub fn kill_group_and_reap(child: &mut Child) {
    if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: plain syscall; a stale group id only yields ESRCH.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends SIGKILL to one process by PID. A PID that is already gone is fine.
pub fn kill_pid(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: plain syscall; a stale PID only yields ESRCH.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// True if `pid` exists and is not a zombie.
pub fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => process_state(&stat).is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The state letter of a `/proc/PID/stat` line. The command name may hold
/// spaces and parentheses, so the state is read after the *last* `)`.
fn process_state(stat: &str) -> Option<char> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

/// PIDs of the running (non-zombie) processes tagged with `instance_id`
/// through [`INSTANCE_MARKER_VAR`]. Processes this user cannot inspect are
/// skipped.
pub fn live_processes_of(instance_id: &str) -> Vec<u32> {
    let needle = format!("{INSTANCE_MARKER_VAR}={instance_id}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| environ_contains(Path::new(&format!("/proc/{pid}/environ")), &needle))
        .filter(|&pid| is_running(pid))
        .collect();
    pids.sort_unstable();
    pids
}

fn environ_contains(path: &Path, needle: &str) -> bool {
    std::fs::read(path).is_ok_and(|environ| {
        environ
            .split(|&byte| byte == 0)
            .any(|entry| entry == needle.as_bytes())
    })
}

/// SIGKILLs every running process tagged with `instance_id` and waits (up to
/// `timeout`) until none is left. Returns the PIDs that were still alive.
pub fn kill_instance_processes(instance_id: &str, timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive = live_processes_of(instance_id);
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        alive.iter().copied().for_each(kill_pid);
        thread::sleep(POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_read_after_a_command_name_with_parentheses() {
        assert_eq!(process_state("42 (we(ird) name) S 1 42"), Some('S'));
        assert_eq!(process_state("42 (x) Z 1"), Some('Z'));
        assert_eq!(process_state("garbage"), None);
    }

    #[test]
    fn a_slow_command_is_killed_at_its_deadline() {
        let started = Instant::now();
        let result = run_with_deadline(
            Command::new("sleep").arg("30"),
            None,
            Duration::from_millis(200),
        );
        assert!(result.is_err());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn input_reaches_the_command_and_output_comes_back() {
        let output = run_with_deadline(
            &mut Command::new("wc"),
            Some(b"a\nb\nc\n".repeat(50_000)),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(output.status.success());
        let text = String::from_utf8(output.stdout).unwrap();
        assert_eq!(text.split_whitespace().next(), Some("150000"));
    }

    #[test]
    fn tagged_processes_are_found_and_killed() {
        let id = format!("unit-{}", std::process::id());
        let mut child = Command::new("sleep")
            .arg("30")
            .env(INSTANCE_MARKER_VAR, &id)
            .spawn()
            .unwrap();
        // Until exec, the forked child still shows this process's environment.
        let deadline = Instant::now() + Duration::from_secs(5);
        while live_processes_of(&id).is_empty() && Instant::now() < deadline {
            thread::sleep(POLL_INTERVAL);
        }
        assert_eq!(live_processes_of(&id), vec![child.id()]);
        let survivors = kill_instance_processes(&id, Duration::from_secs(5));
        let _ = child.wait();
        assert!(survivors.is_empty());
        assert!(!is_running(child.id()));
    }
}
