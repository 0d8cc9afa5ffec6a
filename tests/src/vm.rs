//! The real-kernel checks' driver: fetching qemu and the Debian kernel (`vm/fetch.sh`),
//! building the one VM payload (`examples/vm_check/`, every suite in one program),
//! packing the initramfs, booting it once under TCG (`vm/boot.sh`), and checking the
//! payload's `RESULT {json}` lines suite by suite. When qemu or the kernel cannot be fetched
//! the test skips with the reason, unless `CI=true`, where it fails instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// The VM payload.
#[derive(Debug)]
pub struct Payload {
    /// The example (`tests/examples/<example>/`), built as the workspace builds it.
    pub example: &'static str,
    /// Built optimized (a payload that carries load under TCG) or not (faster to build).
    pub release: bool,
    /// File name of its initramfs under `target/vm/`.
    pub initrd: &'static str,
    /// Whole VM run, boot included.
    pub boot_timeout_secs: u32,
}

/// The one payload: optimized, as the controller suite carries load under TCG. The boot
/// budget covers the suites' (netem 240 s, controller 420 s, 300 s more for its TCP against
/// QUIC part, and the emulated suite).
pub const PAYLOAD: Payload = Payload {
    example: "vm_check",
    release: true,
    initrd: "vm-check.initrd",
    boot_timeout_secs: 1200,
};

/// The mqttv5 broker on this machine, packed into the image (as `/mqttv5`) when it is there:
/// the controller suite's TCP-against-QUIC part dials it.
pub const MQTTV5_ON_HOST: &str = "/usr/local/bin/mqttv5";

/// The result lines of `suite` only.
pub fn suite_results(results: &[Value], suite: &str) -> Vec<Value> {
    results
        .iter()
        .filter(|r| r["suite"] == suite)
        .cloned()
        .collect()
}

/// Boots `payload` and returns its result lines; `None` when the test is skipped.
pub fn boot(payload: &Payload) -> Result<Option<Vec<Value>>> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return skip("the VM tests run on x86_64 Linux only");
    }
    let workspace = crate::workspace::workspace_root();
    let cache = std::env::var_os("CONTINUUM_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/vm-cache"));
    let started = Instant::now();
    match Command::new(workspace.join("vm/fetch.sh"))
        .env("CONTINUUM_VM_CACHE", &cache)
        .output()
    {
        Ok(out) if out.status.success() => echo("fetch", &out),
        Ok(out) => {
            echo("fetch", &out);
            return skip("vm/fetch.sh could not fetch qemu and the Debian kernel");
        }
        Err(err) => return skip(&format!("cannot run vm/fetch.sh: {err}")),
    }
    let fetched = started.elapsed();
    let binary = build(workspace, payload)?;
    let built = started.elapsed();
    let initrd = workspace.join("target/vm").join(payload.initrd);
    let mut initramfs = Command::new(workspace.join("vm/initramfs.sh"));
    initramfs.arg(&binary).arg(&initrd);
    if crate::require_binary(MQTTV5_ON_HOST).is_none() {
        initramfs.arg(MQTTV5_ON_HOST);
    }
    let out = initramfs
        .env("CONTINUUM_VM_CACHE", &cache)
        // What ldd finds must be where the VM's loader looks: in the system's folders, not in
        // those a test process is given (the toolchain's, the target dir's).
        .env_remove("LD_LIBRARY_PATH")
        .output()?;
    echo("initramfs", &out);
    ensure!(out.status.success(), "vm/initramfs.sh failed");
    let out = Command::new(workspace.join("vm/boot.sh"))
        .arg(&initrd)
        .arg(payload.boot_timeout_secs.to_string())
        .env("CONTINUUM_VM_CACHE", &cache)
        .output()?;
    let console = String::from_utf8_lossy(&out.stdout);
    let shown: Vec<&str> = console
        .lines()
        .filter(|line| !line.contains(ARTIFACT_MARK))
        .collect();
    println!(
        "--- VM console ---\n{}\n--- end (qemu: {}) ---",
        shown.join("\n"),
        out.status
    );
    for path in save_artifacts(&console, &workspace.join("target/vm-artifacts"))? {
        println!("artifact: {}", path.display());
    }
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!(
        "timing: fetch {:.1} s, build {:.1} s, initramfs+boot+checks {:.1} s, total {:.1} s",
        fetched.as_secs_f64(),
        (built - fetched).as_secs_f64(),
        (started.elapsed() - built).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    parse_results(&console).map(Some)
}

/// Fails unless every check in `checks` reported `"pass": true` and none was fatal.
pub fn assert_checks(results: &[Value], checks: &[&str]) -> Result<()> {
    let mut failures = Vec::new();
    for check in checks {
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

/// Builds the payload in the running test's target dir with the workspace's own profile and
/// flags (nothing static, no `--target`), so the README's quickstart, which CI runs after the
/// tests, finds the release dependencies it shares with the payload already built; the
/// initramfs carries the C libraries the payload links (`vm/initramfs.sh`).
fn build(workspace: &Path, payload: &Payload) -> Result<PathBuf> {
    let target_dir = crate::workspace::BuildLayout::of_current_test()?.target_dir;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["build", "-p", "tests", "--example", payload.example])
        .arg("--target-dir")
        .arg(&target_dir);
    // What cargo sets for this test's own crate (CARGO_PKG_NAME=tests, CARGO_MANIFEST_DIR, ...)
    // is not the build's: ring's build script declares several of these names as inputs, so
    // with this test's values the quickstart's build, run without them, would rebuild ring and
    // everything above it.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_a_crate) {
            command.env_remove(name);
        }
    }
    if payload.release {
        command.arg("--release");
    }
    let out = command.output().context("run cargo")?;
    if !out.status.success() {
        echo("cargo build", &out);
        bail!("building the payload failed");
    }
    let profile = if payload.release { "release" } else { "debug" };
    Ok(target_dir
        .join(profile)
        .join("examples")
        .join(payload.example))
}

/// Whether `name` is a variable cargo sets for the crate it compiles, runs or tests (not one of
/// its configuration variables, such as `CARGO_HOME` or `CARGO_PROFILE_*`).
fn set_for_a_crate(name: &str) -> bool {
    const PREFIXES: &[&str] = &["CARGO_PKG_", "CARGO_BIN_", "CARGO_CFG_"];
    const NAMES: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "CARGO_ENCODED_RUSTFLAGS",
        "OUT_DIR",
    ];
    NAMES.contains(&name) || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
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

/// How the payload marks a line of a file it hands over (`vm_check/common.rs` `artifact`).
const ARTIFACT_MARK: &str = "ARTIFACT ";

/// Writes every file the payload printed as artifact lines into `dir`, by its name (one path
/// component, nothing else), and returns their paths. A file whose `end` line never came is
/// not written.
fn save_artifacts(console: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    use base64::Engine as _;
    let mut files: Vec<(String, Vec<u8>, bool)> = Vec::new();
    for line in console.lines() {
        let Some(at) = line.find(ARTIFACT_MARK) else {
            continue;
        };
        let mut words = line[at + ARTIFACT_MARK.len()..].split_whitespace();
        let (Some(name), Some(chunk)) = (words.next(), words.next()) else {
            continue;
        };
        ensure!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                && !name.starts_with('.'),
            "artifact name {name:?} is not a plain file name"
        );
        let index = match files.iter().position(|(n, ..)| n == name) {
            Some(index) => index,
            None => {
                files.push((name.to_string(), Vec::new(), false));
                files.len() - 1
            }
        };
        let file = &mut files[index];
        if chunk == "end" {
            file.2 = true;
        } else {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(chunk)
                .with_context(|| format!("artifact {name}: a line is not base64"))?;
            file.1.extend(bytes);
        }
    }
    let mut written = Vec::new();
    for (name, bytes, complete) in files {
        if !complete {
            println!("artifact {name}: its end line never came, not written");
            continue;
        }
        std::fs::create_dir_all(dir)?;
        let path = dir.join(&name);
        std::fs::write(&path, bytes).with_context(|| format!("{}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

fn echo(step: &str, out: &Output) {
    for stream in [&out.stdout, &out.stderr] {
        for line in String::from_utf8_lossy(stream).lines() {
            println!("[{step}] {line}");
        }
    }
}

fn skip(reason: &str) -> Result<Option<Vec<Value>>> {
    if std::env::var("CI").as_deref() == Ok("true") {
        bail!("{reason} (CI=true: a skip would hide that netem is not verified)");
    }
    println!("skipped: {reason}");
    eprintln!("skipped: {reason}");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nested_build_drops_what_cargo_set_for_this_crate_and_keeps_configuration() {
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_BIN_EXE_x",
            "OUT_DIR",
        ] {
            assert!(set_for_a_crate(name), "{name}");
        }
        for name in [
            "CARGO_HOME",
            "CARGO_PROFILE_RELEASE_LTO",
            "CARGO",
            "RUSTFLAGS",
            "PATH",
        ] {
            assert!(!set_for_a_crate(name), "{name}");
        }
    }

    #[test]
    fn artifacts_are_reassembled_from_console_lines_and_only_when_complete() {
        let dir = tempfile::tempdir().unwrap();
        // "<html>" in two chunks, a boot line between them, and a file cut off by the VM.
        let console = "VM: boot\n\x1b[0mARTIFACT report.html PGh0\nRESULT {}\n\
                       ARTIFACT report.html bWw+\nARTIFACT report.html end\nARTIFACT cut.md aGk=\n";
        let written = save_artifacts(console, dir.path()).unwrap();
        assert_eq!(written, vec![dir.path().join("report.html")]);
        assert_eq!(std::fs::read_to_string(&written[0]).unwrap(), "<html>");
        assert!(!dir.path().join("cut.md").exists());
    }

    #[test]
    fn an_artifact_name_cannot_leave_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let error = save_artifacts("ARTIFACT ../x aGk=\n", dir.path()).unwrap_err();
        assert!(
            error.to_string().contains("not a plain file name"),
            "{error}"
        );
    }
}
