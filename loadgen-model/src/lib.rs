//! Continuum's loadgen model: what a loadgen run is asked to do and what it found, as data
//! with its pure functions and nothing that connects, spawns or draws on a terminal.
//!
//! The engine (`loadgen`), the wire contract (`proto`), the controller and bootstrap share
//! these types, as kube-core holds kube's: a crate that speaks the contract builds the
//! workload and reads the result without the MQTT engine, its runtime and its CLI. The
//! `clap` feature (on in `loadgen`) gives transports, MQTT versions and topologies their
//! command-line spellings.
//!
//! # Layout
//! - [`spec`]: the workload (serde, validated with TOML paths), one file per concern: broker
//!   and MQTT settings, topology and shards, pacing and run length, connection/engine/drain
//!   options, reconnects, churn, validation; [`size`]: byte sizes.
//! - [`presets`]: the study's tests (its Table III), each a workload and the points it sweeps;
//!   [`saturation`]: the search for the highest rate a broker sustains (settings, probe,
//!   search), which only decides what to run next; [`suite`]: the Open MQTT Benchmark
//!   Suite's four scenarios, scaled.
//! - [`header`]: the measurement header every payload carries; [`clock`]: the run clock and
//!   wall-clock nanoseconds.
//! - [`result`]: the raw mergeable result, with [`reconnect`] (a reconnect storm's figures)
//!   and [`broker_on_host`] (the broker's own CPU when it shared a host);
//!   [`result_checks`]: what one read from a file must satisfy before use; [`merge`]: adding
//!   up the results of a run's instances, checked; [`series`]: rate over time;
//!   [`histogram_v2`]: histograms as HdrHistogram V2 + DEFLATE, inflated with a cap;
//!   [`intervals`]: latency per interval of the run clock, for HdrHistogram interval logs.
//! - [`summary`]: the figures derived from a result ([`percentiles`]: one histogram's);
//!   [`steadiness`]: was a timed run's rate sustained; [`generator`]: was loadgen the limit;
//!   [`tail`]: whose an open loop's latency tail is, the broker's or loadgen's send delay.

pub mod broker_on_host;
pub mod capabilities;
pub mod clock;
pub mod generator;
pub mod groups;
pub mod header;
pub mod histogram_v2;
pub mod intervals;
pub mod merge;
pub mod percentiles;
pub mod presets;
pub mod reconnect;
pub mod result;
pub mod result_checks;
pub mod retained;
pub mod saturation;
pub mod series;
pub mod size;
pub mod spec;
pub mod steadiness;
pub mod suite;
pub mod summary;
pub mod tail;
pub mod wills;

pub use result::RunResult;
pub use spec::WorkloadSpec;
pub use summary::Summary;
