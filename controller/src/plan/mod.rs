//! The plan (`plan.toml`): nodes, brokers, network scenarios, tests and repetitions.
//!
//! A plan is a serde tree of typed fields with `deny_unknown_fields`; [`Plan::load`] parses
//! it and [`Plan::validate`] checks every cross-reference and value, each error naming the
//! file, the TOML path and the value, before anything on any node changes. The study's
//! scenarios (Table II) and tests (Table III) are built-in presets that fields override.
//!
//! - `types.rs`: the serde tree; `kinds.rs`: the test kinds and their traits (what each
//!   sweeps, how it is timed, what it is compared by); `presets.rs`: the study's scenarios
//!   and tests;
//! - `validate.rs`: the checks (`test_checks.rs`: those of `[[tests]]`; `error.rs`: the error
//!   they return); `testbed.rs`: the checks of `[testbed]` (overlay, k3s) and of kubernetes
//!   brokers;
//! - `transports.rs`: a test's `transports` sweep, unrolled into one test per transport;
//! - `cells.rs`: the plan unrolled into measurement cells; `spread.rs`: a test's load spread
//!   over its loadgen nodes; `path.rs`: a message's path; `redact.rs`: the plan and its text
//!   without secrets, as a results folder holds them.

mod cells;
mod error;
mod kinds;
#[cfg(test)]
mod limits_tests;
mod path;
mod presets;
mod quic;
mod redact;
mod spread;
#[cfg(test)]
mod suite_tests;
mod test_checks;
mod testbed;
#[cfg(test)]
mod tests;
mod transports;
mod types;
mod validate;
mod websocket;

pub use cells::{Cell, CellId, CellPoint, NotACellId};
pub use error::PlanError;
pub use kinds::{Measures, Sweep, Timing, kind_names, kinds_named, sentence};
pub use path::MessagePath;
pub use presets::{FULL_SCALE, scenario_preset, test_preset, workload_for};
pub use redact::{REDACTED, is_secret_key, redact_plan_text};
pub use spread::{MAX_LOADGEN_NODES, MAX_WEIGHT, Placement};
pub use types::*;
pub use validate::MAX_CELLS;

use std::path::Path;

impl Plan {
    /// Reads, parses and validates a plan file.
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Plan::parse(&text, &path.display().to_string())
    }

    /// Parses and validates plan text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Plan, PlanError> {
        let plan: Plan = domain::parse_toml(text, origin)?;
        let plan = plan
            .expand_transports()
            .map_err(|error| error.in_file(origin))?;
        plan.validate()
            .map_err(|error| plan.name_unrolled(error).in_file(origin))?;
        Ok(plan)
    }
}
