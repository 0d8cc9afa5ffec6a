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
//! - [`spec`]: the workload (serde, validated with TOML paths), one file per concern: broker
//!   and MQTT settings, topology and shards, pacing and run length, connection/engine/drain
//!   options, validation; [`size`]: byte sizes.
//! - [`presets`]: the study's tests (its Table III), each a workload and the points it sweeps;
//!   the CLI and the controller's plan both start from them.
//! - [`engine`]: the phases of a run (`engine/connect`, `engine/publish`, `engine/drain` beside
//!   them); `publisher` and `subscriber`: one task per connection; `pacer`: the
//!   open-loop schedule; `session`: connecting; [`runtime`]: the threads a run lives on;
//!   [`usage`]: what it cost loadgen itself; `live`: the counters tasks share during a run.
//! - [`codec`]: MQTT 3.1.1/5 packets via rumqttc's codec; [`transport`]: TCP/TLS,
//!   and WebSocket (ws/wss) on top;
//!   [`header`]: the measurement header; [`clock`]: the run clock.
//! - [`accounting`]: per-(publisher, seq) tracking; [`series`]: rate over time;
//!   [`result`]: the raw mergeable result, [`result_checks`]: what one read from a file must
//!   satisfy before use; [`summary`]: the figures derived from it;
//!   [`steadiness`]: was a timed run's rate sustained; [`generator`]: was loadgen the limit;
//!   [`tail`]: whose an open loop's latency tail is, the broker's or loadgen's send delay;
//!   [`saturation`]: the search for the highest rate a broker sustains (settings, probe,
//!   search).
//! - [`output`]: table, JSON, CSV and HdrHistogram text; [`cli`]: the `loadgen` command
//!   (flags, applying them, one file per command).

pub mod accounting;
pub mod cli;
pub mod clock;
pub mod codec;
pub mod engine;
pub mod generator;
pub mod header;
pub mod histogram_v2;
pub mod limits;
mod live;
pub mod local_broker;
pub mod output;
mod pacer;
pub mod presets;
mod publisher;
mod reconnect;
pub mod result;
pub mod result_checks;
pub mod runtime;
pub mod saturation;
pub mod series;
mod session;
pub mod size;
pub mod spec;
pub mod steadiness;
mod subscriber;
pub mod summary;
pub mod tail;
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
