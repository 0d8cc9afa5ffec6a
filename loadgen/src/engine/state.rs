//! What a run's callers see of it (its phase and progress, the barrier it starts at) and
//! a client's role, shared by the phases.

use crate::live::Progress;

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
