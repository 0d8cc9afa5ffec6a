//! The broker's own process when it runs on this host, in this network namespace: found by the
//! socket it listens on, its CPU time and run-queue wait read from `/proc` like loadgen's own.
//!
//! A burst lasts as long as the broker takes, so its wall time is the broker's speed at that
//! moment. On a shared machine that speed changes from run to run although the broker does the
//! same work (the same reads, writes and memory). These figures say which it was when two runs
//! differ: the broker spent more CPU per message (the machine was slower for it), or it waited
//! for a CPU (loadgen or something else took it). What the summary makes of these figures is
//! `loadgen-model`'s `broker_on_host`; this module finds the process and reads its counters.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs, UdpSocket};

pub use loadgen_model::broker_on_host::{
    BrokerOnHostSummary, HELD_BACK_WAIT_PERCENT, OVERSUBSCRIBED_READY_CPUS, SATURATED_PERCENT,
    summarise,
};

/// A broker process found on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalBroker {
    /// Its process id.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// Its threads when it was found.
    pub threads: u32,
}

/// CPU time and run-queue wait of all of a process's threads, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    /// Time on a CPU.
    pub cpu_ns: u64,
    /// Time ready to run but waiting for a CPU.
    pub wait_ns: u64,
}

/// Which kind of socket a broker listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// A TCP socket in LISTEN (MQTT over TCP, TLS or WebSocket).
    Tcp,
    /// A bound UDP socket (MQTT over QUIC).
    Udp,
}

/// The process listening on `host:port` when that address belongs to this host; `None` when
/// it is remote, not found, or not readable (another user's process without root).
pub fn find(host: &str, port: u16, listener: Listener) -> Option<LocalBroker> {
    let addresses: Vec<IpAddr> = (host, port)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .filter(|ip| is_this_host(*ip))
        .collect();
    if addresses.is_empty() {
        return None;
    }
    let inode = listening_inodes(port, listener)
        .into_iter()
        .find(|(listening, _)| {
            addresses
                .iter()
                .any(|ip| listening.is_unspecified() || same_address(*listening, *ip))
        })
        .map(|(_, inode)| inode)?;
    let pid = owner_of_socket(inode)?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()?
        .trim()
        .to_string();
    let threads =
        std::fs::read_dir(format!("/proc/{pid}/task")).map_or(1, |entries| entries.count() as u32);
    Some(LocalBroker {
        pid,
        command,
        threads,
    })
}

/// Sums the schedstat counters of every thread of `pid`; `None` once it is gone.
pub fn counters(pid: u32) -> Option<ProcessCounters> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = ProcessCounters::default();
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue; // the thread ended meanwhile
        };
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
        if let (Some(Some(cpu)), Some(Some(wait))) = (fields.next(), fields.next()) {
            sum.cpu_ns += cpu;
            sum.wait_ns += wait;
        }
    }
    Some(sum)
}

/// Loopback, or an address of one of this namespace's interfaces (binding to it succeeds).
fn is_this_host(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok()
}

fn same_address(listening: IpAddr, target: IpAddr) -> bool {
    let unmapped = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    unmapped(listening) == unmapped(target)
}

/// (address, socket inode) of every socket of the `listener` kind listening on `port` in
/// this namespace.
fn listening_inodes(port: u16, listener: Listener) -> Vec<(IpAddr, u64)> {
    // The calling thread's namespace: `/proc/net` is the process's main thread's, which is
    // another one for an agent running on threads inside an emulated node's namespace.
    let (tables, state) = match listener {
        Listener::Tcp => (
            ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"],
            TCP_LISTEN,
        ),
        Listener::Udp => (
            ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"],
            UDP_UNCONNECTED,
        ),
    };
    tables
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| parse_listening(&table, port, state))
        .collect()
}

/// The TCP state `/proc/net/tcp` prints for LISTEN.
const TCP_LISTEN: &str = "0A";
/// The state `/proc/net/udp` prints for a bound socket with no peer: a server's (the clients'
/// QUIC sockets are loadgen's own, which the search skips).
const UDP_UNCONNECTED: &str = "07";

fn parse_listening(table: &str, port: u16, listening_state: &str) -> Vec<(IpAddr, u64)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            if *state != listening_state {
                return None;
            }
            let (address, listening_port) = local.split_once(':')?;
            if u16::from_str_radix(listening_port, 16).ok()? != port {
                return None;
            }
            Some((parse_address(address)?, inode.parse().ok()?))
        })
        .collect()
}

/// The kernel prints each 32-bit word of the address as a native-endian hex number.
fn parse_address(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| {
        let part = hex.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(part, 16).ok()?.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// The process holding the socket `inode` open (the first found; a broker's workers share it).
fn owner_of_socket(inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    let own = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != own)
        .find(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|target| target.as_os_str() == wanted.as_str())
                })
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_kernel_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:075B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
           1: 0100007F:075B 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 100 0 0 10 0\n\
           2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0 100 0 0 10 0\n";
        let on_1883 = parse_listening(table, 1883, TCP_LISTEN);
        assert_eq!(
            on_1883.len(),
            1,
            "the established connection is not listening"
        );
        let expected = if cfg!(target_endian = "little") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::new(1, 0, 0, 127))
        };
        assert_eq!(on_1883[0], (expected, 4242));
        assert_eq!(parse_listening(table, 8080, TCP_LISTEN)[0].1, 4444);
        assert!(parse_listening(table, 80, TCP_LISTEN).is_empty());
    }

    /// A child process holding `socket` (Python) bound on 127.0.0.1, and its port: the search
    /// skips loadgen's own process, so a real other process must hold the socket.
    fn child_with(socket: &str) -> (std::process::Child, u16) {
        let script = format!(
            "import socket,time\ns={socket}\ns.bind(('127.0.0.1',0))\n\
             getattr(s,'listen',lambda:0)() if s.type==socket.SOCK_STREAM else 0\n\
             print(s.getsockname()[1],flush=True)\ntime.sleep(30)"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("piped")),
            &mut line,
        )
        .expect("the port is printed");
        (child, line.trim().parse().expect("a port"))
    }

    #[test]
    fn a_listener_on_this_host_is_found_with_its_cpu() {
        let (mut child, port) = child_with("socket.socket()");
        let found = find("127.0.0.1", port, Listener::Tcp);
        let counters_now = found.as_ref().and_then(|b| counters(b.pid));
        let _ = child.kill();
        let _ = child.wait();
        let found = found.expect("the listener is found");
        assert_eq!(found.pid, child.id());
        assert!(found.command.starts_with("python"), "{}", found.command);
        assert!(counters_now.expect("its counters are read").cpu_ns > 0);
        // A port nobody listens on, and an address that is not this host's.
        assert_eq!(find("127.0.0.1", 1, Listener::Tcp), None);
        assert_eq!(find("198.51.100.7", port, Listener::Tcp), None);
        assert_eq!(
            find("127.0.0.1", port, Listener::Udp),
            None,
            "no UDP socket there"
        );
    }

    #[test]
    fn a_udp_listener_on_this_host_is_found_for_quic() {
        let (mut child, port) = child_with("socket.socket(socket.AF_INET,socket.SOCK_DGRAM)");
        let found = find("127.0.0.1", port, Listener::Udp);
        let over_tcp = find("127.0.0.1", port, Listener::Tcp);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.expect("the UDP socket is found").pid, child.id());
        assert_eq!(over_tcp, None, "no TCP listener there");
    }
}
