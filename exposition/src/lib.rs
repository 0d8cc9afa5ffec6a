//! Prometheus' text exposition format (version 0.0.4) as Continuum's agent and controller
//! write it, and the listener that serves it to a Prometheus server.
//!
//! # Layout
//! - this file: [`Exposition`] (what a listener serves), [`Page`] (metric families written
//!   one after another), [`labels`] (escaped), and [`LatencyBuckets`]: an HdrHistogram in
//!   the buckets every latency histogram of the project uses, so that the agent's and the
//!   controller's histograms add up in one query.
//! - `listener`: [`MetricsListener`] and [`serve`], `GET /metrics` over plain HTTP/1.1.

mod listener;

use std::fmt::{Display, Write as _};
use std::future::Future;
use std::pin::Pin;

use hdrhistogram::Histogram;

pub use listener::{MetricsListener, serve};

/// What a metrics listener serves: the page, rendered anew at every scrape.
pub trait Exposition: Send + Sync + 'static {
    /// The metrics now, in the text format.
    fn render(&self) -> Pin<Box<dyn Future<Output = String> + Send + '_>>;
}

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (a count since the start).
    Counter,
    /// Goes up and down (a state, a figure).
    Gauge,
    /// Cumulative buckets, a count and a sum.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page of the text format, written family by family.
#[derive(Debug, Default)]
pub struct Page {
    text: String,
}

impl Page {
    /// An empty page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts family `name`: its help and type lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(
            self.text,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.as_str()
        );
    }

    /// One sample of `name` with `labels` (already [`labels`]-escaped; may be empty).
    pub fn sample(&mut self, name: &str, labels: &str, value: impl Display) {
        if labels.is_empty() {
            let _ = writeln!(self.text, "{name} {value}");
        } else {
            let _ = writeln!(self.text, "{name}{{{labels}}} {value}");
        }
    }

    /// The samples of histogram `name` with `labels`: its buckets, count and sum.
    pub fn histogram(&mut self, name: &str, labels: &str, buckets: &LatencyBuckets) {
        let joined = |extra: &str| {
            if labels.is_empty() {
                extra.to_string()
            } else {
                format!("{labels},{extra}")
            }
        };
        for (bound, below) in LATENCY_BUCKETS_S.iter().zip(&buckets.cumulative) {
            self.sample(
                &format!("{name}_bucket"),
                &joined(&format!("le=\"{bound}\"")),
                below,
            );
        }
        self.sample(
            &format!("{name}_bucket"),
            &joined("le=\"+Inf\""),
            buckets.count,
        );
        self.sample(&format!("{name}_count"), labels, buckets.count);
        self.sample(&format!("{name}_sum"), labels, buckets.sum_seconds);
    }

    /// The page's text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// `name="value",...` with values escaped as the text format asks.
pub fn labels(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Upper bounds of every latency histogram's buckets, s: 10 µs to 10 s.
pub const LATENCY_BUCKETS_S: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram in [`LATENCY_BUCKETS_S`]: what a Prometheus histogram carries.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyBuckets {
    /// Cumulative counts at each of [`LATENCY_BUCKETS_S`].
    pub cumulative: Vec<u64>,
    /// All values (the `+Inf` bucket).
    pub count: u64,
    /// Their sum, s.
    pub sum_seconds: f64,
}

impl LatencyBuckets {
    /// Of a histogram in ns: each value counts in the buckets its recorded range starts in
    /// (its lowest equivalent), so a value on a bound is at or below it.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let mut cumulative = vec![0u64; LATENCY_BUCKETS_S.len()];
        for value in histogram.iter_recorded() {
            let seconds = histogram.lowest_equivalent(value.value_iterated_to()) as f64 / 1e9;
            for (slot, bound) in cumulative.iter_mut().zip(LATENCY_BUCKETS_S) {
                if seconds <= bound {
                    *slot += value.count_at_value();
                }
            }
        }
        LatencyBuckets {
            cumulative,
            count: histogram.len(),
            sum_seconds: histogram.mean() * histogram.len() as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_labels_escaped() {
        let mut histogram =
            Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
        histogram.record(20_000).expect("in range"); // 20 µs
        histogram.record(3_000_000).expect("in range"); // 3 ms
        histogram.record(20_000_000_000).expect("in range"); // 20 s: only +Inf
        let LatencyBuckets {
            cumulative,
            count,
            sum_seconds: sum,
        } = LatencyBuckets::of(&histogram);
        assert_eq!(count, 3);
        assert_eq!(cumulative[0], 0, "nothing at or below 10 µs");
        assert_eq!(cumulative[1], 1, "20 µs is at or below 25 µs");
        assert_eq!(cumulative[8], 2, "3 ms is at or below 5 ms");
        assert_eq!(
            *cumulative.last().expect("a bucket"),
            2,
            "20 s is beyond 10 s"
        );
        // Values at their bucket's highest equivalent: within 0.1 % of what was recorded.
        assert!((sum - 20.003_02).abs() < 0.03, "{sum}");
        assert_eq!(
            labels(&[("scenario", "edge \"5 ms\"\\")]),
            "scenario=\"edge \\\"5 ms\\\"\\\\\""
        );
    }

    #[test]
    fn a_histogram_writes_buckets_count_and_sum_under_its_labels() {
        let buckets = LatencyBuckets {
            cumulative: vec![1; LATENCY_BUCKETS_S.len()],
            count: 2,
            sum_seconds: 0.5,
        };
        let mut page = Page::new();
        page.family("continuum_x_seconds", Kind::Histogram, "A test.");
        page.histogram("continuum_x_seconds", "cell=\"a\"", &buckets);
        page.histogram("continuum_x_seconds", "", &buckets);
        let text = page.finish();
        assert!(text.starts_with(
            "# HELP continuum_x_seconds A test.\n# TYPE continuum_x_seconds histogram\n\
             continuum_x_seconds_bucket{cell=\"a\",le=\"0.00001\"} 1\n"
        ));
        assert!(text.contains("continuum_x_seconds_bucket{cell=\"a\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("continuum_x_seconds_count{cell=\"a\"} 2\n"));
        assert!(text.contains("continuum_x_seconds_sum{cell=\"a\"} 0.5\n"));
        assert!(text.contains("continuum_x_seconds_bucket{le=\"10\"} 1\n"));
        assert!(text.ends_with("continuum_x_seconds_count 2\ncontinuum_x_seconds_sum 0.5\n"));
    }
}
