//! State shared by all connections of a run while it is under way: progress counters and the
//! latency histograms that connections feed in batches.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

use crate::result::new_histogram;

/// Counters and histograms every connection of a run updates.
#[derive(Debug)]
pub(crate) struct Live {
    pub published: AtomicU64,
    pub received: AtomicU64,
    pub received_unique: AtomicU64,
    pub last_receive_ns: AtomicU64,
    pub latency: Mutex<Histogram<u64>>,
    pub send_delay: Mutex<Histogram<u64>>,
}

impl Live {
    pub fn new() -> Self {
        Live {
            published: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_unique: AtomicU64::new(0),
            last_receive_ns: AtomicU64::new(0),
            latency: Mutex::new(new_histogram()),
            send_delay: Mutex::new(new_histogram()),
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
