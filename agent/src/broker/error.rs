//! [`BrokerError`]: why a broker could not be started, stopped or found, in variants that
//! map one-to-one onto gRPC status codes ([`BrokerError::code`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error_code::ErrorCode;
use super::kubernetes::kubectl::KubectlError;
use domain::{InvalidSpec, Product};

/// Why a broker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A field of the spec is invalid: a bad name, an unknown product, a port already in
    /// use. Maps to `InvalidArgument`; nothing was changed on the node.
    #[error(transparent)]
    InvalidSpec(#[from] InvalidSpec),
    /// The product's executable (or a file it needs) is not installed. Maps to
    /// `FailedPrecondition`.
    #[error(
        "{product} is not installed: nothing usable at {} (install: {})",
        list_paths(.looked_at),
        recipes::install_hint(*.product)
    )]
    NotInstalled {
        /// The product that was asked for.
        product: Product,
        /// Every path that was tried, in order.
        looked_at: Vec<PathBuf>,
    },
    /// A broker of this name is running with a different spec. Maps to `AlreadyExists`;
    /// stop it first, or use another name.
    #[error("broker {name:?} already runs with another spec ({running}); stop it first")]
    NameInUse {
        /// The instance name.
        name: String,
        /// A summary of the spec that is running.
        running: String,
    },
    /// No broker of this name was started by this agent. Maps to `NotFound`.
    #[error("no broker named {name:?}")]
    Unknown {
        /// The instance name asked for.
        name: String,
    },
    /// The broker was started but did not answer an MQTT CONNECT with an accepting CONNACK
    /// before its deadline, or exited first. Everything it started has been stopped again.
    /// Maps to `Unavailable`.
    #[error(
        "broker {name:?} did not become ready on {address} within {deadline:?}: {reason}\n\
         last lines of its log:\n{log_tail}"
    )]
    NotReady {
        /// The instance name.
        name: String,
        /// The address that was probed.
        address: SocketAddr,
        /// The deadline that passed.
        deadline: Duration,
        /// The last probe failure, or how the process exited.
        reason: String,
        /// The end of the broker's log (empty for the embedded broker).
        log_tail: String,
    },
    /// A file or process operation on the node failed. Maps to `Internal`.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The Kubernetes cluster did not do what was asked: kubectl cannot run, the API is
    /// unreachable, an apply was refused, pod metrics are unavailable. What a failed start
    /// applied has been deleted again. Maps to kubectl's code ([`KubectlError::code`]).
    #[error("broker {name:?}: {context}: {source}")]
    Kubernetes {
        /// The instance name.
        name: String,
        /// What was being done.
        context: String,
        /// What kubectl said.
        #[source]
        source: KubectlError,
    },
    /// Stopping left something behind or could not be confirmed. Maps to `Internal`.
    #[error("stopping broker {name:?}: {reason}")]
    StopFailed {
        /// The instance name.
        name: String,
        /// What is left or what went wrong.
        reason: String,
    },
}

impl From<host::SpawnError> for BrokerError {
    fn from(error: host::SpawnError) -> Self {
        Self::Io {
            context: error.context,
            source: error.source,
        }
    }
}

impl BrokerError {
    /// The gRPC code this error maps to.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidSpec(_) => ErrorCode::InvalidArgument,
            Self::NotInstalled { .. } => ErrorCode::FailedPrecondition,
            Self::NameInUse { .. } => ErrorCode::AlreadyExists,
            Self::Unknown { .. } => ErrorCode::NotFound,
            Self::NotReady { .. } => ErrorCode::Unavailable,
            Self::Kubernetes { source, .. } => source.code(),
            Self::Io { .. } | Self::StopFailed { .. } => ErrorCode::Internal,
        }
    }

    /// An [`BrokerError::Io`] with `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`BrokerError::InvalidSpec`].
    pub(crate) fn invalid(
        field: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Self::InvalidSpec(InvalidSpec::new(field, value, reason))
    }
}

fn list_paths(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_every_path_tried() {
        let error = BrokerError::NotInstalled {
            product: Product::Emqx,
            looked_at: vec!["/usr/bin/emqx".into(), "/opt/emqx/bin/emqx".into()],
        };
        assert_eq!(error.code(), ErrorCode::FailedPrecondition);
        assert_eq!(
            error.to_string(),
            "emqx is not installed: nothing usable at /usr/bin/emqx, /opt/emqx/bin/emqx \
             (install: unpack EMQX's tarball in /opt/emqx)"
        );
    }

    #[test]
    fn a_bad_field_is_named_with_its_value() {
        let error = BrokerError::invalid("kind.product", "mosquito", "is not a known product");
        assert_eq!(error.code(), ErrorCode::InvalidArgument);
        assert_eq!(
            error.to_string(),
            "kind.product: \"mosquito\" is not a known product"
        );
    }
}
