//! K3s: placeholder until the installer lands (being written now).

use proto::agent::v1 as pb;

use super::InstallError;
use crate::config::AgentConfig;

/// This node's K3s.
#[derive(Debug)]
pub struct K3s {}

impl K3s {
    /// From the agent's configuration (its `[k3s]` settings and state folder).
    pub fn new(_config: &AgentConfig) -> Self {
        K3s {}
    }

    /// Brings K3s up as the request says.
    pub async fn install(
        &self,
        _request: pb::InstallClusterRequest,
    ) -> Result<pb::ClusterStatus, InstallError> {
        Err(InstallError::Missing("not written yet".into()))
    }

    /// Stops K3s and removes its files.
    pub async fn uninstall(&self) -> Result<pb::ClusterStatus, InstallError> {
        Err(InstallError::Missing("not written yet".into()))
    }

    /// Stops a K3s child at agent shutdown.
    pub async fn shutdown(&self) {}
}
