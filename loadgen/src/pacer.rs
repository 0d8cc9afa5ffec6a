//! The open-loop pacer: one thread that releases each publisher's messages at their intended
//! times.
//!
//! Tokio's timer has millisecond granularity, and in open loop every µs of lateness is counted
//! as latency. The pacer sleeps with a 1 ns timer slack and, where messages are far apart,
//! spins the last stretch; where they are close together (an offered rate of thousands per
//! second) it releases everything due at each wake-up instead, so it never spins a core away
//! from the broker. How often it may wake is its [`Resolution`]: every wake-up costs a sleep
//! and a wake of the runtime thread (about 30 µs of CPU together on a virtual machine, where
//! timers trap to the hypervisor), so an offered rate of 15k msg/s released one message at a
//! time cost loadgen most of its core. Publishers stamp the intended time, so any remaining
//! lateness shows in the latency and, separately, in the send-delay histogram.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;
use crate::spec::Schedule;
use crate::usage::RunThreads;

/// How many messages of one publisher are due.
#[derive(Debug, Default)]
pub(crate) struct Release {
    released: AtomicU64,
    notify: Notify,
}

impl Release {
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

/// One publisher as the pacer sees it.
#[derive(Debug)]
pub(crate) struct PacedPublisher {
    pub schedule: Schedule,
    pub release: Arc<Release>,
}

/// Spin at least this long before a deadline instead of sleeping through it...
const SPIN_BEFORE: Duration = Duration::from_micros(150);
/// ...when the next message is at least this far away, so spinning stays a small share of
/// the pacer's time (a quarter at most).
const SPIN_WHEN_GAP_OVER: Duration = Duration::from_micros(600);
/// The shortest sleep between two wake-ups; what falls due meanwhile is released together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// 20 µs: the open-loop latency tests, whose figure is the delay.
    Fine,
    /// 500 µs, at most 2000 wake-ups a second: offered rates, whose figure is the rate and
    /// whose receivers already coalesce for up to 1 ms (see [`crate::spec::Coalescing`]).
    Throughput,
}

impl Resolution {
    pub fn of(pacing: &crate::spec::Pacing) -> Self {
        match pacing {
            crate::spec::Pacing::Rate { .. } => Resolution::Throughput,
            _ => Resolution::Fine,
        }
    }

    fn min_sleep(self) -> Duration {
        match self {
            Resolution::Fine => Duration::from_micros(20),
            Resolution::Throughput => Duration::from_micros(500),
        }
    }
}

/// Runs the pacer on its own thread until every message due before `end_ns` is released (or
/// each counted schedule is exhausted), or `cancel` fires. `publishers` must be ordered by
/// their first intended time and share one interval, so that due times follow the order
/// (seq, publisher).
pub(crate) fn spawn(
    clock: RunClock,
    publishers: Vec<PacedPublisher>,
    end_ns: Option<u64>,
    resolution: Resolution,
    cancel: CancellationToken,
    threads: Option<RunThreads>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("loadgen-pacer".into())
        .spawn(move || {
            if let Some(threads) = threads {
                threads.register_current();
            }
            reduce_timer_slack();
            let mut cursor = Cursor::new(&publishers, end_ns);
            // Which publishers a batch released to, each woken once per batch.
            let mut touched: Vec<usize> = Vec::with_capacity(publishers.len());
            let mut batch_of = vec![u64::MAX; publishers.len()];
            let mut batch = 0u64;
            let mut lead = WakeLead::default();
            while let Some(next_ns) = cursor.next_due() {
                if cancel.is_cancelled()
                    || !wait_until(&clock, next_ns, resolution, end_ns, &mut lead, &cancel)
                {
                    return;
                }
                let now = clock.now_ns();
                batch += 1;
                touched.clear();
                while let Some((index, seq)) = cursor.take_due(now) {
                    publishers[index]
                        .release
                        .released
                        .store(seq + 1, Ordering::Release);
                    if batch_of[index] != batch {
                        batch_of[index] = batch;
                        touched.push(index);
                    }
                }
                for &index in &touched {
                    publishers[index].release.notify.notify_one();
                }
            }
        })
}

/// The next (publisher, seq) to release, walking due times in order.
struct Cursor<'a> {
    publishers: &'a [PacedPublisher],
    end_ns: Option<u64>,
    seq: u64,
    index: usize,
}

impl<'a> Cursor<'a> {
    fn new(publishers: &'a [PacedPublisher], end_ns: Option<u64>) -> Self {
        Cursor {
            publishers,
            end_ns,
            seq: 0,
            index: 0,
        }
    }

    /// When the next message is due; `None` when everything was released.
    fn next_due(&self) -> Option<u64> {
        let publisher = self.publishers.get(self.index)?;
        if publisher
            .schedule
            .limit
            .is_some_and(|limit| self.seq >= limit)
        {
            return None;
        }
        let due = publisher.schedule.intended_ns(self.seq);
        match self.end_ns {
            Some(end) if due >= end => None,
            _ => Some(due),
        }
    }

    /// The next entry if it is due at `now_ns`, advancing past it.
    fn take_due(&mut self, now_ns: u64) -> Option<(usize, u64)> {
        let due = self.next_due()?;
        if due > now_ns {
            return None;
        }
        let taken = (self.index, self.seq);
        self.index += 1;
        if self.index == self.publishers.len() {
            self.index = 0;
            self.seq += 1;
        }
        Some(taken)
    }
}

/// Waits until `due_ns`, or somewhat past it when messages are close together, but never past
/// `end_ns`: what fell due before the end leaves by the end. False when `cancel` fired
/// meanwhile (a long sleep looks at it every [`CANCEL_CHECK_EVERY`]).
///
/// A sleep ends late by the machine's wake-up latency (50-70 µs on a virtual machine, whose
/// timers trap to the hypervisor), so the pacer sleeps until `lead` before the deadline and
/// spins the rest. Where the deadline is far it spins at least [`SPIN_BEFORE`]; where it is
/// near (ten times the study's latency rate: a message every 250 µs), only the open-loop
/// latency tests wake early, by the lead learned from their own sleeps, so their send delay
/// does not grow with the offered rate (it was 7 µs at 400 msg/s and 42 µs at 4,000 with plain
/// sleeps). Offered rates keep releasing together what falls due within their resolution.
fn wait_until(
    clock: &RunClock,
    due_ns: u64,
    resolution: Resolution,
    end_ns: Option<u64>,
    lead: &mut WakeLead,
    cancel: &CancellationToken,
) -> bool {
    let deadline = clock.instant_at(due_ns);
    let now = Instant::now();
    if now >= deadline {
        return true;
    }
    let gap = deadline - now;
    let min_sleep = resolution.min_sleep();
    let min_sleep = match end_ns {
        Some(end) => min_sleep.min(clock.instant_at(end).saturating_duration_since(now)),
        None => min_sleep,
    };
    let early = if gap > SPIN_WHEN_GAP_OVER {
        Some(lead.lead().clamp(SPIN_BEFORE, gap / 4))
    } else if resolution == Resolution::Fine && gap >= lead.lead() + min_sleep {
        Some(lead.lead().min(gap / 2))
    } else {
        None
    };
    match early {
        Some(early) => {
            if !lead.sleep(gap - early, cancel) {
                return false;
            }
            while Instant::now() < deadline {
                std::hint::spin_loop();
            }
            true
        }
        None => lead.sleep(gap.max(min_sleep), cancel),
    }
}

/// A sleep longer than this is taken in slices of it, with a look at the cancel token after
/// each, so that a run whose messages are an hour apart still stops within a slice of being
/// cancelled. Shorter sleeps (every latency and rate test's) are one plain sleep, as before.
const CANCEL_CHECK_EVERY: Duration = Duration::from_millis(50);

/// How long before a deadline the pacer wakes: the 90th percentile of how late its sleeps
/// ended, estimated as it goes (a step up on every later sleep, a ninth of a step down on
/// every earlier one), plus a margin.
#[derive(Debug, Default)]
struct WakeLead {
    overslept_p90_ns: u64,
}

impl WakeLead {
    /// Up by this on a sleep that ended later than the estimate; down by a ninth of it on one
    /// that ended earlier: the estimate settles where one sleep in ten ends later.
    const STEP_NS: u64 = 9_000;
    /// Added to the estimate: a few µs of spinning cost less than a late message.
    const MARGIN: Duration = Duration::from_micros(5);
    /// The estimate stops here: a machine that oversleeps more than this is stalling, and
    /// spinning through its stalls would take a core from the broker.
    const MOST_NS: u64 = 500_000;

    fn lead(&self) -> Duration {
        Duration::from_nanos(self.overslept_p90_ns) + Self::MARGIN
    }

    /// Sleeps `duration` and learns how late the sleep ended (its last slice, for a long one);
    /// false, early and without learning, when `cancel` fired first.
    fn sleep(&mut self, duration: Duration, cancel: &CancellationToken) -> bool {
        let asked_until = Instant::now() + duration;
        let mut left = duration;
        while left > CANCEL_CHECK_EVERY {
            std::thread::sleep(CANCEL_CHECK_EVERY);
            if cancel.is_cancelled() {
                return false;
            }
            left = asked_until.saturating_duration_since(Instant::now());
        }
        std::thread::sleep(left);
        let overslept = Instant::now().saturating_duration_since(asked_until);
        self.observe(u64::try_from(overslept.as_nanos()).unwrap_or(u64::MAX));
        true
    }

    fn observe(&mut self, overslept_ns: u64) {
        self.overslept_p90_ns = if overslept_ns > self.overslept_p90_ns {
            (self.overslept_p90_ns + Self::STEP_NS).min(Self::MOST_NS)
        } else {
            self.overslept_p90_ns.saturating_sub(Self::STEP_NS / 9)
        };
    }
}

fn reduce_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only affects this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(first_ns: u64, interval_ns: u64, limit: Option<u64>) -> Schedule {
        Schedule {
            start_ns: 0,
            first_ps: u128::from(first_ns) * 1_000,
            interval_ps: u128::from(interval_ns) * 1_000,
            limit,
        }
    }

    #[test]
    fn releases_every_message_in_schedule_order() {
        let clock = RunClock::start_now();
        let start = clock.now_ns() + 1_000_000;
        let releases: Vec<Arc<Release>> = (0..3).map(|_| Arc::new(Release::default())).collect();
        let publishers = releases
            .iter()
            .enumerate()
            .map(|(i, release)| PacedPublisher {
                schedule: schedule(i as u64 * 100_000, 1_000_000, Some(5)).starting_at(start),
                release: release.clone(),
            })
            .collect();
        spawn(
            clock,
            publishers,
            None,
            Resolution::Fine,
            CancellationToken::new(),
            None,
        )
        .expect("thread starts")
        .join()
        .expect("pacer finishes");
        assert!(releases.iter().all(|r| r.released() == 5));
        // The last release cannot come before the last intended time.
        assert!(clock.now_ns() >= start + 200_000 + 4 * 1_000_000);
    }

    #[test]
    fn a_timed_schedule_stops_at_the_end_and_releases_close_messages_together() {
        let clock = RunClock::start_now();
        let start = clock.now_ns() + 1_000_000;
        // 4 publishers, each every 40 µs: the workload offers one message per 10 µs, closer
        // than the pacer sleeps, so each wake-up releases several.
        let releases: Vec<Arc<Release>> = (0..4).map(|_| Arc::new(Release::default())).collect();
        let publishers = releases
            .iter()
            .enumerate()
            .map(|(i, release)| PacedPublisher {
                schedule: schedule(i as u64 * 10_000, 40_000, None).starting_at(start),
                release: release.clone(),
            })
            .collect();
        let end = start + 20_000_000; // 20 ms: 500 messages per publisher
        spawn(
            clock,
            publishers,
            Some(end),
            Resolution::Throughput,
            CancellationToken::new(),
            None,
        )
        .expect("thread starts")
        .join()
        .expect("pacer finishes");
        for release in &releases {
            assert_eq!(release.released(), 500);
        }
    }

    #[test]
    fn a_cancelled_pacer_stops_within_a_slice_of_an_hour_long_sleep() {
        let clock = RunClock::start_now();
        let start = clock.now_ns() + 1_000_000;
        let release = Arc::new(Release::default());
        let hour_ns = crate::spec::MAX_DURATION.as_nanos() as u64;
        let publishers = vec![PacedPublisher {
            schedule: schedule(0, hour_ns, None).starting_at(start),
            release: release.clone(),
        }];
        let cancel = CancellationToken::new();
        let pacer = spawn(
            clock,
            publishers,
            None,
            Resolution::Fine,
            cancel.clone(),
            None,
        )
        .expect("thread starts");
        // The first message leaves at the start; the pacer then sleeps towards the second.
        let deadline = Instant::now() + Duration::from_secs(10);
        while release.released() == 0 {
            assert!(Instant::now() < deadline, "the first message was released");
            std::thread::sleep(Duration::from_millis(1));
        }
        let cancelled_at = Instant::now();
        cancel.cancel();
        while !pacer.is_finished() {
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(5),
                "the pacer still sleeps 5 s after its cancel"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let stopped_after = cancelled_at.elapsed();
        pacer.join().expect("pacer finishes");
        assert_eq!(release.released(), 1, "nothing released after the cancel");
        // 50 ms slices; 1 s leaves room for a loaded machine.
        assert!(
            stopped_after < Duration::from_secs(1),
            "stopped {stopped_after:?} after its cancel"
        );
    }

    #[test]
    fn the_wake_lead_settles_at_the_ninetieth_percentile_of_oversleeping() {
        let mut lead = WakeLead::default();
        // Sleeps that end 40, 41, ... 139 µs late, shuffled by a fixed stride: p90 is ~130 µs.
        for round in 0..50u64 {
            for i in 0..100u64 {
                let late_us = 40 + (i * 37 + round) % 100;
                lead.observe(late_us * 1_000);
            }
        }
        let learned_us = lead.overslept_p90_ns / 1_000;
        assert!(
            (115..=145).contains(&learned_us),
            "p90 of 40-139 µs is ~130 µs, learned {learned_us} µs"
        );
        assert_eq!(
            lead.lead(),
            Duration::from_nanos(lead.overslept_p90_ns) + WakeLead::MARGIN
        );
        // A stalling machine does not teach it to spin for ever.
        for _ in 0..1_000 {
            lead.observe(50_000_000);
        }
        assert_eq!(lead.overslept_p90_ns, WakeLead::MOST_NS);
    }

    #[test]
    fn waking_early_never_releases_before_the_deadline() {
        let clock = RunClock::start_now();
        // A lead of 65 µs: each of these waits sleeps part of its gap and spins the rest.
        let mut lead = WakeLead {
            overslept_p90_ns: 60_000,
        };
        for gap_ns in [100_000, 250_000, 2_000_000] {
            let due = clock.now_ns() + gap_ns;
            assert!(wait_until(
                &clock,
                due,
                Resolution::Fine,
                None,
                &mut lead,
                &CancellationToken::new()
            ));
            assert!(
                clock.now_ns() >= due,
                "returned before a deadline {gap_ns} ns away"
            );
        }
    }

    #[test]
    fn schedules_count_the_messages_due_before_an_end() {
        let s = schedule(250, 1_000, None);
        assert_eq!(s.messages_before(0), 0);
        assert_eq!(s.messages_before(250), 0);
        assert_eq!(s.messages_before(251), 1);
        assert_eq!(s.messages_before(1_250), 1);
        assert_eq!(s.messages_before(1_251), 2);
        assert_eq!(schedule(0, 10, Some(3)).messages_before(1_000), 3);
    }
}
