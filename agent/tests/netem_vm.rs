//! Real netem: boots a Debian kernel (which has sch_netem) under qemu with TCG, with
//! `examples/netem_vm_check.rs` built static as the initramfs payload, and asserts every
//! check it reports. Inside the VM the payload makes a PKI, runs one real agent (gRPC over
//! mTLS) in each of two namespaces joined by a veth pair, and drives both as the controller:
//! Info says netem is available; the study's edge and cloud scenarios, half on each end, are
//! read back as asked and add the configured delay to a UDP probe's median RTT; 10 % loss on
//! one end loses 6-14 % of 1000 probes; a 1 s lease renewed twice holds, then lapses and the
//! qdisc goes; ClearNetem is idempotent; an agent identity may not change netem; bad input is
//! InvalidArgument naming the field; stopping an agent clears what it held.
//!
//! The scripts in `vm/` do the work and can be run by hand; `vm_support` drives them. When
//! qemu or the kernel cannot be fetched the test skips with the reason, unless `CI=true`.
//! Needs no root: all networking happens inside the VM, which has no network device.

mod vm_support;

use anyhow::Result;

/// Whole VM run, boot included; a normal one takes well under a minute under TCG.
const BOOT_TIMEOUT_SECS: u32 = 240;

/// Every check the payload must report, each with `"pass": true`.
const CHECKS: &[&str] = &[
    "agents",
    "info",
    "baseline",
    "edge_readback",
    "edge_delay",
    "cloud_readback",
    "cloud_delay",
    "loss",
    "apply_delay",
    "apply_delay_jitter",
    "apply_loss",
    "apply_delay_loss",
    "apply_delay_jitter_loss",
    "apply_rate",
    "apply_rate64",
    "apply_limit",
    "apply_all",
    "permission",
    "bad_input",
    "lease_renew",
    "lease_expiry",
    "clear_idempotent",
    "shutdown_clears",
    "done",
];

#[test]
fn netem_on_a_real_kernel() -> Result<()> {
    let payload = vm_support::Payload {
        example: "netem_vm_check",
        release: false,
        initrd: "netem-check.initrd",
        boot_timeout_secs: BOOT_TIMEOUT_SECS,
    };
    let Some(results) = vm_support::boot(&payload)? else {
        return Ok(());
    };
    vm_support::assert_checks(&results, CHECKS)
}
