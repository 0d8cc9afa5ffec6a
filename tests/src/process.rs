//! The harness's instances: each broker or node a test starts carries
//! [`INSTANCE_MARKER_VAR`] set to its id, so [`instance_marker`] finds the whole tree through
//! `/proc` (the `host` crate holds the sweep, bounded runs and polling, shared with the agent).
//! The variable differs from the agent's own, so a test's sweep never touches an agent's
//! brokers and the other way round.
//!
//! For processes a test did not tag (a fake's daemons, the Nebula an agent started), the one
//! walk over `/proc` is [`running_processes`], with [`processes_mentioning`] and
//! [`process_group`] on top.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use host::Marker;

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

/// The marker of instance `id`.
pub fn instance_marker(id: &str) -> Marker {
    Marker::new(INSTANCE_MARKER_VAR, id)
}

/// PIDs of the running (non-zombie) processes whose `/proc/PID/cmdline` mentions `needle`
/// (a test's private folder, say), in order. Processes this user cannot inspect are skipped.
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    running_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .collect()
}

/// PIDs of every running (non-zombie) process, in order (the walk over `/proc` is host's).
pub use host::running_processes;

/// The process group of `pid` (host's reading of `/proc/PID/stat`).
pub use host::process_group;

/// Runs `command` to its end (stdout and stderr piped) and returns its output with the
/// child's own peak RSS in bytes, from `wait4`: how the CLI tests show that bad input is
/// refused before anything large is allocated.
#[expect(
    clippy::zombie_processes,
    reason = "reaped by wait4, which std's wait cannot replace: it gives the rusage"
)]
pub fn output_with_peak_rss(command: &mut std::process::Command) -> (std::process::Output, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pid = child.id() as libc::pid_t;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut err_pipe = child.stderr.take().expect("piped");
    // stderr on a thread, so neither pipe fills while the other is read.
    let err_reader = std::thread::spawn(move || {
        let _ = err_pipe.read_to_end(&mut stderr);
        stderr
    });
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_end(&mut stdout)
        .expect("stdout");
    let stderr = err_reader.join().expect("stderr reader");
    // SAFETY: wait4 writes the status and the rusage we own; the child is ours and unreaped.
    let (status, usage) = unsafe {
        let mut status = 0;
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut usage), pid);
        (status, usage)
    };
    let output = std::process::Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout,
        stderr,
    };
    (output, usage.ru_maxrss as u64 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_with_its_group() {
        let me = std::process::id();
        assert!(running_processes().contains(&me));
        let exe = std::env::current_exe().expect("own executable");
        assert!(processes_mentioning(&exe.display().to_string()).contains(&me));
        // SAFETY: getpgrp has no preconditions.
        let group = unsafe { libc::getpgrp() };
        assert_eq!(process_group(me), u32::try_from(group).ok());
    }
}
