//! The Continuum agent: the daemon on every testbed node that does what the controller asks
//! over mutual TLS, proves what it did, and undoes it afterwards.
//!
//! Netem is applied to the data-plane interface only, read back from the kernel to report
//! what is really in force, and held by a lease so that a node never stays impaired after a
//! run dies. It is verified against a real kernel by the workspace's `tests/tests/netem_vm.rs`,
//! which boots a Debian kernel under qemu with `tests/examples/vm_check/` as its payload.
//!
//! # Layout
//! - [`server`]: serving over mTLS until SIGTERM/SIGINT, then undoing everything;
//!   [`service`]: the gRPC service, one file per RPC group. Its configuration,
//!   `agent.toml`, is `domain::AgentConfig`.
//! - `main.rs`: the `continuum-agent` binary; `systemd/continuum-agent.service`: its unit.
//! - [`broker`]: MQTT brokers behind one driver trait (native Mosquitto, RabbitMQ, EMQX,
//!   VerneMQ, HiveMQ; kubernetes: the same five as pinned images on k3s; embedded
//!   rumqttd; external), readiness by CONNECT/CONNACK, and
//!   [`broker::Brokers`], the running instances by name (see its own Layout). What each
//!   product needs (settings, command line, image, probe) is its file in crate `recipes`.
//! - [`install`]: the Nebula and k3s installers (phases 2 and 3), see its own Layout.
//! - [`MARKER_VAR`] tags every process the agent starts; the `host` crate holds the process
//!   groups, the `/proc` sweep and bounded runs.
//! - [`netem`]: netem settings, their byte-exact `TCA_OPTIONS` encoding, applying/reading
//!   back/clearing through rtnetlink, the lease, and the capability probe.
//!   - `domain::netem`: what is asked ([`domain::NetemParams`]) and its validation.
//!   - `netem/encode.rs`: [`netem::NetemOptions`], encoder and decoder.
//!   - `netem/qdisc.rs`: [`netem::Netem`], the rtnetlink side.
//!   - `netem/lease.rs`: [`netem::Lease`].
//!   - `netem/probe.rs`: [`netem::netem_available`].
//!   - `netem/testdata/`: requests captured from iproute2's `tc`, and the capture script.
//! - The VM check lives with the other test support: `tests/examples/vm_check/` is the static
//!   program run inside the VM, `tests/tests/netem_vm.rs` boots it (scripts in `vm/`).

#![warn(missing_docs)]

pub mod broker;
pub mod install;
pub mod netem;
pub mod server;
pub mod service;

/// The environment variable tagging every process the agent starts (brokers and their
/// helpers, Nebula, k3s), so a stop or an uninstall finds the whole tree.
pub const MARKER_VAR: &str = "CONTINUUM_BROKER_INSTANCE";

/// A fresh marker for one instance the agent starts.
pub(crate) fn new_marker(name: &str) -> host::Marker {
    host::Marker::unique(MARKER_VAR, name)
}
