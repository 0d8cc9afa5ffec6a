//! Checks the agent's netem against a real kernel. Built static and run as the payload of a
//! throwaway VM by `tests/netem_vm.rs` (it reconfigures the network of the machine it runs
//! on, so it refuses to run unless `CONTINUUM_VM_CHECK=1`).
//!
//! It joins the VM's root namespace ("a", 198.18.0.1/30 on `va`) and a namespace of its own
//! ("b", 198.18.0.2/30 on `vb`) with a veth pair, applies netem through the agent library on
//! the egress of both ends, and measures with a UDP echo probe. Each check prints one line
//! `RESULT {json}` with at least `check` and `pass`; the last one is `done`.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use agent::netem::{
    Netem, NetemCapability, NetemError, NetemOptions, NetemParams, netem_available,
};
use anyhow::{Context, Result, bail};
use futures_util::TryStreamExt;
use rtnetlink::{Handle, LinkUnspec, LinkVeth};
use serde_json::{Value, json};

const ADDR_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const ADDR_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const ECHO_PORT: u16 = 7007;
const PROBES: usize = 500;
/// Twice the 500 the acceptance asks for: the 6-14 % band then sits 4 standard deviations
/// from 10 % instead of 3, so a correct netem fails it about once in 30,000 runs, not 300.
const LOSS_PROBES: usize = 1000;
/// Far above the slowest RTT configured here (cloud: about 8 ms) plus TCG's 13 ms outliers.
const PROBE_TIMEOUT: Duration = Duration::from_millis(50);

/// The study's scenarios as totals between two nodes (Table II), split over both ends.
const SCENARIOS: [(&str, f64, f64, f64); 2] =
    [("edge", 2.5, 0.5, 0.04), ("cloud", 6.25, 1.25, 0.1)];

fn main() -> ExitCode {
    if std::env::var("CONTINUUM_VM_CHECK").as_deref() != Ok("1") {
        eprintln!(
            "refusing to run: this program rewires the network; set CONTINUUM_VM_CHECK=1 inside a VM"
        );
        return ExitCode::FAILURE;
    }
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

fn report(check: &str, pass: bool, details: Value) -> bool {
    let mut line = json!({ "check": check, "pass": pass });
    if let (Some(line), Value::Object(details)) = (line.as_object_mut(), details) {
        line.extend(details);
    }
    println!("RESULT {line}");
    pass
}

async fn run() -> Result<bool> {
    let mut ok = true;
    let capability = netem_available().await;
    ok &= report(
        "capability",
        capability == NetemCapability::Available,
        json!({ "found": capability.to_string() }),
    );

    let bed = Testbed::build().await?;
    let baseline = bed.probe(PROBES)?;
    ok &= report("baseline", baseline.lost == 0, baseline.summary());

    for (name, total_delay, total_jitter, total_loss) in SCENARIOS {
        // The study's repo put half of each total on each end's egress.
        let side =
            NetemParams::from_millis(total_delay / 2.0, total_jitter / 2.0, total_loss / 2.0)?;
        let expected = NetemOptions::from_params(&side)?;
        let held_a = bed.a.apply("va", &side).await?;
        let held_b = bed.b.apply("vb", &side).await?;
        let read = (bed.a.read("va").await?, bed.b.read("vb").await?);
        ok &= report(
            &format!("{name}_readback"),
            read == (Some(expected), Some(expected)) && held_a == expected && held_b == expected,
            json!({ "asked": format!("{side:?}"), "held_va": format!("{:?}", read.0), "held_vb": format!("{:?}", read.1) }),
        );
        let probes = bed.probe(PROBES)?;
        let added = probes.median_ms() - baseline.median_ms();
        let tolerance = 0.2 * total_delay + 0.5;
        let mut details = probes.summary();
        details["configured_ms"] = json!(total_delay);
        details["added_ms"] = json!(added);
        details["tolerance_ms"] = json!(tolerance);
        ok &= report(
            &format!("{name}_delay"),
            (added - total_delay).abs() <= tolerance,
            details,
        );
        bed.a.clear("va").await?;
        bed.b.clear("vb").await?;
    }

    let loss = NetemParams::from_millis(0.0, 0.0, 10.0)?;
    bed.a.apply("va", &loss).await?;
    let probes = bed.probe(LOSS_PROBES)?;
    let rate = probes.lost as f64 / LOSS_PROBES as f64;
    let mut details = probes.summary();
    details["loss_rate"] = json!(rate);
    details["configured"] = json!(0.10);
    ok &= report("loss", (0.06..=0.14).contains(&rate), details);
    bed.a.clear("va").await?;

    ok &= check_combinations(&bed.a).await?;
    ok &= check_leases(&bed.a).await?;
    ok &= check_bad_input(&bed.a).await?;
    Ok(report("done", ok, json!({})))
}

/// Every combination applies as asked, including the ones the study's successor dropped.
async fn check_combinations(netem: &Netem) -> Result<bool> {
    let ms = NetemParams::from_millis;
    let combinations = [
        ("delay", ms(10.0, 0.0, 0.0)?),
        ("delay_jitter", ms(10.0, 2.0, 0.0)?),
        ("loss", ms(0.0, 0.0, 1.0)?),
        ("delay_loss", ms(10.0, 0.0, 1.0)?),
        ("delay_jitter_loss", ms(10.0, 2.0, 1.0)?),
        (
            "rate",
            NetemParams {
                rate_bytes_per_sec: Some(125_000),
                ..Default::default()
            },
        ),
        (
            "rate64",
            NetemParams {
                rate_bytes_per_sec: Some(5_000_000_000),
                ..Default::default()
            },
        ),
        (
            "limit",
            NetemParams {
                limit_packets: Some(500),
                ..Default::default()
            },
        ),
        (
            "all",
            NetemParams {
                rate_bytes_per_sec: Some(1_250_000),
                limit_packets: Some(2000),
                ..ms(5.0, 1.0, 0.5)?
            },
        ),
    ];
    let mut ok = true;
    for (name, params) in combinations {
        let expected = NetemOptions::from_params(&params)?;
        let applied = netem.apply("va", &params).await.map_err(|e| e.to_string());
        let read = netem.read("va").await?;
        let cleared = netem.clear("va").await?;
        let after = netem.read("va").await?;
        let pass = applied == Ok(expected)
            && read == Some(expected)
            && cleared == Some(expected)
            && after.is_none();
        ok &= report(
            &format!("apply_{name}"),
            pass,
            json!({ "applied": format!("{applied:?}"), "read": format!("{read:?}"), "after_clear": format!("{after:?}") }),
        );
    }
    Ok(ok)
}

async fn check_leases(netem: &Netem) -> Result<bool> {
    let params = NetemParams::from_millis(1.25, 0.25, 0.02)?;
    let ttl = Duration::from_secs(1);
    let lease = netem.apply_leased("va", &params, ttl).await?;
    for _ in 0..2 {
        tokio::time::sleep(ttl / 2).await;
        lease.renew()?;
    }
    let renewed = Instant::now();
    tokio::time::sleep(ttl / 2).await;
    // 1.5 TTL after the apply, but only half a TTL after the last renewal.
    let held_after_renewals = netem.read("va").await?.is_some();
    let gone_after = poll_until_gone(netem, Duration::from_secs(5))
        .await?
        .map(|_| renewed.elapsed());
    let pass = held_after_renewals
        && !lease.is_active()
        && gone_after.is_some_and(|t| t >= ttl && t <= ttl + Duration::from_millis(500));
    let mut ok = report(
        "lease_expiry",
        pass,
        json!({ "ttl_ms": ttl.as_millis(), "held_after_renewals": held_after_renewals,
                "gone_after_last_renewal_ms": gone_after.map(|t| t.as_secs_f64() * 1000.0) }),
    );

    let lease = netem
        .apply_leased("va", &params, Duration::from_secs(60))
        .await?;
    let released = lease.release().await.map_err(|e| e.to_string());
    let after = netem.read("va").await?;
    ok &= report(
        "lease_release",
        released.is_ok() && after.is_none(),
        json!({ "released": format!("{released:?}") }),
    );

    let lease = netem
        .apply_leased("va", &params, Duration::from_secs(60))
        .await?;
    drop(lease);
    let gone = poll_until_gone(netem, Duration::from_secs(2)).await?;
    ok &= report(
        "lease_drop",
        gone.is_some(),
        json!({ "gone_after_ms": gone.map(|t| t.as_secs_f64() * 1000.0) }),
    );
    Ok(ok)
}

/// Polls the qdisc of `va` until no netem is left; returns how long that took.
async fn poll_until_gone(netem: &Netem, limit: Duration) -> Result<Option<Duration>> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if netem.read("va").await?.is_none() {
            return Ok(Some(start.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(None)
}

async fn check_bad_input(netem: &Netem) -> Result<bool> {
    let unknown = netem
        .apply("nope0", &NetemParams::from_millis(1.0, 0.0, 0.0)?)
        .await;
    let invalid = netem
        .apply(
            "va",
            &NetemParams {
                loss_percent: 150.0,
                ..Default::default()
            },
        )
        .await;
    let untouched = netem.read("va").await?.is_none();
    let pass = matches!(unknown, Err(NetemError::UnknownInterface { .. }))
        && matches!(&invalid, Err(NetemError::InvalidParams(e)) if e.field() == "loss_percent")
        && untouched;
    Ok(report(
        "bad_input",
        pass,
        json!({ "unknown_interface": format!("{unknown:?}"), "loss_150": format!("{invalid:?}") }),
    ))
}

/// Two namespaces joined by a veth pair, an echo server in "b" and a probe socket in "a".
struct Testbed {
    a: Netem,
    b: Netem,
    probe: UdpSocket,
}

impl Testbed {
    async fn build() -> Result<Self> {
        let root = File::open("/proc/thread-self/ns/net").context("open own netns")?;
        // This thread enters "b" just long enough to open b's sockets, which stay in "b".
        unshare_netns()?;
        let b = connect()?;
        let echo = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT)).context("echo socket")?;
        let ns_b = File::open("/proc/thread-self/ns/net").context("open netns b")?;
        // SAFETY: setns takes a valid fd we own; it moves only this thread.
        if unsafe { libc::setns(root.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!(
                "setns back to the root namespace: {}",
                std::io::Error::last_os_error()
            );
        }
        let a = connect()?;

        a.link()
            .add(LinkVeth::new("va", "vb").build())
            .execute()
            .await
            .context("create veth")?;
        let vb = index(&a, "vb").await?;
        a.link()
            .set(
                LinkUnspec::new_with_index(vb)
                    .setns_by_fd(ns_b.as_raw_fd())
                    .build(),
            )
            .execute()
            .await
            .context("move vb to b")?;
        configure(&a, "va", ADDR_A).await?;
        configure(&b, "vb", ADDR_B).await?;

        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = echo.recv_from(&mut buf) {
                let _ = echo.send_to(&buf[..n], from);
            }
        });
        let probe = UdpSocket::bind((ADDR_A, 0)).context("probe socket")?;
        probe.connect(SocketAddr::new(IpAddr::V4(ADDR_B), ECHO_PORT))?;
        probe.set_read_timeout(Some(PROBE_TIMEOUT))?;
        let bed = Self {
            a: Netem::with_handle(a),
            b: Netem::with_handle(b),
            probe,
        };
        bed.warm_up()?;
        Ok(bed)
    }

    /// Waits for the link to carry packets, and lets the first slow packets of TCG pass.
    fn warm_up(&self) -> Result<()> {
        let start = Instant::now();
        while self.probe(1)?.lost > 0 {
            if start.elapsed() > Duration::from_secs(10) {
                bail!("no echo over the veth pair within 10 s");
            }
        }
        self.probe(50).map(|_| ())
    }

    /// Sends `n` probes one after the other; a reply with another sequence number is late.
    fn probe(&self, n: usize) -> Result<Probes> {
        let mut rtts = Vec::with_capacity(n);
        let mut lost = 0;
        let mut buf = [0u8; 64];
        for seq in 0..n as u64 {
            let sent = Instant::now();
            self.probe.send(&seq.to_be_bytes())?;
            loop {
                match self.probe.recv(&mut buf) {
                    Ok(8) if buf[..8] == seq.to_be_bytes() => {
                        rtts.push(sent.elapsed());
                        break;
                    }
                    Ok(_) => continue,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        lost += 1;
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(Probes { rtts, lost })
    }
}

struct Probes {
    rtts: Vec<Duration>,
    lost: usize,
}

impl Probes {
    fn quantile_ms(&self, q: f64) -> f64 {
        let mut sorted = self.rtts.clone();
        sorted.sort();
        let i = ((sorted.len().saturating_sub(1)) as f64 * q).round() as usize;
        sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    }

    fn median_ms(&self) -> f64 {
        self.quantile_ms(0.5)
    }

    fn summary(&self) -> Value {
        json!({ "probes": self.rtts.len() + self.lost, "lost": self.lost,
                "p10_ms": self.quantile_ms(0.1), "median_ms": self.median_ms(), "p90_ms": self.quantile_ms(0.9) })
    }
}

fn unshare_netns() -> Result<()> {
    // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        bail!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn connect() -> Result<Handle> {
    let (connection, handle, _) = rtnetlink::new_connection().context("netlink socket")?;
    tokio::spawn(connection);
    Ok(handle)
}

async fn index(handle: &Handle, name: &str) -> Result<u32> {
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

async fn configure(handle: &Handle, name: &str, addr: Ipv4Addr) -> Result<()> {
    let idx = index(handle, name).await?;
    handle
        .address()
        .add(idx, IpAddr::V4(addr), 30)
        .execute()
        .await
        .with_context(|| format!("address on {name}"))?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(idx).up().build())
        .execute()
        .await
        .with_context(|| format!("{name} up"))?;
    Ok(())
}
