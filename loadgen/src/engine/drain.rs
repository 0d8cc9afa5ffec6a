//! The end of a run: waiting for the deliveries still in flight, then folding every task's
//! outcome into the result.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::{RunClock, deadline_after, saturating_nanos};
use crate::live::Live;
use crate::publisher::PublisherOutcome;
use crate::result::RunResult;
use crate::spec::WorkloadSpec;
use crate::subscriber::SubscriberOutcome;

/// Deliveries the local subscribers should see, when every publisher is local (else unknown).
pub(super) fn expected_local_deliveries(
    spec: &WorkloadSpec,
    shard: &crate::spec::Shard,
    outcomes: &[PublisherOutcome],
) -> Option<u64> {
    if shard.publishers != (0..spec.publishers) {
        return None;
    }
    let mut published = vec![0u64; spec.publishers as usize];
    for outcome in outcomes {
        published[outcome.id as usize] = outcome.published;
    }
    Some(
        shard
            .subscribers
            .clone()
            .map(|s| {
                spec.topology
                    .publishers_of(s, spec.publishers)
                    .map(|p| published[p as usize])
                    .sum::<u64>()
            })
            .sum(),
    )
}

/// Waits until every expected delivery arrived, nothing arrived for `drain.idle` after the
/// last message was due, the deadline passed, or the run was cancelled.
pub(super) async fn drain(
    spec: &WorkloadSpec,
    clock: RunClock,
    live: &Live,
    expected: Option<u64>,
    published: u64,
    publishing_ends_ns: u64,
    cancel: &CancellationToken,
) {
    let began_ns = clock.now_ns().max(publishing_ends_ns);
    // Saturating: the timeout comes from the spec, and `Instant + Duration` panics on overflow.
    let deadline = Instant::from_std(deadline_after(
        clock.instant_at(began_ns),
        spec.drain.timeout,
    ));
    let idle_ns = saturating_nanos(spec.drain.idle);
    loop {
        let unique = live.received_unique.load(Ordering::Relaxed);
        if expected.is_some_and(|expected| unique >= expected)
            || (published == 0 && expected.is_some())
        {
            return;
        }
        let quiet_since = live.last_receive_ns.load(Ordering::Relaxed).max(began_ns);
        if clock.now_ns().saturating_sub(quiet_since) > idle_ns
            || Instant::now() >= deadline
            || cancel.is_cancelled()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Adds every publisher's and subscriber's counts, windows and series to `result`.
pub(super) fn fill_result(
    result: &mut RunResult,
    publishers: Vec<PublisherOutcome>,
    subscribers: Vec<SubscriberOutcome>,
    live: &Live,
) {
    for outcome in publishers {
        let slot = outcome.id as usize;
        result.published[slot] += outcome.published;
        result.sent_late_after_end += outcome.sent_late_after_end;
        result.acknowledged[slot] += outcome.acknowledged;
        result.publisher_windows.extend(outcome.window);
        outcome.series.fold_into(&mut result.publish_series);
        for (kind, count) in outcome.errors {
            result.count_error(kind, count);
        }
    }
    for outcome in subscribers {
        for (publisher, unique) in outcome.tracker.unique_by_publisher() {
            result.delivered_unique[publisher as usize] += unique;
        }
        result.received += outcome.received;
        result.duplicates += outcome.tracker.duplicates();
        result.out_of_order += outcome.tracker.out_of_order();
        result.subscriber_windows.extend(outcome.window);
        outcome.series.fold_into(&mut result.receive_series);
        for (kind, count) in outcome.errors {
            result.count_error(kind, count);
        }
    }
    result.publisher_windows.sort_by_key(|w| w.client);
    result.subscriber_windows.sort_by_key(|w| w.client);
    let lock = |h: &std::sync::Mutex<hdrhistogram::Histogram<u64>>| {
        h.lock().unwrap_or_else(|p| p.into_inner()).clone()
    };
    result.latency = lock(&live.latency);
    result.transit_latency = lock(&live.transit_latency);
    result.send_delay = lock(&live.send_delay);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_timeout_of_u64_max_seconds_does_not_panic() {
        let mut spec = crate::presets::latency();
        spec.drain.timeout = Duration::from_secs(u64::MAX);
        spec.drain.idle = Duration::from_secs(u64::MAX);
        let clock = RunClock::start_now();
        let live = Live::new(0);
        let cancel = CancellationToken::new();
        cancel.cancel();
        // Nothing is owed and the run was cancelled: it returns at once, past the deadline
        // arithmetic that overflowed.
        tokio::time::timeout(
            Duration::from_secs(5),
            drain(&spec, clock, &live, None, 1, clock.now_ns(), &cancel),
        )
        .await
        .expect("a cancelled drain returns");
    }
}
