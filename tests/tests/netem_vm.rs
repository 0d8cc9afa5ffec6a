//! Real netem: boots a Debian kernel (which has sch_netem) under qemu with TCG, with the
//! one VM payload (`tests/examples/vm_check/`) as the initramfs, and asserts every check
//! each of its suites reports.
//!
//! The `netem` suite makes a PKI, runs one real agent (gRPC over mTLS) in each of two
//! namespaces joined by a veth pair, and drives both as the controller: Info says netem is
//! available; the study's edge and cloud scenarios, half on each end, are read back as asked
//! and add the configured delay to a UDP probe's median RTT; 10 % loss on one end loses
//! 6-14 % of 1000 probes; Gilbert's burst model (p 5 %, r 50 %, a mean of 9.1 %) loses 4-15 %
//! of 2000 probes in bursts of at least 1.5 on average, read back as asked; a 1 s lease renewed twice holds, then lapses and the qdisc goes;
//! ClearNetem is idempotent; an agent identity may not change netem; bad input is
//! InvalidArgument naming the field; stopping an agent clears what it held.
//!
//! The `controller` suite builds a tester, a headnode and a worker namespace joined by a
//! data-plane bridge, each reached from the controller's namespace over a control-plane veth
//! pair of its own; runs a real agent process in each; and runs a plan with `controller::run::run_plan`:
//! two embedded brokers on the worker, one dialled there and one entered through the
//! headnode's forwarding hop, the study's scenarios local, edge and cloud (half of each total
//! on each node's egress), the latency test from the tester (10 publishers every 250 ms; why
//! not faster: see the suite's overview) and the payload test at 1 KB, 3 repetitions in
//! interleaved order (each repetition visits local, edge and cloud in turn). Then: every cell
//! measured; each broker's rise over local (the median of its repetitions' paired rises)
//! matches its path model within 10 % (the scenario's total direct: two egresses, each adding
//! its half; twice that through the headnode: four egresses, the study's path);
//! `manifest.json` records each path and
//! netem asked and read back on every node per scenario; the kernel held it on the data plane,
//! never on the control plane; `report.html` and `report.md` carry the emulation check's line
//! per scenario and the section beside the study, whose rows say they have no counterpart
//! (the study had no embedded broker) with this run's path model; netem is cleared after the
//! run; the agents stop on SIGTERM. The report is handed to the host
//! (`target/vm-artifacts/controller-report.html`) to be looked at in a browser. On the same
//! testbed a second plan sets TCP against QUIC: the mqttv5 broker (packed from this machine)
//! in the worker's namespace, the edge's delay with 0, 2 and 5 % loss, the latency test over
//! each transport, 3 repetitions interleaved; every cell measured, nothing lost at QoS 1,
//! the loss read back on both nodes, and the report's section with both transports per loss
//! level, whose figures this test prints (`target/vm-artifacts/transports-report.html`).
//! That part is required where this machine has `/usr/local/bin/mqttv5`, and in CI; elsewhere
//! the payload reports why it did not run and the test passes without it.
//!
//! The `emulated` suite runs the study as a user on one machine would: a plan whose nodes
//! say `agent = "namespace"`, the controller a process of its own, which makes the nodes'
//! namespaces, links and agents itself. A first run is SIGKILLed mid-cell and leaves only its
//! folder; the next run removes it first, measures local, edge and cloud (3 repetitions
//! interleaved), each scenario's rise over local its total delay within 10 %, and afterwards no namespace, link, qdisc, process or folder is left.
//!
//! The VM counts time in instructions (`vm/boot.sh`: `-icount shift=0,sleep=off`): a guest
//! timer fires when it is due in guest time, so netem adds what it is asked to and the
//! delays are checked to 10 %; figures are in guest time, not this host's.
//!
//! The payload is built once and booted once: the suites run one after the other in the same
//! VM, each in a process of its own, so CI pays one build and one boot for all three.
//! The scripts in `vm/` do the work and can be run by hand; `tests::vm` drives them. When
//! qemu or the kernel cannot be fetched the test skips with the reason, unless `CI=true`.
//! Needs no root: all networking happens inside the VM, which has no network device.

use anyhow::Result;
use tests::vm::{self, PAYLOAD, suite_results};

/// Every check the netem suite must report, each with `"pass": true`.
const NETEM_CHECKS: &[&str] = &[
    "agents",
    "info",
    "baseline",
    "edge_readback",
    "edge_delay",
    "cloud_readback",
    "cloud_delay",
    "edge_metrics",
    "cloud_metrics",
    "loss",
    "bursts",
    "apply_delay",
    "apply_delay_jitter",
    "apply_loss",
    "apply_delay_loss",
    "apply_delay_jitter_loss",
    "apply_rate",
    "apply_rate64",
    "apply_limit",
    "apply_all",
    "apply_gemodel",
    "permission",
    "bad_input",
    "lease_renew",
    "lease_expiry",
    "clear_idempotent",
    "shutdown_clears",
    "done",
];

/// Every check the controller suite must report, each with `"pass": true`.
const CONTROLLER_CHECKS: &[&str] = &[
    "agents",
    "run",
    "local_latency",
    "edge_latency",
    "cloud_latency",
    "summary_rows",
    "edge_delay",
    "cloud_delay",
    "edge_path_embedded",
    "cloud_path_embedded",
    "edge_path_via-headnode",
    "cloud_path_via-headnode",
    "manifest_nodes",
    "manifest_paths",
    "edge_manifest_netem",
    "cloud_manifest_netem",
    "local_unimpaired",
    "edge_kernel",
    "cloud_kernel",
    "control_plane_unimpaired",
    "edge_report",
    "cloud_report",
    "study_section",
    "cleared_after_run",
    "agents_stopped",
    "done",
];

/// The controller suite's TCP-against-QUIC part (`vm_check/transports.rs`), when the image
/// has the mqttv5 broker.
const TRANSPORT_CHECKS: &[&str] = &[
    "transports_broker",
    "transports_run",
    "transports_netem",
    "transports_section",
];

/// Every check the emulated suite must report, each with `"pass": true`.
const EMULATED_CHECKS: &[&str] = &[
    "killed_leaves_only_its_folder",
    "run_exit",
    "leftovers_removed_first",
    "cells",
    "edge_rise",
    "cloud_rise",
    "nothing_left",
    "done",
];

#[test]
fn netem_and_the_controller_on_a_real_kernel() -> Result<()> {
    // The TCP-against-QUIC part needs the mqttv5 broker packed into the image (vm::boot packs
    // it when this machine has it): required then, and in CI, which installs it. Decided
    // before the boot, so a CI machine without it fails at once.
    let without_mqttv5 = tests::require_binary(vm::MQTTV5_ON_HOST);
    if let Some(reason) = &without_mqttv5 {
        assert!(
            !tests::running_in_ci(),
            "CI must install mqttv5, but {reason}"
        );
        println!("the TCP-against-QUIC part is not required: {reason}");
    }
    let Some(results) = vm::boot(&PAYLOAD)? else {
        return Ok(());
    };
    let netem = suite_results(&results, "netem");
    let controller = suite_results(&results, "controller");
    let emulated = suite_results(&results, "emulated");
    for check in ["edge_rise", "cloud_rise"] {
        if let Some(r) = emulated.iter().find(|r| r["check"] == check) {
            println!(
                "emulated {check}: added {} ms per repetition {}, expected {} ± {} ms",
                r["added_ms"], r["added_ms_per_repetition"], r["expected_ms"], r["tolerance_ms"]
            );
        }
    }
    if let Some(r) = netem.iter().find(|r| r["check"] == "loss") {
        println!(
            "random loss: {} of {} probes lost ({}), configured {}",
            r["lost"], r["probes"], r["loss_rate"], r["configured"]
        );
    }
    if let Some(r) = netem.iter().find(|r| r["check"] == "bursts") {
        println!(
            "Gilbert-Elliott loss: {} of {} probes lost ({}), model mean {}; {} bursts, mean {} \
             probes, longest {}",
            r["lost"],
            r["probes"],
            r["loss_rate"],
            r["mean_loss_configured"],
            r["bursts"],
            r["mean_burst"],
            r["longest_burst"]
        );
    }
    for check in ["edge_delay", "cloud_delay"] {
        if let Some(r) = controller.iter().find(|r| r["check"] == check) {
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
    if let Some(r) = controller
        .iter()
        .find(|r| r["check"] == "transports_section")
    {
        println!(
            "TCP and QUIC, edge delay 2.5 ms (jitter 0.5 ms) between the nodes, QoS 1, 3 repetitions each:"
        );
        println!(
            "  loss | transport | transit p50 | p99 | p99.9 | connect p50 (ms) | delivered | lost"
        );
        // The report's cells, as markdown escapes them.
        let shown = |value: &serde_json::Value| {
            value
                .as_str()
                .unwrap_or("-")
                .replace("\\[", "[")
                .replace("\\]", "]")
        };
        for row in r["rows"].as_array().into_iter().flatten() {
            println!(
                "  {} % | {} | {} | {} | {} | {} | {} | {}",
                row["loss_percent"],
                shown(&row["transport"]),
                shown(&row["p50_ms"]),
                shown(&row["p99_ms"]),
                shown(&row["p999_ms"]),
                shown(&row["connect_p50_ms"]),
                shown(&row["delivered"]),
                shown(&row["lost"])
            );
        }
        for shift in r["shifts"].as_array().into_iter().flatten() {
            println!("  {}", shown(shift));
        }
    }
    let mut controller_checks = CONTROLLER_CHECKS.to_vec();
    if without_mqttv5.is_none() {
        controller_checks.extend_from_slice(TRANSPORT_CHECKS);
    }
    // Every suite judged, so one failing does not hide another's outcome.
    let netem_outcome = vm::assert_checks(&netem, NETEM_CHECKS);
    let controller_outcome = vm::assert_checks(&controller, &controller_checks);
    let emulated_outcome = vm::assert_checks(&emulated, EMULATED_CHECKS);
    netem_outcome.and(controller_outcome).and(emulated_outcome)
}
