//! A figure over repetitions: the median and its 95 % confidence interval (percentile
//! bootstrap, fixed seed, so the same folder always gives the same report).

use super::chart::SeriesPoint;
use crate::stats;

/// Confidence of every interval in the report.
pub const CONFIDENCE: f64 = 0.95;
/// Bootstrap resamples per interval.
const RESAMPLES: u32 = 2_000;
/// Fixed seed: reports are reproducible byte for byte.
const SEED: u64 = 0x00C0_4F1D_E4CE;

/// The median of a figure over repetitions and its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Median over the repetitions.
    pub median: f64,
    /// Lower end of the interval (the median itself for one repetition).
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Repetitions.
    pub n: usize,
    /// Enough repetitions (5) for the bootstrap interval to be trusted.
    pub reliable: bool,
}

impl Estimate {
    /// Over `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let median = stats::median(values)?;
        let n = values.iter().filter(|v| !v.is_nan()).count();
        let interval = stats::bootstrap_median_ci(values, CONFIDENCE, RESAMPLES, SEED);
        Some(match interval {
            Some(interval) => Estimate {
                median,
                low: interval.low,
                high: interval.high,
                n,
                reliable: interval.reliable,
            },
            None => Estimate {
                median,
                low: median,
                high: median,
                n,
                reliable: false,
            },
        })
    }

    /// `median [low-high]` with `format` for each number; just the median when the interval
    /// is a point.
    pub fn text(&self, format: impl Fn(f64) -> String) -> String {
        let (median, low, high) = (format(self.median), format(self.low), format(self.high));
        if low == high {
            median
        } else {
            format!("{median} [{low}-{high}]")
        }
    }

    /// A chart point at `x`: marker at the median, error bar over the interval.
    pub fn point(&self, x: f64) -> SeriesPoint {
        SeriesPoint {
            x,
            y: self.median,
            low: self.low,
            high: self.high,
        }
    }
}

/// What the brackets mean, for table notes and captions.
pub const INTERVAL_MEANING: &str = "Figures over repetitions are medians with a 95 % confidence \
     interval in brackets (percentile bootstrap of the median over the repetitions, 2,000 \
     resamples, fixed seed); with fewer than 5 repetitions the interval is indicative only.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_are_reproducible_and_contain_their_median() {
        let values = [100.0, 120.0, 90.0, 110.0, 105.0, 98.0];
        let first = Estimate::of(&values).expect("values");
        assert_eq!(
            Estimate::of(&values),
            Some(first),
            "same seed, same interval"
        );
        assert!(first.low <= first.median && first.median <= first.high);
        assert_eq!(first.n, 6);
        assert!(first.reliable);
        assert_eq!(Estimate::of(&[]), None);
        let one = Estimate::of(&[7.0]).expect("one value");
        assert_eq!((one.low, one.high, one.reliable), (7.0, 7.0, false));
        assert_eq!(one.text(|v| format!("{v:.0}")), "7");
    }
}
