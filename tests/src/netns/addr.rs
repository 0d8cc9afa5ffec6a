//! Testbed addresses: the benchmarking range 198.18.0.0/15, the /24 each
//! testbed leases from it, and reading addresses and routes out of `ip`'s
//! text output.
//!
//! Leases are `flock`s on files in a shared directory, so testbeds in
//! parallel test processes never get the same /24, and a lease held by a
//! crashed process is free again as soon as the kernel closes its files.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// An IPv4 prefix such as `198.18.0.0/15`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Prefix {
    network: Ipv4Addr,
    len: u8,
}

/// 198.18.0.0/15, set aside for benchmarking (RFC 2544): the only range a
/// testbed uses.
pub const BENCHMARK_RANGE: Ipv4Prefix = Ipv4Prefix {
    network: Ipv4Addr::new(198, 18, 0, 0),
    len: 15,
};

impl Ipv4Prefix {
    /// The prefix of length `len` (at most 32) holding `addr`; host bits are
    /// cleared.
    pub fn new(addr: Ipv4Addr, len: u8) -> Result<Self> {
        if len > 32 {
            bail!("prefix length {len} is longer than 32");
        }
        Ok(Self {
            network: Ipv4Addr::from(u32::from(addr) & mask(len)),
            len,
        })
    }

    /// The first address of the prefix.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// True for `0.0.0.0/0`, the prefix of a default route.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// True if `addr` lies in this prefix.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & mask(self.len) == u32::from(self.network)
    }

    /// True if the two prefixes share at least one address.
    pub fn overlaps(&self, other: &Ipv4Prefix) -> bool {
        let shorter = mask(self.len.min(other.len));
        u32::from(self.network) & shorter == u32::from(other.network) & shorter
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// `a.b.c.d/len`, or a bare address as a /32.
impl std::str::FromStr for Ipv4Prefix {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, len.parse().context("prefix length")?),
            None => (text, 32),
        };
        let addr: Ipv4Addr = addr
            .parse()
            .with_context(|| format!("address in {text:?}"))?;
        Self::new(addr, len)
    }
}

fn mask(len: u8) -> u32 {
    match len {
        0 => 0,
        len => u32::MAX << (32 - u32::from(len.min(32))),
    }
}

/// One of the 512 /24s of [`BENCHMARK_RANGE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subnet {
    index: u16,
}

impl Subnet {
    /// How many /24s [`BENCHMARK_RANGE`] holds.
    pub const COUNT: u16 = 512;

    /// The `index`th /24 of the range (198.18.0.0/24 is 0, 198.19.255.0/24
    /// is 511), or `None` past the end.
    pub fn from_index(index: u16) -> Option<Self> {
        (index < Self::COUNT).then_some(Self { index })
    }

    /// This subnet's position in the range.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// The subnet as a prefix.
    pub fn prefix(&self) -> Ipv4Prefix {
        let base = u32::from(BENCHMARK_RANGE.network) + (u32::from(self.index) << 8);
        Ipv4Prefix {
            network: Ipv4Addr::from(base),
            len: 24,
        }
    }

    /// Host `n` (1 to 254) of the subnet.
    pub fn host(&self, n: u8) -> Option<Ipv4Addr> {
        (1..=254)
            .contains(&n)
            .then(|| Ipv4Addr::from(u32::from(self.prefix().network) | u32::from(n)))
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.prefix().fmt(f)
    }
}

/// A [`Subnet`] held for one testbed; dropping it frees the subnet.
#[derive(Debug)]
pub(crate) struct SubnetLease {
    subnet: Subnet,
    /// Holds the `flock`; closing it releases the lease.
    _lock: File,
}

impl SubnetLease {
    /// Leases the first free /24, trying them in order. Leases are exclusive
    /// across processes, and across leases within one process (each lease
    /// opens its own file, and `flock`s on separate opens conflict).
    pub(crate) fn acquire(lock_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(lock_dir)
            .with_context(|| format!("creating {}", lock_dir.display()))?;
        for subnet in (0..Subnet::COUNT).filter_map(Subnet::from_index) {
            let path = lock_dir.join(format!("subnet-{}.lock", subnet.index));
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            // SAFETY: plain syscall on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self {
                    subnet,
                    _lock: file,
                });
            }
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(error).with_context(|| format!("locking {}", path.display()));
            }
        }
        bail!(
            "all {} testbed subnets in {BENCHMARK_RANGE} are leased (lock files in {})",
            Subnet::COUNT,
            lock_dir.display()
        )
    }

    pub(crate) fn subnet(&self) -> Subnet {
        self.subnet
    }
}

/// Where subnet leases are kept: one directory shared by every test process
/// on the machine.
pub(crate) fn default_lock_dir() -> PathBuf {
    std::env::temp_dir().join("continuum-testbed-subnets")
}

/// The IPv4 interface addresses in the output of `ip -4 -o addr show`: for
/// every `inet ADDR/LEN`, the address and the prefix it is on.
pub fn parse_ip_addr_output(output: &str) -> Result<Vec<(Ipv4Addr, Ipv4Prefix)>> {
    let mut addresses = Vec::new();
    for line in output.lines() {
        let mut words = line.split_whitespace();
        while let Some(word) = words.next() {
            if word == "inet" {
                let Some(address) = words.next() else {
                    bail!("`inet` without an address in {line:?}");
                };
                let (addr, len) = address
                    .split_once('/')
                    .with_context(|| format!("no prefix length in {line:?}"))?;
                let addr: Ipv4Addr = addr.parse().with_context(|| format!("in {line:?}"))?;
                let len: u8 = len.parse().with_context(|| format!("in {line:?}"))?;
                addresses.push((addr, Ipv4Prefix::new(addr, len)?));
            }
        }
    }
    Ok(addresses)
}

/// The destinations of the routes in the output of
/// `ip -4 route show table all` (`default` is `0.0.0.0/0`).
pub fn parse_ip_route_output(output: &str) -> Result<Vec<Ipv4Prefix>> {
    const ROUTE_TYPES: [&str; 10] = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "anycast",
        "unreachable",
        "blackhole",
        "prohibit",
        "throw",
        "nat",
    ];
    let mut destinations = Vec::new();
    for line in output.lines() {
        let mut words = line.split_whitespace().peekable();
        if words.peek().is_some_and(|word| ROUTE_TYPES.contains(word)) {
            words.next();
        }
        let destination = match words.next() {
            None => continue,
            Some("default") => Ipv4Prefix::new(Ipv4Addr::UNSPECIFIED, 0)?,
            Some(word) => word
                .parse()
                .with_context(|| format!("route destination in {line:?}"))?,
        };
        destinations.push(destination);
    }
    Ok(destinations)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(text: &str) -> Ipv4Prefix {
        text.parse().unwrap()
    }

    #[test]
    fn subnets_tile_the_benchmark_range() {
        let first = Subnet::from_index(0).unwrap();
        let last = Subnet::from_index(Subnet::COUNT - 1).unwrap();
        assert_eq!(first.to_string(), "198.18.0.0/24");
        assert_eq!(
            Subnet::from_index(256).unwrap().to_string(),
            "198.19.0.0/24"
        );
        assert_eq!(last.to_string(), "198.19.255.0/24");
        assert_eq!(Subnet::from_index(Subnet::COUNT), None);
        for subnet in [first, last] {
            assert!(BENCHMARK_RANGE.overlaps(&subnet.prefix()));
            assert!(BENCHMARK_RANGE.contains(subnet.host(254).unwrap()));
        }
        assert_eq!(first.host(1), Some(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(first.host(0), None);
        assert_eq!(first.host(255), None);
    }

    #[test]
    fn prefixes_overlap_when_they_share_an_address() {
        assert!(BENCHMARK_RANGE.overlaps(&prefix("0.0.0.0/0")));
        assert!(BENCHMARK_RANGE.overlaps(&prefix("198.19.3.4")));
        assert!(prefix("198.16.0.0/14").overlaps(&BENCHMARK_RANGE));
        assert!(!BENCHMARK_RANGE.overlaps(&prefix("198.20.0.0/16")));
        assert!(!BENCHMARK_RANGE.overlaps(&prefix("192.0.2.0/24")));
        assert!(!BENCHMARK_RANGE.contains(Ipv4Addr::new(198, 17, 255, 255)));
        assert_eq!(
            prefix("198.18.7.9/24").network(),
            Ipv4Addr::new(198, 18, 7, 0)
        );
        assert!("198.18.0.0/33".parse::<Ipv4Prefix>().is_err());
    }

    #[test]
    fn leases_are_exclusive_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = SubnetLease::acquire(dir.path()).unwrap();
        let second = SubnetLease::acquire(dir.path()).unwrap();
        assert_eq!(first.subnet().index(), 0);
        assert_eq!(second.subnet().index(), 1);
        drop(first);
        let third = SubnetLease::acquire(dir.path()).unwrap();
        assert_eq!(third.subnet().index(), 0);
    }

    #[test]
    fn addresses_are_read_from_ip_addr() {
        let output = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n\
                      4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n";
        let addresses = parse_ip_addr_output(output).unwrap();
        assert_eq!(
            addresses,
            [
                (Ipv4Addr::LOCALHOST, prefix("127.0.0.0/8")),
                (Ipv4Addr::new(192, 0, 2, 2), prefix("192.0.2.0/24")),
            ]
        );
        assert!(parse_ip_addr_output("2: eth0 inet 1.2.3.4 scope").is_err());
    }

    #[test]
    fn route_destinations_are_read_from_ip_route() {
        let output = "default via 192.0.2.1 dev eth0 \n\
                      192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 \n\
                      local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1 \n\
                      broadcast 192.0.2.255 dev eth0 table local proto kernel scope link src 192.0.2.2 \n\
                      \n";
        let routes = parse_ip_route_output(output).unwrap();
        assert_eq!(
            routes,
            [
                prefix("0.0.0.0/0"),
                prefix("192.0.2.0/24"),
                prefix("127.0.0.1/32"),
                prefix("192.0.2.255/32"),
            ]
        );
        assert!(routes[0].is_default());
        assert!(parse_ip_route_output("via nowhere").is_err());
    }
}
