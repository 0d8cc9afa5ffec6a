//! Installers for phases 2 and 3 of the study, driven by the controller: the Nebula overlay
//! ([`nebula::Nebula`]: lighthouse on the headnode, members elsewhere) and k3s
//! ([`k3s::K3s`]: server on the headnode, agents on workers). Both are idempotent (the same
//! request twice changes nothing the second time), report what they did, and undo
//! everything on uninstall: `continuum-agent uninstall` calls the same code, which is how
//! `bootstrap uninstall` removes them.
//!
//! Where systemd is PID 1 each runs as a unit; elsewhere (containers, this project's test
//! namespaces) as a child of the agent in its own process group, stopped at agent shutdown.
//!
//! # Layout
//! - this file: [`InstallError`] and its gRPC mapping, [`systemd_is_pid1`].
//! - `nebula/`: the request's checks, config generation, the daemon (unit or child), the
//!   tun device, the reachability check.
//! - `k3s/`: server/agent command lines, token, node list, uninstall steps (see its Layout).

pub mod k3s;
pub mod nebula;

use std::path::Path;

use tonic::{Code, Status};

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

/// True when systemd runs this machine (PID 1 is systemd), so installers write units
/// instead of supervising children.
pub fn systemd_is_pid1() -> bool {
    std::fs::read_to_string("/proc/1/comm").is_ok_and(|comm| comm.trim() == "systemd")
        && Path::new("/run/systemd/system").is_dir()
}
