//! The open-loop pacer: one thread that releases each publisher's messages at their intended
//! times.
//!
//! Tokio's timer has millisecond granularity, and in open loop every µs of lateness is counted
//! as latency. The pacer sleeps with a 1 ns timer slack and spins the last stretch, then wakes
//! the publisher whose message is due; publishers stamp the intended time, so any remaining
//! lateness shows in the latency and, separately, in the send-delay histogram.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;

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

    fn release(&self, count: u64) {
        self.released.store(count, Ordering::Release);
        self.notify.notify_one();
    }
}

/// The intended send times of one publisher: `first_ns + seq * interval_ns`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub first_ns: u64,
    pub interval_ns: u64,
}

impl Schedule {
    pub fn intended_ns(&self, seq: u64) -> u64 {
        self.first_ns + seq * self.interval_ns
    }
}

/// One publisher as the pacer sees it.
#[derive(Debug)]
pub(crate) struct PacedPublisher {
    pub schedule: Schedule,
    pub release: Arc<Release>,
}

/// Spin this long before a deadline instead of sleeping through it.
const SPIN_BEFORE: Duration = Duration::from_micros(150);

/// Runs the pacer on its own thread until every message is released or `cancel` fires.
/// `publishers` must be ordered by their first intended time.
pub(crate) fn spawn(
    clock: RunClock,
    publishers: Vec<PacedPublisher>,
    messages: u64,
    cancel: CancellationToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("loadgen-pacer".into())
        .spawn(move || {
            reduce_timer_slack();
            for seq in 0..messages {
                for publisher in &publishers {
                    if cancel.is_cancelled() {
                        return;
                    }
                    sleep_until(clock.instant_at(publisher.schedule.intended_ns(seq)));
                    publisher.release.release(seq + 1);
                }
            }
        })
}

fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let remaining = deadline - now;
        if remaining > SPIN_BEFORE {
            std::thread::sleep(remaining - SPIN_BEFORE);
        } else {
            std::hint::spin_loop();
        }
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

    #[test]
    fn releases_every_message_in_schedule_order() {
        let clock = RunClock::start_now();
        let start = clock.now_ns() + 1_000_000;
        let releases: Vec<Arc<Release>> = (0..3).map(|_| Arc::new(Release::default())).collect();
        let publishers = releases
            .iter()
            .enumerate()
            .map(|(i, release)| PacedPublisher {
                schedule: Schedule {
                    first_ns: start + i as u64 * 100_000,
                    interval_ns: 1_000_000,
                },
                release: release.clone(),
            })
            .collect();
        spawn(clock, publishers, 5, CancellationToken::new())
            .expect("thread starts")
            .join()
            .expect("pacer finishes");
        assert!(releases.iter().all(|r| r.released() == 5));
        // The last release cannot come before the last intended time.
        assert!(clock.now_ns() >= start + 200_000 + 4 * 1_000_000);
    }
}
