//! Why a run could not be carried out.

use crate::results::ResultsError;

/// Why a run could not be carried out (cells that fail are recorded, not errors).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The plan cannot run as written.
    #[error("plan: {0}")]
    Plan(String),
    /// An agent could not be reached or is not what the plan says.
    #[error("node {node}: {problem}")]
    Agent {
        /// Node name.
        node: String,
        /// What went wrong.
        problem: String,
    },
    /// The in-process agent could not start.
    #[error("local agent: {0}")]
    Local(String),
    /// Results could not be written.
    #[error(transparent)]
    Results(#[from] ResultsError),
    /// A resumed run's folder holds another plan.
    #[error("{dir}: it holds a run of another plan; resume it with that plan")]
    ResumeMismatch {
        /// The folder.
        dir: String,
    },
}
