//! Network namespaces held by file descriptor only: a [`Netns`] made here has no name under
//! `/run/netns` and lives as long as some descriptor or process holds it, so a crash of its
//! maker leaves no namespace (and no veth inside one) behind unless a process still runs in
//! it. Work happens inside one on a thread of its own ([`Netns::run`], [`Netns::spawn`]):
//! `setns` moves only the calling thread, and what that thread creates (sockets, netlink
//! connections, threads, child processes) stays in the namespace, while the caller's own
//! threads never change namespace.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::thread::JoinHandle;
use std::time::Duration;

/// A network namespace, open as `/proc/.../ns/net`.
#[derive(Debug)]
pub struct Netns {
    file: File,
}

impl Netns {
    /// A new, empty namespace (only a `lo`, down), made on a thread that exits at once.
    pub fn create() -> io::Result<Netns> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread,
                    // which ends right after opening its new namespace.
                    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(Netns {
                        file: File::open("/proc/thread-self/ns/net")?,
                    })
                })
                .join()
                .map_err(|_| io::Error::other("the namespace's thread panicked"))?
        })
    }

    /// The calling thread's namespace.
    pub fn current() -> io::Result<Netns> {
        Ok(Netns {
            file: File::open("/proc/thread-self/ns/net")?,
        })
    }

    /// The namespace's inode: the same for every handle of one namespace (what
    /// `/proc/PID/ns/net` links show as `net:[INODE]`).
    pub fn inode(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.ino())
    }

    /// Another handle of the same namespace.
    pub fn try_clone(&self) -> io::Result<Netns> {
        Ok(Netns {
            file: self.file.try_clone()?,
        })
    }

    /// Runs `work` on a thread inside the namespace and returns what it returned.
    pub fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> io::Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    self.enter()?;
                    Ok(work())
                })
                .join()
                .map_err(|_| io::Error::other("a thread inside the namespace panicked"))?
        })
    }

    /// Starts `work` on a thread named `name` inside the namespace (its threads and children
    /// inherit it).
    pub fn spawn<T: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<JoinHandle<io::Result<T>>> {
        let netns = self.try_clone()?;
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                netns.enter()?;
                drop(netns);
                Ok(work())
            })
    }

    /// Moves the calling thread into the namespace. Only for a thread of its own: the
    /// thread never comes back.
    fn enter(&self) -> io::Result<()> {
        // SAFETY: setns takes a descriptor this value owns; it moves only the calling thread.
        if unsafe { libc::setns(self.file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsRawFd for Netns {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// A TCP connection to `address` from inside `netns` (the socket stays there), within
/// `timeout`: how a process outside a namespace reaches a server listening in it without
/// sending a packet from its own namespace.
pub fn connect_in(netns: &Netns, address: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    netns.run(|| TcpStream::connect_timeout(&address, timeout))?
}

/// The distinct network namespaces in use on this host, by inode: those any thread of any
/// process is in, and those any process holds open (as [`Netns`] does).
pub fn namespaces_in_use() -> Vec<u64> {
    namespaces_of(&numbered_entries(std::path::Path::new("/proc")))
}

/// The network namespaces this process and its descendants are in or hold open: what a check
/// compares before and after to see that none of its own was left behind, whatever other
/// processes on the host do meanwhile.
pub fn namespaces_of_this_process_tree() -> Vec<u64> {
    let me = std::process::id();
    let mut tree = crate::marker::descendants(me);
    tree.push(me);
    let processes: Vec<std::path::PathBuf> = tree
        .iter()
        .map(|pid| std::path::PathBuf::from(format!("/proc/{pid}")))
        .collect();
    namespaces_of(&processes)
}

fn namespaces_of(processes: &[std::path::PathBuf]) -> Vec<u64> {
    let mut inodes = Vec::new();
    for process in processes {
        for task in numbered_entries(&process.join("task")) {
            if let Ok(meta) = std::fs::metadata(task.join("ns/net")) {
                inodes.push(meta.ino());
            }
        }
        for fd in std::fs::read_dir(process.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            if let Some(inode) = target
                .strip_prefix("net:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|inode| inode.parse().ok())
            {
                inodes.push(inode);
            }
        }
    }
    inodes.sort_unstable();
    inodes.dedup();
    inodes
}

/// The entries of `dir` named by a number (processes, threads).
fn numbered_entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
        })
        .map(|entry| entry.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs CAP_SYS_ADMIN; without it the test says so and passes nothing off as checked.
    fn create_or_skip() -> Option<Netns> {
        match Netns::create() {
            Ok(netns) => Some(netns),
            Err(error) => {
                eprintln!("skipped: cannot create a network namespace here: {error}");
                None
            }
        }
    }

    #[test]
    fn work_runs_inside_the_namespace_and_the_caller_stays_where_it_was() {
        let Some(netns) = create_or_skip() else {
            return;
        };
        let home = Netns::current()
            .expect("own namespace")
            .inode()
            .expect("inode");
        let inside = netns
            .run(|| Netns::current().and_then(|n| n.inode()))
            .expect("runs")
            .expect("inode inside");
        assert_eq!(inside, netns.inode().expect("inode"));
        assert_ne!(inside, home);
        assert_eq!(
            Netns::current().expect("own").inode().expect("inode"),
            home,
            "the calling thread did not move"
        );
        // A fresh namespace's loopback is down: nothing listens or answers there.
        let refused = connect_in(
            &netns,
            "127.0.0.1:9".parse().expect("address"),
            Duration::from_millis(200),
        );
        assert!(refused.is_err());
    }

    #[test]
    fn a_namespace_ends_with_its_last_handle() {
        let Some(netns) = create_or_skip() else {
            return;
        };
        let inode = netns.inode().expect("inode");
        let spawned = netns
            .spawn("inside", || Netns::current().and_then(|n| n.inode()))
            .expect("spawns");
        assert_eq!(
            spawned
                .join()
                .expect("joins")
                .expect("entered")
                .expect("inode"),
            inode
        );
        assert!(
            namespaces_of_this_process_tree().contains(&inode),
            "held open by this process"
        );
        assert!(namespaces_in_use().contains(&inode));
        drop(netns);
        assert!(
            !namespaces_of_this_process_tree().contains(&inode),
            "no thread is in it and no descriptor holds it"
        );
    }
}
