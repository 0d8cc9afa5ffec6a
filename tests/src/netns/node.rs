//! One node of a [`Testbed`](super::Testbed): running programs and Rust
//! code inside its network namespace.

use std::ffi::OsStr;
use std::fs::File;
use std::future::Future;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::thread;

use anyhow::{Context, Result, ensure};

use super::{IP_BINARY, Subnet, netns_path};
use crate::process::INSTANCE_MARKER_VAR;
use host::blocking::kill_group_and_reap;
#[cfg(doc)]
use host::blocking::run_with_deadline;

/// One node of a [`Testbed`](super::Testbed): a network namespace with one address.
#[derive(Debug)]
pub struct Node {
    pub(super) name: String,
    pub(super) netns: String,
    pub(super) addr: Ipv4Addr,
    pub(super) subnet: Subnet,
    /// The testbed's id, set as [`INSTANCE_MARKER_VAR`] on every process.
    pub(super) instance_id: String,
}

/// A long-running process in a node, killed (with its process group) when
/// this is dropped.
#[derive(Debug)]
pub struct NodeProcess {
    child: Child,
}

impl Node {
    /// The name given in its [`NodeSpec`](super::NodeSpec).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's address on the testbed link.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The testbed's subnet, which holds [`Node::addr`].
    pub fn subnet(&self) -> Subnet {
        self.subnet
    }

    /// The name of the node's namespace, as `ip netns` knows it.
    pub fn netns_name(&self) -> &str {
        &self.netns
    }

    /// The path of the node's namespace (`/run/netns/NAME`).
    pub fn netns_path(&self) -> PathBuf {
        netns_path(&self.netns)
    }

    /// A command running `program` inside the node's namespace
    /// (`ip netns exec NS program`), tagged with the testbed's
    /// [`INSTANCE_MARKER_VAR`] so teardown finds it and what it spawns. Add
    /// arguments and run it as usual (for example with
    /// [`run_with_deadline`]), or hand it to [`Node::spawn`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(IP_BINARY);
        command
            .args(["netns", "exec", &self.netns])
            .arg(program)
            .env(INSTANCE_MARKER_VAR, &self.instance_id);
        command
    }

    /// Starts `command`, which must come from this node's
    /// [`Node::command`], as a long-running process in its own process group.
    ///
    /// It is killed when the returned [`NodeProcess`] or the testbed is
    /// dropped, and (through `PR_SET_PDEATHSIG`) when the thread that called
    /// `spawn` ends, so a test killed by its runner leaves nothing behind:
    /// spawn from the test's thread, not from a short-lived helper.
    pub fn spawn(&self, command: &mut Command) -> Result<NodeProcess> {
        let args: Vec<_> = command.get_args().take(3).collect();
        ensure!(
            command.get_program() == IP_BINARY && args == ["netns", "exec", self.netns.as_str()],
            "{command:?} was not made by Node::command for node {}",
            self.name
        );
        command.process_group(0);
        // SAFETY: a single system call with constant arguments.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .with_context(|| format!("spawning {command:?}"))?;
        Ok(NodeProcess { child })
    }

    /// Runs `f` on a new thread that has entered the node's network
    /// namespace, and returns its result; a panic in `f` is passed on.
    ///
    /// Every socket made on that thread (and on threads it starts) belongs
    /// to the node, and keeps belonging to it when handed to another
    /// thread: bind a listener here and serve it from anywhere.
    pub fn enter<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let path = self.netns_path();
        let netns = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        thread::scope(|scope| {
            let handle = thread::Builder::new()
                .name(format!("netns {}", self.netns))
                .spawn_scoped(scope, move || {
                    // SAFETY: plain syscall on an open namespace file. It
                    // moves only this thread, which is ours.
                    if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } == -1 {
                        let error = std::io::Error::last_os_error();
                        return Err(anyhow::Error::new(error)
                            .context(format!("entering {}", path.display())));
                    }
                    drop(netns);
                    Ok(f())
                })
                .context("starting a thread")?;
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Runs the future made by `f` to completion on a current-thread tokio
    /// runtime (with I/O and timers) inside the node's namespace; see
    /// [`Node::enter`]. The runtime is dropped afterwards, so return plain
    /// values or std sockets, not tokio ones.
    pub fn run_in<F, Fut>(&self, f: F) -> Result<Fut::Output>
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future,
        Fut::Output: Send,
    {
        self.enter(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("building a tokio runtime")?;
            Ok(runtime.block_on(f()))
        })?
    }
}

impl NodeProcess {
    /// The process id (`ip netns exec` execs the program in place, so this
    /// is the program's).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child, to wait for it or take its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        kill_group_and_reap(&mut self.child);
    }
}

/// TCP connections established to `port` in the network namespace of process `pid` (read
/// from its `/proc/PID/net/tcp`): how a test sees a node's clients connected.
pub fn established_to(pid: u32, port: u16) -> usize {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let remote = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(2).is_some_and(|r| r.ends_with(&remote)) && fields.get(3) == Some(&"01")
        })
        .count()
}

/// Bytes received on `eth0` in the network namespace of process `pid` (its node's testbed
/// link): how a test sees load arriving at a node.
pub fn link_bytes_received(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/net/dev"))
        .ok()
        .and_then(|dev| {
            dev.lines()
                .find_map(|l| l.trim_start().strip_prefix("eth0:"))
                .and_then(|counters| counters.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
