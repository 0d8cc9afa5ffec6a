//! What the payload's suites share: moving threads between network namespaces, rtnetlink
//! links and addresses, and the `RESULT {json}` lines the tests read from the console, each
//! naming its suite ([`SUITE_VAR`]).

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

use anyhow::{Context, Result, bail};
use futures_util::TryStreamExt;
use rtnetlink::{Handle, LinkUnspec};
use serde_json::{Value, json};

pub fn unshare_netns() -> Result<()> {
    // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        bail!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread (only) into the namespace `netns` refers to.
pub fn setns(netns: &File) -> Result<()> {
    // SAFETY: setns takes a valid fd we own; it moves only this thread.
    if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `command`'s process enter the namespace `netns` refers to before it runs; `netns`
/// must stay open until the process has started.
pub fn spawn_in(command: &mut std::process::Command, netns: &File) {
    use std::os::unix::process::CommandExt;
    let fd = netns.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only calls setns, which is
    // async-signal-safe; the caller keeps `fd` open in the parent (and so the child).
    unsafe {
        command.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

pub fn connect() -> Result<Handle> {
    let (connection, handle, _) = rtnetlink::new_connection().context("netlink socket")?;
    tokio::spawn(connection);
    Ok(handle)
}

pub async fn index(handle: &Handle, name: &str) -> Result<u32> {
    let link = handle
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await?;
    Ok(link
        .with_context(|| format!("no link {name}"))?
        .header
        .index)
}

pub async fn up(handle: &Handle, name: &str) -> Result<()> {
    let idx = index(handle, name).await?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(idx).up().build())
        .execute()
        .await
        .with_context(|| format!("{name} up"))
}

pub async fn configure(handle: &Handle, name: &str, addr: Ipv4Addr) -> Result<()> {
    let idx = index(handle, name).await?;
    handle
        .address()
        .add(idx, IpAddr::V4(addr), 30)
        .execute()
        .await
        .with_context(|| format!("address on {name}"))?;
    up(handle, name).await
}

/// The environment variable naming the suite a process runs, set by `main.rs` for each
/// suite's process and copied into every result line as `"suite"`.
pub const SUITE_VAR: &str = "CONTINUUM_VM_SUITE";

/// How far a delay measured in the VM may be from what netem was asked to add: 10 %. The VM
/// keeps guest time by instruction count (`vm/boot.sh`: `-icount shift=0,sleep=off`), so a
/// guest timer fires when it is due and netem adds what it is asked to; without it TCG made
/// every guest timer 0.2-0.5 ms late and the rises 11-23 % high on a shared host.
pub const DELAY_TOLERANCE: f64 = 0.10;

pub fn report(check: &str, pass: bool, details: Value) -> bool {
    let suite = std::env::var(SUITE_VAR).unwrap_or_default();
    let mut line = json!({ "suite": suite, "check": check, "pass": pass });
    if let (Some(line), Value::Object(details)) = (line.as_object_mut(), details) {
        line.extend(details);
    }
    println!("RESULT {line}");
    pass
}

/// Prints `file` for the test on the host to write under `target/vm-artifacts/` (a report to
/// open in a browser): lines `ARTIFACT <name> <base64 chunk>`, in order, then `ARTIFACT <name>
/// end`. Chunks are short because the serial console may break long lines.
pub fn artifact(name: &str, file: &[u8]) {
    use base64::Engine as _;
    for chunk in file.chunks(3 * 256) {
        let text = base64::engine::general_purpose::STANDARD.encode(chunk);
        println!("ARTIFACT {name} {text}");
    }
    println!("ARTIFACT {name} end");
}

/// Whether this program was started as the VM's payload (it rewires the network, so it
/// refuses to run anywhere else and says so).
pub fn inside_the_vm() -> bool {
    let inside = std::env::var("CONTINUUM_VM_CHECK").as_deref() == Ok("1");
    if !inside {
        eprintln!(
            "refusing to run: this program rewires the network; set CONTINUUM_VM_CHECK=1 inside a VM"
        );
    }
    inside
}

/// A suite's setup, shared: warnings as `filter` allows on stderr, `run` on a current-thread
/// runtime, and a fatal error reported as a failed `fatal` check.
pub fn run_suite<F>(filter: &str, run: impl FnOnce() -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<bool>>,
{
    use std::process::ExitCode;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("runtime")
        .and_then(|rt| rt.block_on(run()));
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            report("fatal", false, json!({ "error": format!("{err:#}") }));
            ExitCode::FAILURE
        }
    }
}
