//! The workspace's own binaries for tests outside the package that defines them.
//!
//! Cargo hands `CARGO_BIN_EXE_<name>` only to a package's own integration tests, and builds
//! the binaries of no other package for them: a controller test that took
//! `target/debug/continuum-agent` as it found it might run yesterday's agent. So
//! [`workspace_binary`] runs `cargo build` for the binary, with the profile (and target)
//! the running test was built with, once per test process, and returns the path cargo
//! reports. If that build fails the test fails and says why; nothing falls back to
//! whatever file is there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use host::blocking::run_with_deadline;

/// A build of one binary may take this long (cold, on two cores shared with other tests).
const BUILD_DEADLINE: Duration = Duration::from_secs(900);

/// The workspace root (this crate lives in `<root>/tests`).
pub fn workspace_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest)
}

/// Where and how the running test was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildLayout {
    /// The target directory (it holds `.rustc_info.json`).
    pub target_dir: PathBuf,
    /// The cargo profile: `dev` for `target/debug`, otherwise the folder's name.
    pub profile: String,
    /// `--target`, when the build had one (`target/<triple>/<profile>`).
    pub triple: Option<String>,
}

impl BuildLayout {
    /// The layout of the running test executable (`<target>/[<triple>/]<profile>/deps/<exe>`).
    pub fn of_current_test() -> Result<Self> {
        let exe = std::env::current_exe().context("the test's own executable")?;
        Self::of_test_executable(&exe)
    }

    /// The layout of the test executable at `exe`.
    pub fn of_test_executable(exe: &Path) -> Result<Self> {
        let unexpected = || {
            format!(
                "{} does not lie in <target>/[<triple>/]<profile>/deps/",
                exe.display()
            )
        };
        let deps = exe.parent().with_context(unexpected)?;
        ensure!(deps.file_name() == Some("deps".as_ref()), unexpected());
        let profile_dir = deps.parent().with_context(unexpected)?;
        let name = |dir: &Path| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
                .with_context(unexpected)
        };
        let folder = name(profile_dir)?;
        let profile = if folder == "debug" {
            "dev".to_string()
        } else {
            folder
        };
        let above = profile_dir.parent().with_context(unexpected)?;
        // Cargo writes `.rustc_info.json` at the root of a target directory only.
        if above.join(".rustc_info.json").is_file() {
            return Ok(BuildLayout {
                target_dir: above.to_path_buf(),
                profile,
                triple: None,
            });
        }
        let target_dir = above.parent().with_context(unexpected)?;
        ensure!(target_dir.join(".rustc_info.json").is_file(), unexpected());
        Ok(BuildLayout {
            target_dir: target_dir.to_path_buf(),
            profile,
            triple: Some(name(above)?),
        })
    }
}

/// The binary `bin` of workspace package `package`, built now (once per test process) with
/// the running test's profile; see the module docs.
pub fn workspace_binary(package: &str, bin: &str) -> Result<PathBuf> {
    static BUILT: OnceLock<Mutex<BTreeMap<String, Result<PathBuf, String>>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    // Held during the build: two threads of one process asking at once build once.
    let mut built = built
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = format!("{package}/{bin}");
    let outcome = built
        .entry(key)
        .or_insert_with(|| build(package, bin).map_err(|error| format!("{error:#}")));
    match outcome {
        Ok(path) => Ok(path.clone()),
        Err(error) => bail!("{error}"),
    }
}

fn build(package: &str, bin: &str) -> Result<PathBuf> {
    let layout = BuildLayout::of_current_test()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut command = Command::new(&cargo);
    command
        .current_dir(workspace_root())
        // Offline: everything the binary needs was fetched to build this test, and a test
        // in an isolated namespace has no network to fetch from anyway.
        .args([
            "build",
            "--offline",
            "--message-format=json-render-diagnostics",
        ])
        .args(["-p", package, "--bin", bin, "--profile", &layout.profile])
        .arg("--target-dir")
        .arg(&layout.target_dir);
    if let Some(triple) = &layout.triple {
        command.args(["--target", triple]);
    }
    let shown = format!(
        "cargo build -p {package} --bin {bin} --profile {}",
        layout.profile
    );
    let started = Instant::now();
    let output = run_with_deadline(&mut command, None, BUILD_DEADLINE)
        .with_context(|| format!("cannot run `{shown}` ({})", Path::new(&cargo).display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!(
            "`{shown}` failed ({}); this test needs a fresh {bin} and uses no older one:\n{}",
            output.status,
            tail(&stderr, 40)
        );
    }
    let path = executable(&String::from_utf8_lossy(&output.stdout), bin).with_context(|| {
        format!(
            "`{shown}` named no executable {bin}:\n{}",
            tail(&stderr, 20)
        )
    })?;
    eprintln!(
        "{bin}: {} fresh after `{shown}` ({:.1} s)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(path)
}

/// The executable cargo's JSON messages report for binary target `bin`.
fn executable(messages: &str, bin: &str) -> Option<PathBuf> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| {
            message["reason"] == "compiler-artifact"
                && message["target"]["name"] == bin
                && message["target"]["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"))
        })
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_comes_from_the_test_executables_path() -> Result<()> {
        let target = tempfile::tempdir()?;
        std::fs::write(target.path().join(".rustc_info.json"), "{}")?;
        let plain = target.path().join("debug/deps/netem_vm-0123");
        assert_eq!(
            BuildLayout::of_test_executable(&plain)?,
            BuildLayout {
                target_dir: target.path().to_path_buf(),
                profile: "dev".into(),
                triple: None
            }
        );
        let crossed = target
            .path()
            .join("x86_64-unknown-linux-gnu/release/deps/controller_vm-4567");
        assert_eq!(
            BuildLayout::of_test_executable(&crossed)?,
            BuildLayout {
                target_dir: target.path().to_path_buf(),
                profile: "release".into(),
                triple: Some("x86_64-unknown-linux-gnu".into())
            }
        );
        assert!(BuildLayout::of_test_executable(&target.path().join("debug/netem_vm")).is_err());
        Ok(())
    }

    #[test]
    fn the_executable_is_read_from_cargos_messages() {
        let messages = r#"{"reason":"compiler-artifact","target":{"name":"proto","kind":["lib"]},"executable":null}
{"reason":"compiler-artifact","target":{"name":"continuum-agent","kind":["bin"]},"executable":"/t/debug/continuum-agent"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            executable(messages, "continuum-agent"),
            Some(PathBuf::from("/t/debug/continuum-agent"))
        );
        assert_eq!(executable(messages, "bootstrap"), None);
    }

    #[test]
    fn the_current_test_has_a_layout() -> Result<()> {
        let layout = BuildLayout::of_current_test()?;
        assert!(layout.target_dir.join(".rustc_info.json").is_file());
        Ok(())
    }
}
