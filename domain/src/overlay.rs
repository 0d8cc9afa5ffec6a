//! Overlay addresses as plans and inventories write them (`198.19.0.2/24`, as in a node's
//! Nebula certificate).

use std::net::Ipv4Addr;

/// `198.19.0.2/24` as address and prefix length.
pub fn parse_overlay_cidr(text: &str) -> Option<(Ipv4Addr, u8)> {
    let (ip, len) = text.split_once('/')?;
    let len: u8 = len.parse().ok().filter(|len| (1..=32).contains(len))?;
    Some((ip.parse().ok()?, len))
}

/// The network part of `ip/len`, to tell whether two addresses share an overlay network.
pub fn overlay_network(ip: Ipv4Addr, len: u8) -> u32 {
    u32::from(ip) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_share_a_network_only_within_their_prefix() {
        let (ip, len) = parse_overlay_cidr("198.19.0.2/24").expect("valid");
        assert_eq!((ip, len), (Ipv4Addr::new(198, 19, 0, 2), 24));
        let (other, _) = parse_overlay_cidr("198.19.0.200/24").expect("valid");
        assert_eq!(overlay_network(ip, len), overlay_network(other, len));
        let (outside, _) = parse_overlay_cidr("198.19.1.2/24").expect("valid");
        assert_ne!(overlay_network(ip, len), overlay_network(outside, len));
        for bad in [
            "198.19.0.2",
            "198.19.0.2/0",
            "198.19.0.2/33",
            "x/24",
            "198.19.0.2/x",
        ] {
            assert_eq!(parse_overlay_cidr(bad), None, "{bad}");
        }
    }
}
