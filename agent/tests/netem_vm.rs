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
//! The scripts in `vm/` do the work and can be run by hand. When qemu or the kernel cannot be
//! fetched the test skips with the reason, unless `CI=true`, where it fails instead.
//! Needs no root: all networking happens inside the VM, which has no network device.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// Whole VM run, boot included; a normal one takes well under a minute under TCG.
const BOOT_TIMEOUT_SECS: u32 = 240;
const TARGET: &str = "x86_64-unknown-linux-gnu";

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
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return skip("the VM test runs on x86_64 Linux only");
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("workspace root")?;
    let cache = std::env::var_os("CONTINUUM_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/vm-cache"));
    let started = Instant::now();

    let fetch = Command::new(workspace.join("vm/fetch.sh"))
        .env("CONTINUUM_VM_CACHE", &cache)
        .output();
    match fetch {
        Ok(out) if out.status.success() => echo("fetch", &out),
        Ok(out) => {
            echo("fetch", &out);
            return skip("vm/fetch.sh could not fetch qemu and the Debian kernel");
        }
        Err(err) => return skip(&format!("cannot run vm/fetch.sh: {err}")),
    }
    let fetched = started.elapsed();

    let payload = build_payload(workspace)?;
    let built = started.elapsed();

    let initrd = workspace.join("target/vm-static/netem-check.initrd");
    let out = Command::new(workspace.join("vm/initramfs.sh"))
        .arg(&payload)
        .arg(&initrd)
        .env("CONTINUUM_VM_CACHE", &cache)
        .output()?;
    echo("initramfs", &out);
    ensure!(out.status.success(), "vm/initramfs.sh failed");

    let out = Command::new(workspace.join("vm/boot.sh"))
        .arg(&initrd)
        .arg(BOOT_TIMEOUT_SECS.to_string())
        .env("CONTINUUM_VM_CACHE", &cache)
        .output()?;
    let console = String::from_utf8_lossy(&out.stdout);
    println!(
        "--- VM console ---\n{console}--- end (qemu: {}) ---",
        out.status
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!(
        "timing: fetch {:.1} s, build {:.1} s, initramfs+boot+checks {:.1} s, total {:.1} s",
        fetched.as_secs_f64(),
        (built - fetched).as_secs_f64(),
        (started.elapsed() - built).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    let results = parse_results(&console)?;
    let mut failures = Vec::new();
    for check in CHECKS {
        match results.iter().find(|r| r["check"] == *check) {
            Some(r) if r["pass"] == true => {}
            Some(r) => failures.push(format!("{check} failed: {r}")),
            None => failures.push(format!("{check} not reported")),
        }
    }
    if let Some(fatal) = results.iter().find(|r| r["check"] == "fatal") {
        failures.push(format!("payload stopped: {fatal}"));
    }
    ensure!(
        failures.is_empty(),
        "VM checks failed:\n{}",
        failures.join("\n")
    );
    Ok(())
}

/// Builds the payload static, in a target dir of its own so the workspace's artifacts (built
/// without `crt-static`) are neither rebuilt nor mixed up.
fn build_payload(workspace: &Path) -> Result<PathBuf> {
    let target_dir = workspace.join("target/vm-static");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace)
        .args([
            "build",
            "-p",
            "agent",
            "--example",
            "netem_vm_check",
            "--target",
            TARGET,
            "--target-dir",
        ])
        .arg(&target_dir)
        // With an explicit --target, RUSTFLAGS reach only the target's crates, not proc macros.
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // No debug info: a smaller initramfs, and a faster build. No incremental state either:
        // this target dir is built cold far more often than it is edited.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .output()
        .context("run cargo")?;
    if !out.status.success() {
        echo("cargo build", &out);
        bail!("building the static payload failed");
    }
    Ok(target_dir
        .join(TARGET)
        .join("debug/examples/netem_vm_check"))
}

fn parse_results(console: &str) -> Result<Vec<Value>> {
    console
        .lines()
        // The serial console may prefix a line with terminal control sequences.
        .filter_map(|line| {
            line.find("RESULT {")
                .map(|at| &line[at + "RESULT ".len()..])
        })
        .map(|json| {
            serde_json::from_str(json.trim_end())
                .with_context(|| format!("bad result line: {json}"))
        })
        .collect()
}

fn echo(step: &str, out: &Output) {
    for stream in [&out.stdout, &out.stderr] {
        for line in String::from_utf8_lossy(stream).lines() {
            println!("[{step}] {line}");
        }
    }
}

fn skip(reason: &str) -> Result<()> {
    if std::env::var("CI").as_deref() == Ok("true") {
        bail!("{reason} (CI=true: a skip would hide that netem is not verified)");
    }
    println!("skipped: {reason}");
    eprintln!("skipped: {reason}");
    Ok(())
}
