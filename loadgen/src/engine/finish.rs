//! Finishing: the measurement stops, every outcome is folded into the result, and the
//! instance's load over the measured window is added.

use std::sync::atomic::Ordering;

use super::drain::Drained;
use super::prepare::Run;
use super::start::{Started, Timing};
use super::state::Phase;
use crate::groups::{GroupDeliveries, MemberShare};
use crate::live::Live;
use crate::publisher::{PublisherOutcome, Warmup};
use crate::result::{MeasuredWindow, RunResult};
use crate::spec::Routing;
use crate::subscriber::SubscriberOutcome;
use crate::usage::Reading;

/// Stops measuring at once, then completes `result` with every outcome and the load.
pub(super) async fn finish(
    run: &Run<'_>,
    mut result: RunResult,
    started: Started,
    drained: Drained,
) -> RunResult {
    result.churn = drained.churn;
    result.wills = drained.wills;
    let start_ns = started.timing.start_ns();
    let load_wall_ns = run.clock.now_ns().saturating_sub(start_ns);
    let usage_after = Reading::now(&run.scope);
    let samples = started.meter.monitor.finish().await;

    let expiry = ExpiryJudge::of(run, start_ns);
    fill_result(
        &mut result,
        drained.publishers,
        drained.subscribers,
        &run.live,
        &run.routing,
        expiry.as_ref(),
    );
    let zero_rtt = match started.reconnector {
        Some(_) => run.dialer.zero_rtt_counts().await,
        None => None,
    };
    result.reconnect = started
        .reconnector
        .map(|reconnector| reconnector.outcome(zero_rtt));
    result.load_wall_ns = load_wall_ns;
    let threads = crate::cpus::threads_for(run.spec);
    result.resources = started.meter.usage_before.until(usage_after, threads);
    let (from_ns, until_ns) = load_window(&mut result, &started.timing, &run.live);
    result.instances.push(crate::usage::instance_load(
        &samples,
        from_ns,
        until_ns,
        crate::usage::capacity_milli(threads),
        run.shard.clone(),
        started.meter.local_broker.as_ref(),
    ));
    result.interrupted = run.cancel.is_cancelled();
    run.status.update(|s| {
        s.phase = Phase::Done;
        s.progress = run.live.progress();
    });
    result
}

/// The span (from, until) on the run clock the instance's load is taken over: a timed run's
/// measured window (recorded in `result`), else from the start to the last message seen.
fn load_window(result: &mut RunResult, timing: &Timing, live: &Live) -> (u64, u64) {
    let start_ns = timing.start_ns();
    match timing.end_ns {
        Some(end_ns) => {
            let from_ns = match timing.warmup {
                Warmup::Until(from_ns) => from_ns,
                Warmup::Messages(_) => start_ns,
            };
            result.measured_window = Some(MeasuredWindow {
                start_ns,
                from_ns,
                until_ns: end_ns,
            });
            (from_ns, end_ns)
        }
        None => {
            let last_publish = result.publisher_windows.iter().map(|w| w.last_ns).max();
            let last_receive = live.last_receive_ns.load(Ordering::Relaxed);
            let last = last_publish.unwrap_or(start_ns).max(last_receive);
            (start_ns, last.max(start_ns + 1))
        }
    }
}

/// Adds every publisher's and subscriber's counts, windows and series to `result`.
fn fill_result(
    result: &mut RunResult,
    publishers: Vec<PublisherOutcome>,
    subscribers: Vec<SubscriberOutcome>,
    live: &Live,
    routing: &Routing,
    expiry: Option<&ExpiryJudge>,
) {
    for outcome in publishers {
        let slot = outcome.id as usize;
        result.published[slot] += outcome.published;
        result.sent_late_after_end += outcome.sent_late_after_end;
        result.bytes_written += outcome.bytes_written;
        result.acknowledged[slot] += outcome.acknowledged;
        result.publisher_windows.extend(outcome.window);
        outcome.series.fold_into(&mut result.publish_series);
        for (kind, count) in outcome.errors {
            result.count_error(kind, count);
        }
    }
    for outcome in subscribers {
        match routing.group_of(outcome.id) {
            None => {
                for (publisher, unique) in outcome.tracker.unique_by_publisher() {
                    result.delivered_unique[publisher as usize] += unique;
                }
            }
            Some(filter) => join_member(result, filter, &outcome),
        }
        if let Some(judge) = expiry {
            result.expired += judge.expired_at(&outcome, routing, &result.published);
        }
        result.received += outcome.received;
        result.most_unacknowledged = result.most_unacknowledged.max(outcome.most_unacknowledged);
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
    result.read_delay = lock(&live.read_delay);
    result.latency_intervals = live
        .latency_intervals
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
}

/// Judges which messages an absent subscriber missed because they expired
/// ([`crate::spec::expirable_until`]), from the timetable: one instance holds every publisher
/// (validation sees to it), so what each published bounds what was owed.
struct ExpiryJudge {
    expiry: std::time::Duration,
    timetable: crate::spec::Timetable,
}

impl ExpiryJudge {
    fn of(run: &Run<'_>, start_ns: u64) -> Option<Self> {
        let spec = run.spec;
        if !spec.judges_expiry() {
            return None;
        }
        Some(ExpiryJudge {
            expiry: spec.connection.message_expiry?,
            timetable: spec.timetable()?.starting_at(start_ns),
        })
    }

    /// The messages `subscriber` missed that came after the last it received from their
    /// publisher before it left and were due an expiry before it came back; none when the
    /// broker had not kept its session (then nothing was held, and all it missed is lost).
    fn expired_at(
        &self,
        subscriber: &SubscriberOutcome,
        routing: &Routing,
        published: &[u64],
    ) -> u64 {
        let Some(absence) = subscriber.absence.as_ref().filter(|a| a.kept) else {
            return 0;
        };
        if routing.group_of(subscriber.id).is_some() {
            return 0;
        }
        let Some(until_ns) = crate::spec::expirable_until(absence.back_ns, self.expiry) else {
            return 0;
        };
        let expiry_ns = u64::try_from(self.expiry.as_nanos()).unwrap_or(u64::MAX);
        routing
            .publishers_of(subscriber.id)
            .iter()
            .map(|publisher| {
                let schedule = self.timetable.schedule_of(publisher);
                // After the last received before leaving; from a publisher not heard from,
                // what was due from an expiry before leaving (still in flight then, or sent
                // late, and held).
                let first = absence.highest_before.get(&publisher).map_or_else(
                    || schedule.messages_before(absence.left_ns.saturating_sub(expiry_ns)),
                    |seq| u64::from(*seq) + 1,
                );
                let sent = published.get(publisher as usize).copied().unwrap_or(0);
                let last = schedule.messages_before(until_ns).min(sent);
                subscriber.tracker.unseen(publisher, first..last.max(first))
            })
            .sum()
    }
}

/// Joins a shared subscription's member into its group: a message another member already
/// got counts as a duplicate, not as a second delivery.
fn join_member(result: &mut RunResult, filter: u32, member: &SubscriberOutcome) {
    let publishers = result.spec.publishers;
    let at = match result.groups.iter().position(|g| g.filter == filter) {
        Some(at) => at,
        None => {
            result.groups.push(GroupDeliveries::new(filter, publishers));
            result.groups.len() - 1
        }
    };
    let group = &mut result.groups[at];
    let mut delivered = 0;
    for (publisher, seen, unique) in member.tracker.seen_by_publisher() {
        delivered += unique;
        let joined = group.join(publisher, seen);
        result.delivered_unique[publisher as usize] += joined.new;
        result.duplicates += joined.again;
    }
    group.duplicates += member.tracker.duplicates();
    group.members.push(MemberShare {
        subscriber: member.id,
        delivered,
    });
    group.members.sort_by_key(|m| m.subscriber);
    result.groups.sort_by_key(|g| g.filter);
}
