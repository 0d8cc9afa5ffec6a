//! Ports: checking that a broker's MQTT port is free, choosing one when the spec asks for
//! any, and the address a local probe reaches a listener on.
//!
//! Between choosing a port and the broker binding it there is a window. Inside the agent
//! two starts in flight could be handed the same port; the loser's bind fails, but its
//! readiness probe could reach the winner's listener and report success. So every port
//! handed out is reserved in this process ([`PortClaim`]) until the start that asked for
//! it has finished. Ports are a process-wide resource, hence the process-wide set.
//! Against other processes taking the port meanwhile, drivers retry a start on any port
//! and check after readiness that their broker is still the one running.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::{Mutex, PoisonError};

use super::error::BrokerError;

/// Ports handed out by [`claim_port`] whose start has not finished yet.
static RESERVED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
/// The same for UDP ports ([`claim_udp_port`]): a number of their own beside TCP's.
static RESERVED_UDP: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// How many kernel-chosen ports are tried before giving up on finding an unreserved one.
const PICK_ATTEMPTS: usize = 16;

/// A port reserved for one start; released when dropped, by which time the broker either
/// holds it or has failed.
#[derive(Debug)]
pub struct PortClaim {
    port: u16,
    set: &'static Mutex<BTreeSet<u16>>,
}

impl PortClaim {
    /// The claimed port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.port);
    }
}

/// Reserves `port` in `set` unless a start in this process holds it already.
fn reserve(port: u16, set: &'static Mutex<BTreeSet<u16>>) -> Option<PortClaim> {
    let newly_reserved = set
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(port);
    // A claim is built only when it owns the reservation: dropping one releases the port
    // (and takes the lock, which is free again here).
    if newly_reserved {
        Some(PortClaim { port, set })
    } else {
        None
    }
}

/// Checks that `bind:port` can be listened on right now and reserves it: a free port chosen
/// by the kernel when `port` is 0. The test listener is closed before returning.
pub fn claim_port(bind: IpAddr, port: u16) -> Result<PortClaim, BrokerError> {
    for _ in 0..PICK_ATTEMPTS {
        let bound = try_bind(bind, port)?;
        if let Some(claim) = reserve(bound, &RESERVED) {
            return Ok(claim);
        }
        if port != 0 {
            return Err(BrokerError::invalid(
                "port",
                port,
                format!("is being taken by another broker starting on {bind}"),
            ));
        }
    }
    Err(BrokerError::io(
        format!("choosing a port on {bind}"),
        std::io::Error::other(format!(
            "the kernel offered {PICK_ATTEMPTS} ports that starting brokers hold"
        )),
    ))
}

/// [`claim_port`] for a UDP port (a QUIC listener's), errors naming `options.quic_port`.
pub fn claim_udp_port(bind: IpAddr, port: u16) -> Result<PortClaim, BrokerError> {
    const FIELD: &str = "options.quic_port";
    for _ in 0..PICK_ATTEMPTS {
        let bound = match UdpSocket::bind(SocketAddr::new(bind, port)) {
            Ok(socket) => socket
                .local_addr()
                .map(|addr| addr.port())
                .map_err(|e| BrokerError::io(format!("reading the UDP port bound on {bind}"), e))?,
            Err(error) => {
                return Err(BrokerError::invalid(
                    FIELD,
                    port,
                    format!("cannot be bound (UDP) on {bind}: {error}"),
                ));
            }
        };
        if let Some(claim) = reserve(bound, &RESERVED_UDP) {
            return Ok(claim);
        }
        if port != 0 {
            return Err(BrokerError::invalid(
                FIELD,
                port,
                format!("is being taken by another broker starting on {bind}"),
            ));
        }
    }
    Err(BrokerError::io(
        format!("choosing a UDP port on {bind}"),
        std::io::Error::other(format!(
            "the kernel offered {PICK_ATTEMPTS} ports that starting brokers hold"
        )),
    ))
}

/// Binds `bind:port` and returns the bound port; errors name the field at fault.
fn try_bind(bind: IpAddr, port: u16) -> Result<u16, BrokerError> {
    use std::io::ErrorKind;
    match TcpListener::bind(SocketAddr::new(bind, port)) {
        Ok(listener) => listener
            .local_addr()
            .map(|addr| addr.port())
            .map_err(|e| BrokerError::io(format!("reading the port bound on {bind}"), e)),
        Err(error) if error.kind() == ErrorKind::AddrInUse => Err(BrokerError::invalid(
            "port",
            port,
            format!("is already in use on {bind}"),
        )),
        Err(error) if error.kind() == ErrorKind::AddrNotAvailable => Err(BrokerError::invalid(
            "bind",
            bind,
            "is not an address of this node",
        )),
        Err(error) if error.kind() == ErrorKind::PermissionDenied => Err(BrokerError::invalid(
            "port",
            port,
            format!("cannot be bound on {bind} without privileges: {error}"),
        )),
        Err(error) => Err(BrokerError::invalid(
            "bind",
            SocketAddr::new(bind, port),
            format!("cannot be listened on: {error}"),
        )),
    }
}

/// Free TCP ports on loopback for a broker's private listeners (AMQP, Erlang distribution,
/// epmd, JMX). All listeners are held until every port is known, so they are distinct.
pub fn free_loopback_ports(count: usize) -> Result<Vec<u16>, BrokerError> {
    let listeners = (0..count)
        .map(|_| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(|e| BrokerError::io("binding 127.0.0.1:0 to find a free port", e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|listener| {
            listener
                .local_addr()
                .map(|addr| addr.port())
                .map_err(|e| BrokerError::io("reading a port chosen by the kernel", e))
        })
        .collect()
}

/// Whether this process has a TCP socket listening on `port`, read from `/proc/net/tcp`,
/// `/proc/net/tcp6` and `/proc/self/fd`. The embedded broker checks it after readiness, so
/// that a probe answered by another program's listener is not taken for its own.
pub fn listening_in_this_process(port: u16) -> bool {
    !own_listeners(port).is_empty()
}

/// Turns Nagle's algorithm off on this process's listening sockets on `port`; sockets it
/// then accepts inherit TCP_NODELAY (Linux). rumqttd binds and accepts by itself and sets
/// no TCP_NODELAY, so without this every small message it forwards can wait for the
/// previous one's ACK, which a latency benchmark would count against the broker. Returns
/// how many sockets were changed.
pub fn disable_nagle_on_listeners(port: u16) -> usize {
    own_listeners(port)
        .into_iter()
        .filter(|fd| {
            let on: libc::c_int = 1;
            // SAFETY: setsockopt on a descriptor of this process that /proc names as a TCP
            // listener, with a valid pointer to an int and its size.
            unsafe {
                libc::setsockopt(
                    *fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                ) == 0
            }
        })
        .count()
}

/// File descriptors of this process's sockets listening on `port`.
fn own_listeners(port: u16) -> Vec<libc::c_int> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return Vec::new();
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    fds.filter_map(|entry| {
        let entry = entry.ok()?;
        let fd: libc::c_int = entry.file_name().to_str()?.parse().ok()?;
        let target = std::fs::read_link(entry.path()).ok()?;
        let inode: u64 = target
            .to_str()?
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()?;
        inodes.contains(&inode).then_some(fd)
    })
    .collect()
}

/// Inodes of the sockets in state LISTEN on `port`, IPv4 and IPv6.
fn listening_inodes(port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    let port_hex = format!("{port:04X}");
    // The calling thread's namespace: `/proc/net` is the process's main thread's, which is
    // another one for an agent running on threads inside an emulated node's namespace.
    ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let local_port = fields.get(1)?.rsplit(':').next()?;
                    (local_port == port_hex && *fields.get(3)? == LISTEN)
                        .then(|| fields.get(9)?.parse::<u64>().ok())
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Where a client on this node reaches a listener bound to `listen`: the loopback address
/// when it is bound to every interface.
pub fn connect_address(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::ErrorCode;

    const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn a_port_in_use_is_an_invalid_argument_naming_the_port() {
        let holder = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = holder.local_addr().unwrap().port();
        let error = claim_port(LOCALHOST, port).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument);
        assert!(
            error.to_string().starts_with(&format!("port: \"{port}\"")),
            "{error}"
        );
        drop(holder);
        assert_eq!(claim_port(LOCALHOST, port).unwrap().port(), port);
    }

    #[test]
    fn a_claimed_port_is_not_handed_out_again_until_released() {
        let claim = claim_port(LOCALHOST, 0).unwrap();
        let port = claim.port();
        assert_ne!(port, 0);
        let error = claim_port(LOCALHOST, port).unwrap_err();
        assert!(
            error.to_string().contains("another broker starting"),
            "{error}"
        );
        drop(claim);
        assert_eq!(claim_port(LOCALHOST, port).unwrap().port(), port);
    }

    #[test]
    fn a_foreign_bind_address_is_refused() {
        // TEST-NET-1 is never assigned to a local interface.
        let error = claim_port("192.0.2.1".parse().unwrap(), 0).unwrap_err();
        assert!(error.to_string().starts_with("bind: "), "{error}");
    }

    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(disable_nagle_on_listeners(port), 1);
        let _client = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(
            accepted.nodelay().unwrap(),
            "Linux copies TCP_NODELAY to accepted sockets"
        );
    }

    #[test]
    fn a_listener_of_this_process_is_recognised() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening_in_this_process(port));
        drop(listener);
        assert!(!listening_in_this_process(port));
    }

    #[test]
    fn private_ports_are_distinct() {
        let mut ports = free_loopback_ports(6).unwrap();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 6);
    }

    #[test]
    fn unspecified_listeners_are_reached_over_loopback() {
        assert_eq!(
            connect_address("0.0.0.0:1883".parse().unwrap()),
            "127.0.0.1:1883".parse().unwrap()
        );
        assert_eq!(
            connect_address("[::]:1883".parse().unwrap()),
            "[::1]:1883".parse().unwrap()
        );
        assert_eq!(
            connect_address("198.18.2.3:1883".parse().unwrap()),
            "198.18.2.3:1883".parse().unwrap()
        );
    }
}
