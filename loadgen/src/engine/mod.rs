//! Runs one workload through its phases and gathers the [`RunResult`]. `run_scoped` (behind
//! [`run`] and [`run_at`]) is the script, one call per phase:
//!
//! `prepare -> preflight -> connect -> start -> publish -> drain -> finish`
//!
//! Each phase lives in its own file and hands the next a small struct:
//! - `prepare`: the spec checked; the run's id, shard, dialer, codec and clock fixed; enough
//!   open files (the `Run` every phase shares).
//! - `preflight`: one probe connection, so a broker that is down fails fast; the broker's
//!   process when it runs on this host.
//! - `connect`: every connection, subscribers first, ramped up (`Connected`).
//! - `start`: the start barrier: the CPU measurement begins, the first message's time and the
//!   run's `Timing` are fixed, the subscribers and the churn fleet (`churn`) set off (`Started`).
//! - `publish`: the publisher tasks and an open loop's pacer, until the last publisher ends.
//! - `drain`: waiting for what is in flight, then for every subscriber and churn client
//!   (`Drained`).
//! - `finish`: the measurement stops; every outcome is folded into the result with the
//!   instance's load over the measured window.

mod churn;
mod connect;
mod drain;
mod finish;
mod preflight;
mod prepare;
mod publish;
mod start;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::LoadgenError;
use crate::live::Progress;
use crate::result::RunResult;
use crate::spec::WorkloadSpec;
use crate::usage::Scope;
use connect::connect;
pub(crate) use connect::connect_fields;
use drain::drain;
use finish::finish;
use preflight::preflight;
use prepare::prepare;
use publish::publish;
use start::start;

/// The phase a run is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Checking the broker answers.
    #[default]
    Preflight,
    /// Opening connections.
    Connecting,
    /// Publishing.
    Publishing,
    /// Waiting for in-flight messages.
    Draining,
    /// Finished.
    Done,
}

/// What a progress display shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Current phase.
    pub phase: Phase,
    /// Counters so far.
    pub progress: Progress,
    /// Messages this instance will publish.
    pub planned_publishes: u64,
    /// Connections opened / planned.
    pub connected: (u64, u64),
}

/// When a run starts, for instances that must start together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartBarrier {
    /// The run clock's origin as Unix time in ns on *this* host's clock (the controller maps
    /// its own time through the host's clock offset); now when absent.
    pub origin_unix_ns: Option<u64>,
    /// The first message leaves this long after the origin, ns; 50 ms after the last
    /// connection when absent.
    pub start_at_ns: Option<u64>,
}

/// Runs `spec` to completion (or until `cancel`), reporting progress on `status` if given.
pub async fn run(
    spec: &WorkloadSpec,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    run_at(spec, StartBarrier::default(), cancel, status).await
}

/// Like [`run`], with the run clock and the start time fixed by `barrier`, so that instances
/// on several hosts publish on one timeline from one moment.
pub async fn run_at(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
) -> Result<RunResult, LoadgenError> {
    run_scoped(spec, barrier, cancel, status, Scope::Process).await
}

/// [`run_at`], measuring the CPU of `scope` (a dedicated run's own threads): the phases in
/// order, each handing the next what it needs.
pub(crate) async fn run_scoped(
    spec: &WorkloadSpec,
    barrier: StartBarrier,
    cancel: CancellationToken,
    status: Option<watch::Sender<Status>>,
    scope: Scope,
) -> Result<RunResult, LoadgenError> {
    let run = prepare(spec, barrier, cancel, status, scope)?;
    let local_broker = preflight(&run).await?;
    let connected = connect(&run).await?;
    let mut started = start(&run, connected.subscribers, local_broker)?;
    let published = publish(&run, &started, connected.publishers).await?;
    let drained = drain(&run, &mut started, published).await?;
    Ok(finish(&run, connected.result, started, drained).await)
}

/// Publisher or subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends messages.
    Publisher,
    /// Receives messages.
    Subscriber,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Publisher => "publisher",
            Role::Subscriber => "subscriber",
        })
    }
}
