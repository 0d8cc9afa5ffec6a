//! An agent killed with netem applied (SIGKILL: no shutdown runs, and the lease would hold
//! the qdisc for another minute) leaves the qdisc in the kernel; the next agent started on the
//! node clears it before it serves, from the record the killed one left on disk. The killed
//! agent is a real process: this program re-executed as [`CHILD`], serving agent "b" in
//! namespace "b" with the same state directory as the in-process agents of the netem suite.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::netem::NetemOptions;
use agent::service::AgentService;
use anyhow::{Context, Result, bail};
use domain::NetemParams;
use proto::mtls::Credentials;
use serde_json::json;

use crate::common::{report, setns};
use crate::netem::{
    AGENTS, MEASURE_LEASE, NsThread, PKI_DIR, Pki, RunningAgent, Testbed, apply_request, rpc,
};

/// The argument that makes this program serve one agent until it is killed.
pub const CHILD: &str = "agent-child";
/// The next agent must have cleared the qdisc within this of its start.
const CLEARED_WITHIN: Duration = Duration::from_secs(1);

/// `agent-child NETNS`: serves agent "b" in the namespace at path `NETNS` until killed.
pub fn child_main(args: &[String]) -> ExitCode {
    let outcome = (|| -> Result<()> {
        let [netns] = args else {
            bail!("usage: {CHILD} NETNS_PATH");
        };
        setns(&File::open(netns).with_context(|| format!("open {netns}"))?)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let (name, interface) = AGENTS[1];
            let credentials = Credentials::load(Path::new(PKI_DIR), name)?;
            let config = Pki::agent_config(Path::new(PKI_DIR), name, interface);
            let listener = tokio::net::TcpListener::bind(config.listen).await?;
            let service = Arc::new(AgentService::new(config).await);
            agent::server::serve(service, &credentials, listener, std::future::pending()).await?;
            Ok(())
        })
    })();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{CHILD}: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Kills a child agent holding netem on `vb`, then starts a fresh agent in "b".
pub async fn check_crash(bed: &Testbed, ns_b: &NsThread, pki: &Pki) -> Result<bool> {
    let params = NetemParams::from_millis(3.0, 0.5, 0.0)?;
    let expected = Some(NetemOptions::from_params(&params)?);
    let netns = format!("/proc/{}/fd/{}", std::process::id(), bed.ns_b.as_raw_fd());
    let mut child = Command::new(std::env::current_exe()?)
        .args([CHILD, &netns])
        .spawn()
        .context("start the child agent")?;
    let started = Instant::now();
    let mut client = loop {
        match ns_b.connect(&pki.controller).await {
            Ok(client) => break client,
            Err(_) if started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => {
                let _ = child.kill();
                return Err(error.context("the child agent never answered"));
            }
        }
    };
    let applied = rpc(client.apply_netem(apply_request("vb", &params, MEASURE_LEASE))).await;
    let held_before = bed.b.read("vb").await?;
    child.kill().context("SIGKILL the child agent")?;
    let killed = child.wait()?;
    drop(client);
    let held_after_kill = bed.b.read("vb").await?;

    let restarted = Instant::now();
    let fresh = RunningAgent::start(ns_b, pki, 1).await?;
    let after_start = bed.b.read("vb").await?;
    let took = restarted.elapsed();
    let stopped = fresh.stop().await;
    Ok(report(
        "crash_leaves_nothing",
        applied.is_ok()
            && held_before == expected
            && held_after_kill == expected
            && after_start.is_none()
            && took <= CLEARED_WITHIN
            && stopped.is_ok(),
        json!({ "applied": format!("{:?}", applied.map(|s| s.present)),
                "killed": killed.to_string(),
                "held_before_kill": format!("{held_before:?}"),
                "held_after_kill": format!("{held_after_kill:?}"),
                "after_next_start": format!("{after_start:?}"),
                "next_start_to_cleared_ms": took.as_secs_f64() * 1e3 }),
    ))
}
