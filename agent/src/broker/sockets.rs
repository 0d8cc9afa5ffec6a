//! What a broker's processes listen on, read from `/proc`: the agent logs it when a broker
//! is ready, so a listener its recipe did not ask for (a dashboard, a cluster port, an
//! Erlang distribution port on every interface) is seen, and the tests compare it with the
//! listeners the recipe meant to open.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A transport a socket listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// A TCP socket in LISTEN.
    Tcp,
    /// A bound UDP socket (QUIC listeners, Erlang's and others' discovery).
    Udp,
}

/// One listening socket of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Listening {
    /// TCP or UDP.
    pub transport: Transport,
    /// The bound address (unspecified for every interface).
    pub address: SocketAddr,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        })
    }
}

impl fmt::Display for Listening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.transport, self.address)
    }
}

/// The kernel's state numbers: TCP_LISTEN for TCP; TCP_CLOSE (7), which `/proc/net/udp`
/// shows for a bound, unconnected UDP socket.
const TCP_LISTEN: &str = "0A";
const UDP_UNCONNECTED: &str = "07";

/// Every socket of the processes `pids` that listens (TCP) or is bound unconnected (UDP),
/// sorted, each once (a socket shared by a parent and child is one listener).
pub fn listening_of(pids: &[u32]) -> Vec<Listening> {
    let inodes: BTreeSet<u64> = pids.iter().flat_map(|pid| socket_inodes(*pid)).collect();
    let Some(first) = pids.first() else {
        return Vec::new();
    };
    let tables = [
        ("tcp", Transport::Tcp, TCP_LISTEN),
        ("tcp6", Transport::Tcp, TCP_LISTEN),
        ("udp", Transport::Udp, UDP_UNCONNECTED),
        ("udp6", Transport::Udp, UDP_UNCONNECTED),
    ];
    let mut found: BTreeSet<Listening> = BTreeSet::new();
    for (file, transport, state) in tables {
        // The processes' own network namespace, which may not be the agent's thread's.
        let Ok(table) = std::fs::read_to_string(format!("/proc/{first}/net/{file}")) else {
            continue;
        };
        for (address, inode) in parse_table(&table, state) {
            // Port 0: a UDP socket created but never bound, listening on nothing.
            if inodes.contains(&inode) && address.port() != 0 {
                found.insert(Listening { transport, address });
            }
        }
    }
    found.into_iter().collect()
}

/// Inodes of the sockets process `pid` holds open.
fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let target = std::fs::read_link(entry.ok()?.path()).ok()?;
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// (local address, inode) of the rows of a `/proc/net/{tcp,udp}{,6}` table in `state`.
fn parse_table(table: &str, state: &str) -> Vec<(SocketAddr, u64)> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, row_state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            if *row_state != state {
                return None;
            }
            let (address, port) = local.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            // A JVM binds an IPv4 address as its IPv4-mapped IPv6 form: shown as IPv4.
            let address = match parse_address(address)? {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                v4 => v4,
            };
            Some((SocketAddr::new(address, port), inode.parse().ok()?))
        })
        .collect()
}

/// The kernel prints each 32-bit word of the address as a native-endian hex number.
fn parse_address(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, UdpSocket};

    #[test]
    fn this_process_lists_its_own_tcp_listener_and_udp_socket_and_no_client() {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(tcp.local_addr().unwrap()).unwrap();
        let found = listening_of(&[std::process::id()]);
        let tcp_entry = Listening {
            transport: Transport::Tcp,
            address: tcp.local_addr().unwrap(),
        };
        let udp_entry = Listening {
            transport: Transport::Udp,
            address: udp.local_addr().unwrap(),
        };
        assert!(found.contains(&tcp_entry), "{found:?}");
        assert!(found.contains(&udp_entry), "{found:?}");
        // The connected client socket and the accepted one are not listeners.
        let on_port = found
            .iter()
            .filter(|l| l.transport == Transport::Tcp)
            .filter(|l| l.address.port() == tcp.local_addr().unwrap().port())
            .count();
        assert_eq!(on_port, 1, "{found:?}");
        assert_eq!(
            tcp_entry.to_string(),
            format!("tcp {}", tcp.local_addr().unwrap())
        );
        assert!(listening_of(&[]).is_empty());
    }
}
