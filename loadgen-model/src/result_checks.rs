//! The checks a [`RunResult`] read from a file passes before anything indexes, sums or
//! allocates by what it says: `loadgen merge` and `controller report` read results that may
//! come from anywhere, and a result is plain numbers. Each check names the field's path.
//!
//! - The workload must be one the planner accepts
//!   ([`WorkloadSpec::validate`](crate::spec::WorkloadSpec::validate)): at most
//!   [`crate::spec::MAX_CLIENTS`] publishers and subscribers, so nothing sized by them can
//!   ask for gigabytes.
//! - Shards and client windows lie within the workload's clients, and there is one count per
//!   publisher: merging and summarising index by them.
//! - Counts (each one, and each list's total) stay under [`MAX_COUNT`], CPU times under
//!   [`MAX_CPU_NS`], and times on the run clock under [`MAX_RUN_CLOCK_NS`], so sums and the
//!   expected deliveries (a count times at most `MAX_CLIENTS`) cannot overflow, and the
//!   per-bucket and per-second figures of a measured window stay small.
//!
//! [`check`] is for one result; [`check_merge`] runs it on both sides of a merge, so a sum
//! of many results stays within the bounds too.

use std::ops::Range;

use hdrhistogram::Histogram;

use crate::result::{ClientWindow, RunResult};
use crate::series::{BUCKET_NS, RateSeries};
use crate::spec::Shard;

/// Most of any count one result holds (messages, deliveries, failures), 2^44 (1.8e13): over a
/// thousand times what the planner's largest workload can send (10^7 msg/s for an hour),
/// small enough that such a count times `MAX_CLIENTS` subscribers fits in a `u64`.
pub const MAX_COUNT: u64 = 1 << 44;
/// Latest time on a run's clock a result may name, ns: 48 hours, twice the longest cell
/// timeout the planner accepts.
pub const MAX_RUN_CLOCK_NS: u64 = 48 * 3_600 * 1_000_000_000;
/// Most CPU time a result may add up, ns: 2^56 (about 2.3 years of one CPU).
pub const MAX_CPU_NS: u64 = 1 << 56;

/// Largest result file read, 64 MiB: the planner's largest workload (100,000 publishers and
/// subscribers, an hour in 10 ms buckets) writes well under half of it.
pub const MAX_RESULT_FILE_BYTES: u64 = 64 << 20;

/// Why a result cannot be used: the field's path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ResultProblem {
    /// The field, as in the JSON (`shards[1].publishers`).
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

fn problem(path: impl Into<String>, problem: impl Into<String>) -> ResultProblem {
    ResultProblem {
        path: path.into(),
        problem: problem.into(),
    }
}

/// Checks everything a merge or a summary relies on; the first problem is the error.
pub fn check(result: &RunResult) -> Result<(), ResultProblem> {
    let spec = &result.spec;
    // A result's spec never holds an inline CA (it is not written), and its figures need none.
    spec.validate_with_ca_supplied().map_err(|error| {
        problem(
            format!("spec.{}", error.path),
            format!("{}: {}", error.value, error.problem),
        )
    })?;
    for (i, shard) in result.shards.iter().enumerate() {
        check_shard(shard, result, &format!("shards[{i}]"))?;
    }
    for (i, instance) in result.instances.iter().enumerate() {
        check_shard(&instance.shard, result, &format!("instances[{i}].shard"))?;
    }
    let publishers = spec.publishers as usize;
    for (name, counts) in [
        ("published", &result.published),
        ("acknowledged", &result.acknowledged),
        ("delivered_unique", &result.delivered_unique),
    ] {
        if counts.len() != publishers {
            return Err(problem(
                name,
                format!(
                    "{} entries, but the workload has {publishers} publishers",
                    counts.len()
                ),
            ));
        }
        total(name, counts.iter().copied())?;
    }
    check_windows(
        "publisher_windows",
        &result.publisher_windows,
        spec.publishers,
    )?;
    check_windows(
        "subscriber_windows",
        &result.subscriber_windows,
        spec.subscribers,
    )?;
    for (name, count) in [
        ("received", result.received),
        ("duplicates", result.duplicates),
        ("out_of_order", result.out_of_order),
        ("sent_late_after_end", result.sent_late_after_end),
        ("bytes_written", result.bytes_written),
        ("expired", result.expired),
        ("most_unacknowledged", result.most_unacknowledged),
    ] {
        total(name, [count])?;
    }
    total("errors", result.errors.values().copied())?;
    check_series("publish_series", &result.publish_series)?;
    check_series("receive_series", &result.receive_series)?;
    for (name, histogram) in [
        ("latency", &result.latency),
        ("transit_latency", &result.transit_latency),
        ("send_delay", &result.send_delay),
        ("read_delay", &result.read_delay),
        ("connect_time", &result.connect_time),
    ] {
        check_histogram(name, histogram)?;
    }
    result
        .latency_intervals
        .check()
        .map_err(|reason| problem("latency_intervals", reason))?;
    total(
        "latency_intervals",
        result
            .latency_intervals
            .intervals
            .iter()
            .map(|i| i.histogram.len()),
    )?;
    let usage = &result.resources;
    for (name, ns) in [
        ("resources.cpu_user_ns", usage.cpu_user_ns),
        ("resources.cpu_system_ns", usage.cpu_system_ns),
        ("resources.cpu_ns", usage.cpu_ns),
        ("resources.cpu_wait_ns", usage.cpu_wait_ns),
        ("resources.throttled_ns", usage.throttled_ns),
    ] {
        if ns > MAX_CPU_NS {
            return Err(problem(name, format!("{ns} ns is over {MAX_CPU_NS}")));
        }
    }
    clock("load_wall_ns", result.load_wall_ns)?;
    if let Some(window) = result.measured_window {
        for (name, ns) in [
            ("measured_window.start_ns", window.start_ns),
            ("measured_window.from_ns", window.from_ns),
            ("measured_window.until_ns", window.until_ns),
        ] {
            clock(name, ns)?;
        }
        if !(window.start_ns <= window.from_ns && window.from_ns <= window.until_ns) {
            return Err(problem(
                "measured_window",
                format!(
                    "start {} <= from {} <= until {} does not hold",
                    window.start_ns, window.from_ns, window.until_ns
                ),
            ));
        }
    }
    if let Some(churn) = &result.churn {
        for (name, count) in [
            ("churn.attempted", churn.attempted),
            ("churn.connected", churn.connected),
            ("churn.disconnected", churn.disconnected),
            ("churn.cancelled", churn.cancelled),
            ("churn.most_open", churn.most_open),
        ] {
            total(name, [count])?;
        }
        total("churn.failures", churn.failures.values().copied())?;
        check_histogram("churn.connect_time", &churn.connect_time)?;
        for (name, ns) in [
            ("churn.most_late_ns", churn.most_late_ns),
            ("churn.first_arrival_ns", churn.first_arrival_ns),
            ("churn.last_arrival_ns", churn.last_arrival_ns),
        ] {
            clock(name, ns)?;
        }
    }
    if let Some(storm) = &result.reconnect {
        for (name, count) in [
            ("reconnect.lost", storm.lost),
            ("reconnect.reconnected", storm.reconnected),
            ("reconnect.gave_up", storm.gave_up),
            ("reconnect.interrupted", storm.interrupted),
            ("reconnect.attempts", storm.attempts),
            ("reconnect.sessions_resumed", storm.sessions_resumed),
            ("reconnect.zero_rtt_attempted", storm.zero_rtt_attempted),
            ("reconnect.zero_rtt_accepted", storm.zero_rtt_accepted),
            ("reconnect.zero_rtt_rejected", storm.zero_rtt_rejected),
            ("reconnect.resent", storm.resent),
        ] {
            total(name, [count])?;
        }
        if storm
            .zero_rtt_accepted
            .saturating_add(storm.zero_rtt_rejected)
            > storm.zero_rtt_attempted
        {
            let field = if storm.zero_rtt_accepted > storm.zero_rtt_attempted {
                "reconnect.zero_rtt_accepted"
            } else {
                "reconnect.zero_rtt_rejected"
            };
            return Err(problem(
                field,
                format!(
                    "{} accepted and {} rejected of {} attempted",
                    storm.zero_rtt_accepted, storm.zero_rtt_rejected, storm.zero_rtt_attempted
                ),
            ));
        }
        total("reconnect.failures", storm.failures.values().copied())?;
        check_histogram("reconnect.time_away", &storm.time_away)?;
        clock("reconnect.first_lost_ns", storm.first_lost_ns)?;
        clock("reconnect.last_back_ns", storm.last_back_ns)?;
    }
    if let Some(retained) = &result.retained {
        for (name, count) in [
            ("retained.current", retained.current),
            ("retained.stale", retained.stale),
            ("retained.missing", retained.missing),
            ("retained.extra", retained.extra),
            ("retained.expected_each", retained.expected_each),
            ("retained.cleared", retained.cleared),
            (
                "retained.left_after_clear",
                retained.left_after_clear.unwrap_or(0),
            ),
        ] {
            total(name, [count])?;
        }
        let late = crate::spec::MAX_LATE_SUBSCRIBERS as usize;
        if retained.all_received_ns.len() > late {
            return Err(problem(
                "retained.all_received_ns",
                format!("more than {late} late subscribers"),
            ));
        }
        for ns in &retained.all_received_ns {
            clock("retained.all_received_ns", *ns)?;
        }
    }
    if let Some(wills) = &result.wills {
        check_wills(wills)?;
    }
    check_groups(result)
}

/// Will clients: each count within the one before it (delivered of dropped of connected of
/// the most a run makes), one time per delivered will, in order, each a time on the clock.
fn check_wills(wills: &crate::wills::WillOutcome) -> Result<(), ResultProblem> {
    let most = crate::spec::MAX_WILL_CLIENTS;
    for (name, count, bound) in [
        (
            "wills.connected",
            wills.connected.saturating_add(wills.failed),
            most,
        ),
        ("wills.dropped", wills.dropped, wills.connected),
        ("wills.delivered", wills.delivered, wills.dropped),
        ("wills.disconnected", wills.disconnected, wills.connected),
    ] {
        if count > bound {
            return Err(problem(name, format!("{count} is more than {bound}")));
        }
    }
    total("wills.duplicates", [wills.duplicates])?;
    total("wills.unexpected", [wills.unexpected])?;
    total("wills.cleared", [wills.cleared])?;
    if wills.from_drop_ns.len() != wills.delivered as usize {
        return Err(problem(
            "wills.from_drop_ns",
            format!(
                "{} times for {} wills",
                wills.from_drop_ns.len(),
                wills.delivered
            ),
        ));
    }
    if !wills.from_drop_ns.is_sorted() {
        return Err(problem("wills.from_drop_ns", "not in order"));
    }
    for ns in &wills.from_drop_ns {
        clock("wills.from_drop_ns", *ns)?;
    }
    clock("wills.drop_late_ns", wills.drop_late_ns)?;
    clock("wills.delay_ns", wills.delay_ns)
}

/// Shared subscriptions: one per shared entry of the spec's filters, a bitmap slot per
/// publisher, members among the subscribers, and bitmaps no longer than any run numbers.
fn check_groups(result: &RunResult) -> Result<(), ResultProblem> {
    if result.groups.is_empty() {
        return Ok(());
    }
    let spec = &result.spec;
    let routing = crate::spec::Routing::of(spec)
        .map_err(|error| problem(format!("spec.{}", error.path), error.problem))?;
    let mut seen = Vec::new();
    for (i, group) in result.groups.iter().enumerate() {
        let at = format!("groups[{i}]");
        let shared = (0..spec.subscribers).any(|s| routing.group_of(s) == Some(group.filter));
        if !shared || seen.contains(&group.filter) {
            return Err(problem(
                format!("{at}.filter"),
                format!(
                    "{} is not a shared subscription of topics.subscribe, or is listed twice",
                    group.filter
                ),
            ));
        }
        seen.push(group.filter);
        if group.delivered.len() != spec.publishers as usize {
            return Err(problem(
                format!("{at}.delivered"),
                format!(
                    "{} entries, but the workload has {} publishers",
                    group.delivered.len(),
                    spec.publishers
                ),
            ));
        }
        let words = MAX_COUNT.div_ceil(64) as usize;
        if let Some(long) = group.delivered.iter().position(|bits| bits.len() > words) {
            return Err(problem(
                format!("{at}.delivered[{long}]"),
                format!("longer than {words} words"),
            ));
        }
        for (j, member) in group.members.iter().enumerate() {
            if member.subscriber >= spec.subscribers
                || routing.group_of(member.subscriber) != Some(group.filter)
            {
                return Err(problem(
                    format!("{at}.members[{j}].subscriber"),
                    format!("{} is not a member of this group", member.subscriber),
                ));
            }
        }
        total(
            &format!("{at}.members"),
            group.members.iter().map(|m| m.delivered),
        )?;
        total(&format!("{at}.duplicates"), [group.duplicates])?;
    }
    Ok(())
}

/// Checks both results of a merge, naming which side is wrong: the one merged into (the
/// running total) or the one added.
pub fn check_merge(total: &RunResult, added: &RunResult) -> Result<(), String> {
    check(total).map_err(|error| format!("the result merged into: {error}"))?;
    check(added).map_err(|error| format!("the result added: {error}"))
}

fn within(range: &Range<u32>, count: u32, path: &str, clients: &str) -> Result<(), ResultProblem> {
    if range.start > range.end || range.end > count {
        return Err(problem(
            path,
            format!(
                "{}..{} does not lie within the workload's {count} {clients} (0..{count})",
                range.start, range.end
            ),
        ));
    }
    Ok(())
}

fn check_shard(shard: &Shard, result: &RunResult, path: &str) -> Result<(), ResultProblem> {
    within(
        &shard.publishers,
        result.spec.publishers,
        &format!("{path}.publishers"),
        "publishers",
    )?;
    within(
        &shard.subscribers,
        result.spec.subscribers,
        &format!("{path}.subscribers"),
        "subscribers",
    )
}

fn check_windows(name: &str, windows: &[ClientWindow], clients: u32) -> Result<(), ResultProblem> {
    for (i, window) in windows.iter().enumerate() {
        let path = format!("{name}[{i}]");
        if window.client >= clients {
            return Err(problem(
                format!("{path}.client"),
                format!("client {} of a workload of {clients}", window.client),
            ));
        }
        clock(&format!("{path}.first_ns"), window.first_ns)?;
        clock(&format!("{path}.last_ns"), window.last_ns)?;
        if window.first_ns > window.last_ns {
            return Err(problem(
                path,
                format!(
                    "first_ns {} is after last_ns {}",
                    window.first_ns, window.last_ns
                ),
            ));
        }
    }
    total(
        &format!("{name}[].count"),
        windows.iter().map(|window| window.count),
    )
}

fn check_series(name: &str, series: &RateSeries) -> Result<(), ResultProblem> {
    let most = MAX_RUN_CLOCK_NS / BUCKET_NS + 1;
    if series.counts.len() as u64 > most {
        return Err(problem(
            name,
            format!(
                "{} buckets of 10 ms, more than a run clock of 48 h has ({most})",
                series.counts.len()
            ),
        ));
    }
    total(&format!("{name}.counts"), series.counts.iter().copied())
}

fn check_histogram(name: &str, histogram: &Histogram<u64>) -> Result<(), ResultProblem> {
    // hdrhistogram saturates its total, so a sum past u64 shows here as u64::MAX.
    total(name, [histogram.len()])
}

/// The sum of `counts`, refused above [`MAX_COUNT`].
fn total(name: &str, counts: impl IntoIterator<Item = u64>) -> Result<(), ResultProblem> {
    let mut sum: u64 = 0;
    for count in counts {
        sum = sum.saturating_add(count);
        if sum > MAX_COUNT {
            return Err(problem(
                name,
                format!("counts more than {MAX_COUNT}, beyond any workload the planner accepts"),
            ));
        }
    }
    Ok(())
}

fn clock(name: &str, ns: u64) -> Result<(), ResultProblem> {
    if ns > MAX_RUN_CLOCK_NS {
        return Err(problem(
            name,
            format!("{ns} ns is later than a run lasts (at most {MAX_RUN_CLOCK_NS} ns, 48 h)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{MeasuredWindow, ResourceUsage};
    use crate::spec::{Pacing, Topology};
    use crate::summary::Summary;

    fn result() -> RunResult {
        let mut spec = crate::presets::latency();
        spec.publishers = 2;
        spec.subscribers = 2;
        spec.topology = Topology::Pairs;
        let mut result = RunResult::empty(&spec, "checked");
        result.shards.push(spec.effective_shard());
        for p in 0..2u32 {
            result.published[p as usize] = 10;
            result.delivered_unique[p as usize] = 10;
            result.publish_series.add(u64::from(p) * 1_000_000, 10);
            result.publisher_windows.push(ClientWindow {
                client: p,
                first_ns: 0,
                last_ns: 9_000_000,
                count: 10,
            });
        }
        result.latency.record(50_000).expect("in range");
        result
    }

    #[test]
    fn will_counts_beyond_what_they_count_within_are_named() {
        let wills = crate::wills::WillOutcome {
            connected: 20,
            dropped: 5,
            delivered: 2,
            watched: true,
            from_drop_ns: vec![1_000, 2_000],
            ..Default::default()
        };
        let mut sound = result();
        sound.wills = Some(wills.clone());
        check(&sound).expect("sound");
        type Spoil = fn(&mut crate::wills::WillOutcome);
        let cases: [(Spoil, &str); 5] = [
            (|w| w.delivered = 6, "wills.delivered: 6 is more than 5"),
            (|w| w.dropped = 21, "wills.dropped: 21 is more than 20"),
            (
                |w| w.connected = u32::MAX,
                "wills.connected: 4294967295 is more than 10000",
            ),
            (
                |w| w.from_drop_ns.push(3_000),
                "wills.from_drop_ns: 3 times for 2 wills",
            ),
            (
                |w| w.from_drop_ns.reverse(),
                "wills.from_drop_ns: not in order",
            ),
        ];
        for (spoil, expected) in cases {
            let mut spoiled = wills.clone();
            spoil(&mut spoiled);
            let mut result = result();
            result.wills = Some(spoiled);
            let problem = check(&result).expect_err("refused").to_string();
            assert!(problem.contains(expected), "{problem} lacks {expected}");
        }
    }

    #[test]
    fn zero_rtt_verdicts_beyond_the_tries_are_named() {
        let mut storm = crate::reconnect::ReconnectOutcome::empty();
        storm.lost = 4;
        storm.reconnected = 4;
        storm.attempts = 4;
        storm.zero_rtt_attempted = 4;
        storm.zero_rtt_accepted = 1;
        storm.zero_rtt_rejected = 3;
        let mut sound = result();
        sound.reconnect = Some(storm.clone());
        check(&sound).expect("one accepted and three rejected of four tried");
        storm.zero_rtt_rejected = 4;
        let mut spoilt = result();
        spoilt.reconnect = Some(storm);
        let problem = check(&spoilt).expect_err("refused").to_string();
        assert!(
            problem
                .contains("reconnect.zero_rtt_rejected: 1 accepted and 4 rejected of 4 attempted"),
            "{problem}"
        );
    }

    #[test]
    fn a_sound_result_passes_and_each_hostile_field_is_named() {
        check(&result()).expect("sound");
        type Spoil = fn(&mut RunResult);
        let cases: [(Spoil, &str); 11] = [
            (
                |r| r.shards[0].publishers = 0..5,
                "shards[0].publishers: 0..5 does not lie within the workload's 2 publishers",
            ),
            (
                |r| r.spec.publishers = 4_000_000_000,
                "spec.publishers: 4000000000",
            ),
            (|r| r.published.push(1), "published: 3 entries"),
            (
                |r| r.publisher_windows[1].client = 7,
                "publisher_windows[1].client",
            ),
            (|r| r.published[0] = u64::MAX, "published: counts more than"),
            (
                |r| {
                    r.published[0] = MAX_COUNT;
                    r.published[1] = MAX_COUNT;
                },
                "published: counts more than",
            ),
            (|r| r.received = u64::MAX, "received"),
            (
                |r| {
                    r.resources = ResourceUsage {
                        cpu_user_ns: u64::MAX,
                        ..ResourceUsage::default()
                    }
                },
                "resources.cpu_user_ns",
            ),
            (
                |r| {
                    r.measured_window = Some(MeasuredWindow {
                        start_ns: 0,
                        from_ns: 0,
                        until_ns: u64::MAX,
                    })
                },
                "measured_window.until_ns",
            ),
            (
                |r| {
                    r.measured_window = Some(MeasuredWindow {
                        start_ns: 5,
                        from_ns: 4,
                        until_ns: 6,
                    })
                },
                "measured_window: start 5 <= from 4",
            ),
            (
                |r| {
                    let instance = serde_json::json!({
                        "shard": { "publishers": { "start": 3, "end": 1 },
                                   "subscribers": { "start": 0, "end": 0 } },
                        "cpu_capacity_milli": 1000, "window_ms": 1.0, "busy_percent": 0.0,
                        "peak_busy_percent": 0.0, "cpu_wait_percent": 0.0,
                        "throttled_percent": 0.0,
                    });
                    r.instances
                        .push(serde_json::from_value(instance).expect("an instance"));
                },
                "instances[0].shard.publishers: 3..1",
            ),
        ];
        for (spoil, expected) in cases {
            let mut spoilt = result();
            spoil(&mut spoilt);
            let error = check(&spoilt).expect_err(expected).to_string();
            assert!(error.starts_with(expected), "{expected}: {error}");
        }
    }

    #[test]
    fn what_passes_summarises_and_merges_without_overflow() {
        // The largest counts the checks let through, on both sides of a merge.
        let mut big = result();
        big.spec.pacing = Pacing::Burst;
        big.published = vec![MAX_COUNT / 2; 2];
        big.delivered_unique = vec![MAX_COUNT / 2; 2];
        big.received = MAX_COUNT;
        big.measured_window = Some(MeasuredWindow {
            start_ns: 0,
            from_ns: 0,
            until_ns: MAX_RUN_CLOCK_NS,
        });
        check(&big).expect("at the bounds");
        let summary = Summary::of(&big);
        assert_eq!(summary.published, MAX_COUNT);
        let mut other = big.clone();
        other.shards.clear();
        other.merge(&big).expect("merges");
        let error = other.merge(&big).expect_err("over the bounds");
        assert!(
            error
                .to_string()
                .contains("the result merged into: published"),
            "{error}"
        );
    }
}
