//! [`NodeRole`]: what a node may be asked to do; the agent's configuration grants roles and
//! the plan asks for them, so both read this one type.

use serde::{Deserialize, Serialize};

/// What a node may be asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeRole {
    /// Runs loadgen workloads (RunLoad).
    Loadgen,
    /// Runs brokers (StartBroker).
    Broker,
    /// Accepts netem on its data-plane interface (ApplyNetem).
    Netem,
}

impl NodeRole {
    /// The role's name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeRole::Loadgen => "loadgen",
            NodeRole::Broker => "broker",
            NodeRole::Netem => "netem",
        }
    }
}

impl std::fmt::Display for NodeRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
