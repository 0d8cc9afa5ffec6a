//! A figure over repetitions: the median and the exact distribution-free interval for it
//! (order statistics, [`crate::stats::order_statistic_median_ci`]) with the coverage it really
//! has. 95 % needs 6 repetitions; below that the interval is the range of the repetitions and
//! says its smaller coverage, never "95 %".

use super::chart::SeriesPoint;
use crate::stats;

/// Coverage every interval aims at.
pub const CONFIDENCE: f64 = 0.95;

/// The median of a figure over repetitions and its interval.
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
    /// The probability that the interval covers the true median (0 for one repetition).
    pub coverage: f64,
}

impl Estimate {
    /// Over `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let median = stats::median(values)?;
        let n = values.iter().filter(|v| !v.is_nan()).count();
        Some(match stats::order_statistic_median_ci(values, CONFIDENCE) {
            Some(interval) => Estimate {
                median,
                low: interval.low,
                high: interval.high,
                n,
                coverage: interval.coverage,
            },
            None => Estimate {
                median,
                low: median,
                high: median,
                n,
                coverage: 0.0,
            },
        })
    }

    /// `median [low-high]` with `format` for each number, the coverage inside the brackets
    /// when it is below [`CONFIDENCE`]; just the median when the interval is a point.
    pub fn text(&self, format: impl Fn(f64) -> String) -> String {
        let (median, low, high) = (format(self.median), format(self.low), format(self.high));
        if low == high {
            median
        } else if self.coverage + COVERAGE_SLACK < CONFIDENCE {
            format!("{median} [{low}-{high}, {}]", coverage_text(self.coverage))
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

/// Rounding room when a coverage is compared with [`CONFIDENCE`].
const COVERAGE_SLACK: f64 = 1e-9;

/// A coverage as a percentage: "50 %", "87.5 %", "93.75 %".
pub fn coverage_text(coverage: f64) -> String {
    let percent = coverage * 100.0;
    let text = format!("{percent:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} %")
}

/// What the brackets mean, for table notes and captions.
pub const INTERVAL_MEANING: &str = "Figures over repetitions are medians with an interval in \
     brackets: the exact distribution-free interval for the median from the repetitions' order \
     statistics (no resampling, no assumption about the distribution). A bracket without a \
     percentage covers the median with a probability of at least 0.95, which takes 6 or more \
     repetitions; with fewer, the bracket is the range of the repetitions and names its real \
     coverage (2 repetitions: 50 %, 3: 75 %, 4: 87.5 %, 5: 93.75 %).";

/// What a chart's error bar is, for captions.
pub const ERROR_BAR_MEANING: &str =
    "error bar: the interval of the table (the range of the repetitions below 6 of them)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_give_the_exact_interval_and_name_a_coverage_below_the_usual() {
        let values = [100.0, 120.0, 90.0, 110.0, 105.0, 98.0];
        let six = Estimate::of(&values).expect("values");
        // Six values: [min, max] covers the median with 1 - 2/64 = 96.875 %.
        assert_eq!((six.low, six.high, six.n), (90.0, 120.0, 6));
        assert!((six.coverage - 0.968_75).abs() < 1e-12, "{six:?}");
        assert_eq!(six.text(|v| format!("{v:.0}")), "102 [90-120]");

        let two = Estimate::of(&[10.0, 14.0]).expect("two values");
        assert_eq!((two.low, two.high), (10.0, 14.0));
        assert_eq!(two.text(|v| format!("{v:.0}")), "12 [10-14, 50 %]");
        let five = Estimate::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).expect("five values");
        assert_eq!(five.text(|v| format!("{v:.0}")), "3 [1-5, 93.75 %]");
        let four = Estimate::of(&[1.0, 2.0, 3.0, 4.0]).expect("four values");
        assert_eq!(four.text(|v| format!("{v:.1}")), "2.5 [1.0-4.0, 87.5 %]");

        assert_eq!(Estimate::of(&[]), None);
        let one = Estimate::of(&[7.0]).expect("one value");
        assert_eq!((one.low, one.high), (7.0, 7.0));
        assert_eq!(one.text(|v| format!("{v:.0}")), "7");
    }
}
