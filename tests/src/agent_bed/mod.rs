//! Agents on a namespace testbed: the real `continuum-agent` binary (built fresh by
//! [`workspace_binary`]) as a process in each of tester, headnode and worker, with a
//! [`TestPki`] of their own, and a client holding the controller's identity. Used by the
//! agent's namespace tests and by the controller's end-to-end tests alike.
//!
//! # Layout
//! - this file: [`AgentBed`], agent configurations, [`connect_when_ready`], and the
//!   RunLoad helpers ([`workload`], [`run_load`]).
//! - [`external_mosquitto`]: a Mosquitto in the worker's namespace that a plan names as an
//!   external broker, and the top of such a plan.
//! - [`nebula`]: what the overlay tests add: `nebula-cert` certificates, the `[nebula]`
//!   section of agent.toml, the tun device and processes seen from outside.

pub mod external_mosquitto;
pub mod nebula;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use host::{Attempt, poll_until, poll_until_blocking};
use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use proto::client::connect_agent;
use proto::mtls::Credentials;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::netns::{NodeProcess, Testbed};
use crate::pki::TestPki;
use crate::workspace::workspace_binary;

/// The port every agent serves gRPC on, on its node's testbed address.
pub const AGENT_PORT: u16 = 7100;
/// The agents of a testbed, in node order (each gets host 1, 2, 3 of the subnet).
pub const AGENTS: [&str; 3] = ["tester", "headnode", "worker"];
/// How long an agent may take to answer after it was started.
pub const READY_DEADLINE: Duration = Duration::from_secs(20);
/// How often a wait for an agent looks again.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How often a wait for an agent to exit looks again.
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The agent binary, fresh ([`workspace_binary`]).
pub fn agent_binary() -> Result<PathBuf> {
    workspace_binary("agent", "continuum-agent")
}

/// A testbed with an agent on each of tester, headnode and worker, and an empty controller
/// node, plus the PKI they share.
#[derive(Debug)]
pub struct AgentBed {
    /// The namespaces.
    pub testbed: Testbed,
    /// The folder of the project's PKI, the agents' configs and their state folders.
    pub pki: tempfile::TempDir,
    /// The PKI in [`AgentBed::pki`].
    pub certificates: TestPki,
    /// Each agent's process, by name.
    pub agents: Vec<(String, NodeProcess)>,
}

impl AgentBed {
    /// The agents with plain configurations.
    pub fn start() -> Result<Self> {
        Self::start_with("agents", |_, _| Ok(String::new()))
    }

    /// The agents with `extra(testbed, name)` appended to each one's agent.toml (extra
    /// sections, written once the testbed's addresses are known).
    pub fn start_with(
        prefix: &str,
        extra: impl Fn(&Testbed, &str) -> Result<String>,
    ) -> Result<Self> {
        Self::start_with_nodes(prefix, &[], extra)
    }

    /// [`AgentBed::start_with`], plus `bare_nodes` without an agent.
    pub fn start_with_nodes(
        prefix: &str,
        bare_nodes: &[&str],
        extra: impl Fn(&Testbed, &str) -> Result<String>,
    ) -> Result<Self> {
        let nodes: Vec<_> = AGENTS
            .iter()
            .chain(&["controller"])
            .chain(bare_nodes)
            .map(|n| (*n).into())
            .collect();
        let binary = agent_binary()?;
        let testbed = Testbed::build(prefix, &nodes)?;
        let pki = tempfile::tempdir()?;
        let addresses: Vec<_> = AGENTS
            .iter()
            .map(|name| (*name, testbed.node(name).addr().into()))
            .collect();
        let certificates = TestPki::create(pki.path(), &addresses)?;
        let mut agents = Vec::new();
        for name in AGENTS {
            let node = testbed.node(name);
            let config = write_agent_config(
                pki.path(),
                name,
                SocketAddr::new(node.addr().into(), AGENT_PORT),
                &extra(&testbed, name)?,
            )?;
            let mut command = node.command(&binary);
            // rumqttd (the embedded broker) logs an ERROR for every client that disconnects.
            command
                .arg("--config")
                .arg(&config)
                .env("RUST_LOG", "warn,rumqttd=off");
            agents.push((name.to_string(), node.spawn(&mut command)?));
        }
        Ok(AgentBed {
            testbed,
            pki,
            certificates,
            agents,
        })
    }

    /// The agent's gRPC address.
    pub fn address(&self, agent: &str) -> String {
        format!("{}:{AGENT_PORT}", self.testbed.node(agent).addr())
    }

    /// The agent's state folder (brokers, installers).
    pub fn state_dir(&self, agent: &str) -> PathBuf {
        self.pki.path().join(format!("{agent}-state"))
    }

    /// The identity `name` (controller or an agent) from the PKI.
    pub fn credentials(&self, name: &str) -> Result<Credentials> {
        self.certificates.credentials(name)
    }

    /// Runs `f` in the controller node.
    pub fn on_controller_node<F, Fut, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future<Output = Result<T>>,
        T: Send,
    {
        self.testbed.node("controller").run_in(f)?
    }

    /// Sends SIGTERM to every agent and checks each exits cleanly within `limit`.
    pub fn terminate_agents(&mut self, limit: Duration) -> Result<()> {
        for (name, process) in &mut self.agents {
            // SAFETY: a plain kill(2) on our own child's PID.
            unsafe { libc::kill(process.id() as i32, libc::SIGTERM) };
            let status = poll_until_blocking(limit, EXIT_POLL_INTERVAL, || {
                match process.child_mut().try_wait() {
                    Ok(Some(status)) => Attempt::Done(status),
                    Ok(None) => Attempt::Retry(anyhow::anyhow!(
                        "agent {name} did not exit within {limit:?} of SIGTERM"
                    )),
                    Err(error) => Attempt::Stop(anyhow::Error::new(error)),
                }
            })?;
            if !status.success() {
                bail!("agent {name} exited with {status} after SIGTERM");
            }
        }
        Ok(())
    }
}

/// Writes `<pki>/<name>.toml` for an agent listening on `listen`, with `extra` appended
/// (top-level keys such as `roles`, then sections: the TLS files are an inline table).
pub fn write_agent_config(
    pki: &Path,
    name: &str,
    listen: SocketAddr,
    extra: &str,
) -> Result<PathBuf> {
    let state = pki.join(format!("{name}-state"));
    std::fs::create_dir_all(&state)?;
    // Brokers started as root drop to their own users, which must reach their files.
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    let path = pki.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\nlisten = \"{listen}\"\ndata_plane_interface = \"eth0\"\nstate_dir = \"{}\"\n\
             tls = {{ ca = \"{}\", cert = \"{}\", key = \"{}\" }}\n{extra}",
            state.display(),
            pki.join("ca.pem").display(),
            pki.join(format!("{name}.pem")).display(),
            pki.join(format!("{name}.key")).display(),
        ),
    )?;
    Ok(path)
}

/// Connects, retrying until the agent answers Info or the deadline passes.
pub async fn connect_when_ready(
    address: &str,
    credentials: &Credentials,
) -> Result<AgentClient<Channel>> {
    poll_until(READY_DEADLINE, POLL_INTERVAL, || async {
        let attempt = async {
            let mut client = connect_agent(address, None, credentials).await?;
            client.info(pb::InfoRequest {}).await?;
            anyhow::Ok(client)
        };
        match attempt.await {
            Ok(client) => Attempt::Done(client),
            Err(error) => Attempt::Retry(error),
        }
    })
    .await
    .map_err(|error| error.context(format!("agent {address} never answered")))
}

/// A protobuf duration (the longest one for a duration beyond its range).
pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

/// A throughput workload against `broker`, as the controller would send it.
pub fn workload(broker: &str, pairs: u32, messages: u64) -> Result<loadgen::WorkloadSpec> {
    let (host, port) = broker.rsplit_once(':').context("host:port")?;
    let mut spec = loadgen::presets::throughput();
    spec.broker.host = host.to_string();
    spec.broker.port = port.parse()?;
    spec.publishers = pairs;
    spec.subscribers = pairs;
    spec.messages_per_publisher = messages;
    spec.payload = loadgen::size::ByteSize(64);
    Ok(spec)
}

/// Runs a load on an agent and returns its result, checking the stream ends with one.
pub async fn run_load(
    client: &mut AgentClient<Channel>,
    request: pb::RunLoadRequest,
) -> Result<loadgen::RunResult> {
    let mut events = client.run_load(request).await?.into_inner();
    let mut progress = 0;
    while let Some(event) = events.next().await {
        match event?.event.context("empty event")? {
            pb::run_load_event::Event::Progress(_) => progress += 1,
            pb::run_load_event::Event::Result(result) => {
                anyhow::ensure!(events.next().await.is_none(), "events after the result");
                eprintln!("RunLoad: {progress} progress events, then the result");
                return Ok(loadgen::RunResult::try_from(*result)?);
            }
        }
    }
    bail!("the stream ended without a result")
}
