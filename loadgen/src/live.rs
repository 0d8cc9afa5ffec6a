//! State shared by all connections of a run while it is under way: progress counters and the
//! latency histograms that connections feed in batches.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use tokio::sync::Notify;

use crate::intervals::IntervalHistograms;
use crate::result::new_histogram;

/// Counters and histograms every connection of a run updates.
#[derive(Debug)]
pub(crate) struct Live {
    pub published: AtomicU64,
    pub received: AtomicU64,
    pub received_unique: AtomicU64,
    pub last_receive_ns: AtomicU64,
    pub latency: Mutex<Histogram<u64>>,
    pub transit_latency: Mutex<Histogram<u64>>,
    pub send_delay: Mutex<Histogram<u64>>,
    pub read_delay: Mutex<Histogram<u64>>,
    /// `latency` per interval of the run clock, for the interval log.
    pub latency_intervals: Mutex<IntervalHistograms>,
    /// Closed loop at QoS 0: one per global publisher index; empty otherwise.
    pub credits: Vec<std::sync::Arc<Credit>>,
}

impl Live {
    pub fn new(credits: usize) -> Self {
        Live {
            credits: (0..credits).map(|_| Default::default()).collect(),
            published: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_unique: AtomicU64::new(0),
            last_receive_ns: AtomicU64::new(0),
            latency: Mutex::new(new_histogram()),
            transit_latency: Mutex::new(new_histogram()),
            send_delay: Mutex::new(new_histogram()),
            read_delay: Mutex::new(new_histogram()),
            latency_intervals: Mutex::new(IntervalHistograms::default()),
        }
    }

    /// A subscriber read a batch of messages at `now_ns`.
    pub fn add_received(&self, received: u64, unique: u64, now_ns: u64) {
        if received > 0 {
            self.received.fetch_add(received, Ordering::Relaxed);
            self.received_unique.fetch_add(unique, Ordering::Relaxed);
            self.last_receive_ns.fetch_max(now_ns, Ordering::Relaxed);
        }
    }

    /// A snapshot for progress display.
    pub fn progress(&self) -> Progress {
        Progress {
            published: self.published.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
        }
    }
}

/// A closed loop's end-to-end window at QoS 0, for one publisher: how many of its messages
/// its subscribers received, and when to wake it.
#[derive(Debug)]
pub(crate) struct Credit {
    delivered: AtomicU64,
    /// Wake the publisher once `delivered` reaches this; `u64::MAX` when it is not waiting.
    wake_at: AtomicU64,
    notify: Notify,
}

impl Default for Credit {
    fn default() -> Self {
        Credit {
            delivered: AtomicU64::new(0),
            wake_at: AtomicU64::new(u64::MAX),
            notify: Notify::new(),
        }
    }
}

impl Credit {
    /// Deliveries so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Acquire)
    }

    /// A subscriber received `count` more of this publisher's messages.
    pub fn add(&self, count: u64) {
        let total = self.delivered.fetch_add(count, Ordering::AcqRel) + count;
        if total >= self.wake_at.load(Ordering::Acquire)
            && self.wake_at.swap(u64::MAX, Ordering::AcqRel) != u64::MAX
        {
            self.notify.notify_one();
        }
    }

    /// Asks to be woken when deliveries reach `target`; false when they already have.
    pub fn wake_when(&self, target: u64) -> bool {
        self.wake_at.store(target, Ordering::Release);
        if self.delivered() >= target {
            self.wake_at.store(u64::MAX, Ordering::Release);
            return false;
        }
        true
    }

    /// Resolves after a wake-up asked for with [`Credit::wake_when`].
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

/// How far a run has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Messages written to the broker so far.
    pub published: u64,
    /// Messages received by subscribers so far.
    pub received: u64,
}

/// Collects samples locally and records them into a shared histogram in batches, so the hot
/// path takes the lock once per few hundred messages.
#[derive(Debug)]
pub(crate) struct SampleBuffer<'a> {
    target: &'a Mutex<Histogram<u64>>,
    samples: Vec<u64>,
}

const SAMPLE_BATCH: usize = 256;

impl<'a> SampleBuffer<'a> {
    pub fn new(target: &'a Mutex<Histogram<u64>>) -> Self {
        SampleBuffer {
            target,
            samples: Vec::with_capacity(SAMPLE_BATCH),
        }
    }

    pub fn push(&mut self, value_ns: u64) {
        self.samples.push(value_ns);
        if self.samples.len() == SAMPLE_BATCH {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if self.samples.is_empty() {
            return;
        }
        // A poisoned lock only means another connection panicked mid-record; the counts
        // recorded so far are still valid.
        let mut histogram = self
            .target
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for value in self.samples.drain(..) {
            histogram.saturating_record(value.max(1));
        }
    }
}

impl Drop for SampleBuffer<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A connection's latencies with their receive times, added to the run's interval
/// histograms in batches, as [`SampleBuffer`] does for one histogram.
pub(crate) struct IntervalBuffer<'a> {
    target: &'a Mutex<IntervalHistograms>,
    samples: Vec<(u64, u64)>,
}

impl<'a> IntervalBuffer<'a> {
    pub fn new(target: &'a Mutex<IntervalHistograms>) -> Self {
        IntervalBuffer {
            target,
            samples: Vec::with_capacity(SAMPLE_BATCH),
        }
    }

    /// `value_ns` received at `at_ns` on the run clock.
    pub fn push(&mut self, at_ns: u64, value_ns: u64) {
        self.samples.push((at_ns, value_ns));
        if self.samples.len() == SAMPLE_BATCH {
            self.flush();
        }
    }

    pub fn flush(&mut self) {
        if self.samples.is_empty() {
            return;
        }
        let mut intervals = self
            .target
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (at_ns, value_ns) in self.samples.drain(..) {
            intervals.record(at_ns, value_ns);
        }
    }
}

impl Drop for IntervalBuffer<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// First/last/count of the measured messages of one client.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WindowTracker {
    first_ns: Option<u64>,
    last_ns: u64,
    count: u64,
}

impl WindowTracker {
    pub fn add(&mut self, now_ns: u64) {
        self.first_ns.get_or_insert(now_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.count += 1;
    }

    pub fn finish(self, client: u32) -> Option<crate::result::ClientWindow> {
        self.first_ns.map(|first_ns| crate::result::ClientWindow {
            client,
            first_ns,
            last_ns: self.last_ns,
            count: self.count,
        })
    }
}
