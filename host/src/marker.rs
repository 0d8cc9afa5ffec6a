//! [`Marker`]: the environment variable every process of one instance carries (a broker and
//! the helpers it forks, a Nebula daemon, a test's RabbitMQ node). Descendants inherit it, even
//! those that detach (Erlang's port helpers, an epmd), so reading `/proc/*/environ` finds the
//! whole tree, and teardown kills by PID whatever is still alive.
//!
//! Zombies do not count as running: an orphaned helper is reaped by PID 1, which in some
//! sandboxes does so only every few seconds, so it may show as `<defunct>` for a while.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::poll::{Attempt, poll_until, poll_until_blocking};

/// How often a sweep looks again.
const SWEEP_INTERVAL: Duration = Duration::from_millis(25);

/// The tag of one instance: `var=value` in the environment of each of its processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    var: &'static str,
    value: String,
}

impl Marker {
    /// A marker with a value of the caller's choosing (unique among live instances).
    pub fn new(var: &'static str, value: impl Into<String>) -> Self {
        Marker {
            var,
            value: value.into(),
        }
    }

    /// A fresh marker for an instance called `name`: `<this pid>-<name>-<n>`.
    pub fn unique(var: &'static str, name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Marker::new(var, format!("{}-{name}-{n}", std::process::id()))
    }

    /// The environment variable.
    pub fn var(&self) -> &'static str {
        self.var
    }

    /// Its value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// PIDs of the running (non-zombie) processes carrying this marker, in order. Processes
    /// this user cannot inspect are skipped.
    pub fn live_processes(&self) -> Vec<u32> {
        let needle = format!("{}={}", self.var, self.value);
        running_processes()
            .into_iter()
            .filter(|&pid| environ_contains(pid, &needle))
            .collect()
    }

    /// Among the marked processes, the first whose command name is one of `names` (e.g.
    /// `beam.smp` under RabbitMQ's start script): the one whose CPU and memory are the broker's.
    pub fn find_process_named(&self, names: &[&str]) -> Option<u32> {
        self.live_processes().into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| names.contains(&comm.trim_end()))
        })
    }

    /// SIGKILLs every marked process until none is left or `limit` passes; returns the PIDs
    /// still alive.
    pub async fn sweep(&self, limit: Duration) -> Vec<u32> {
        let mut seen = Vec::new();
        poll_until(limit, SWEEP_INTERVAL, || {
            let outcome = self.kill_alive(&mut seen);
            async move { outcome }
        })
        .await
        .err()
        .unwrap_or_default()
    }

    /// [`Marker::sweep`] for synchronous callers.
    pub fn sweep_blocking(&self, limit: Duration) -> Vec<u32> {
        let mut seen = Vec::new();
        poll_until_blocking(limit, SWEEP_INTERVAL, || self.kill_alive(&mut seen))
            .err()
            .unwrap_or_default()
    }

    /// One round of a sweep. A killed process loses its environment (its memory) before it
    /// is a zombie, so it no longer shows the marker while it still exits: every marked
    /// process once `seen` (PID and start time, so a reused PID is not taken for it) counts
    /// until it is a zombie or gone.
    fn kill_alive(&self, seen: &mut Vec<(u32, u64)>) -> Attempt<(), Vec<u32>> {
        for pid in self.live_processes() {
            if let Some(started) = start_time(pid)
                && !seen.contains(&(pid, started))
            {
                seen.push((pid, started));
            }
        }
        seen.retain(|&(pid, started)| is_running(pid) && start_time(pid) == Some(started));
        if seen.is_empty() {
            return Attempt::Done(());
        }
        let alive: Vec<u32> = seen.iter().map(|&(pid, _)| pid).collect();
        alive.iter().copied().for_each(kill);
        Attempt::Retry(alive)
    }
}

impl std::fmt::Display for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.var, self.value)
    }
}

/// Sends `signal` to one process. A process that is already gone is fine.
pub fn send_signal(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: plain syscall; a stale PID only yields ESRCH.
        unsafe { libc::kill(pid, signal) };
    }
}

/// SIGKILLs one process. A process that is already gone is fine.
pub fn kill(pid: u32) {
    send_signal(pid, libc::SIGKILL);
}

/// SIGKILLs the process group `pgid` (never group 0 or 1).
pub fn kill_group(pgid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pgid)
        && pgid > 1
    {
        // SAFETY: plain syscall on a negative id, i.e. a process group; ESRCH if empty.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// PIDs of every running (non-zombie) process, in order: the one walk over `/proc` that
/// the sweeps here and the tests' process checks share.
pub fn running_processes() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| is_running(pid))
        .collect();
    pids.sort_unstable();
    pids
}

/// True if `pid` exists and is not a zombie.
pub fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| process_state(&stat))
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// The state letter of a `/proc/PID/stat` line, read after the last `)` because the
/// command name may itself hold parentheses.
fn process_state(stat: &str) -> Option<char> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

/// Field `n` of `/proc/PID/stat` counted from the state (0): read after the command name's
/// last `)`, as the name may hold spaces and parentheses.
fn stat_field(pid: u32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(n)?
        .parse()
        .ok()
}

/// The parent PID of `pid`.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_field(pid, 1).and_then(|ppid| u32::try_from(ppid).ok())
}

/// The process group of `pid`.
pub fn process_group(pid: u32) -> Option<u32> {
    stat_field(pid, 2).and_then(|pgrp| u32::try_from(pgrp).ok())
}

/// When `pid` started, in clock ticks since boot: with the PID, it names one process (a PID
/// alone may have been reused).
pub fn start_time(pid: u32) -> Option<u64> {
    stat_field(pid, 19)
}

/// The running processes below `root` (children, their children, ...), in no set order.
pub fn descendants(root: u32) -> Vec<u32> {
    let processes: Vec<(u32, Option<u32>)> = running_processes()
        .into_iter()
        .map(|pid| (pid, parent_of(pid)))
        .collect();
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for &(pid, ppid) in &processes {
            if ppid == Some(parent) && pid != root && !found.contains(&pid) {
                found.push(pid);
                queue.push(pid);
            }
        }
    }
    found
}

fn environ_contains(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|&byte| byte == 0)
            .any(|entry| entry == needle.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn state_is_read_after_a_command_name_with_parentheses() {
        assert_eq!(process_state("42 (we(ird) name) S 1 42"), Some('S'));
        assert_eq!(process_state("42 (x) Z 1"), Some('Z'));
        assert_eq!(process_state("garbage"), None);
    }

    #[test]
    fn tagged_processes_are_found_and_killed() {
        let marker = Marker::unique("CONTINUUM_HOST_UNIT", "sleep");
        let mut child = Command::new("sleep")
            .arg("30")
            .env(marker.var(), marker.value())
            .spawn()
            .expect("sleep starts");
        // Until exec, the forked child still shows this process's environment.
        let found = poll_until_blocking(Duration::from_secs(5), SWEEP_INTERVAL, || {
            match marker.live_processes() {
                pids if pids.is_empty() => Attempt::Retry(()),
                pids => Attempt::Done(pids),
            }
        });
        assert_eq!(found, Ok(vec![child.id()]));
        assert_eq!(marker.find_process_named(&["sleep"]), Some(child.id()));
        let survivors = marker.sweep_blocking(Duration::from_secs(5));
        let _ = child.wait();
        assert!(survivors.is_empty());
        assert!(!is_running(child.id()));
    }
}
