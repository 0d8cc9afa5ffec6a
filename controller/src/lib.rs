//! Continuum's controller: drives the agents of a testbed over mutual TLS.
//!
//! So far it holds the building blocks that the agent's end-to-end tests and the coming
//! orchestration share: connecting to an agent with the controller's identity, and
//! estimating an agent's clock offset.
//!
//! # Layout
//! - [`connect`]: an mTLS channel to an agent.
//! - [`civil`]: UTC dates and times for folder names, reports and run listings.
//! - [`clock`]: 4-timestamp clock exchanges and the offset estimate with its error bound.
//! - [`plan`]: the plan file, its presets and validation, and its cells.
//! - [`results`]: the results folder: manifest, summary.csv, metrics.csv, per-cell files.
//! - [`report`]: `report.md`, `report.html` and SVG figures, rebuilt from a results folder.
//! - [`run`]: running a plan: agents, brokers, scenarios, cells, undo.
//! - [`pki_command`]: `controller pki`, the CA and identities without bootstrap.
//! - [`serve`]: `controller serve`, the controller as a gRPC service over mTLS.
//! - [`remote`]: `controller remote`, driving that service from a laptop.
//! - `main.rs`: the `controller` binary.

pub mod civil;
pub mod clock;
pub mod pki_command;
pub mod plan;
pub mod remote;
pub mod report;
pub mod results;
pub mod run;
pub mod serve;
pub mod stats;
