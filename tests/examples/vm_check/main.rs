//! The VM payload: one program that one VM boot runs for every real-kernel check
//! (`tests/tests/netem_vm.rs` builds it, packs it as the initramfs's `/payload` and boots it).
//! The VM has netem; this machine does not.
//!
//! Run without arguments (as `vm/init` does), it runs each suite in a process of its own,
//! one after the other, so one suite's namespaces, agents and sockets are gone before the
//! next starts; each result line names its suite. It rewires the network of the machine it
//! runs on, so it refuses to run unless `CONTINUUM_VM_CHECK=1`.
//!
//! # Layout
//! - this file: the suites and how they are run.
//! - [`netem`]: the agent's netem through its gRPC service, against the kernel.
//! - [`controller`]: a whole plan run by the controller against two agents with netem;
//!   [`transports`]: a second plan on its testbed, TCP against QUIC under the edge's loss.
//! - [`crash`]: a killed agent's netem is cleared by the next agent (run by the netem suite).
//! - [`emulated`]: the study on emulated nodes (`agent = "namespace"`), the controller a
//!   process of its own, killed once, and what it leaves.
//! - [`common`]: namespaces, rtnetlink helpers and the `RESULT {json}` lines.

mod common;
mod controller;
mod crash;
mod emulated;
mod netem;
mod transports;

use std::process::{Command, ExitCode};

use common::SUITE_VAR;

/// The suites, in the order they run.
const SUITES: [&str; 3] = ["netem", controller::SUITE, emulated::SUITE];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => run_all(),
        Some("netem") => netem::main(),
        Some(controller::SUITE) => controller::main(&args[1..]),
        Some(emulated::SUITE) => emulated::main(&args[1..]),
        Some(crash::CHILD) => crash::child_main(&args[1..]),
        Some(other) => {
            eprintln!("unknown suite {other}; the suites are {SUITES:?}");
            ExitCode::FAILURE
        }
    }
}

/// Each suite in a child process of its own; fails if any did.
fn run_all() -> ExitCode {
    if std::env::var("CONTINUUM_VM_CHECK").as_deref() != Ok("1") {
        eprintln!(
            "refusing to run: this program rewires the network; set CONTINUUM_VM_CHECK=1 inside a VM"
        );
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            eprintln!("VM payload: own executable: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut all_passed = true;
    for suite in SUITES {
        // Standard streams inherited: the VM has no /dev/null to give them.
        match Command::new(&exe).arg(suite).env(SUITE_VAR, suite).status() {
            Ok(status) => {
                println!("VM: suite {suite} exit {status}");
                all_passed &= status.success();
            }
            Err(err) => {
                println!("VM: suite {suite} did not start: {err}");
                all_passed = false;
            }
        }
    }
    if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
