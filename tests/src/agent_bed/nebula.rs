//! Nebula on a namespace testbed: certificates from the real `nebula-cert`, the `[nebula]`
//! section of each agent.toml, and looking at the tun device and processes from outside.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::netns::{Node, Testbed};
use anyhow::{Result, ensure};
use host::blocking::run_with_deadline;

/// Debian's Nebula.
pub const NEBULA: &str = "/usr/bin/nebula";
/// Its certificate tool.
pub const NEBULA_CERT: &str = "/usr/bin/nebula-cert";
/// The tun device the installer names by default.
pub const TUN: &str = "nebula1";

/// The overlay /24: 198.19.0.0/24, or the next one if the testbed's own subnet is that one.
pub fn overlay_network(testbed: &Testbed) -> [u8; 3] {
    let taken = testbed.subnet().prefix().network().octets();
    if taken[..3] == [198, 19, 0] {
        [198, 19, 1]
    } else {
        [198, 19, 0]
    }
}

/// Overlay host numbers: the headnode (lighthouse) first.
pub fn overlay_host(agent: &str) -> u8 {
    match agent {
        "headnode" => 1,
        "tester" => 2,
        _ => 3,
    }
}

/// The overlay address of `agent` in the overlay /24 `net`.
pub fn overlay_ip(net: [u8; 3], agent: &str) -> Ipv4Addr {
    Ipv4Addr::new(net[0], net[1], net[2], overlay_host(agent))
}

/// Runs `nebula-cert` with `args`, bounded.
pub fn nebula_cert(args: &[&str]) -> Result<()> {
    let mut command = Command::new(NEBULA_CERT);
    command.args(args);
    let output = run_with_deadline(&mut command, None, Duration::from_secs(30))?;
    ensure!(
        output.status.success(),
        "nebula-cert {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Nebula's CA and a host certificate for `agent`, in `dir`; returns the `[nebula]`
/// section of its agent.toml.
pub fn nebula_section(dir: &Path, net: [u8; 3], agent: &str) -> Result<String> {
    let path = |name: &str| dir.join(name).display().to_string();
    if !dir.join("ca.crt").exists() {
        nebula_cert(&[
            "ca",
            "-name",
            "Continuum test overlay",
            "-out-crt",
            &path("ca.crt"),
            "-out-key",
            &path("ca.key"),
        ])?;
    }
    nebula_cert(&[
        "sign",
        "-ca-crt",
        &path("ca.crt"),
        "-ca-key",
        &path("ca.key"),
        "-name",
        agent,
        "-ip",
        &format!("{}/24", overlay_ip(net, agent)),
        "-out-crt",
        &path(&format!("{agent}.crt")),
        "-out-key",
        &path(&format!("{agent}.key")),
    ])?;
    Ok(format!(
        "[nebula]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nbinary = \"{NEBULA}\"\n",
        path("ca.crt"),
        path(&format!("{agent}.crt")),
        path(&format!("{agent}.key")),
    ))
}

/// Runs `program args` inside `node`, bounded; its stdout, or why it failed.
pub fn in_node(node: &Node, program: &str, args: &[&str]) -> Result<String> {
    let mut command = node.command(program);
    command.args(args);
    let output = run_with_deadline(&mut command, None, Duration::from_secs(20))?;
    ensure!(
        output.status.success(),
        "{program} {args:?} in {}: {}",
        node.name(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The addresses on the tun device of `node`, or `None` when it has none.
pub fn tun_addresses(node: &Node) -> Option<String> {
    in_node(
        node,
        crate::netns::IP_BINARY,
        &["-4", "-o", "addr", "show", "dev", TUN],
    )
    .ok()
}

/// The tun device's (rx, tx) byte counters in `node` (`ip netns exec` mounts the node's sysfs).
pub fn tun_bytes(node: &Node) -> Result<(u64, u64)> {
    let read = |counter: &str| -> Result<u64> {
        let path = format!("/sys/class/net/{TUN}/statistics/{counter}");
        Ok(in_node(node, "/bin/cat", &[&path])?.trim().parse()?)
    };
    Ok((read("rx_bytes")?, read("tx_bytes")?))
}

/// PIDs of live processes whose command line mentions `needle` (nebula started with a
/// config under the test's state folders).
pub use crate::process::processes_mentioning;
