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
//! use loadgen_model::WorkloadSpec;
//! use proto::loadgen::v1 as pb;
//!
//! let message = pb::WorkloadSpec::default();
//! let error = WorkloadSpec::try_from(message).unwrap_err();
//! assert_eq!(error.to_string(), "spec.broker: missing");
//! ```
//!
//! # Layout
//! - `proto/continuum/loadgen/v1/loadgen.proto`: the loadgen workload and its result.
//! - `proto/continuum/agent/v1/agent.proto`: the agent service ([`agent::v1`]).
//! - `proto/continuum/controller/v1/controller.proto`: the controller as a service, driven
//!   from a laptop ([`controller::v1`]).
//! - `build.rs`: compiles every `.proto` under `proto/`.
//! - [`loadgen::v1`]: the generated messages of package `continuum.loadgen.v1`.
//! - [`convert`]: `TryFrom`/`From` between messages and domain types, and
//!   [`ConversionError`]; `convert/spec.rs` holds the workload, `convert/result.rs` the result
//!   (histograms travel as HdrHistogram V2 + DEFLATE bytes).
//! - [`pki`]: the project CA and the identities it issues (controller, agents, remote
//!   clients), with role and name in each certificate, and their files on disk.
//! - [`client`]: dialling an agent over mTLS ([`client::connect_agent`]), and errors and
//!   statuses as one line with their causes.
//! - [`clock`]: an agent's clock offset from 4-timestamp `Clock` exchanges, with its error
//!   bound (the controller's run origin and the agent tests use it).
//! - [`mtls`]: tonic server and client TLS configs from those identities, and the callers'
//!   identity and role checks for gRPC handlers.
//! - `proto/continuum/testing/v1/ping.proto` and [`testing::v1`]: the mTLS conformance service
//!   (one reading, one mutating RPC) that `tests/mtls.rs` runs over real TLS.

pub mod client;
pub mod clock;
pub mod convert;
pub mod mtls;
pub mod pki;

pub use convert::ConversionError;

/// The agent service of package `continuum.agent.v1` (generated from `agent.proto`).
pub mod agent {
    /// Version 1: the `Agent` service, its client and server, and its messages.
    pub mod v1 {
        tonic::include_proto!("continuum.agent.v1");
    }
}

/// The controller service of package `continuum.controller.v1` (generated from
/// `controller.proto`): `controller serve` and `controller remote`.
pub mod controller {
    /// Version 1: the `Controller` service (submit, watch, list, fetch, cancel runs), its
    /// client and server, and its messages.
    pub mod v1 {
        tonic::include_proto!("continuum.controller.v1");
    }
}

/// Messages of the `continuum.loadgen.*` packages.
pub mod loadgen {
    /// Version 1 of package `continuum.loadgen`: `WorkloadSpec`, `RunResult` and their parts,
    /// generated from `loadgen.proto`.
    pub mod v1 {
        tonic::include_proto!("continuum.loadgen.v1");
    }
}

/// Services that exist only to test the transport.
pub mod testing {
    /// Version 1 of package `continuum.testing`: the mTLS conformance service `Ping`, with
    /// one reading RPC (`Ping`) and one mutating RPC (`Mutate`), generated from `ping.proto`.
    pub mod v1 {
        tonic::include_proto!("continuum.testing.v1");
    }
}
