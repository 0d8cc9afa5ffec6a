//! Installers for phases 2 and 3 of the study, driven by the controller: the Nebula overlay
//! ([`nebula::Nebula`]: lighthouse on the headnode, members elsewhere) and k3s
//! ([`k3s::K3s`]: server on the headnode, agents on workers). Both are idempotent (the same
//! request twice changes nothing the second time), report what they did, and undo
//! everything on uninstall: `continuum-agent uninstall` calls the same code, which is how
//! `bootstrap uninstall` removes them.
//!
//! Where systemd is PID 1 and the agent shares its network namespace ([`use_systemd`]) each
//! runs as a unit; elsewhere (containers, this project's test namespaces) as a child of the
//! agent in its own process group, stopped at agent shutdown.
//!
//! # Shutdown bound
//! Agent shutdown calls `K3s::shutdown`, then `Nebula::shutdown`. Each first cancels an
//! install or uninstall in flight (it gives up at its next await and releases the installer;
//! a stop it was doing is finished by shutdown), then stops its child:
//! - k3s: SIGTERM, up to 20 s for it to exit, SIGKILL to its group, up to 5 s to reap it,
//!   up to 5 s to sweep every process it started (shims, containers): at most 30 s, plus at
//!   most 5 s waiting for the cancelled call to let go: [`K3S_SHUTDOWN_BOUND`], 35 s;
//! - Nebula: SIGTERM, up to 5 s, SIGKILL, up to 5 s to reap it, with the same 5 s wait for a
//!   cancelled call: [`NEBULA_SHUTDOWN_BOUND`], 15 s.
//!
//! Together at most [`SHUTDOWN_BOUND`], 50 s. Units under systemd are not stopped at
//! shutdown (they are installed), so there both return at once. The agent's own stop
//! timeouts (its unit's `TimeoutStopSec`, bootstrap's wait before SIGKILL) must exceed this
//! plus what the brokers' stops take.
//!
//! # Layout
//! - this file: [`InstallError`] and its gRPC mapping, [`use_systemd`], the shutdown bound.
//! - `system.rs`: what both installers share: `systemctl`, ExecStart quoting, executables
//!   on PATH, atomic private writes, removals.
//! - `nebula/`: the request's checks, config generation, the daemon (unit or child), the
//!   tun device, the reachability check.
//! - `k3s/`: server/agent command lines, token, node list, uninstall steps (see its Layout).

pub mod k3s;
pub mod nebula;

mod system;

use std::path::Path;
use std::time::Duration;

use tonic::{Code, Status};

/// The longest `K3s::shutdown` takes (see the module docs for its parts).
pub const K3S_SHUTDOWN_BOUND: Duration = Duration::from_secs(35);
/// The longest `Nebula::shutdown` takes.
pub const NEBULA_SHUTDOWN_BOUND: Duration = Duration::from_secs(15);
/// The longest both installers' shutdowns take together, one after the other.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(50);
/// How long a shutdown waits for a cancelled install or uninstall to release the
/// installer before it stops the daemon from its PID record instead.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// An installer could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A request field has a bad value; nothing was changed.
    #[error("{field}: {problem}")]
    Invalid {
        /// The request field, as a path (`lighthouses[0].underlay_address`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Something the node needs is missing (an executable, certificates from bootstrap).
    #[error("{0}")]
    Missing(String),
    /// A step failed; the message says which and why (with the tail of its log).
    #[error("{0}")]
    Failed(String),
    /// Installed, but a peer it must reach does not answer (yet): worth retrying.
    #[error("{0}")]
    Unreachable(String),
}

impl InstallError {
    /// A bad request field.
    pub fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        InstallError::Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl From<InstallError> for Status {
    fn from(error: InstallError) -> Self {
        let code = match &error {
            InstallError::Invalid { .. } => Code::InvalidArgument,
            InstallError::Missing(_) => Code::FailedPrecondition,
            InstallError::Failed(_) => Code::Internal,
            InstallError::Unreachable(_) => Code::Unavailable,
        };
        Status::new(code, error.to_string())
    }
}

/// True when systemd runs this machine (PID 1 is systemd). Installers decide with
/// [`use_systemd`], which also looks at the network namespace.
pub fn systemd_is_pid1() -> bool {
    std::fs::read_to_string("/proc/1/comm").is_ok_and(|comm| comm.trim() == "systemd")
        && Path::new("/run/systemd/system").is_dir()
}

/// True when an installer should write a systemd unit rather than supervise a child:
/// systemd is PID 1 and this process shares PID 1's network namespace. A unit runs in PID
/// 1's namespace, so an agent in a namespace of its own (a container, a test node) must
/// supervise its daemons itself, or it would bring the overlay or k3s up on the host.
pub fn use_systemd() -> bool {
    systemd_is_pid1() && shares_pid1_network_namespace()
}

fn shares_pid1_network_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |path: &str| {
        std::fs::metadata(path)
            .ok()
            .map(|meta| (meta.dev(), meta.ino()))
    };
    match (id("/proc/1/ns/net"), id("/proc/self/ns/net")) {
        (Some(init), Some(own)) => init == own,
        // Unreadable (not root): assume the usual case, the agent on the host.
        _ => true,
    }
}

/// Runs `call` unless `shutting_down` has fired, and abandons it (at its next await, which
/// releases the installer's lock) when it fires: the installer's shutdown then finishes the
/// stop. Shared by both installers.
pub(crate) async fn unless_shutting_down<T>(
    shutting_down: &tokio_util::sync::CancellationToken,
    call: impl std::future::Future<Output = Result<T, InstallError>>,
) -> Result<T, InstallError> {
    let refused = || InstallError::Failed("the agent is shutting down".into());
    if shutting_down.is_cancelled() {
        return Err(refused());
    }
    tokio::select! {
        biased;
        () = shutting_down.cancelled() => Err(refused()),
        result = call => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_add_up() {
        assert!(K3S_SHUTDOWN_BOUND + NEBULA_SHUTDOWN_BOUND <= SHUTDOWN_BOUND);
        // This process is in its own namespace or on the host; either way the rule holds.
        assert!(!use_systemd() || systemd_is_pid1());
    }
}
