//! Running a privileged test in a process of its own whose network namespace
//! has nothing but loopback, so a mistake fails with "network unreachable"
//! instead of leaving the machine.
//!
//! # How
//! A test calls [`isolated_netns_test!`](crate::isolated_netns_test) (or
//! [`isolate_test`]) first. In the test process this re-executes the test
//! binary for just that test (`--exact NAME`, the name libtest gives the test
//! thread), with, between fork and exec:
//! - `unshare(CLONE_NEWNET | CLONE_NEWNS)`: a fresh network namespace (only
//!   a down `lo`) and a mount namespace of its own;
//! - `/` made a recursive slave, then a fresh tmpfs on `/run/netns`: the
//!   namespaces `ip netns add` creates there are bind mounts seen only by
//!   this process and its children. When the process ends, however it ends,
//!   they go with it: nothing can be left behind in the machine's
//!   `/run/netns`, and parallel tests never see each other's namespaces;
//! - `PR_SET_PDEATHSIG`: if the outer test is killed (a nextest timeout), the
//!   isolated one dies too.
//!
//! The outer test waits for it (bounded by [`ISOLATED_RUN_DEADLINE`]), shows
//! its output and fails if it did not pass. In the isolated process the same
//! call checks that the namespace really has no interface but `lo`, brings
//! `lo` up, and lets the test run.
//!
//! # Why not something lighter
//! - `unshare(CLONE_NEWNET)` on the test thread isolates only that thread
//!   and what it spawns afterwards: a `#[tokio::test]` multi-thread runtime's
//!   workers, made before the body runs, would stay in the root namespace.
//!   Isolating the whole process leaves no such thread.
//! - `unshare --net` without a mount namespace would put the testbed's
//!   namespaces in the machine's `/run/netns`, where a crashed test leaves
//!   them.
//!
//! Both `cargo test` (tests on threads of one process) and nextest (a process
//! per test) work: each test gets its own isolated process either way.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::running_in_ci;
use host::blocking::run_with_deadline;

/// Set in the isolated process to the outer test process's PID.
pub const ISOLATED_VAR: &str = "CONTINUUM_NETNS_ISOLATED";

/// iproute2, called by full path.
pub const IP_BINARY: &str = "/usr/sbin/ip";

/// How long the isolated run of one test may take, kept below nextest's
/// 5-minute kill so its output is still shown.
pub const ISOLATED_RUN_DEADLINE: Duration = Duration::from_secs(240);

/// Where `ip netns` keeps named namespaces.
pub(crate) const NETNS_DIR: &str = "/run/netns";
/// Where the controller keeps its emulated runs' folders; each isolated test gets its own.
pub(crate) const CONTINUUM_RUN_DIR: &str = "/run/continuum";

/// Capabilities a testbed needs: `CAP_NET_ADMIN` (links, addresses) and
/// `CAP_SYS_ADMIN` (namespaces, mounts).
const REQUIRED_CAPABILITIES: [(u32, &str); 2] = [(12, "CAP_NET_ADMIN"), (21, "CAP_SYS_ADMIN")];

/// Checks that this process may build testbeds: it holds `CAP_NET_ADMIN` and
/// `CAP_SYS_ADMIN` (in practice: runs as root) and iproute2 is installed.
///
/// Returns `true` if so. Otherwise prints why the calling test is skipped
/// and returns `false`, except under CI ([`running_in_ci`]), where this
/// panics with the reason.
pub fn require_root() -> bool {
    skip_or_fail(missing_privileges(), running_in_ci())
}

fn missing_privileges() -> Option<String> {
    let mut reasons = Vec::new();
    match effective_capabilities() {
        Ok(caps) => {
            let missing: Vec<&str> = REQUIRED_CAPABILITIES
                .iter()
                .filter(|(bit, _)| caps & (1 << bit) == 0)
                .map(|(_, name)| *name)
                .collect();
            if !missing.is_empty() {
                reasons.push(format!(
                    "network namespace tests need {} (run them as root)",
                    missing.join(" and ")
                ));
            }
        }
        Err(error) => reasons.push(format!(
            "cannot read this process's capabilities: {error:#}"
        )),
    }
    reasons.extend(crate::require_binary(IP_BINARY));
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

fn skip_or_fail(reason: Option<String>, in_ci: bool) -> bool {
    let Some(reason) = reason else {
        return true;
    };
    assert!(!in_ci, "CI runs every test as root, but {reason}");
    eprintln!("SKIPPED: {reason}");
    false
}

/// The effective capability set, from `/proc/self/status`.
fn effective_capabilities() -> Result<u64> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    parse_cap_eff(&status)
}

fn parse_cap_eff(status: &str) -> Result<u64> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .context("no CapEff line in /proc/self/status")?;
    u64::from_str_radix(line.trim(), 16).with_context(|| format!("CapEff {line:?}"))
}

/// Makes the calling test run in an isolated process (see the module docs).
///
/// Returns `true` when the caller is that isolated process and should run
/// the test body. Returns `false` when the caller should return at once: the
/// test was skipped (no root, see [`require_root`]) or its isolated run
/// passed. Panics if the isolated run failed, or if this process claims to
/// be isolated but its namespace has more than `lo`.
///
/// Must be called from the test's own thread: its name is the test's name.
pub fn isolate_test() -> bool {
    isolate_test_within(ISOLATED_RUN_DEADLINE)
}

/// [`isolate_test`] for a test whose isolated run may take up to `deadline` (keep it below
/// the test's own nextest kill, so that its output is still shown).
pub fn isolate_test_within(deadline: Duration) -> bool {
    if std::env::var_os(ISOLATED_VAR).is_some() {
        static READY: OnceLock<Result<(), String>> = OnceLock::new();
        let ready = READY.get_or_init(|| prepare_isolated_process().map_err(|e| format!("{e:#}")));
        if let Err(error) = ready {
            panic!("{ISOLATED_VAR} is set but this process is not isolated: {error}");
        }
        return true;
    }
    if !require_root() {
        return false;
    }
    let thread = std::thread::current();
    let Some(test_name) = thread.name().filter(|name| *name != "main") else {
        panic!("isolate_test must be called on the test's own thread (it names the test)");
    };
    if let Err(error) = run_isolated(test_name, deadline) {
        panic!("{error:#}");
    }
    false
}

/// Runs the calling test in an isolated process: returns from the test
/// unless this is that process. See [`isolate_test`].
///
/// Use as the first statement of a test; pass the value to return (such as
/// `Ok(())`) if the test returns one.
///
/// ```no_run
/// #[test]
/// fn nodes_talk() {
///     tests::isolated_netns_test!();
///     let testbed = tests::netns::Testbed::build("talk", &["a".into(), "b".into()]);
///     // ...
/// }
/// ```
#[macro_export]
macro_rules! isolated_netns_test {
    () => {
        if !$crate::netns::isolate_test() {
            return;
        }
    };
    ($skipped:expr) => {
        if !$crate::netns::isolate_test() {
            return $skipped;
        }
    };
}

fn run_isolated(test_name: &str, deadline: Duration) -> Result<()> {
    // The mount point for the private tmpfs; `ip netns add` would create it
    // anyway.
    fs::create_dir_all(NETNS_DIR).with_context(|| format!("creating {NETNS_DIR}"))?;
    // The mount point for the test's own `/run/continuum` (where the controller keeps its
    // emulated runs' folders, and sweeps those of dead controllers): tests running at once
    // must not see each other's.
    fs::create_dir_all(CONTINUUM_RUN_DIR)
        .with_context(|| format!("creating {CONTINUUM_RUN_DIR}"))?;
    let exe = std::env::current_exe().context("locating the test binary")?;
    let mut command = Command::new(exe);
    command
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .arg("--include-ignored")
        .env(ISOLATED_VAR, std::process::id().to_string());
    // SAFETY: the closure only makes system calls with static arguments,
    // which is allowed between fork and exec.
    unsafe { command.pre_exec(enter_private_namespaces) };
    let output = run_with_deadline(&mut command, None, deadline)
        .with_context(|| format!("running {test_name} in an isolated network namespace"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        bail!(
            "{test_name} failed in its isolated network namespace ({})",
            output.status
        );
    }
    // libtest exits 0 when its filter matched nothing: make sure it ran.
    if !stdout.contains("test result: ok. 1 passed") {
        bail!("the isolated run did not run {test_name} (is it called from the test thread?)");
    }
    Ok(())
}

/// Runs in the forked child before exec: only system calls, no allocation.
fn enter_private_namespaces() -> std::io::Result<()> {
    fn check(result: libc::c_int) -> std::io::Result<()> {
        if result == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
    let tmpfs = c"tmpfs";
    // SAFETY: system calls with valid, NUL-terminated static strings.
    unsafe {
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
        ))?;
        check(libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWNS))?;
        // Nothing mounted from here on propagates back to the machine.
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            tmpfs.as_ptr(),
            c"/run/netns".as_ptr(),
            tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"mode=0755".as_ptr().cast(),
        ))?;
        check(libc::mount(
            tmpfs.as_ptr(),
            c"/run/continuum".as_ptr(),
            tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755".as_ptr().cast(),
        ))
    }
}

fn prepare_isolated_process() -> Result<()> {
    ensure_thread_isolated()?;
    let output = run_with_deadline(
        Command::new(IP_BINARY).args(["link", "set", "lo", "up"]),
        None,
        Duration::from_secs(10),
    )?;
    if !output.status.success() {
        bail!(
            "ip link set lo up failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Fails unless the calling thread's network namespace has no interface
/// but `lo`: nothing sent from it can leave the machine, whatever the
/// address.
pub fn ensure_thread_isolated() -> Result<()> {
    let dev = fs::read_to_string("/proc/thread-self/net/dev")
        .context("reading /proc/thread-self/net/dev")?;
    let interfaces = parse_net_dev(&dev);
    if interfaces != ["lo"] {
        bail!(
            "this thread's network namespace has interfaces {interfaces:?}, not just lo; \
             start the test with tests::isolated_netns_test!()"
        );
    }
    Ok(())
}

/// The interface names in `/proc/net/dev` (after its two header lines).
fn parse_net_dev(dev: &str) -> Vec<&str> {
    dev.lines()
        .skip(2)
        .filter_map(|line| Some(line.split_once(':')?.0.trim()))
        .collect()
}

/// In the isolated process, the network namespace the test binary was
/// started in (the outer test process's), for read-only inspection with
/// `nsenter --net=PATH`. `None` outside an isolated process.
pub fn outer_netns_path() -> Option<PathBuf> {
    let pid: u32 = std::env::var(ISOLATED_VAR).ok()?.parse().ok()?;
    Some(PathBuf::from(format!("/proc/{pid}/ns/net")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_read_from_proc_status() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status).unwrap(), 0x1ff_ffff_ffff);
        assert!(parse_cap_eff("Name:\tx\n").is_err());
    }

    #[test]
    fn interfaces_are_read_from_net_dev() {
        let dev = "Inter-|   Receive    |  Transmit\n face |bytes packets|bytes packets\n    lo:       0       0\n  eth0: 12 3\n";
        assert_eq!(parse_net_dev(dev), ["lo", "eth0"]);
    }

    #[test]
    fn missing_privileges_skip_locally_and_fail_in_ci() {
        assert!(skip_or_fail(None, true));
        assert!(!skip_or_fail(Some("no root".into()), false));
        let in_ci = std::panic::catch_unwind(|| skip_or_fail(Some("no root".into()), true));
        assert!(in_ci.is_err());
    }
}
