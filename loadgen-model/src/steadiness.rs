//! Whether a timed run was sustained: judged from its rate series over the measured window.
//!
//! A rate is *sustained* only when the broker kept it for the whole window: the receive rate
//! of each half lies within 5 % of the whole window's, and the backlog (deliveries owed:
//! messages published times their subscribers, minus deliveries received) did not keep
//! growing. At an offered rate, the publishers must also have sent what was offered and the
//! subscribers received at least 99 % of it. And nothing may be lost over the whole run,
//! warm-up included: a broker that drops messages to keep up (rumqttd at QoS 0 does) has not
//! sustained the rate, however steady the window looks. A run that fails any of these keeps
//! its figures, marked unsteady with the reasons; it is never tabulated as a sustained rate.

use serde::{Deserialize, Serialize};

use crate::result::{MeasuredWindow, RunResult};
use crate::series::{BUCKET_NS, RateSeries};
use crate::spec::Pacing;

/// Largest difference between a half's receive rate and the whole window's, as a share.
pub const HALF_TOLERANCE: f64 = 0.05;
/// Largest backlog growth over the window, as a share of the window's deliveries.
pub const BACKLOG_TOLERANCE: f64 = 0.02;
/// Least share of the offered rate that must be published and delivered.
pub const OFFERED_SHARE: f64 = 0.99;

/// The verdict on one timed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steadiness {
    /// Every criterion held.
    pub steady: bool,
    /// Which criteria failed, in words with figures (empty when steady).
    pub reasons: Vec<String>,
    /// The measured window: start on the run clock and length, in whole 10 ms buckets, ms.
    pub window_start_ms: f64,
    /// Window length, ms.
    pub window_ms: f64,
    /// Offered publish rate (rate pacing), msg/s.
    pub offered_msgs_per_s: Option<f64>,
    /// Publishes per second over the window.
    pub publish_msgs_per_s: f64,
    /// Deliveries per second over the window (all subscribers together).
    pub receive_msgs_per_s: f64,
    /// Deliveries per second over the window's first half.
    pub receive_first_half_msgs_per_s: f64,
    /// Deliveries per second over its second half.
    pub receive_second_half_msgs_per_s: f64,
    /// Deliveries per second of the slowest whole second of the window.
    pub receive_slowest_second_msgs_per_s: Option<f64>,
    /// Deliveries per second of the fastest whole second.
    pub receive_fastest_second_msgs_per_s: Option<f64>,
    /// Deliveries owed at the window's start.
    pub backlog_at_start: i64,
    /// Deliveries owed at its end.
    pub backlog_at_end: i64,
    /// Deliveries over the window as a share of what the offered rate asked for, percent.
    pub delivered_percent_of_offered: Option<f64>,
}

/// Judges a timed run; `None` for counted runs, for a result without its whole workload
/// (a shard alone cannot see the backlog), or a window with no whole bucket.
pub fn judge(result: &RunResult) -> Option<Steadiness> {
    let window = result.measured_window?;
    if !result.covers_whole_workload() {
        return None;
    }
    let spec = &result.spec;
    let fanout = f64::from(spec.subscribers) / f64::from(spec.publishers.max(1));
    let fanout = match spec.topology {
        crate::spec::Topology::Shared => f64::from(spec.subscribers),
        _ => fanout,
    };
    let (first, last) = whole_buckets(window)?;
    let span_s = (last - first) as f64 * BUCKET_NS as f64 / 1e9;
    let middle = first + (last - first) / 2;
    let rate_over = |series: &RateSeries, a: u64, b: u64| {
        count(series, a, b) as f64 * 1e9 / (((b - a).max(1)) * BUCKET_NS) as f64
    };
    let publish = rate_over(&result.publish_series, first, last);
    let receive = rate_over(&result.receive_series, first, last);
    let first_half = rate_over(&result.receive_series, first, middle);
    let second_half = rate_over(&result.receive_series, middle, last);
    let seconds = per_second(&result.receive_series, first, last);
    let backlog_at = |bucket: u64| {
        let published = count(&result.publish_series, 0, bucket) as f64;
        let received = count(&result.receive_series, 0, bucket) as f64;
        (published * fanout - received).round() as i64
    };
    let (backlog_at_start, backlog_at_end) = (backlog_at(first), backlog_at(last));
    let offered = match spec.pacing {
        Pacing::Rate { rate } => Some(rate as f64),
        Pacing::OpenLoop { interval } if !interval.is_zero() => {
            Some(f64::from(spec.publishers) / interval.as_secs_f64())
        }
        _ => None,
    };
    let delivered_percent_of_offered =
        offered.map(|offered| receive * 100.0 / (offered * fanout).max(f64::MIN_POSITIVE));

    let mut reasons = Vec::new();
    if receive <= 0.0 {
        reasons.push("nothing was received in the measured window".to_string());
    }
    for (name, half) in [("first", first_half), ("second", second_half)] {
        let off = (half - receive).abs() / receive.max(f64::MIN_POSITIVE);
        if receive > 0.0 && off > HALF_TOLERANCE {
            reasons.push(format!(
                "the receive rate of the {name} half ({half:.0} msg/s) is {:.1} % off the window's ({receive:.0} msg/s)",
                off * 100.0
            ));
        }
    }
    let growth = backlog_at_end - backlog_at_start;
    let window_deliveries = receive * span_s;
    if growth as f64 > BACKLOG_TOLERANCE * window_deliveries.max(1.0) && growth > 0 {
        reasons.push(format!(
            "the backlog grew by {growth} deliveries ({:.0}/s), from {backlog_at_start} to {backlog_at_end}: the broker fell behind",
            growth as f64 / span_s
        ));
    }
    if let Some(offered) = offered {
        if publish < OFFERED_SHARE * offered {
            reasons.push(format!(
                "the publishers sent {publish:.0} msg/s of the {offered:.0} offered ({:.1} %)",
                publish * 100.0 / offered
            ));
        }
        if let Some(share) = delivered_percent_of_offered
            && share < OFFERED_SHARE * 100.0
        {
            reasons.push(format!(
                "the subscribers received {share:.1} % of the offered deliveries (at least {:.0} % needed)",
                OFFERED_SHARE * 100.0
            ));
        }
    }
    if let Some(lost) = result.lost_deliveries().filter(|lost| *lost > 0) {
        reasons.push(format!(
            "{lost} deliveries were lost ({:.2} % of {}): a rate that loses messages is not sustained",
            lost as f64 * 100.0 / result.expected_deliveries().max(1) as f64,
            result.expected_deliveries()
        ));
    }
    Some(Steadiness {
        steady: reasons.is_empty(),
        reasons,
        window_start_ms: (first * BUCKET_NS) as f64 / 1e6,
        window_ms: span_s * 1e3,
        offered_msgs_per_s: offered,
        publish_msgs_per_s: publish,
        receive_msgs_per_s: receive,
        receive_first_half_msgs_per_s: first_half,
        receive_second_half_msgs_per_s: second_half,
        receive_slowest_second_msgs_per_s: seconds.iter().copied().reduce(f64::min),
        receive_fastest_second_msgs_per_s: seconds.iter().copied().reduce(f64::max),
        backlog_at_start,
        backlog_at_end,
        delivered_percent_of_offered,
    })
}

/// The whole buckets inside the measured window, as `[first, last)`.
pub fn whole_buckets(window: MeasuredWindow) -> Option<(u64, u64)> {
    let first = window.from_ns.div_ceil(BUCKET_NS);
    let last = window.until_ns / BUCKET_NS;
    (last > first).then_some((first, last))
}

/// Messages in buckets `[from, to)`.
fn count(series: &RateSeries, from: u64, to: u64) -> u64 {
    (from..to)
        .filter_map(|b| series.counts.get(usize::try_from(b).ok()?))
        .sum()
}

/// Rates of each whole second in `[first, last)`.
fn per_second(series: &RateSeries, first: u64, last: u64) -> Vec<f64> {
    let per_second = 1_000_000_000 / BUCKET_NS;
    (0..(last - first) / per_second)
        .map(|i| {
            let from = first + i * per_second;
            count(series, from, from + per_second) as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Topology;

    /// A timed pairs run of 10 s (after 1 s of warm-up) whose subscribers receive `receive(s)`
    /// messages in second s while publishers send 1000 per second.
    fn run(receive: impl Fn(u64) -> u64) -> RunResult {
        let mut spec = crate::presets::throughput();
        spec.publishers = 1;
        spec.subscribers = 1;
        spec.topology = Topology::Pairs;
        spec.messages_per_publisher = 0;
        spec.duration = Some(std::time::Duration::from_secs(10));
        spec.warmup = Some(std::time::Duration::from_secs(1));
        spec.pacing = Pacing::Rate { rate: 1000 };
        let mut result = RunResult::empty(&spec, "steady");
        result.shards.push(spec.effective_shard());
        result.measured_window = Some(MeasuredWindow {
            start_ns: 0,
            from_ns: 1_000_000_000,
            until_ns: 11_000_000_000,
        });
        for second in 0..11u64 {
            for bucket in 0..100u64 {
                let at = second * 1_000_000_000 + bucket * BUCKET_NS;
                result.publish_series.add(at, 10);
                let received = receive(second);
                result.receive_series.add(at, received / 100);
            }
        }
        result
    }

    #[test]
    fn a_broker_that_keeps_up_is_steady() {
        let verdict = judge(&run(|_| 1000)).expect("timed");
        assert!(verdict.steady, "{:?}", verdict.reasons);
        assert!((verdict.receive_msgs_per_s - 1000.0).abs() < 1e-6);
        assert_eq!(verdict.window_ms, 10_000.0);
        assert_eq!(verdict.backlog_at_start, verdict.backlog_at_end);
        assert_eq!(verdict.delivered_percent_of_offered, Some(100.0));
    }

    #[test]
    fn a_falling_receive_rate_and_a_growing_backlog_are_named() {
        // Receives 1000/s for 5 s, then 800/s: the second half is slow, the backlog grows.
        let verdict = judge(&run(|s| if s < 6 { 1000 } else { 800 })).expect("timed");
        assert!(!verdict.steady);
        let reasons = verdict.reasons.join(" | ");
        assert!(reasons.contains("second half"), "{reasons}");
        assert!(reasons.contains("backlog grew by 1000"), "{reasons}");
        assert!(reasons.contains("received 90.0 %"), "{reasons}");
    }

    #[test]
    fn counted_runs_and_shards_are_not_judged() {
        let mut partial = run(|_| 1000);
        partial.measured_window = None;
        assert_eq!(judge(&partial), None);
        let mut shard = run(|_| 1000);
        shard.shards = vec![crate::spec::Shard {
            publishers: 0..1,
            subscribers: 0..0,
        }];
        assert_eq!(judge(&shard), None);
    }
}
