//! Continuum's wire contract: the protobuf messages and gRPC services that the controller and
//! the agents exchange, and their conversions to the domain types.
//!
//! The `.proto` files are the contract; the Rust code is generated at build time by protox (a
//! pure-Rust protobuf compiler, so no system `protoc`) and tonic-prost-build, which also emits
//! tonic clients and servers for every `service`. Business logic never handles the generated,
//! all-`Option` structs: a received message becomes a domain type through `TryFrom`, which
//! checks presence, enum values and ranges and then the domain's own `validate()`, and fails
//! with a [`ConversionError`] naming the field path (`spec.pacing.interval: missing`).
//!
//! ```
//! use loadgen::WorkloadSpec;
//! use proto::loadgen::v1 as pb;
//!
//! let message = pb::WorkloadSpec::default();
//! let error = WorkloadSpec::try_from(message).unwrap_err();
//! assert_eq!(error.to_string(), "spec.broker: missing");
//! ```
//!
//! # Layout
//! - `proto/continuum/loadgen/v1/loadgen.proto`: the loadgen workload and its result.
//! - `build.rs`: compiles every `.proto` under `proto/`.
//! - [`loadgen::v1`]: the generated messages of package `continuum.loadgen.v1`.
//! - [`convert`]: `TryFrom`/`From` between messages and domain types, and
//!   [`ConversionError`]; `convert/spec.rs` holds the workload, `convert/result.rs` the result
//!   (histograms travel as HdrHistogram V2 + DEFLATE bytes).

pub mod convert;

pub use convert::ConversionError;

/// Messages of the `continuum.loadgen.*` packages.
pub mod loadgen {
    /// Version 1 of package `continuum.loadgen`: `WorkloadSpec`, `RunResult` and their parts,
    /// generated from `loadgen.proto`.
    pub mod v1 {
        tonic::include_proto!("continuum.loadgen.v1");
    }
}
