//! The agent a node with `agent = "local"` gets: started inside this process on 127.0.0.1
//! with a throwaway PKI, so the quickstart needs nothing installed. It is the one use the
//! controller has for the agent crate, so it sits behind the cargo feature `local-agent`
//! (on by default): without it, `controller remote` and `controller serve` for remote
//! testbeds link neither rtnetlink, rumqttd, k8s-openapi nor sysinfo.

use super::guard::Undo;

/// The in-process agents of a run, stopped (their netem cleared, their brokers stopped)
/// when undone, and the emulated nodes' namespaces, which end after their agents: the run's
/// local agent guard.
#[derive(Debug, Default)]
pub(super) struct LocalAgents {
    pub(super) agents: Vec<LocalAgent>,
    #[cfg(feature = "local-agent")]
    pub(super) emulated: Option<super::namespaces::NamespaceTestbed>,
}

impl Undo for LocalAgents {
    fn describe(&self) -> String {
        let agents = format!("{} in-process agent(s)", self.agents.len());
        #[cfg(feature = "local-agent")]
        if let Some(emulated) = &self.emulated {
            return format!("{agents} and the emulated nodes {emulated:?}");
        }
        agents
    }

    async fn undo(&mut self) {
        while let Some(local) = self.agents.pop() {
            local.shutdown().await;
        }
        #[cfg(feature = "local-agent")]
        if let Some(mut emulated) = self.emulated.take() {
            emulated.stop_agents().await;
        }
    }

    fn abandon(&mut self) {
        // Told to stop, each agent undoes its own netem and brokers as long as the runtime
        // runs its task.
        for local in self.agents.drain(..) {
            local.abandon();
        }
        #[cfg(feature = "local-agent")]
        if let Some(emulated) = self.emulated.as_mut() {
            emulated.abandon_agents();
        }
    }
}

#[cfg(feature = "local-agent")]
pub use with_agent::LocalAgent;
#[cfg(feature = "local-agent")]
pub(super) use with_agent::start_local_agent;
#[cfg(not(feature = "local-agent"))]
pub use without_agent::LocalAgent;
#[cfg(not(feature = "local-agent"))]
pub(super) use without_agent::start_local_agent;

#[cfg(feature = "local-agent")]
mod with_agent {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::path::Path;
    use std::sync::Arc;

    use proto::agent::v1::agent_client::AgentClient;
    use proto::client::connect_agent;
    use proto::mtls::Credentials;
    use proto::pki::{CertificateAuthority, IdentitySpec, Overwrite, Role, write_pki};
    use tokio::task::JoinHandle;
    use tokio_util::sync::CancellationToken;
    use tonic::transport::Channel;

    use crate::plan::NodeEntry;
    use crate::run::RunError;

    /// An agent running inside this process, stopped (netem cleared, brokers stopped) by
    /// [`LocalAgent::shutdown`].
    #[derive(Debug)]
    pub struct LocalAgent {
        address: SocketAddr,
        stop: CancellationToken,
        task: JoinHandle<()>,
        _files: tempfile::TempDir,
    }

    impl LocalAgent {
        /// Where it listens.
        pub fn address(&self) -> SocketAddr {
            self.address
        }

        /// Stops the agent and waits until it has undone everything.
        pub async fn shutdown(self) {
            self.stop.cancel();
            let _ = self.task.await;
        }

        /// Tells the agent to stop without waiting for it.
        pub(in crate::run) fn abandon(self) {
            self.stop.cancel();
        }
    }

    /// Starts an agent in this process on 127.0.0.1 with a PKI of its own.
    pub async fn start_local_agent(
        node: &NodeEntry,
    ) -> Result<(LocalAgent, AgentClient<Channel>), RunError> {
        let local = |e: &dyn std::fmt::Display| RunError::Local(e.to_string());
        let files = tempfile::tempdir().map_err(|e| local(&e))?;
        let credentials = local_pki(files.path()).map_err(|e| local(&e))?;
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
                .await
                .map_err(|e| RunError::Local(format!("binding 127.0.0.1: {e}")))?;
        let address = listener.local_addr().map_err(|e| local(&e))?;
        let config = domain::AgentConfig {
            name: node.name.clone(),
            listen: address,
            tls: domain::TlsFiles {
                ca: files.path().join("ca.pem"),
                cert: files.path().join("local.pem"),
                key: files.path().join("local.key"),
            },
            roles: node.roles.clone(),
            data_plane_interface: None,
            state_dir: files.path().join("state"),
            nebula: None,
            k3s: Default::default(),
        };
        let agent_credentials = Credentials::load(files.path(), "local").map_err(|e| local(&e))?;
        let service = Arc::new(agent::service::AgentService::new(config).await);
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            if let Err(error) = agent::server::serve(
                service,
                &agent_credentials,
                listener,
                shutdown.cancelled_owned(),
            )
            .await
            {
                tracing::error!(%error, "local agent");
            }
        });
        let client = match connect_agent(&address.to_string(), None, &credentials).await {
            Ok(client) => client,
            Err(error) => {
                // Not handed out yet, so stopped here: it must not stay listening.
                stop.cancel();
                let _ = task.await;
                return Err(local(&error));
            }
        };
        Ok((
            LocalAgent {
                address,
                stop,
                task,
                _files: files,
            },
            client,
        ))
    }

    /// A CA, the controller and one agent ("local", valid for 127.0.0.1), written into `dir`.
    fn local_pki(dir: &Path) -> Result<Credentials, Box<dyn std::error::Error>> {
        let ca = CertificateAuthority::generate("Continuum local CA")?;
        let controller = ca.issue(&IdentitySpec::new(Role::Controller, "controller"))?;
        let agent = ca.issue(
            &IdentitySpec::new(Role::Agent, "local")
                .with_ip_address(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        )?;
        write_pki(dir, &ca, &[controller, agent], Overwrite::Refuse)?;
        Ok(Credentials::load(dir, "controller")?)
    }
}

#[cfg(not(feature = "local-agent"))]
mod without_agent {
    use proto::agent::v1::agent_client::AgentClient;
    use tonic::transport::Channel;

    use crate::plan::NodeEntry;
    use crate::run::RunError;

    /// No in-process agent in this build: there is never one to stop.
    #[derive(Debug)]
    pub enum LocalAgent {}

    impl LocalAgent {
        /// Never called: there is no value.
        pub fn address(&self) -> std::net::SocketAddr {
            match *self {}
        }

        /// Nothing to stop.
        pub async fn shutdown(self) {
            match self {}
        }

        /// Nothing to stop.
        pub(in crate::run) fn abandon(self) {
            match self {}
        }
    }

    /// Refuses: this controller was built without the in-process agent.
    pub async fn start_local_agent(
        node: &NodeEntry,
    ) -> Result<(LocalAgent, AgentClient<Channel>), RunError> {
        Err(RunError::Local(format!(
            "node {}: agent = \"local\" needs the in-process agent, and this controller was \
             built without it (cargo feature local-agent); give the node a remote agent \
             (host:port) or build the controller with its default features",
            node.name
        )))
    }
}
