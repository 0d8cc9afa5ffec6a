//! Nebula: placeholder until the installer lands (being written now).

use proto::agent::v1 as pb;

use super::InstallError;
use crate::config::AgentConfig;

/// This node's Nebula.
#[derive(Debug)]
pub struct Nebula {}

impl Nebula {
    /// From the agent's configuration (its `[nebula]` files and state folder).
    pub fn new(_config: &AgentConfig) -> Self {
        Nebula {}
    }

    /// Brings Nebula up as the request says.
    pub async fn install(
        &self,
        _request: pb::InstallOverlayRequest,
    ) -> Result<pb::OverlayStatus, InstallError> {
        Err(InstallError::Missing("not written yet".into()))
    }

    /// Stops Nebula and removes its files.
    pub async fn uninstall(&self) -> Result<pb::OverlayStatus, InstallError> {
        Err(InstallError::Missing("not written yet".into()))
    }

    /// Stops a Nebula child at agent shutdown.
    pub async fn shutdown(&self) {}
}
