//! How the agent's errors become gRPC statuses: a code that says what the caller can do, and
//! a message that names the field or the cause.

use tonic::{Code, Status};

use crate::netem::NetemError;

/// A request field with a bad value: InvalidArgument naming it.
pub(crate) fn invalid(field: &str, problem: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {problem}"))
}

/// A required field is absent.
pub(crate) fn missing(field: &str) -> Status {
    invalid(field, "missing")
}

/// The node cannot do this (a role or capability it lacks).
pub(crate) fn unable(what: impl std::fmt::Display) -> Status {
    Status::failed_precondition(what.to_string())
}

/// Maps a netem failure.
pub(crate) fn from_netem(error: NetemError) -> Status {
    let code = match &error {
        NetemError::InvalidParams(_) | NetemError::UnknownInterface { .. } => Code::InvalidArgument,
        NetemError::CapabilityMissing { .. } | NetemError::PermissionDenied { .. } => {
            Code::FailedPrecondition
        }
        _ => Code::Internal,
    };
    Status::new(code, error.to_string())
}

/// Maps a loadgen failure.
pub(crate) fn from_loadgen(error: loadgen::LoadgenError) -> Status {
    use loadgen::LoadgenError as E;
    let code = match &error {
        E::Spec(_) | E::SpecSyntax(_) | E::Dial(_) => Code::InvalidArgument,
        E::BrokerUnreachable { .. } | E::Connect { .. } => Code::Unavailable,
        E::StartMissed { .. } => Code::DeadlineExceeded,
        E::Cancelled => Code::Cancelled,
        _ => Code::Internal,
    };
    Status::new(code, error.to_string())
}
