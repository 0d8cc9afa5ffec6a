//! Message counts over time in fixed buckets, to find the steady-state window and its rate.

use serde::{Deserialize, Serialize};

/// Width of one bucket.
pub const BUCKET_NS: u64 = 10_000_000;

/// Messages per 10 ms bucket since the run origin; dense, mergeable by addition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateSeries {
    /// Count of bucket `i` covers `[i * BUCKET_NS, (i + 1) * BUCKET_NS)`.
    pub counts: Vec<u64>,
}

impl RateSeries {
    /// Adds `count` messages at time `ns`.
    pub fn add(&mut self, ns: u64, count: u64) {
        let bucket = usize::try_from(ns / BUCKET_NS).unwrap_or(usize::MAX);
        if bucket >= self.counts.len() {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += count;
    }

    /// Adds another series bucket by bucket.
    pub fn merge(&mut self, other: &RateSeries) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }

    /// Rate in messages/s over the whole buckets inside `[start_ns, end_ns]`, with the span
    /// used; `None` when the window holds no whole bucket.
    pub fn rate_within(&self, start_ns: u64, end_ns: u64) -> Option<(f64, u64, u64)> {
        let first = start_ns.div_ceil(BUCKET_NS);
        let last = end_ns / BUCKET_NS; // exclusive
        if last <= first {
            return None;
        }
        let count: u64 = (first..last)
            .filter_map(|b| self.counts.get(usize::try_from(b).ok()?))
            .sum();
        let span_ns = (last - first) * BUCKET_NS;
        Some((
            count as f64 * 1e9 / span_ns as f64,
            first * BUCKET_NS,
            last * BUCKET_NS,
        ))
    }
}

/// A task's own counts, sparse so that an idle hour costs nothing; folded into a
/// [`RateSeries`] when the task ends.
#[derive(Debug, Clone, Default)]
pub struct LocalSeries {
    runs: Vec<(u64, u64)>,
}

impl LocalSeries {
    /// Adds `count` messages at time `ns` (times must not go backwards by more than a bucket).
    pub fn add(&mut self, ns: u64, count: u64) {
        let bucket = ns / BUCKET_NS;
        match self.runs.last_mut() {
            Some((last, total)) if *last == bucket => *total += count,
            _ => self.runs.push((bucket, count)),
        }
    }

    /// Folds these counts into `series`.
    pub fn fold_into(&self, series: &mut RateSeries) {
        for &(bucket, count) in &self.runs {
            series.add(bucket * BUCKET_NS, count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_counts_only_whole_buckets_inside_the_window() {
        let mut series = RateSeries::default();
        for bucket in 0..10u64 {
            series.add(bucket * BUCKET_NS + 1, 100);
        }
        // Window 5 ms .. 95 ms: whole buckets 1..9 (8 buckets, 800 messages, 80 ms).
        let (rate, start, end) = series
            .rate_within(5_000_000, 95_000_000)
            .expect("has buckets");
        assert_eq!((start, end), (10_000_000, 90_000_000));
        assert!((rate - 10_000.0).abs() < 1e-6, "{rate}");
        assert_eq!(series.rate_within(1_000_000, 9_000_000), None);
    }

    #[test]
    fn local_series_fold_and_merge_add_up() {
        let mut local = LocalSeries::default();
        local.add(1, 1);
        local.add(2, 1);
        local.add(BUCKET_NS * 3, 5);
        let mut a = RateSeries::default();
        local.fold_into(&mut a);
        assert_eq!(a.counts, vec![2, 0, 0, 5]);
        let mut b = RateSeries::default();
        b.add(0, 1);
        b.merge(&a);
        assert_eq!(b.counts, vec![3, 0, 0, 5]);
    }
}
