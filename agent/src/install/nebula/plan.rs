//! The request, checked: a [`Plan`]. Validation runs over the whole request before anything
//! on the node changes, and every error names the request field
//! (`lighthouses[1].underlay_address`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use proto::agent::v1 as pb;

use super::super::InstallError;

/// UDP port Nebula listens on when the request says 0 (Nebula's own default).
pub(super) const DEFAULT_PORT: u16 = 4242;
/// Tun device name when the request gives none.
pub(super) const DEFAULT_INTERFACE: &str = "nebula1";
/// How long the reachability check may take when the request gives no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest reachability check accepted: an RPC should not hang for longer.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// A lighthouse as this node must reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lighthouse {
    /// Its overlay address.
    pub overlay_ip: Ipv4Addr,
    /// `host:port` on the underlay, as Nebula's `static_host_map` takes it.
    pub underlay_address: String,
}

/// A valid InstallOverlayRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    /// This node is a lighthouse.
    pub lighthouse: bool,
    /// This node's overlay address.
    pub address: Ipv4Addr,
    /// The overlay's prefix length.
    pub prefix: u8,
    /// The lighthouses other than this node.
    pub lighthouses: Vec<Lighthouse>,
    /// Nebula's UDP port.
    pub listen_port: u16,
    /// The tun device.
    pub interface: String,
    /// Overlay peers that must answer through the tunnel.
    pub check_reachable: Vec<Ipv4Addr>,
    /// How long they may take.
    pub timeout: Duration,
}

impl Plan {
    /// Checks every field of `request`.
    pub fn from_request(request: &pb::InstallOverlayRequest) -> Result<Self, InstallError> {
        let (address, prefix) = parse_cidr(&request.overlay_cidr)
            .map_err(|problem| InstallError::invalid("overlay_cidr", problem))?;
        let in_overlay = |ip: Ipv4Addr| same_network(ip, address, prefix);
        let mut lighthouses = Vec::with_capacity(request.lighthouses.len());
        let mut seen = BTreeSet::new();
        for (i, given) in request.lighthouses.iter().enumerate() {
            let field = |name: &str| format!("lighthouses[{i}].{name}");
            let overlay_ip = parse_ip(&given.overlay_ip)
                .map_err(|problem| InstallError::invalid(field("overlay_ip"), problem))?;
            if overlay_ip == address {
                return Err(InstallError::invalid(
                    field("overlay_ip"),
                    format!(
                        "{overlay_ip} is this node's own address: a node does not list itself \
                         as a lighthouse (set lighthouse = true instead)"
                    ),
                ));
            }
            if !in_overlay(overlay_ip) {
                return Err(InstallError::invalid(
                    field("overlay_ip"),
                    format!(
                        "{overlay_ip} is outside the overlay {}",
                        request.overlay_cidr
                    ),
                ));
            }
            if !seen.insert(overlay_ip) {
                return Err(InstallError::invalid(
                    field("overlay_ip"),
                    format!("{overlay_ip} is listed twice"),
                ));
            }
            check_underlay(&given.underlay_address)
                .map_err(|problem| InstallError::invalid(field("underlay_address"), problem))?;
            lighthouses.push(Lighthouse {
                overlay_ip,
                underlay_address: given.underlay_address.clone(),
            });
        }
        if !request.lighthouse && lighthouses.is_empty() {
            return Err(InstallError::invalid(
                "lighthouses",
                "a member needs at least one lighthouse to find its peers",
            ));
        }
        let listen_port = match request.listen_port {
            0 => DEFAULT_PORT,
            port => u16::try_from(port).map_err(|_| {
                InstallError::invalid("listen_port", format!("{port} is not a UDP port"))
            })?,
        };
        let interface = if request.interface.is_empty() {
            DEFAULT_INTERFACE.to_string()
        } else {
            check_interface(&request.interface)
                .map_err(|problem| InstallError::invalid("interface", problem))?;
            request.interface.clone()
        };
        let mut check_reachable = Vec::with_capacity(request.check_reachable.len());
        for (i, given) in request.check_reachable.iter().enumerate() {
            let field = format!("check_reachable[{i}]");
            let ip = parse_ip(given).map_err(|problem| InstallError::invalid(&field, problem))?;
            if ip == address {
                return Err(InstallError::invalid(
                    field,
                    format!("{ip} is this node's own address, which never crosses the tunnel"),
                ));
            }
            if !in_overlay(ip) {
                return Err(InstallError::invalid(
                    field,
                    format!("{ip} is outside the overlay {}", request.overlay_cidr),
                ));
            }
            if !check_reachable.contains(&ip) {
                check_reachable.push(ip);
            }
        }
        let timeout = match &request.timeout {
            None => DEFAULT_TIMEOUT,
            Some(given) => Duration::try_from(*given)
                .ok()
                .filter(|timeout| !timeout.is_zero() && *timeout <= MAX_TIMEOUT)
                .ok_or_else(|| {
                    InstallError::invalid(
                        "timeout",
                        format!(
                            "{}s {}ns: give a positive duration of at most {MAX_TIMEOUT:?}",
                            given.seconds, given.nanos
                        ),
                    )
                })?,
        };
        Ok(Plan {
            lighthouse: request.lighthouse,
            address,
            prefix,
            lighthouses,
            listen_port,
            interface,
            check_reachable,
            timeout,
        })
    }

    /// The overlay address with its prefix, as the certificate and the tun carry it.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.address, self.prefix)
    }
}

fn parse_ip(text: &str) -> Result<Ipv4Addr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an IPv4 address (Nebula 1.6 overlays are IPv4)"))
}

fn parse_cidr(text: &str) -> Result<(Ipv4Addr, u8), String> {
    let shape = || format!("{text:?} is not an address with a prefix, like 198.19.0.3/24");
    let (ip, prefix) = text.split_once('/').ok_or_else(shape)?;
    let ip = parse_ip(ip)?;
    let prefix: u8 = prefix.parse().map_err(|_| shape())?;
    if !(1..=30).contains(&prefix) {
        return Err(format!(
            "{text:?}: the prefix must be 1 to 30 bits, so the overlay holds other hosts"
        ));
    }
    let host_bits = u32::from(ip) & !mask(prefix);
    if host_bits == 0 || host_bits == !mask(prefix) {
        return Err(format!(
            "{text:?} is the network's or the broadcast address, not a host's"
        ));
    }
    Ok((ip, prefix))
}

fn mask(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

fn same_network(a: Ipv4Addr, b: Ipv4Addr, prefix: u8) -> bool {
    u32::from(a) & mask(prefix) == u32::from(b) & mask(prefix)
}

fn check_underlay(text: &str) -> Result<(), String> {
    let shape =
        || format!("{text:?} is not host:port (198.18.0.2:4242, or a DNS name with a port)");
    let (host, port) = text.rsplit_once(':').ok_or_else(shape)?;
    let port: u16 = port.parse().map_err(|_| shape())?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host_ok = !host.is_empty()
        && (host.parse::<std::net::IpAddr>().is_ok()
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
    if port == 0 || !host_ok {
        return Err(shape());
    }
    Ok(())
}

fn check_interface(name: &str) -> Result<(), String> {
    if name.len() > 15
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(format!(
            "{name:?}: an interface name has 1 to 15 letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member() -> pb::InstallOverlayRequest {
        pb::InstallOverlayRequest {
            lighthouse: false,
            overlay_cidr: "198.19.0.3/24".into(),
            lighthouses: vec![pb::OverlayLighthouse {
                overlay_ip: "198.19.0.1".into(),
                underlay_address: "198.18.0.2:4242".into(),
            }],
            listen_port: 0,
            interface: String::new(),
            check_reachable: vec!["198.19.0.1".into(), "198.19.0.2".into()],
            timeout: None,
        }
    }

    fn refused(request: &pb::InstallOverlayRequest) -> (String, String) {
        match Plan::from_request(request) {
            Err(InstallError::Invalid { field, problem }) => (field, problem),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_member_request_becomes_a_plan_with_defaults() {
        let plan = Plan::from_request(&member()).expect("valid");
        assert_eq!(plan.cidr(), "198.19.0.3/24");
        assert_eq!(
            (plan.listen_port, plan.interface.as_str()),
            (4242, "nebula1")
        );
        assert_eq!(plan.timeout, DEFAULT_TIMEOUT);
        assert_eq!(plan.check_reachable.len(), 2);
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut r = member();
        r.overlay_cidr = "198.19.0.3".into();
        assert_eq!(refused(&r).0, "overlay_cidr");
        r.overlay_cidr = "198.19.0.300/24".into();
        assert_eq!(refused(&r).0, "overlay_cidr");
        r.overlay_cidr = "198.19.0.0/24".into();
        assert!(refused(&r).1.contains("network"));

        let mut r = member();
        r.lighthouses.push(pb::OverlayLighthouse {
            overlay_ip: "198.19.0.2".into(),
            underlay_address: "198.18.0.3".into(),
        });
        assert_eq!(refused(&r).0, "lighthouses[1].underlay_address");
        r.lighthouses[1].underlay_address = "198.18.0.3:0".into();
        assert_eq!(refused(&r).0, "lighthouses[1].underlay_address");
        r.lighthouses[1].underlay_address = "head node:4242".into();
        assert_eq!(refused(&r).0, "lighthouses[1].underlay_address");
        r.lighthouses[1].underlay_address = "headnode.lan:4242".into();
        assert!(Plan::from_request(&r).is_ok());
        r.lighthouses[1].overlay_ip = "198.19.0.1".into();
        assert!(refused(&r).1.contains("twice"));
        r.lighthouses[1].overlay_ip = "203.0.113.1".into();
        assert!(refused(&r).1.contains("outside the overlay"));

        let mut r = member();
        r.lighthouses.clear();
        assert_eq!(refused(&r).0, "lighthouses");
        r.lighthouse = true;
        assert!(Plan::from_request(&r).is_ok(), "a lighthouse needs none");
        r.lighthouses = member().lighthouses;
        r.lighthouses[0].overlay_ip = "198.19.0.3".into();
        let (field, problem) = refused(&r);
        assert_eq!(field, "lighthouses[0].overlay_ip");
        assert!(problem.contains("itself"), "{problem}");

        let mut r = member();
        r.check_reachable[0] = "198.19.0.x".into();
        assert_eq!(refused(&r).0, "check_reachable[0]");
        r.check_reachable[0] = "198.19.0.3".into();
        assert!(refused(&r).1.contains("own address"));

        let mut r = member();
        r.interface = "a-name-far-too-long".into();
        assert_eq!(refused(&r).0, "interface");
        r.interface = "tun/0".into();
        assert_eq!(refused(&r).0, "interface");

        let mut r = member();
        r.listen_port = 70_000;
        assert_eq!(refused(&r).0, "listen_port");
        r.listen_port = 0;
        r.timeout = Some(prost_types::Duration {
            seconds: -1,
            nanos: 0,
        });
        assert_eq!(refused(&r).0, "timeout");
    }
}
