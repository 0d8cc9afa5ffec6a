//! The agent a node with `agent = "local"` gets: started inside this process on 127.0.0.1
//! with a throwaway PKI, so the quickstart needs nothing installed. It is the one use the
//! controller has for the agent crate, so it sits behind the cargo feature `local-agent`
//! (on by default): without it, `controller remote` and `controller serve` for remote
//! testbeds link neither rtnetlink, rumqttd, k8s-openapi nor sysinfo.
//!
//! Nothing of an agent outlives its controller, even one killed with SIGKILL: each agent
//! keeps its keys and its brokers' folders in a folder of its own, watched by a
//! [`host::child::Watchdog`] that kills the brokers (every process carrying one of their
//! markers) and removes the folder when the controller exits. The folders sit under one root
//! with their controller's PID and start time, as the emulated nodes' do, so a run also
//! sweeps what a killed controller's watchdog could not (it was killed too).

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
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    use host::child::Watchdog;

    use proto::mtls::Credentials;
    use proto::pki::{CertificateAuthority, IdentitySpec, Overwrite, Role, write_pki};
    use tokio::task::JoinHandle;
    use tokio_util::sync::CancellationToken;

    use crate::plan::NodeEntry;
    use crate::run::error::RunError;
    use crate::run::namespaces::{remove_leftovers_in, run_folder_in};
    use crate::run::testbed::Agent;

    /// Where root's in-process agents keep their folders: on tmpfs, which only root may write.
    const ROOT_LOCAL_ROOT: &str = "/run/continuum/local";
    /// The files under an agent's folder that hold its native brokers' markers.
    const MARKER_FILES: &str = "state-*/brokers/*/marker";
    /// How long the watchdog may take to sweep and remove the folder after an orderly stop
    /// (nothing is left to kill then, unless a broker would not stop).
    const WATCHDOG_LIMIT: Duration = Duration::from_secs(20);

    /// An agent running inside this process, stopped (netem cleared, brokers stopped) by
    /// [`LocalAgent::shutdown`].
    #[derive(Debug)]
    pub struct LocalAgent {
        address: SocketAddr,
        stop: CancellationToken,
        task: JoinHandle<()>,
        files: Cleanup,
    }

    /// An agent's folder and its watchdog, removed after the agent stopped.
    #[derive(Debug)]
    struct Cleanup {
        folder: PathBuf,
        watchdog: Option<Watchdog>,
    }

    impl Cleanup {
        /// Lets the watchdog kill whatever still carries a broker's marker (a broker that
        /// would not stop) and remove the folder, and waits for it.
        async fn run(mut self) {
            if let Some(watchdog) = self.watchdog.take() {
                watchdog.release(WATCHDOG_LIMIT).await;
            }
        }
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            // Without `run` (an abandoned run, a runtime that ended), the watchdog let go now
            // does the same without being waited for; the folder is its to remove then, as it
            // needs the markers in it. What is left is removed here.
            if self.watchdog.take().is_none() {
                match std::fs::remove_dir_all(&self.folder) {
                    Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                        tracing::warn!(folder = %self.folder.display(), %error, "removing an in-process agent's folder");
                    }
                    _ => {}
                }
            }
        }
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
            self.files.run().await;
        }

        /// Tells the agent to stop without waiting for it; its folder goes when it has. If
        /// the runtime ends first, the folder goes at once and the watchdog kills what the
        /// agent had not stopped yet.
        pub(in crate::run) fn abandon(self) {
            self.stop.cancel();
            let (task, files) = (self.task, self.files);
            // Dropped outside any runtime, there is no one to wait for the agent: the watchdog
            // kills now what the agent had not stopped, and removes the folder.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = task.await;
                    files.run().await;
                });
            }
        }
    }

    /// Starts an agent in this process on 127.0.0.1 with a PKI of its own.
    pub async fn start_local_agent(node: &NodeEntry) -> Result<(LocalAgent, Agent), RunError> {
        let local = |e: &dyn std::fmt::Display| RunError::Local(e.to_string());
        let files = agent_folder().await.map_err(|e| local(&e))?;
        // Armed before anything is written into the folder, the keys first.
        let watchdog = match Watchdog::spawn(files.path(), agent::MARKER_VAR, MARKER_FILES) {
            Ok(watchdog) => Some(watchdog),
            Err(error) => {
                tracing::warn!(node = %node.name, %error, "no watchdog: if this controller is killed, its brokers run until the next run stops them");
                None
            }
        };
        let files = Cleanup {
            folder: files.keep(),
            watchdog,
        };
        let credentials = local_pki(&files.folder).map_err(|e| local(&e))?;
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
                .await
                .map_err(|e| RunError::Local(format!("binding 127.0.0.1: {e}")))?;
        let address = listener.local_addr().map_err(|e| local(&e))?;
        let config = domain::AgentConfig {
            name: node.name.clone(),
            listen: address,
            tls: domain::TlsFiles {
                ca: files.folder.join("ca.pem"),
                cert: files.folder.join("local.pem"),
                key: files.folder.join("local.key"),
            },
            roles: node.roles.clone(),
            data_plane_interface: None,
            // `state-<node>`, as the emulated nodes' folders: what the sweep looks in.
            state_dir: files.folder.join(format!("state-{}", node.name)),
            nebula: None,
            metrics_listen: None,
            k3s: Default::default(),
        };
        let agent_credentials = Credentials::load(&files.folder, "local").map_err(|e| local(&e))?;
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
        let client =
            match crate::agent_client::connect(&address.to_string(), &credentials, None).await {
                Ok(client) => client,
                Err(error) => {
                    // Not handed out yet, so stopped here: it must not stay listening.
                    stop.cancel();
                    let _ = task.await;
                    files.run().await;
                    return Err(local(&error));
                }
            };
        Ok((
            LocalAgent {
                address,
                stop,
                task,
                files,
            },
            client,
        ))
    }

    /// A new folder for an agent under [`local_root`], after the folders of controllers that
    /// are gone were swept; a plain temporary folder (the watchdog alone then guards it) when
    /// there is no root to use.
    async fn agent_folder() -> std::io::Result<tempfile::TempDir> {
        match local_root() {
            Ok(root) => {
                remove_leftovers_in(&root).await;
                run_folder_in(&root)
            }
            Err(error) => {
                tracing::warn!(%error, "in-process agents use a plain temporary folder, which a later run cannot sweep");
                tempfile::tempdir()
            }
        }
    }

    /// The root of the in-process agents' folders: [`ROOT_LOCAL_ROOT`] for root; for anyone
    /// else `continuum-<uid>` in the temporary folder, made private, and refused unless it is
    /// this user's own private folder (another user could have made it first, or a link).
    fn local_root() -> std::io::Result<PathBuf> {
        // SAFETY: geteuid takes nothing and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid == 0 {
            return Ok(PathBuf::from(ROOT_LOCAL_ROOT));
        }
        private_folder(&std::env::temp_dir().join(format!("continuum-{uid}")), uid)
    }

    /// `path` made (0700) if missing; Err unless it is then a folder, not a link, owned by
    /// `uid` and closed to everyone else.
    fn private_folder(path: &Path, uid: u32) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => return Err(error),
            _ => {}
        }
        let meta = std::fs::symlink_metadata(path)?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(std::io::Error::other(format!(
                "{} is not a folder private to user {uid}",
                path.display()
            )));
        }
        Ok(path.to_owned())
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

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::os::unix::fs::PermissionsExt;

        #[tokio::test]
        async fn an_agent_folder_dropped_without_its_cleanup_is_swept_by_its_watchdog() {
            let folder = tempfile::tempdir().expect("folder").keep();
            let instance = folder.join("state-worker/brokers/b");
            std::fs::create_dir_all(&instance).expect("instance");
            let marker = host::Marker::unique(agent::MARKER_VAR, "b");
            std::fs::write(instance.join("marker"), marker.value()).expect("marker");
            let mut line = host::CommandLine::new("/bin/sleep");
            line.args = vec!["30".into()];
            // A broker the agent had not stopped when its run was abandoned.
            let _broker =
                host::GroupChild::spawn("b", &line, &marker, &instance, &instance.join("log"))
                    .expect("spawns");
            let watchdog = Watchdog::spawn(&folder, agent::MARKER_VAR, MARKER_FILES)
                .expect("the watchdog starts");
            drop(Cleanup {
                folder: folder.clone(),
                watchdog: Some(watchdog),
            });
            let swept = host::poll_until(
                Duration::from_secs(20),
                Duration::from_millis(25),
                || async {
                    match (marker.live_processes(), folder.exists()) {
                        (alive, false) if alive.is_empty() => host::Attempt::Done(()),
                        left => host::Attempt::Retry(left),
                    }
                },
            )
            .await;
            assert_eq!(swept, Ok(()), "{}", folder.display());
        }

        #[test]
        fn the_root_of_a_user_who_is_not_root_is_a_private_folder_of_its_own() {
            let temp = tempfile::tempdir().expect("temp dir");
            // SAFETY: geteuid takes nothing and cannot fail.
            let me = unsafe { libc::geteuid() };
            let made = temp.path().join("made");
            assert_eq!(private_folder(&made, me).expect("made"), made);
            let mode = std::fs::metadata(&made).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
            assert!(private_folder(&made, me).is_ok(), "found again");
            // Someone else's, open to others, or a link: another user may have made it first.
            let error = private_folder(&made, me + 1).expect_err("not this user's");
            assert!(
                error.to_string().contains("not a folder private"),
                "{error}"
            );
            let open = temp.path().join("open");
            std::fs::create_dir(&open).expect("dir");
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            assert!(private_folder(&open, me).is_err());
            let link = temp.path().join("link");
            std::os::unix::fs::symlink(&made, &link).expect("link");
            assert!(private_folder(&link, me).is_err());
        }
    }
}

#[cfg(not(feature = "local-agent"))]
mod without_agent {
    use crate::plan::NodeEntry;
    use crate::run::error::RunError;
    use crate::run::testbed::Agent;

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
    pub async fn start_local_agent(node: &NodeEntry) -> Result<(LocalAgent, Agent), RunError> {
        Err(RunError::Local(format!(
            "node {}: agent = \"local\" needs the in-process agent, and this controller was \
             built without it (cargo feature local-agent); give the node a remote agent \
             (host:port) or build the controller with its default features",
            node.name
        )))
    }
}
