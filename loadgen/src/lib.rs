//! Continuum's MQTT workload engine.
//!
//! `loadgen` runs one workload against any MQTT broker and records figures that mean what
//! their names say: end-to-end latency from a binary nanosecond stamp (open loop: from the
//! *intended* send time, with the send delay kept apart, and the transit latency from the
//! actual send beside it), aggregate publish and receive rates
//! over the steady-state window beside the per-client distribution, and per-(publisher, seq)
//! accounting of received, lost, duplicated and reordered messages judged against the QoS.
//! Results of several instances merge exactly, which is how agents combine.
//!
//! # Layout
//! The data and its pure functions are in `loadgen-model` and re-exported here under their
//! old names: [`spec`] (the workload), [`size`], [`presets`] (the study's tests),
//! [`saturation`] (the search's settings, probes and decisions), [`header`] (the measurement
//! header), [`clock`] (the run clock), [`result`] (the raw mergeable result) with
//! [`result_checks`], [`series`] and [`histogram_v2`], and [`summary`] with [`steadiness`],
//! [`generator`] and [`tail`]. Here, the engine:
//! - [`engine`]: a run as its phases, one file each, in order: `prepare`, `preflight`,
//!   `connect`, `start`, `publish` (`churn` beside it), `drain`, `finish`;
//!   `publisher` and `subscriber`: one task per connection; `pacer`: the
//!   open-loop schedule; `session`: connecting; `reconnect`: reconnecting lost connections;
//!   [`runtime`]: the threads a run lives on ([`cpus`]: how many); [`usage`]: what it cost
//!   loadgen itself;
//!   [`local_broker`]: the broker's process on this host; `live`: the counters tasks share
//!   during a run; [`limits`]: open-file limits.
//! - [`codec`]: MQTT 3.1.1/5 packets via rumqttc's codec; [`transport`]: TCP/TLS,
//!   and WebSocket (ws/wss) on top.
//! - [`accounting`]: per-(publisher, seq) tracking.
//! - [`output`]: table, JSON, CSV and HdrHistogram text, [`interval_log`]: the latency
//!   interval log (`.hlog`); [`cli`]: the `loadgen` command
//!   (flags, applying them, one file per command).

// The spec, result, summary and their kin are `loadgen-model`'s, so that crates speaking the
// contract need not build the engine; re-exported so `loadgen::spec` and `crate::spec` stay.
pub use loadgen_model::{
    capabilities, clock, generator, groups, header, histogram_v2, intervals, presets, result,
    result_checks, retained, saturation, series, size, spec, steadiness, suite, summary, tail,
    wills,
};

pub mod accounting;
pub mod cli;
pub mod codec;
pub mod cpus;
pub mod engine;
pub mod interval_log;
pub mod limits;
mod live;
pub mod local_broker;
pub mod output;
mod pacer;
pub mod probe;
mod publisher;
mod reason_codes;
mod reconnect;
pub mod runtime;
mod session;
mod subscriber;
pub mod transport;
pub mod usage;

pub use engine::{Phase, Role, StartBarrier, Status, run, run_at};
pub use live::Progress;
pub use result::RunResult;
pub use runtime::run_dedicated;
pub use session::ConnectFailure;
pub use spec::WorkloadSpec;
pub use summary::Summary;

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// The spec file is not valid TOML or has unknown fields.
    #[error("spec: {0}")]
    SpecSyntax(String),
    /// A spec field has a bad value.
    #[error("spec: {0}")]
    Spec(#[from] spec::SpecError),
    /// TLS or the WebSocket request could not be set up from the spec.
    #[error(transparent)]
    Dial(#[from] transport::DialSetupError),
    /// The preflight connection failed: the broker is down, refuses, or is not MQTT.
    #[error("broker {address}: {failure}")]
    BrokerUnreachable {
        /// `host:port`.
        address: String,
        /// What went wrong.
        failure: ConnectFailure,
    },
    /// One of the run's connections failed; the run is aborted rather than measured short.
    #[error("{role} {client} could not connect to {address}: {failure}")]
    Connect {
        /// Publisher or subscriber.
        role: Role,
        /// Its global index.
        client: u32,
        /// `host:port`.
        address: String,
        /// What went wrong.
        failure: ConnectFailure,
    },
    /// Connecting took longer than the start barrier allowed.
    #[error("connections were not ready at the agreed start time ({late_ms:.1} ms late)")]
    StartMissed {
        /// How late, ms.
        late_ms: f64,
    },
    /// The run was cancelled before the load started.
    #[error("cancelled before the load started")]
    Cancelled,
    /// The workload needs more open files than the process may have.
    #[error("{0}")]
    OpenFiles(String),
    /// A bug or resource exhaustion inside loadgen.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<spec::SpecReadError> for LoadgenError {
    fn from(error: spec::SpecReadError) -> Self {
        match error {
            spec::SpecReadError::Syntax(message) => LoadgenError::SpecSyntax(message),
            spec::SpecReadError::Invalid(invalid) => LoadgenError::Spec(invalid),
        }
    }
}
