//! Loopback ports and descriptor limits for brokers started by the tests.
//!
//! Every broker instance listens on ports chosen here, so tests running in
//! parallel never collide and nothing depends on a fixed port number. Only
//! 127.0.0.1 is ever bound: the testbed must not listen or send anywhere else.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use anyhow::{Context, Result, bail};

/// The only address the brokers and clients of these tests use.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Returns a TCP port on 127.0.0.1 that was free a moment ago.
///
/// The kernel picks it (bind to port 0); the listener is dropped before
/// returning so the broker can bind it. Another process may grab the port in
/// between, which is why the broker drivers retry their start on a fresh port
/// when the broker reports the address in use.
pub fn free_loopback_port() -> Result<u16> {
    let listener = TcpListener::bind(SocketAddr::from((LOOPBACK, 0)))
        .context("binding 127.0.0.1:0 to find a free port")?;
    let port = listener
        .local_addr()
        .context("reading the port the kernel chose for 127.0.0.1:0")?
        .port();
    Ok(port)
}

/// Returns `count` distinct free loopback ports.
///
/// All listeners are held until every port is known, so the kernel cannot
/// hand out the same port twice within one call.
pub fn free_loopback_ports(count: usize) -> Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| {
            TcpListener::bind(SocketAddr::from((LOOPBACK, 0)))
                .context("binding 127.0.0.1:0 to find a free port")
        })
        .collect::<Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| {
            Ok(listener
                .local_addr()
                .context("reading the port the kernel chose for 127.0.0.1:0")?
                .port())
        })
        .collect()
}

/// The open-file limits of this process after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit now in force (what `open`/`socket` are checked against).
    pub soft: u64,
    /// The hard ceiling, which an unprivileged process cannot raise.
    pub hard: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit.
///
/// A load test with 1600+ MQTT connections needs more descriptors than the
/// usual soft limit of 1024, on the client side and in the broker. Brokers
/// spawned afterwards inherit the raised limit.
pub fn raise_nofile_limit() -> Result<NofileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for getrlimit to fill in.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("getrlimit(RLIMIT_NOFILE)");
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit; setrlimit only reads it.
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| {
                format!(
                    "setrlimit(RLIMIT_NOFILE) from {} to {}",
                    limit.rlim_cur, limit.rlim_max
                )
            });
        }
        limit = raised;
    }
    if limit.rlim_cur == 0 {
        bail!("RLIMIT_NOFILE soft limit reads as 0 after raising it");
    }
    Ok(NofileLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_again() {
        let port = free_loopback_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((LOOPBACK, port)).unwrap();
    }

    #[test]
    fn ports_handed_out_together_are_distinct() {
        let mut ports = free_loopback_ports(8).unwrap();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 8);
    }

    #[test]
    fn raising_the_limit_reaches_the_hard_limit() {
        let limit = raise_nofile_limit().unwrap();
        assert_eq!(limit.soft, limit.hard);
    }
}
