//! [`FieldError`]: one field with a bad value, named by its TOML path with the value as
//! written and what is wrong: the shape every "path = value: problem" error of the project
//! takes (a loadgen spec, a plan's workload table, a message converted from the wire, a
//! field of a TOML file).

/// A field with a bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} = {value}: {problem}")]
pub struct FieldError {
    /// TOML path of the field, e.g. `pacing.interval` or `brokers[1].product`.
    pub path: String,
    /// The offending value as written.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

impl FieldError {
    /// An error for the field at `path`.
    pub fn new(
        path: impl Into<String>,
        value: impl std::fmt::Display,
        problem: impl Into<String>,
    ) -> Self {
        FieldError {
            path: path.into(),
            value: value.to_string(),
            problem: problem.into(),
        }
    }

    /// The same error with its path inside `table` (`workload` and `qos`: `workload.qos`).
    pub fn within(self, table: &str) -> Self {
        FieldError {
            path: format!("{table}.{}", self.path),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_path_the_value_and_the_problem() {
        let error = FieldError::new("qos", 3, "must be 0, 1 or 2").within("workload");
        assert_eq!(error.to_string(), "workload.qos = 3: must be 0, 1 or 2");
    }
}
