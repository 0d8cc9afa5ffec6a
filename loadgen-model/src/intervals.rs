//! Latency per interval of the run clock: what HdrHistogram's interval log (`.hlog`) holds, so
//! a reader can plot a run's own latency over time with the field's tools.
//!
//! Intervals are 1 s long, on a grid anchored at the run clock's origin, which every instance
//! of a run shares: instances merge interval by interval. Memory stays bounded whatever the
//! run's length: a run whose measured deliveries span more than [`MAX_INTERVALS`] intervals
//! doubles the interval length and merges neighbours (2 s, 4 s, ...), so the log always holds
//! at most that many histograms.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::result::new_histogram;

/// The most intervals one result holds (each histogram takes up to 256 KiB in memory).
pub const MAX_INTERVALS: usize = 60;
/// The length of an interval until a run outgrows [`MAX_INTERVALS`] of them.
pub const FIRST_INTERVAL_NS: u64 = 1_000_000_000;
/// The longest interval: 2^20 s (12 days) covers any run; merges never go beyond it.
const LONGEST_INTERVAL_NS: u64 = FIRST_INTERVAL_NS << 20;

/// One interval's histogram: deliveries received in `[index, index + 1) x interval_ns` on the
/// run clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Position on the grid, from the run clock's origin.
    pub index: u64,
    /// The latencies received in it, ns.
    #[serde(with = "crate::histogram_v2")]
    pub histogram: Histogram<u64>,
}

/// Latency histograms per interval, in order, empty intervals left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalHistograms {
    /// Length of every interval, ns: [`FIRST_INTERVAL_NS`] times a power of two.
    pub interval_ns: u64,
    /// The intervals with deliveries, by index.
    pub intervals: Vec<Interval>,
}

impl Default for IntervalHistograms {
    fn default() -> Self {
        IntervalHistograms {
            interval_ns: FIRST_INTERVAL_NS,
            intervals: Vec::new(),
        }
    }
}

impl IntervalHistograms {
    /// Records `value_ns` received at `at_ns` on the run clock (saturating at the
    /// histograms' bound, as the run's own histograms do).
    pub fn record(&mut self, at_ns: u64, value_ns: u64) {
        let mut index = at_ns / self.interval_ns;
        while self.span_with(index) > MAX_INTERVALS as u64 && self.coarsen() {
            index = at_ns / self.interval_ns;
        }
        let histogram = match self.intervals.binary_search_by_key(&index, |i| i.index) {
            Ok(at) => &mut self.intervals[at].histogram,
            Err(at) => {
                self.intervals.insert(
                    at,
                    Interval {
                        index,
                        histogram: new_histogram(),
                    },
                );
                &mut self.intervals[at].histogram
            }
        };
        histogram.saturating_record(value_ns.max(1));
    }

    /// Adds `other`'s intervals (another instance of the same run) to these, on the coarser
    /// of the two grids.
    pub fn merge(&mut self, other: &IntervalHistograms) -> Result<(), String> {
        let mut other = other.clone();
        other.check()?;
        while self.interval_ns < other.interval_ns {
            if !self.coarsen() {
                return Err("interval lengths that no doubling makes equal".to_string());
            }
        }
        while other.interval_ns < self.interval_ns {
            if !other.coarsen() {
                return Err("interval lengths that no doubling makes equal".to_string());
            }
        }
        for interval in other.intervals {
            match self
                .intervals
                .binary_search_by_key(&interval.index, |i| i.index)
            {
                Ok(at) => self.intervals[at]
                    .histogram
                    .add(&interval.histogram)
                    .map_err(|e| format!("interval {}: {e:?}", interval.index))?,
                Err(at) => self.intervals.insert(at, interval),
            }
        }
        while self.span() > MAX_INTERVALS as u64 && self.coarsen() {}
        Ok(())
    }

    /// What a result read from a file or a peer must satisfy: a length on the grid, indices
    /// in order and unique, at most [`MAX_INTERVALS`] of them.
    pub fn check(&self) -> Result<(), String> {
        let mut length = FIRST_INTERVAL_NS;
        while length < self.interval_ns && length < LONGEST_INTERVAL_NS {
            length *= 2;
        }
        if length != self.interval_ns {
            return Err(format!(
                "interval length {} ns is not 1 s times a power of two up to 2^20",
                self.interval_ns
            ));
        }
        if self.intervals.len() > MAX_INTERVALS {
            return Err(format!(
                "{} intervals, more than the {MAX_INTERVALS} a result holds",
                self.intervals.len()
            ));
        }
        if self.intervals.windows(2).any(|w| w[0].index >= w[1].index) {
            return Err("interval indices out of order or repeated".to_string());
        }
        Ok(())
    }

    /// Deliveries over all intervals.
    pub fn count(&self) -> u64 {
        self.intervals.iter().map(|i| i.histogram.len()).sum()
    }

    /// Intervals from the first with deliveries to the last, both included.
    fn span(&self) -> u64 {
        match (self.intervals.first(), self.intervals.last()) {
            (Some(first), Some(last)) => last.index - first.index + 1,
            _ => 0,
        }
    }

    /// [`Self::span`] if `index` were added.
    fn span_with(&self, index: u64) -> u64 {
        match (self.intervals.first(), self.intervals.last()) {
            (Some(first), Some(last)) => last.index.max(index) - first.index.min(index) + 1,
            _ => 1,
        }
    }

    /// Doubles the interval length and merges neighbours; false at the longest length.
    fn coarsen(&mut self) -> bool {
        if self.interval_ns >= LONGEST_INTERVAL_NS {
            return false;
        }
        self.interval_ns *= 2;
        let mut merged: Vec<Interval> = Vec::with_capacity(self.intervals.len() / 2 + 1);
        for interval in std::mem::take(&mut self.intervals) {
            let index = interval.index / 2;
            match merged.last_mut() {
                Some(last) if last.index == index => {
                    // Same bounds: adding cannot fail.
                    let _ = last.histogram.add(&interval.histogram);
                }
                _ => merged.push(Interval {
                    index,
                    histogram: interval.histogram,
                }),
            }
        }
        self.intervals = merged;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = FIRST_INTERVAL_NS;

    #[test]
    fn deliveries_land_in_their_second_and_instances_merge_interval_by_interval() {
        let mut one = IntervalHistograms::default();
        one.record(2 * SECOND + 5, 1_000);
        one.record(2 * SECOND + 900_000_000, 3_000);
        one.record(4 * SECOND, 2_000);
        assert_eq!(
            one.intervals.iter().map(|i| i.index).collect::<Vec<_>>(),
            [2, 4]
        );
        assert_eq!(one.intervals[0].histogram.len(), 2);

        let mut other = IntervalHistograms::default();
        other.record(3 * SECOND, 7_000);
        other.record(4 * SECOND + 1, 8_000);
        one.merge(&other).expect("merged");
        assert_eq!(
            one.intervals
                .iter()
                .map(|i| (i.index, i.histogram.len()))
                .collect::<Vec<_>>(),
            [(2, 2), (3, 1), (4, 2)]
        );
        assert_eq!(one.count(), 5);
        one.check().expect("well-formed");
    }

    #[test]
    fn a_long_run_doubles_its_interval_and_never_holds_more_than_the_cap() {
        let mut long = IntervalHistograms::default();
        // 10 minutes of one delivery per second, after a 30 s warm-up.
        for second in 30..630 {
            long.record(second * SECOND, 500_000 + second);
        }
        assert!(
            long.intervals.len() <= MAX_INTERVALS,
            "{}",
            long.intervals.len()
        );
        assert_eq!(
            long.interval_ns,
            16 * SECOND,
            "600 s in at most 60 intervals"
        );
        assert_eq!(long.count(), 600, "nothing lost to merging");
        long.check().expect("well-formed");

        // A one-second instance merged into it takes its grid.
        let mut short = IntervalHistograms::default();
        short.record(100 * SECOND, 9);
        short.merge(&long).expect("merged");
        assert_eq!(short.interval_ns, 16 * SECOND);
        assert_eq!(short.count(), 601);
        assert!(short.intervals.len() <= MAX_INTERVALS);
    }

    #[test]
    fn malformed_interval_sets_are_refused() {
        let mut odd = IntervalHistograms {
            interval_ns: 3 * SECOND,
            ..IntervalHistograms::default()
        };
        assert!(odd.check().is_err());
        odd.interval_ns = SECOND;
        odd.intervals = vec![
            Interval {
                index: 4,
                histogram: new_histogram(),
            },
            Interval {
                index: 4,
                histogram: new_histogram(),
            },
        ];
        assert!(odd.check().is_err());
        let plenty = IntervalHistograms {
            intervals: (0..=MAX_INTERVALS as u64)
                .map(|index| Interval {
                    index,
                    histogram: new_histogram(),
                })
                .collect(),
            ..IntervalHistograms::default()
        };
        assert!(plenty.check().is_err());
        assert!(IntervalHistograms::default().merge(&plenty).is_err());
    }
}
