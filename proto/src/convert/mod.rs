//! Conversions between the generated prost messages and the domain types.
//!
//! Receiving is `TryFrom<message> for domain type`: it refuses a missing sub-message, an
//! unspecified or unknown enum value, a number the domain type cannot hold and, through the
//! domain's own `validate()`, a bad value; every error names the field path (`spec.qos`,
//! `result.latency`). Sending is `From<&domain type>` (or `TryFrom` where encoding can fail).
//! Paths follow the domain's field names, which the `.proto` mirrors; the one difference is
//! the pacing `oneof`, whose members `open_loop`/`burst` are reported as `pacing`, as in
//! `SPEC.toml`.
//!
//! - `spec.rs`, `result.rs`: loadgen's workload and its result (`loadgen-model`'s types, so
//!   the contract does not build the engine).
//! - `broker.rs`: a broker request and its product ([`domain::BrokerSpec`]).
//! - `netem.rs`: netem parameters ([`domain::NetemParams`]).

mod broker;
mod netem;

pub use broker::known_product;
mod result;
mod spec;

use std::time::Duration;

use domain::FieldError;
use loadgen_model::spec::SpecError;

/// A message that does not make a valid domain value; each variant names the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// A required sub-message, `oneof` or enum was not sent (enums: the `*_UNSPECIFIED` zero).
    #[error("{path}: missing")]
    Missing {
        /// Field path, e.g. `spec.pacing.interval`.
        path: String,
    },
    /// An enum field holds a number its enum does not define (e.g. from a newer peer).
    #[error("{path}: {value} is not a {kind}")]
    UnknownEnum {
        /// Field path, e.g. `spec.qos`.
        path: String,
        /// The number received.
        value: i32,
        /// What the enum is, e.g. `QoS`.
        kind: &'static str,
    },
    /// A field's value is out of range or breaks a rule of the domain type: its path (e.g.
    /// `spec.broker.port`), the value as received and what is wrong.
    #[error(transparent)]
    Invalid(FieldError),
    /// A domain rule refused the value (a Kubernetes node name, jitter above the delay); the
    /// problem is the domain check's own words.
    #[error("{path}: {problem}")]
    Rule {
        /// Field path, e.g. `spec.kind.kubernetes.node`.
        path: String,
        /// What the domain check said.
        problem: String,
    },
    /// A histogram's bytes are not an HdrHistogram V2 encoding (or could not be made into one).
    #[error("{path}: not a valid HdrHistogram V2 encoding: {reason}")]
    Histogram {
        /// Field path, e.g. `result.latency`.
        path: String,
        /// The decoder's or encoder's complaint.
        reason: String,
    },
}

impl ConversionError {
    /// The path of the field at fault.
    pub fn path(&self) -> &str {
        match self {
            ConversionError::Missing { path }
            | ConversionError::UnknownEnum { path, .. }
            | ConversionError::Invalid(FieldError { path, .. })
            | ConversionError::Rule { path, .. }
            | ConversionError::Histogram { path, .. } => path,
        }
    }

    /// A spec validation error, its TOML path placed under the message at `at`.
    fn from_spec(error: SpecError, at: &str) -> Self {
        ConversionError::Invalid(error.within(at))
    }
}

/// A peer that sends an invalid message made a bad request.
impl From<ConversionError> for tonic::Status {
    fn from(error: ConversionError) -> Self {
        tonic::Status::invalid_argument(error.to_string())
    }
}

/// The path of field `field` in the message at `at`.
fn field(at: &str, field: &str) -> String {
    format!("{at}.{field}")
}

/// A sub-message that must be present.
fn required<T>(value: Option<T>, at: &str, name: &str) -> Result<T, ConversionError> {
    value.ok_or_else(|| ConversionError::Missing {
        path: field(at, name),
    })
}

/// An enum field: an undefined number is unknown; the `*_UNSPECIFIED` zero, which `known`
/// maps to `None`, is missing.
fn enumeration<E: TryFrom<i32>, T>(
    value: i32,
    at: &str,
    name: &str,
    kind: &'static str,
    known: impl FnOnce(E) -> Option<T>,
) -> Result<T, ConversionError> {
    let variant = E::try_from(value).map_err(|_| ConversionError::UnknownEnum {
        path: field(at, name),
        value,
        kind,
    })?;
    known(variant).ok_or_else(|| ConversionError::Missing {
        path: field(at, name),
    })
}

/// A protobuf `uint32` that must fit a `u16` (ports, in-flight windows).
fn narrow_u16(value: u32, at: &str, name: &str) -> Result<u16, ConversionError> {
    u16::try_from(value).map_err(|_| {
        ConversionError::Invalid(FieldError {
            path: field(at, name),
            value: value.to_string(),
            problem: format!("must be at most {}", u16::MAX),
        })
    })
}

fn narrow_u8(value: u32, at: &str, name: &str) -> Result<u8, ConversionError> {
    u8::try_from(value).map_err(|_| {
        ConversionError::Invalid(FieldError {
            path: field(at, name),
            value: value.to_string(),
            problem: format!("must be at most {}", u8::MAX),
        })
    })
}

/// A required, non-negative `google.protobuf.Duration`.
fn duration(
    value: Option<prost_types::Duration>,
    at: &str,
    name: &str,
) -> Result<Duration, ConversionError> {
    let value = required(value, at, name)?;
    Duration::try_from(value).map_err(|error| {
        ConversionError::Invalid(FieldError {
            path: field(at, name),
            value: value.to_string(),
            problem: error.to_string(),
        })
    })
}

/// A duration as `google.protobuf.Duration`; beyond `i64::MAX` seconds (292 billion years)
/// it saturates, which no setting can mean.
fn duration_to_proto(value: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(value).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}
