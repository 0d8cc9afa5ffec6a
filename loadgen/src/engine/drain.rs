//! Draining: waiting for the deliveries still in flight, then for every subscriber and the
//! churn fleet to end.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::prepare::Run;
use super::start::Started;
use super::state::Phase;
use crate::LoadgenError;
use crate::clock::{RunClock, deadline_after, saturating_nanos};
use crate::live::Live;
use crate::publisher::PublisherOutcome;
use crate::result::ChurnOutcome;
use crate::spec::WorkloadSpec;
use crate::subscriber::SubscriberOutcome;
use crate::wills::WillOutcome;

/// What every task of a run did, once all have ended.
pub(super) struct Drained {
    /// One per publisher of this instance.
    pub(super) publishers: Vec<PublisherOutcome>,
    /// One per subscriber of this instance.
    pub(super) subscribers: Vec<SubscriberOutcome>,
    /// The churn fleet's, on the instance that ran it.
    pub(super) churn: Option<ChurnOutcome>,
    /// The will clients', on the instance that ran them.
    pub(super) wills: Option<WillOutcome>,
}

/// Waits for what is in flight, then stops the subscribers and collects every outcome.
pub(super) async fn drain(
    run: &Run<'_>,
    started: &mut Started,
    publishers: Vec<PublisherOutcome>,
) -> Result<Drained, LoadgenError> {
    run.status.update(|s| s.phase = Phase::Draining);
    let published: u64 = publishers.iter().map(|o| o.published).sum();
    let expected = expected_local_deliveries(run, &publishers);
    wait_for_deliveries(
        run.spec,
        run.clock,
        &run.live,
        expected,
        published,
        started.timing.publishing_ends_ns,
        &run.cancel,
    )
    .await;
    started.subscribers.stop.cancel();
    let mut subscribers = Vec::new();
    while let Some(joined) = started.subscribers.tasks.join_next().await {
        subscribers
            .push(joined.map_err(|e| LoadgenError::Internal(format!("subscriber task: {e}")))?);
    }
    let churn = match started.churn.take() {
        Some(churn) => Some(
            churn
                .await
                .map_err(|e| LoadgenError::Internal(format!("churn task: {e}")))?,
        ),
        None => None,
    };
    let wills = match started.wills.take() {
        Some(wills) => Some(
            wills
                .await
                .map_err(|e| LoadgenError::Internal(format!("wills task: {e}")))?,
        ),
        None => None,
    };
    Ok(Drained {
        publishers,
        subscribers,
        churn,
        wills,
    })
}

/// Deliveries the local subscribers should see, when every publisher is local and no shared
/// subscription has members elsewhere (else unknown).
fn expected_local_deliveries(run: &Run<'_>, outcomes: &[PublisherOutcome]) -> Option<u64> {
    let (spec, shard) = (run.spec, &run.shard);
    if shard.publishers != (0..spec.publishers) {
        return None;
    }
    let owed = run.routing.owed_to(&shard.subscribers)?;
    Some(
        outcomes
            .iter()
            .map(|outcome| outcome.published * owed[outcome.id as usize])
            .sum(),
    )
}

/// Waits until every expected delivery arrived, nothing arrived for `drain.idle` after the
/// last message was due, the deadline passed, or the run was cancelled.
async fn wait_for_deliveries(
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
            wait_for_deliveries(&spec, clock, &live, None, 1, clock.now_ns(), &cancel),
        )
        .await
        .expect("a cancelled drain returns");
    }
}
