//! The run clock: nanoseconds since the run's origin, on a monotonic base.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since a run's origin. Every stamp and receive time of a run is on it, so
/// latencies are differences of two readings of one clock.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    origin: Instant,
    origin_unix_ns: u64,
}

impl RunClock {
    /// A clock whose origin is now.
    pub fn start_now() -> Self {
        RunClock {
            origin: Instant::now(),
            origin_unix_ns: unix_now_ns(),
        }
    }

    /// A clock whose origin is the wall-clock instant `origin_unix_ns` of this host, so that
    /// instances on several hosts (with offsets corrected) share one timeline.
    pub fn aligned_to_unix(origin_unix_ns: u64) -> Self {
        let now = Instant::now();
        let unix_now = unix_now_ns();
        let origin = if origin_unix_ns <= unix_now {
            now.checked_sub(Duration::from_nanos(unix_now - origin_unix_ns))
                .unwrap_or(now)
        } else {
            now + Duration::from_nanos(origin_unix_ns - unix_now)
        };
        RunClock {
            origin,
            origin_unix_ns,
        }
    }

    /// Nanoseconds elapsed since the origin (0 before it).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` after the origin.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns)
    }

    /// The origin as Unix time in ns.
    pub fn origin_unix_ns(&self) -> u64 {
        self.origin_unix_ns
    }
}

/// The furthest loadgen schedules a wait: about 30 years, as tokio caps its own sleeps. A
/// deadline from a spec or a request (a drain timeout, an interval) is capped here instead
/// of overflowing `Instant + Duration`, which panics.
pub const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `from + after`, with `after` capped at [`FAR_FUTURE`]: never panics.
pub fn deadline_after(from: Instant, after: Duration) -> Instant {
    from.checked_add(after.min(FAR_FUTURE)).unwrap_or(from)
}

/// A duration in ns, saturating at `u64::MAX` (584 years), for sums on the run clock.
pub fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Wall-clock time in ns since the Unix epoch.
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_are_monotonic_and_instants_round_trip() {
        let clock = RunClock::start_now();
        let first = clock.now_ns();
        let second = clock.now_ns();
        assert!(second >= first);
        let at = clock.instant_at(5_000_000);
        assert_eq!(
            at.duration_since(clock.instant_at(0)),
            Duration::from_millis(5)
        );
    }

    #[test]
    fn deadlines_from_any_duration_do_not_overflow() {
        let now = Instant::now();
        let far = deadline_after(now, Duration::MAX);
        assert_eq!(far, now + FAR_FUTURE);
        assert_eq!(
            deadline_after(now, Duration::from_secs(u64::MAX)),
            far,
            "u64::MAX seconds"
        );
        assert_eq!(
            deadline_after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert_eq!(saturating_nanos(Duration::from_secs(u64::MAX)), u64::MAX);
        assert_eq!(saturating_nanos(Duration::from_micros(3)), 3_000);
    }

    #[test]
    fn aligned_clock_places_its_origin_at_the_wall_time() {
        let origin = unix_now_ns() - 2_000_000_000;
        let clock = RunClock::aligned_to_unix(origin);
        let elapsed = clock.now_ns();
        assert!(
            (1_900_000_000..3_000_000_000).contains(&elapsed),
            "{elapsed}"
        );
    }
}
