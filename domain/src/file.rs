//! [`FileError`]: why a TOML file (a plan, an inventory, an agent's configuration) cannot be
//! used, naming the file, the TOML path and the value; and [`read_toml`], which reads one.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::FieldError;

/// A file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown field, or a value of the wrong type.
    #[error("{path}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Syntax {
        /// The file.
        path: String,
        /// Line of the error, when known.
        line: Option<usize>,
        /// toml's message, naming the field.
        message: String,
    },
    /// A field has a bad value or refers to something that does not exist.
    #[error("{path}: {field}")]
    Invalid {
        /// The file (empty until [`FileError::in_file`]).
        path: String,
        /// The field, its value and what is wrong.
        field: FieldError,
    },
}

impl FileError {
    /// An [`FileError::Invalid`] whose file is named later ([`FileError::in_file`]).
    pub fn invalid(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        problem: impl Into<String>,
    ) -> Self {
        FileError::Invalid {
            path: String::new(),
            field: FieldError::new(field, value, problem),
        }
    }

    /// Names the file an error came from.
    pub fn in_file(self, file: &str) -> Self {
        match self {
            FileError::Invalid { field, .. } => FileError::Invalid {
                path: file.to_string(),
                field,
            },
            FileError::Syntax { line, message, .. } => FileError::Syntax {
                path: file.to_string(),
                line,
                message,
            },
            FileError::Read { source, .. } => FileError::Read {
                path: file.to_string(),
                source,
            },
        }
    }
}

/// Parses `text` as TOML; `origin` names it in errors (a file, or "the submitted plan").
pub fn parse_toml<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, FileError> {
    toml::from_str(text).map_err(|error| {
        let line = error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        FileError::Syntax {
            path: origin.to_string(),
            line,
            message: error.message().trim().replace('\n', " "),
        }
    })
}

/// Reads and parses the TOML file at `path`.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<T, FileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_toml(&text, &shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        name: String,
    }

    #[test]
    fn syntax_errors_name_the_file_line_and_field() {
        let error = parse_toml::<Sample>("name = \"a\"\nport = 3\n", "x.toml").unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("x.toml line 2: "), "{text}");
        assert!(text.contains("port"), "{text}");
    }

    #[test]
    fn invalid_values_get_their_file_later() {
        let error = FileError::invalid("nodes[1].name", "\"a b\"", "bad").in_file("plan.toml");
        assert_eq!(error.to_string(), "plan.toml: nodes[1].name = \"a b\": bad");
    }

    #[test]
    fn a_missing_file_is_named() {
        let error = read_toml::<Sample>(Path::new("/nonexistent/x.toml")).unwrap_err();
        assert!(
            error.to_string().starts_with("/nonexistent/x.toml: "),
            "{error}"
        );
    }
}
