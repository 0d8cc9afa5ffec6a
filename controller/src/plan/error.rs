//! [`PlanError`], the error every check of a plan returns, and the helpers that build one.

/// Why a plan cannot run: the file, the TOML path and the value (the error every TOML file
/// of the project shares).
pub type PlanError = domain::FileError;

/// A field of the plan with a bad value: its TOML path, the value and what is wrong.
pub(super) fn invalid(
    path: impl Into<String>,
    value: impl std::fmt::Display,
    problem: impl Into<String>,
) -> PlanError {
    PlanError::invalid(path, value, problem)
}

/// A value as the error shows it: quoted, as TOML writes a string.
pub(super) fn quoted(text: &str) -> String {
    format!("{text:?}")
}
