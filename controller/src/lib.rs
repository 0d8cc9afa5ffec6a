//! Continuum's controller: drives the agents of a testbed over mutual TLS through a plan's
//! brokers x scenarios x cells, writes each result as it ends and the report at the end;
//! runs as a command (`controller plan.toml`) or as a service (`controller serve`).
//!
//! # Layout
//! - [`civil`]: UTC dates and times for folder names, reports and run listings.
//! - [`clock`]: 4-timestamp clock exchanges and the offset estimate with its error bound.
//! - [`plan`]: the plan file, its presets and validation, and its cells.
//! - [`results`]: the results folder: manifest, summary.csv, metrics.csv, per-cell files.
//! - [`report`]: `report.md`, `report.html` and SVG figures, rebuilt from a results folder;
//!   `controller compare` of two of them.
//! - [`metrics`]: the run's live metrics for Prometheus (`[metrics]` in the plan).
//! - [`run`]: running a plan: agents, brokers, scenarios, cells, undo, through a typed
//!   testbed ([`run::testbed`]).
//! - `agent_client`: that testbed over gRPC, converting to and from the agents' messages.
//! - [`stats`]: medians with distribution-free confidence intervals and comparisons between
//!   brokers, for the report.
//! - [`pki_command`]: `controller pki`, the CA and identities without bootstrap.
//! - [`serve`]: `controller serve`, the controller as a gRPC service over mTLS.
//! - [`remote`]: `controller remote`, driving that service from a laptop.
//! - `main.rs`: the `controller` binary; `terminal.rs` shows a run's progress.

mod agent_client;
pub mod civil;
/// The clock-offset estimate lives in `proto`, beside the agent client it measures with.
pub use proto::clock;
pub mod metrics;
pub mod pki_command;
pub mod plan;
pub mod remote;
pub mod report;
pub mod results;
pub mod run;
pub mod serve;
pub mod stats;
