//! When messages leave: the pacing modes, counted or timed runs, and the open-loop schedule
//! of each publisher.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::WorkloadSpec;

/// When publishers send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Pacing {
    /// Each publisher sends one message every `interval`, publishers evenly staggered; latency
    /// is measured from the intended send time, whatever the broker does.
    OpenLoop {
        /// Time between two messages of one publisher.
        #[serde(with = "humantime_serde")]
        interval: Duration,
    },
    /// Open loop at an offered rate over all publishers together: message k of the workload
    /// (publisher k mod P) is due at k / rate seconds; latency from the intended time.
    Rate {
        /// Messages per second offered by all publishers together.
        rate: u64,
    },
    /// Each publisher keeps its in-flight window full (QoS 1/2) or TCP busy (QoS 0) for the
    /// run's `duration`: what the broker takes, sustained.
    ClosedLoop,
    /// Each publisher sends its `messages_per_publisher` as fast as the broker (TCP and the
    /// in-flight window) takes them: the study's burst, which ends before any steady state.
    Burst,
}

impl Pacing {
    /// True for the schedules whose messages are stamped with their intended send time.
    pub fn is_open_loop(&self) -> bool {
        matches!(self, Pacing::OpenLoop { .. } | Pacing::Rate { .. })
    }

    /// The mode's name as written in a spec.
    pub fn mode(&self) -> &'static str {
        match self {
            Pacing::OpenLoop { .. } => "open-loop",
            Pacing::Rate { .. } => "rate",
            Pacing::ClosedLoop => "closed-loop",
            Pacing::Burst => "burst",
        }
    }
}

/// How long a run lasts, as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunLength {
    /// Each publisher sends `per_publisher` messages; the first `warmup` are not measured.
    Counted {
        /// Messages per publisher, warm-up included.
        per_publisher: u64,
        /// Leading messages excluded from the figures.
        warmup: u64,
    },
    /// Publishing lasts `warmup + measure`; messages stamped in the warm-up are not measured.
    Timed {
        /// Publishing before the measured window.
        warmup: Duration,
        /// The measured window.
        measure: Duration,
    },
}

/// The longest timed run: its rate series (10 ms buckets) stay a few MB. Also the bound of every
/// other duration that schedules work (interval, warm-up, drain, hold, gap...), so that every
/// load ends and no deadline computed from a spec comes near overflowing.
pub const MAX_DURATION: Duration = Duration::from_secs(3_600);
/// The highest offered rate: one message per 100 ns over all publishers.
pub const MAX_RATE: u64 = 10_000_000;

/// The intended send times of one open-loop publisher, in ps so that an offered rate that
/// does not divide a second keeps its exact average.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The run's start on the run clock, ns.
    pub start_ns: u64,
    /// The first message's offset from the start, ps.
    pub first_ps: u128,
    /// Time between two messages of this publisher, ps.
    pub interval_ps: u128,
    /// Counted runs: messages this publisher sends.
    pub limit: Option<u64>,
}

impl Schedule {
    /// The same schedule starting at `start_ns`.
    pub fn starting_at(self, start_ns: u64) -> Self {
        Schedule { start_ns, ..self }
    }

    /// When message `seq` is due, ns on the run clock.
    pub fn intended_ns(&self, seq: u64) -> u64 {
        let offset_ps = self
            .first_ps
            .saturating_add(u128::from(seq).saturating_mul(self.interval_ps));
        self.start_ns
            .saturating_add(u64::try_from(offset_ps / 1_000).unwrap_or(u64::MAX))
    }

    /// How many messages are due strictly before `end_ns` (capped by a counted run's limit).
    pub fn messages_before(&self, end_ns: u64) -> u64 {
        let span_ps = u128::from(end_ns.saturating_sub(self.start_ns)) * 1_000;
        let due = if span_ps <= self.first_ps {
            0
        } else {
            u64::try_from((span_ps - self.first_ps).div_ceil(self.interval_ps)).unwrap_or(u64::MAX)
        };
        self.limit.map_or(due, |limit| due.min(limit))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl WorkloadSpec {
    /// Counted or timed, as the engine runs it (call on a validated spec).
    pub fn length(&self) -> RunLength {
        match self.duration {
            Some(measure) => RunLength::Timed {
                warmup: self.warmup.unwrap_or_default(),
                measure,
            },
            None => RunLength::Counted {
                per_publisher: self.messages_per_publisher,
                warmup: self.warmup_messages,
            },
        }
    }

    /// Publishing time of a timed run, warm-up included (zero for counted runs).
    pub fn run_time(&self) -> Duration {
        match self.length() {
            RunLength::Timed { warmup, measure } => warmup.saturating_add(measure),
            RunLength::Counted { .. } => Duration::ZERO,
        }
    }

    /// Messages each publisher will send, when the spec fixes it: counted runs, and timed
    /// runs on a schedule; `None` for a closed loop.
    pub fn planned_messages_per_publisher(&self) -> Option<u64> {
        match (self.length(), &self.pacing) {
            (RunLength::Counted { per_publisher, .. }, _) => Some(per_publisher),
            (RunLength::Timed { .. }, Pacing::ClosedLoop | Pacing::Burst) => None,
            (RunLength::Timed { .. }, _) => {
                let schedule = self.schedule_of(0)?;
                Some(schedule.messages_before(schedule.start_ns + nanos(self.run_time())))
            }
        }
    }

    /// The open-loop schedule of `publisher` relative to a start at 0 (`None` for closed
    /// loop and burst).
    pub fn schedule_of(&self, publisher: u32) -> Option<Schedule> {
        self.timetable()
            .map(|timetable| timetable.schedule_of(publisher))
    }

    /// Every publisher's open-loop schedule relative to a start at 0 (`None` for closed loop
    /// and burst). Publishers are spread evenly over one interval, as independent clients
    /// are; at an offered rate, message k of the workload is due at k / rate.
    pub fn timetable(&self) -> Option<Timetable> {
        let publishers = u128::from(self.publishers.max(1));
        let (interval_ps, offset_per_publisher) = match self.pacing {
            Pacing::OpenLoop { interval } => {
                let interval_ps = interval.as_nanos().saturating_mul(1_000);
                (interval_ps, (interval_ps, publishers))
            }
            Pacing::Rate { rate } => {
                let rate = u128::from(rate.max(1));
                (
                    1_000_000_000_000 * publishers / rate,
                    (1_000_000_000_000, rate),
                )
            }
            Pacing::ClosedLoop | Pacing::Burst => return None,
        };
        Some(Timetable {
            start_ns: 0,
            interval_ps: interval_ps.max(1),
            offset_per_publisher,
            limit: match self.length() {
                RunLength::Counted { per_publisher, .. } => Some(per_publisher),
                RunLength::Timed { .. } => None,
            },
        })
    }
}

/// The schedules of all publishers of an open-loop workload at once. Publishers stamp each
/// message with the time it actually left; a subscriber asks the timetable when it was due,
/// so one delivery gives both latencies (from the intended and from the actual send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timetable {
    start_ns: u64,
    interval_ps: u128,
    /// Publisher p's first message is due `p * numerator / denominator` ps after the start.
    offset_per_publisher: (u128, u128),
    limit: Option<u64>,
}

impl Timetable {
    /// The same timetable starting at `start_ns` on the run clock.
    pub fn starting_at(self, start_ns: u64) -> Self {
        Timetable { start_ns, ..self }
    }

    /// The schedule of `publisher`.
    pub fn schedule_of(&self, publisher: u32) -> Schedule {
        let (numerator, denominator) = self.offset_per_publisher;
        Schedule {
            start_ns: self.start_ns,
            first_ps: numerator.saturating_mul(u128::from(publisher)) / denominator.max(1),
            interval_ps: self.interval_ps,
            limit: self.limit,
        }
    }

    /// When message `seq` of `publisher` is due, ns on the run clock.
    pub fn intended_ns(&self, publisher: u32, seq: u64) -> u64 {
        self.schedule_of(publisher).intended_ns(seq)
    }
}
