//! The CPU and memory samples nodes stream during each cell (`metrics.csv`, one
//! [`MetricsRow`] each), and what the broker spent on a cell from them, taken over the
//! window the cell's figures describe: the measured window of a timed run, or the first to
//! the last message of a counted one. And the cell's verdict on who was the limit.

use std::path::Path;

use loadgen::{RunResult, Summary};
use serde::{Deserialize, Serialize};

use super::fields::decimals;
use super::{ResultsError, csv_file};

/// One node or process sample taken during a cell: a row of `metrics.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// Cell id.
    pub cell: String,
    /// Sample time, Unix ns on the node's clock.
    pub unix_ns: u64,
    /// Node.
    pub node: String,
    /// Node CPU busy, percent of all cores.
    #[serde(serialize_with = "decimals::<2, _>")]
    pub node_cpu_percent: f64,
    /// Node memory in use, bytes.
    pub node_memory_used_bytes: u64,
    /// Watched process (the broker), or empty.
    pub process: String,
    /// Its CPU, percent of one core.
    #[serde(serialize_with = "decimals::<2, _>")]
    pub process_cpu_percent: f64,
    /// Its resident memory, bytes.
    pub process_rss_bytes: u64,
}

/// The columns a sample cannot be used without: all of them.
const COLUMNS: [&str; 8] = [
    "cell",
    "unix_ns",
    "node",
    "node_cpu_percent",
    "node_memory_used_bytes",
    "process",
    "process_cpu_percent",
    "process_rss_bytes",
];

/// Every sample of the `metrics.csv` at `path`, each read or why not; `None` when the
/// file does not exist (no node sampled anything).
pub fn read_each_sample(
    path: &Path,
) -> Result<Option<Vec<Result<MetricsRow, ResultsError>>>, ResultsError> {
    csv_file::read(path, &COLUMNS)
}

/// The broker's CPU and memory over a cell's window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BrokerUsage {
    /// Mean CPU of the broker's process (or pod), percent of one core.
    pub cpu_percent: f64,
    /// Its CPU time per delivered message over the window, µs.
    pub cpu_us_per_delivery: Option<f64>,
    /// Its largest resident memory sampled during the cell, MB.
    pub peak_rss_mb: f64,
    /// Samples inside the window (the mean's basis).
    pub samples: usize,
}

impl BrokerUsage {
    /// As `summary.csv` publishes it, and so as a cell's record keeps it: CPU to 0.01 %,
    /// CPU per delivery to 0.001 µs, memory to 0.1 MB; finer digits are below what the
    /// samples resolve. The record and its export then hold the same numbers.
    pub fn as_published(self) -> Self {
        let round = |value: f64, decimals: i32| {
            let scale = 10f64.powi(decimals);
            (value * scale).round() / scale
        };
        BrokerUsage {
            cpu_percent: round(self.cpu_percent, 2),
            cpu_us_per_delivery: self.cpu_us_per_delivery.map(|us| round(us, 3)),
            peak_rss_mb: round(self.peak_rss_mb, 1),
            samples: self.samples,
        }
    }
}

/// The window of a result on its first loadgen host's wall clock, Unix ns.
pub fn window_unix_ns(result: &RunResult) -> Option<(u64, u64)> {
    let origin = result.clock_origin_unix_ns;
    if origin == 0 {
        return None;
    }
    if let Some(window) = result.measured_window {
        return Some((origin + window.from_ns, origin + window.until_ns));
    }
    let first = result.publisher_windows.iter().map(|w| w.first_ns).min()?;
    let last = result
        .subscriber_windows
        .iter()
        .map(|w| w.last_ns)
        .max()
        .unwrap_or(first);
    Some((origin + first, origin + last.max(first)))
}

/// The broker's usage over `result`'s window from `rows` of process `broker`; `shift_ns`
/// maps the loadgen host's clock onto the broker node's (broker offset minus loadgen offset,
/// both against the controller).
pub fn broker_usage(
    result: &RunResult,
    summary: &Summary,
    rows: &[MetricsRow],
    broker: &str,
    shift_ns: i64,
) -> Option<BrokerUsage> {
    let (from, until) = window_unix_ns(result)?;
    let shift = |t: u64| (t as i128 + shift_ns as i128).max(0) as u64;
    let (from, until) = (shift(from), shift(until));
    let own: Vec<&MetricsRow> = rows.iter().filter(|r| r.process == broker).collect();
    if own.is_empty() {
        return None;
    }
    // A sample's CPU share covers the interval before it: keep those that end inside.
    let inside: Vec<&MetricsRow> = own
        .iter()
        .copied()
        .filter(|r| r.unix_ns > from && r.unix_ns <= until.max(from + 1))
        .collect();
    let basis = if inside.is_empty() {
        // A short window (a burst) may hold no sample: the one right after it covers it.
        own.iter()
            .copied()
            .filter(|r| r.unix_ns > from)
            .min_by_key(|r| r.unix_ns)
            .into_iter()
            .collect()
    } else {
        inside
    };
    let samples = basis.len();
    if samples == 0 {
        return None;
    }
    let cpu_percent = basis.iter().map(|r| r.process_cpu_percent).sum::<f64>() / samples as f64;
    let deliveries_per_s = summary
        .steadiness
        .as_ref()
        .map_or(summary.receive_rate.msgs_per_s, |s| s.receive_msgs_per_s);
    Some(BrokerUsage {
        cpu_percent,
        cpu_us_per_delivery: (deliveries_per_s > 0.0)
            .then(|| cpu_percent / 100.0 * 1e6 / deliveries_per_s),
        peak_rss_mb: own.iter().map(|r| r.process_rss_bytes).max().unwrap_or(0) as f64 / 1e6,
        samples,
    })
}

/// Below this CPU share of one core a broker counts as idle.
pub const IDLE_BROKER_PERCENT: f64 = 50.0;

/// Whether the generator, not the broker, was the limit of a cell: loadgen's own verdict,
/// or an offered rate the publishers did not reach while the broker had CPU to spare.
pub fn generator_limit(summary: &Summary, usage: Option<&BrokerUsage>) -> Option<String> {
    if summary.generator.limited {
        return Some(summary.generator.reasons.join("; "));
    }
    let steadiness = summary.steadiness.as_ref()?;
    let offered = steadiness.offered_msgs_per_s?;
    let usage = usage?;
    (steadiness.publish_msgs_per_s < loadgen::steadiness::OFFERED_SHARE * offered
        && usage.cpu_percent < IDLE_BROKER_PERCENT)
        .then(|| {
            format!(
                "the publishers sent {:.0} of the {offered:.0} msg/s offered while the broker used only {:.0} % of a core",
                steadiness.publish_msgs_per_s, usage.cpu_percent
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(unix_ns: u64, cpu: f64, rss: u64) -> MetricsRow {
        MetricsRow {
            cell: "c".into(),
            unix_ns,
            node: "n".into(),
            node_cpu_percent: 0.0,
            node_memory_used_bytes: 0,
            process: "mosquitto".into(),
            process_cpu_percent: cpu,
            process_rss_bytes: rss,
        }
    }

    fn timed_result() -> (RunResult, Summary) {
        let mut spec = loadgen::presets::throughput();
        spec.publishers = 1;
        spec.subscribers = 1;
        spec.messages_per_publisher = 0;
        spec.duration = Some(std::time::Duration::from_secs(2));
        spec.pacing = loadgen::spec::Pacing::Rate { rate: 1000 };
        let mut result = RunResult::empty(&spec, "u");
        result.shards.push(spec.effective_shard());
        result.clock_origin_unix_ns = 1_000_000_000_000;
        result.measured_window = Some(loadgen::result::MeasuredWindow {
            start_ns: 0,
            from_ns: 0,
            until_ns: 2_000_000_000,
        });
        for bucket in 0..200u64 {
            result.publish_series.add(bucket * 10_000_000, 10);
            result.receive_series.add(bucket * 10_000_000, 10);
        }
        let summary = Summary::of(&result);
        (result, summary)
    }

    #[test]
    fn cpu_per_delivery_is_taken_over_the_window_on_the_brokers_clock() {
        let (result, summary) = timed_result();
        // The broker's clock runs 5 s ahead of loadgen's host.
        let shift = 5_000_000_000i64;
        let base = 1_000_000_000_000 + 5_000_000_000;
        let rows = vec![
            row(base - 500_000_000, 99.0, 10_000_000), // before the window
            row(base + 500_000_000, 40.0, 20_000_000),
            row(base + 1_000_000_000, 60.0, 30_000_000),
            row(base + 2_000_000_000, 50.0, 25_000_000),
            row(base + 2_500_000_000, 99.0, 12_000_000), // after it
        ];
        let usage = broker_usage(&result, &summary, &rows, "mosquitto", shift).expect("usage");
        assert_eq!(usage.samples, 3);
        assert!((usage.cpu_percent - 50.0).abs() < 1e-9);
        // 0.5 core over 1000 deliveries/s: 500 µs per delivery.
        let per = usage.cpu_us_per_delivery.expect("deliveries");
        assert!((per - 500.0).abs() < 1.0, "{per}");
        assert_eq!(usage.peak_rss_mb, 30.0);
        assert!(broker_usage(&result, &summary, &rows, "rabbitmq", shift).is_none());
    }

    #[test]
    fn an_offered_rate_missed_beside_an_idle_broker_is_the_generators_limit() {
        let (_, mut summary) = timed_result();
        let idle = BrokerUsage {
            cpu_percent: 10.0,
            cpu_us_per_delivery: None,
            peak_rss_mb: 1.0,
            samples: 4,
        };
        assert_eq!(
            generator_limit(&summary, Some(&idle)),
            None,
            "it was reached"
        );
        if let Some(steadiness) = summary.steadiness.as_mut() {
            steadiness.offered_msgs_per_s = Some(5_000.0);
        }
        let verdict = generator_limit(&summary, Some(&idle)).expect("limited");
        assert!(verdict.contains("only 10 % of a core"), "{verdict}");
        let busy = BrokerUsage {
            cpu_percent: 95.0,
            ..idle
        };
        assert_eq!(
            generator_limit(&summary, Some(&busy)),
            None,
            "the broker was busy"
        );
    }
}
