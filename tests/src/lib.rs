//! Testbed support for Continuum's end-to-end tests: real brokers on
//! loopback, read through their own counters; namespace testbeds with real
//! agents on them; a shared test PKI and a fake `k3s`.
//!
//! A test starts a [`Mosquitto`] or a [`RabbitMq`] of its own, each on free
//! 127.0.0.1 ports with its files in a private temporary directory, drives
//! load at it, and checks what the broker itself counted
//! ([`MosquittoCounters`], [`RabbitCounters`]) against what the clients
//! claim. Dropping a broker stops it and every process it spawned.
//!
//! All traffic stays on 127.0.0.1: nothing here binds, connects or resolves
//! anything else.
//!
//! # Layout
//! - [`ports`]: free loopback ports, and raising `RLIMIT_NOFILE` for tests
//!   with thousands of connections.
//! - [`process`]: instance ids that tag every process of a broker (the
//!   `host` crate sweeps them), and finding processes nobody tagged (over
//!   `host::running_processes`, the one walk over `/proc`).
//! - [`mqtt_wire`]: a minimal blocking MQTT 3.1.1 client (readiness probes,
//!   `$SYS` reading, deliberately slow subscribers).
//! - [`mosquitto`]: the Mosquitto driver and its options.
//! - [`mosquitto_sys`]: Mosquitto's counters from its `$SYS` tree: what each
//!   means, and how the harness's own traffic is taken out.
//! - `mosquitto_sys_reader` (private): the connection that follows `$SYS` and waits
//!   for complete or settled updates.
//! - [`rabbitmq`]: a private RabbitMQ node with the MQTT plugin, its own
//!   epmd, and nothing shared with a system instance.
//! - [`rabbitmq_counters`]: RabbitMQ's global message counters.
//! - `rabbitmq_env` (private): the config files and environment that keep a
//!   node apart from any system instance.
//! - [`cpu_quota`]: a CPU quota on one process (a constrained broker, a starved generator).
//! - [`netns`]: multi-node testbeds from network namespaces with addresses
//!   in 198.18.0.0/15, reachable only from inside the testbed's own
//!   namespaces (the one exception to loopback-only), built from a test
//!   process isolated in a namespace of its own.
//! - [`agent_bed`]: real `continuum-agent` processes on a namespace testbed,
//!   for the agent's and the controller's end-to-end tests.
//! - [`prometheus`]: a real Prometheus server scraping a run's metrics listeners, and its
//!   HTTP API.
//! - [`pki`]: the one test PKI (a CA, the controller, one identity per
//!   agent) on files or in memory.
//! - [`fake_k3s`]: the scripted fake `k3s` and what it recorded.
//! - [`workspace`]: a workspace binary built fresh for a test of another
//!   package.
//! - [`udp_relay`]: one UDP address in front of brokers that change, as a broker restarting
//!   behind its address looks to QUIC clients.
//! - [`wire`]: a packet capture on loopback that times each PUBLISH into and out of a broker
//!   (the referee of loadgen's latency figures).
//! - [`vm`]: the real-kernel checks' driver: builds the one VM payload
//!   (`examples/vm_check/`), boots it under qemu, reads its results.
//! - this file: checks for installed components ([`require_binary`],
//!   [`skip_unless_installed!`]) that skip locally and fail in CI.

pub mod agent_bed;
pub mod cpu_quota;
pub mod fake_k3s;
pub mod load;
pub mod mosquitto;
pub mod mosquitto_sys;
mod mosquitto_sys_reader;
pub mod mqtt_wire;
pub mod mqttv5;
pub mod netns;
pub mod node_vm;
pub mod pki;
pub mod ports;
pub mod process;
pub mod prometheus;
pub mod rabbitmq;
pub mod rabbitmq_counters;
mod rabbitmq_env;
pub mod sys_snapshot;
pub mod udp_relay;
pub mod vm;
pub mod wire;
pub mod workspace;

pub use cpu_quota::{CpuQuota, cpu_quota_unavailable};
pub use mosquitto::{Mosquitto, MosquittoOptions};
pub use mosquitto_sys::MosquittoCounters;
pub use mqtt_wire::{MqttConnection, ReceivedPublish};
pub use ports::{free_loopback_port, raise_nofile_limit};
pub use rabbitmq::RabbitMq;
pub use rabbitmq_counters::RabbitCounters;

use std::os::unix::fs::PermissionsExt;

/// Why the executable at `path` cannot be used, or `None` if it can.
pub fn require_binary(path: &str) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => None,
        Ok(_) => Some(format!("{path} exists but is not an executable file")),
        Err(error) => Some(format!("{path} is not installed ({error})")),
    }
}

/// Every file under `dir`, at any depth (links are listed, not followed): what a test reads
/// when nothing in a results folder may hold something (a password, a certificate).
pub fn files_under(dir: &std::path::Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context;
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).with_context(|| folder.display().to_string())? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                folders.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    Ok(files)
}

/// True when running under CI (`CI` set to anything but empty, `0` or
/// `false`), where every component is installed and nothing may be skipped.
pub fn running_in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| {
        let value = value.trim();
        !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
    })
}

/// Checks that every executable in `paths` is installed.
///
/// Returns `true` if all are. Otherwise prints why the calling test is
/// skipped and returns `false`, except under CI ([`running_in_ci`]), where a
/// missing component is a broken setup and this panics with the reason.
pub fn components_available(paths: &[&str]) -> bool {
    skip_or_fail(paths, running_in_ci())
}

/// [`components_available`] with the CI decision passed in, so it can be
/// tested without changing this process's environment.
fn skip_or_fail(paths: &[&str], in_ci: bool) -> bool {
    let missing: Vec<String> = paths
        .iter()
        .filter_map(|path| require_binary(path))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let reason = missing.join("; ");
    assert!(!in_ci, "CI must install every test component, but {reason}");
    eprintln!("SKIPPED: {reason}");
    false
}

/// Returns from the calling test (after printing why) unless every listed
/// executable is installed; panics instead under CI. See
/// [`components_available`].
///
/// ```no_run
/// # fn main() {
/// tests::skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY, "/usr/bin/mosquitto_pub");
/// # }
/// ```
#[macro_export]
macro_rules! skip_unless_installed {
    ($($path:expr),+ $(,)?) => {
        if !$crate::components_available(&[$($path),+]) {
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_tool_is_accepted_and_a_missing_one_explained() {
        assert_eq!(require_binary("/bin/sh"), None);
        let reason = require_binary("/nonexistent/broker").unwrap();
        assert!(reason.contains("/nonexistent/broker"));
        assert!(
            require_binary("/etc").is_some(),
            "a directory is no executable"
        );
    }

    #[test]
    fn a_missing_component_skips_locally() {
        assert!(skip_or_fail(&["/bin/sh"], false));
        assert!(!skip_or_fail(&["/bin/sh", "/nonexistent/broker"], false));
    }

    #[test]
    #[should_panic(expected = "/nonexistent/broker")]
    fn a_missing_component_fails_in_ci() {
        skip_or_fail(&["/nonexistent/broker"], true);
    }
}
