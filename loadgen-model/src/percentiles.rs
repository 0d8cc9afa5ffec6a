//! Percentiles of one histogram in µs, the shape every latency, send delay, connect time
//! and time away is summarised in.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Percentiles of one histogram, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Interquartile range, p75 - p25 (the study's boxplots).
    pub iqr_us: f64,
}

impl LatencySummary {
    /// Summarises a histogram of ns values.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1_000.0;
        LatencySummary {
            count: histogram.len(),
            min_us: us(histogram.min()),
            p50_us: us(histogram.value_at_quantile(0.50)),
            p90_us: us(histogram.value_at_quantile(0.90)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            p999_us: us(histogram.value_at_quantile(0.999)),
            max_us: us(histogram.max()),
            mean_us: histogram.mean() / 1_000.0,
            iqr_us: us(histogram.value_at_quantile(0.75)) - us(histogram.value_at_quantile(0.25)),
        }
    }
}
