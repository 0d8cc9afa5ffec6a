//! [`ErrorCode`]: the gRPC status code a broker failure maps to, apart from the errors that
//! carry it, so kubectl's errors and the broker's errors both name codes without naming
//! each other.

/// The gRPC status code a [`BrokerError`](super::BrokerError) maps to. Kept here as a plain
/// enum so this module does not depend on tonic; the service turns it into a `tonic::Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request itself is wrong; retrying it unchanged cannot succeed.
    InvalidArgument,
    /// The node lacks something the request needs (a broker binary).
    FailedPrecondition,
    /// A broker of that name already runs with another spec.
    AlreadyExists,
    /// No broker of that name is known.
    NotFound,
    /// The broker started but never answered MQTT in time.
    Unavailable,
    /// The node failed in a way the caller cannot fix (I/O, a stop that left processes).
    Internal,
}
