//! The controller with real netem: boots a Debian kernel (which has sch_netem) under qemu
//! with TCG, with `examples/controller_vm_check.rs` built static as the initramfs payload,
//! and asserts every check it reports. Inside the VM the payload builds a tester and a worker
//! namespace joined by a data-plane veth pair, each reached from the controller's namespace
//! over a control-plane veth pair of its own; runs a real agent process in each; and runs a
//! plan with `controller::run::run_plan`: the embedded broker on the worker, the study's
//! scenarios local, edge and cloud (half of each total on each end), the latency test from
//! the tester (20 publishers every 250 ms; why not faster: see the example), 2 repetitions. Then: every cell measured; the latency median rises over
//! local's by the scenario's one-way path delay (2.5 ms edge, 6.25 ms cloud: the message
//! crosses the link out and back, each end adding its half) within 20 % + 0.5 ms;
//! `manifest.json` records netem asked and read back on both nodes per scenario; the kernel
//! held it on the data plane, never on the control plane; `report.html` and `report.md`
//! carry the emulation check's line per scenario; netem is cleared after the run; the
//! agents stop on SIGTERM.
//!
//! The scripts in `vm/` do the work and can be run by hand; `vm_support` drives them. When
//! qemu or the kernel cannot be fetched the test skips with the reason, unless `CI=true`.
//! Needs no root: all networking happens inside the VM, which has no network device.

mod vm_support;

use anyhow::Result;

/// Whole VM run, boot included.
const BOOT_TIMEOUT_SECS: u32 = 420;

/// Every check the payload must report, each with `"pass": true`.
const CHECKS: &[&str] = &[
    "agents",
    "run",
    "local_latency",
    "edge_latency",
    "cloud_latency",
    "summary_rows",
    "edge_delay",
    "cloud_delay",
    "manifest_nodes",
    "edge_manifest_netem",
    "cloud_manifest_netem",
    "local_unimpaired",
    "edge_kernel",
    "cloud_kernel",
    "control_plane_unimpaired",
    "edge_report",
    "cloud_report",
    "cleared_after_run",
    "agents_stopped",
    "done",
];

#[test]
fn controller_run_with_real_netem() -> Result<()> {
    let payload = vm_support::Payload {
        example: "controller_vm_check",
        release: true,
        initrd: "controller-check.initrd",
        boot_timeout_secs: BOOT_TIMEOUT_SECS,
    };
    let Some(results) = vm_support::boot(&payload)? else {
        return Ok(());
    };
    for check in ["edge_delay", "cloud_delay"] {
        if let Some(r) = results.iter().find(|r| r["check"] == check) {
            println!(
                "{check}: median {} ms, local {} ms, added {} ms, expected {} ± {} ms",
                r["median_ms"],
                r["local_median_ms"],
                r["added_ms"],
                r["expected_ms"],
                r["tolerance_ms"]
            );
        }
    }
    vm_support::assert_checks(&results, CHECKS)
}
