//! Which interface holds an address: the agent's control plane is the interface its gRPC
//! listener's address is on, and netem must not impair it unless the operator made it the
//! data-plane interface too (a node with one NIC). And which names can name an interface.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `name` can name an interface, by the kernel's own rule (`dev_valid_name`): 1 to
/// 15 bytes, not `.` or `..`, no `/`, `:` or whitespace. A longer name (an altname may have
/// up to 127 bytes) is refused rather than looked up: rtnetlink cuts a looked-up name to 15
/// bytes, so a long one could reach another interface than the one it was checked as.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
}

/// The interface that has `ip` assigned, if any (`None` for an unspecified address).
pub fn holding(ip: IpAddr) -> Option<String> {
    if ip.is_unspecified() {
        return None;
    }
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: `entry` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let current = unsafe { &*entry };
        if address_of(current) == Some(ip) && !current.ifa_name.is_null() {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(current.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
        entry = current.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

fn address_of(entry: &libc::ifaddrs) -> Option<IpAddr> {
    if entry.ifa_addr.is_null() {
        return None;
    }
    // SAFETY: ifa_addr points to a sockaddr whose family says which struct it is.
    unsafe {
        match i32::from((*entry.ifa_addr).sa_family) {
            libc::AF_INET => {
                let v4 = &*(entry.ifa_addr as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let v6 = &*(entry.ifa_addr as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_address_is_on_lo_and_a_foreign_one_nowhere() {
        assert_eq!(
            holding(IpAddr::V4(Ipv4Addr::LOCALHOST)).as_deref(),
            Some("lo")
        );
        assert_eq!(holding("192.0.2.77".parse().expect("an address")), None);
        assert_eq!(holding(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), None);
    }

    #[test]
    fn interface_names_follow_the_kernels_rule() {
        for good in ["lo", "eth0", "nebula1", "a", "fifteen-bytes-x"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "eth0:1",
            "a b",
            "a\0b",
            "sixteen-bytes-xx",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
