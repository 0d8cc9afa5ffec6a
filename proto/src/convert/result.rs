//! `RunResult` and its parts: histograms as HdrHistogram V2 + DEFLATE bytes.

use loadgen_model::groups::{GroupDeliveries, MemberShare};
use loadgen_model::retained::RetainedOutcome;
use loadgen_model::wills::WillOutcome;
use std::ops::Range;

use domain::FieldError;
use hdrhistogram::Histogram;
use loadgen_model::header::HeaderEncoding;
use loadgen_model::histogram_v2::{self, HistogramError};
use loadgen_model::intervals::{Interval, IntervalHistograms, MAX_INTERVALS};
use loadgen_model::result::{
    BrokerOnHost, ChurnOutcome, ClientWindow, HISTOGRAM_HIGHEST_NS, HISTOGRAM_SIGFIG, InstanceLoad,
    MeasuredWindow, ReconnectOutcome, ResourceUsage, RunResult,
};
use loadgen_model::series::RateSeries;
use loadgen_model::spec::Shard;

use super::spec::{shard_from_proto, spec_from_proto};
use super::{ConversionError, enumeration, field, required};
use crate::loadgen::v1 as pb;

/// Validates a received result: the spec as in `WorkloadSpec`'s conversion, histograms that
/// decode with the project-wide bounds, and shards, per-publisher counts and client windows
/// that fit the workload, so later merging and summarising cannot index out of range.
impl TryFrom<pb::RunResult> for RunResult {
    type Error = ConversionError;

    fn try_from(message: pb::RunResult) -> Result<Self, Self::Error> {
        result_from_proto(message, "result")
    }
}

fn result_from_proto(message: pb::RunResult, at: &str) -> Result<RunResult, ConversionError> {
    let spec = spec_from_proto(required(message.spec, at, "spec")?, &field(at, "spec"))?;
    if let Some(shard) = &spec.shard {
        return Err(ConversionError::Invalid(FieldError {
            path: format!("{at}.spec.shard"),
            value: format!("{:?}", shard.publishers),
            problem: "a result's spec is the whole workload; its parts are listed in shards".into(),
        }));
    }
    let header = enumeration(
        message.header,
        at,
        "header",
        "header encoding",
        |v| match v {
            pb::HeaderEncoding::Unspecified => None,
            pb::HeaderEncoding::Full => Some(HeaderEncoding::Full),
            pb::HeaderEncoding::Compact => Some(HeaderEncoding::Compact),
        },
    )?;
    if header != spec.header_encoding() {
        return Err(ConversionError::Invalid(FieldError {
            path: field(at, "header"),
            value: header.to_string(),
            problem: format!(
                "a {} payload carries the {} header",
                spec.payload,
                spec.header_encoding()
            ),
        }));
    }
    let shards = message
        .shards
        .into_iter()
        .enumerate()
        .map(|(i, shard)| {
            let at = format!("{at}.shards[{i}]");
            let shard = shard_from_proto(shard, &at)?;
            within(&shard.publishers, spec.publishers, &at, "publishers")?;
            within(&shard.subscribers, spec.subscribers, &at, "subscribers")?;
            Ok(shard)
        })
        .collect::<Result<Vec<Shard>, ConversionError>>()?;
    let publishers = spec.publishers as usize;
    for (name, counts) in [
        ("published", &message.published),
        ("acknowledged", &message.acknowledged),
        ("delivered_unique", &message.delivered_unique),
    ] {
        if counts.len() != publishers {
            return Err(ConversionError::Invalid(FieldError {
                path: field(at, name),
                value: format!("{} entries", counts.len()),
                problem: format!("needs one per publisher ({publishers})"),
            }));
        }
    }
    let publisher_windows = windows(
        message.publisher_windows,
        spec.publishers,
        at,
        "publisher_windows",
    )?;
    let subscriber_windows = windows(
        message.subscriber_windows,
        spec.subscribers,
        at,
        "subscriber_windows",
    )?;
    let resources = required(message.resources, at, "resources")?;
    let instances = message
        .instances
        .into_iter()
        .enumerate()
        .map(|(i, instance)| {
            let at = format!("{at}.instances[{i}]");
            let shard = shard_from_proto(required(instance.shard, &at, "shard")?, &at)?;
            within(&shard.publishers, spec.publishers, &at, "shard.publishers")?;
            within(
                &shard.subscribers,
                spec.subscribers,
                &at,
                "shard.subscribers",
            )?;
            Ok(InstanceLoad {
                node: None,
                shard,
                cpu_capacity_milli: instance.cpu_capacity_milli,
                window_ms: instance.window_ms,
                busy_percent: instance.busy_percent,
                peak_busy_percent: instance.peak_busy_percent,
                cpu_wait_percent: instance.cpu_wait_percent,
                throttled_percent: instance.throttled_percent,
                host_steal_percent: instance.host_steal_percent,
                host_cpu_pressure_percent: instance.host_cpu_pressure_percent,
                cgroup_cpu_pressure_percent: instance.cgroup_cpu_pressure_percent,
                broker_on_host: instance.broker_on_host.map(|broker| BrokerOnHost {
                    pid: broker.pid,
                    command: broker.command.chars().take(MAX_COMMAND_CHARS).collect(),
                    threads: broker.threads,
                    cpu_ms: broker.cpu_ms,
                    cpus_used: broker.cpus_used,
                    cpu_wait_percent: broker.cpu_wait_percent,
                }),
            })
        })
        .collect::<Result<Vec<InstanceLoad>, ConversionError>>()?;
    Ok(RunResult {
        run_id: message.run_id,
        shards,
        header,
        latency: histogram_from_bytes(&message.latency, at, "latency")?,
        transit_latency: if message.transit_latency.is_empty() {
            loadgen_model::result::new_histogram()
        } else {
            histogram_from_bytes(&message.transit_latency, at, "transit_latency")?
        },
        send_delay: histogram_from_bytes(&message.send_delay, at, "send_delay")?,
        read_delay: if message.read_delay.is_empty() {
            loadgen_model::result::new_histogram()
        } else {
            histogram_from_bytes(&message.read_delay, at, "read_delay")?
        },
        latency_intervals: intervals_from(
            message.latency_interval_ns,
            &message.latency_intervals,
            at,
        )?,
        connect_time: histogram_from_bytes(&message.connect_time, at, "connect_time")?,
        published: message.published,
        acknowledged: message.acknowledged,
        delivered_unique: message.delivered_unique,
        received: message.received,
        duplicates: message.duplicates,
        out_of_order: message.out_of_order,
        publish_series: RateSeries {
            counts: required(message.publish_series, at, "publish_series")?.counts,
        },
        receive_series: RateSeries {
            counts: required(message.receive_series, at, "receive_series")?.counts,
        },
        publisher_windows,
        subscriber_windows,
        errors: message.errors,
        resources: ResourceUsage {
            cpu_user_ns: resources.cpu_user_ns,
            cpu_system_ns: resources.cpu_system_ns,
            peak_rss_bytes: resources.peak_rss_bytes,
            cpu_ns: resources.cpu_ns,
            cpu_wait_ns: resources.cpu_wait_ns,
            throttled_ns: resources.throttled_ns,
            cpu_capacity_milli: resources.cpu_capacity_milli,
        },
        load_wall_ns: message.load_wall_ns,
        interrupted: message.interrupted,
        sent_late_after_end: message.sent_late_after_end,
        bytes_written: message.bytes_written,
        expired: message.expired,
        most_unacknowledged: message.most_unacknowledged,
        measured_window: message.measured_window.map(|w| MeasuredWindow {
            start_ns: w.start_ns,
            from_ns: w.from_ns,
            until_ns: w.until_ns,
        }),
        instances,
        clock_origin_unix_ns: message.clock_origin_unix_ns,
        churn: message
            .churn
            .map(|churn| -> Result<ChurnOutcome, ConversionError> {
                let at = field(at, "churn");
                Ok(ChurnOutcome {
                    attempted: churn.attempted,
                    connected: churn.connected,
                    disconnected: churn.disconnected,
                    cancelled: churn.cancelled,
                    failures: churn.failures.into_iter().collect(),
                    connect_time: histogram_from_bytes(&churn.connect_time, &at, "connect_time")?,
                    most_open: churn.most_open,
                    most_late_ns: churn.most_late_ns,
                    first_arrival_ns: churn.first_arrival_ns,
                    last_arrival_ns: churn.last_arrival_ns,
                })
            })
            .transpose()?,
        reconnect: message
            .reconnect
            .map(|storm| -> Result<ReconnectOutcome, ConversionError> {
                let at = field(at, "reconnect");
                Ok(ReconnectOutcome {
                    lost: storm.lost,
                    reconnected: storm.reconnected,
                    gave_up: storm.gave_up,
                    interrupted: storm.interrupted,
                    attempts: storm.attempts,
                    failures: storm.failures.into_iter().collect(),
                    sessions_resumed: storm.sessions_resumed,
                    zero_rtt_attempted: storm.zero_rtt_attempted,
                    zero_rtt_accepted: storm.zero_rtt_accepted,
                    zero_rtt_rejected: storm.zero_rtt_rejected,
                    resent: storm.resent,
                    time_away: histogram_from_bytes(&storm.time_away, &at, "time_away")?,
                    first_lost_ns: storm.first_lost_ns,
                    last_back_ns: storm.last_back_ns,
                })
            })
            .transpose()?,
        retained: message.retained.map(|r| RetainedOutcome {
            late_subscribers: r.late_subscribers,
            failed: r.failed,
            expected_each: r.expected_each,
            current: r.current,
            stale: r.stale,
            missing: r.missing,
            extra: r.extra,
            all_received_ns: r.all_received_ns,
            cleared: r.cleared,
            left_after_clear: r.left_after_clear,
        }),
        wills: message.wills.map(|w| WillOutcome {
            connected: w.connected,
            failed: w.failed,
            dropped: w.dropped,
            delivered: w.delivered,
            duplicates: w.duplicates,
            unexpected: w.unexpected,
            disconnected: w.disconnected,
            watched: w.watched,
            from_drop_ns: w.from_drop_ns,
            drop_late_ns: w.drop_late_ns,
            delay_ns: w.delay_ns,
            cleared: w.cleared,
        }),
        groups: message
            .groups
            .into_iter()
            .map(|group| GroupDeliveries {
                filter: group.filter,
                members: group
                    .members
                    .into_iter()
                    .map(|m| MemberShare {
                        subscriber: m.subscriber,
                        delivered: m.delivered,
                    })
                    .collect(),
                delivered: group.delivered.into_iter().map(|b| b.words).collect(),
                duplicates: group.duplicates,
            })
            .collect(),
        spec,
    })
}

/// A shard range must be ordered and lie within the workload's `count` clients.
/// A broker's command name kept from a peer's result (Linux's own are at most 15 bytes).
const MAX_COMMAND_CHARS: usize = 64;

fn within(range: &Range<u32>, count: u32, at: &str, name: &str) -> Result<(), ConversionError> {
    if range.start > range.end || range.end > count {
        return Err(ConversionError::Invalid(FieldError {
            path: field(at, name),
            value: format!("{range:?}"),
            problem: format!("must lie within 0..{count}"),
        }));
    }
    Ok(())
}

/// Client windows must name a client of the workload and not end before they start.
fn windows(
    messages: Vec<pb::ClientWindow>,
    clients: u32,
    at: &str,
    name: &str,
) -> Result<Vec<ClientWindow>, ConversionError> {
    messages
        .into_iter()
        .enumerate()
        .map(|(i, window)| {
            let at = format!("{at}.{name}[{i}]");
            if window.client >= clients {
                return Err(ConversionError::Invalid(FieldError {
                    path: field(&at, "client"),
                    value: window.client.to_string(),
                    problem: format!("the workload has {clients} such clients"),
                }));
            }
            if window.first_ns > window.last_ns {
                return Err(ConversionError::Invalid(FieldError {
                    path: field(&at, "last_ns"),
                    value: window.last_ns.to_string(),
                    problem: format!("before first_ns ({})", window.first_ns),
                }));
            }
            Ok(ClientWindow {
                client: window.client,
                first_ns: window.first_ns,
                last_ns: window.last_ns,
                count: window.count,
            })
        })
        .collect()
}

/// Decodes a histogram and insists on the project-wide bounds, without which it cannot merge.
/// The latency intervals of a peer's result: counted before any histogram is decoded, then
/// checked as a result read from a file is.
fn intervals_from(
    interval_ns: u64,
    intervals: &[pb::LatencyInterval],
    at: &str,
) -> Result<IntervalHistograms, ConversionError> {
    if interval_ns == 0 && intervals.is_empty() {
        return Ok(IntervalHistograms::default());
    }
    let invalid = |value: String, problem: String| {
        ConversionError::Invalid(FieldError {
            path: field(at, "latency_intervals"),
            value,
            problem,
        })
    };
    if intervals.len() > MAX_INTERVALS {
        return Err(invalid(
            format!("{} intervals", intervals.len()),
            format!("at most {MAX_INTERVALS}"),
        ));
    }
    let decoded = IntervalHistograms {
        interval_ns,
        intervals: intervals
            .iter()
            .map(|interval| {
                Ok(Interval {
                    index: interval.index,
                    histogram: histogram_from_bytes(
                        &interval.histogram,
                        at,
                        "latency_intervals.histogram",
                    )?,
                })
            })
            .collect::<Result<Vec<_>, ConversionError>>()?,
    };
    decoded
        .check()
        .map_err(|problem| invalid(format!("{interval_ns} ns"), problem))?;
    Ok(decoded)
}

fn histogram_from_bytes(
    bytes: &[u8],
    at: &str,
    name: &str,
) -> Result<Histogram<u64>, ConversionError> {
    // from_bytes checks the header (bounds, declared lengths) before it allocates anything.
    histogram_v2::from_bytes(bytes).map_err(|error| match error {
        HistogramError::Bounds { high, sigfig, .. } => ConversionError::Invalid(FieldError {
            path: field(at, name),
            value: format!("1..={high} ns at {sigfig} digits"),
            problem: format!(
                "histograms must have bounds 1..={HISTOGRAM_HIGHEST_NS} ns at {HISTOGRAM_SIGFIG} digits to merge"
            ),
        }),
        HistogramError::Malformed(reason) => ConversionError::Histogram {
            path: field(at, name),
            reason,
        },
    })
}

fn histogram_to_bytes(
    histogram: &Histogram<u64>,
    at: &str,
    name: &str,
) -> Result<Vec<u8>, ConversionError> {
    histogram_v2::to_bytes(histogram).map_err(|reason| ConversionError::Histogram {
        path: field(at, name),
        reason,
    })
}

/// Encodes a result for the wire. Fallible only because HdrHistogram V2 cannot encode a
/// bucket count above `i64::MAX`; the error names the histogram.
impl TryFrom<&RunResult> for pb::RunResult {
    type Error = ConversionError;

    fn try_from(result: &RunResult) -> Result<Self, Self::Error> {
        let at = "result";
        Ok(pb::RunResult {
            spec: Some(pb::WorkloadSpec::from(&result.spec)),
            run_id: result.run_id.clone(),
            shards: result.shards.iter().map(pb::Shard::from).collect(),
            header: match result.header {
                HeaderEncoding::Full => pb::HeaderEncoding::Full,
                HeaderEncoding::Compact => pb::HeaderEncoding::Compact,
            }
            .into(),
            latency: histogram_to_bytes(&result.latency, at, "latency")?,
            transit_latency: histogram_to_bytes(&result.transit_latency, at, "transit_latency")?,
            send_delay: histogram_to_bytes(&result.send_delay, at, "send_delay")?,
            read_delay: histogram_to_bytes(&result.read_delay, at, "read_delay")?,
            latency_interval_ns: result.latency_intervals.interval_ns,
            latency_intervals: result
                .latency_intervals
                .intervals
                .iter()
                .map(|interval| {
                    Ok(pb::LatencyInterval {
                        index: interval.index,
                        histogram: histogram_to_bytes(
                            &interval.histogram,
                            at,
                            "latency_intervals.histogram",
                        )?,
                    })
                })
                .collect::<Result<Vec<_>, ConversionError>>()?,
            connect_time: histogram_to_bytes(&result.connect_time, at, "connect_time")?,
            published: result.published.clone(),
            acknowledged: result.acknowledged.clone(),
            delivered_unique: result.delivered_unique.clone(),
            received: result.received,
            duplicates: result.duplicates,
            out_of_order: result.out_of_order,
            publish_series: Some(pb::RateSeries {
                counts: result.publish_series.counts.clone(),
            }),
            receive_series: Some(pb::RateSeries {
                counts: result.receive_series.counts.clone(),
            }),
            publisher_windows: result
                .publisher_windows
                .iter()
                .map(window_to_proto)
                .collect(),
            subscriber_windows: result
                .subscriber_windows
                .iter()
                .map(window_to_proto)
                .collect(),
            errors: result.errors.clone(),
            resources: Some(pb::ResourceUsage {
                cpu_user_ns: result.resources.cpu_user_ns,
                cpu_system_ns: result.resources.cpu_system_ns,
                peak_rss_bytes: result.resources.peak_rss_bytes,
                cpu_ns: result.resources.cpu_ns,
                cpu_wait_ns: result.resources.cpu_wait_ns,
                throttled_ns: result.resources.throttled_ns,
                cpu_capacity_milli: result.resources.cpu_capacity_milli,
            }),
            load_wall_ns: result.load_wall_ns,
            interrupted: result.interrupted,
            sent_late_after_end: result.sent_late_after_end,
            bytes_written: result.bytes_written,
            expired: result.expired,
            most_unacknowledged: result.most_unacknowledged,
            clock_origin_unix_ns: result.clock_origin_unix_ns,
            measured_window: result.measured_window.map(|w| pb::MeasuredWindow {
                start_ns: w.start_ns,
                from_ns: w.from_ns,
                until_ns: w.until_ns,
            }),
            instances: result
                .instances
                .iter()
                .map(|instance| pb::InstanceLoad {
                    shard: Some(pb::Shard::from(&instance.shard)),
                    cpu_capacity_milli: instance.cpu_capacity_milli,
                    window_ms: instance.window_ms,
                    busy_percent: instance.busy_percent,
                    peak_busy_percent: instance.peak_busy_percent,
                    cpu_wait_percent: instance.cpu_wait_percent,
                    throttled_percent: instance.throttled_percent,
                    host_steal_percent: instance.host_steal_percent,
                    host_cpu_pressure_percent: instance.host_cpu_pressure_percent,
                    cgroup_cpu_pressure_percent: instance.cgroup_cpu_pressure_percent,
                    broker_on_host: instance.broker_on_host.as_ref().map(|broker| {
                        pb::BrokerOnHost {
                            pid: broker.pid,
                            command: broker.command.clone(),
                            threads: broker.threads,
                            cpu_ms: broker.cpu_ms,
                            cpus_used: broker.cpus_used,
                            cpu_wait_percent: broker.cpu_wait_percent,
                        }
                    }),
                })
                .collect(),
            churn: result
                .churn
                .as_ref()
                .map(|churn| -> Result<pb::ChurnOutcome, ConversionError> {
                    let at = field(at, "churn");
                    Ok(pb::ChurnOutcome {
                        attempted: churn.attempted,
                        connected: churn.connected,
                        disconnected: churn.disconnected,
                        cancelled: churn.cancelled,
                        failures: churn.failures.clone().into_iter().collect(),
                        connect_time: histogram_to_bytes(&churn.connect_time, &at, "connect_time")?,
                        most_open: churn.most_open,
                        most_late_ns: churn.most_late_ns,
                        first_arrival_ns: churn.first_arrival_ns,
                        last_arrival_ns: churn.last_arrival_ns,
                    })
                })
                .transpose()?,
            reconnect: result
                .reconnect
                .as_ref()
                .map(|storm| -> Result<pb::ReconnectOutcome, ConversionError> {
                    let at = field(at, "reconnect");
                    Ok(pb::ReconnectOutcome {
                        lost: storm.lost,
                        reconnected: storm.reconnected,
                        gave_up: storm.gave_up,
                        interrupted: storm.interrupted,
                        attempts: storm.attempts,
                        failures: storm.failures.clone().into_iter().collect(),
                        sessions_resumed: storm.sessions_resumed,
                        zero_rtt_attempted: storm.zero_rtt_attempted,
                        zero_rtt_accepted: storm.zero_rtt_accepted,
                        zero_rtt_rejected: storm.zero_rtt_rejected,
                        resent: storm.resent,
                        time_away: histogram_to_bytes(&storm.time_away, &at, "time_away")?,
                        first_lost_ns: storm.first_lost_ns,
                        last_back_ns: storm.last_back_ns,
                    })
                })
                .transpose()?,
            retained: result.retained.as_ref().map(|r| pb::RetainedOutcome {
                late_subscribers: r.late_subscribers,
                failed: r.failed,
                expected_each: r.expected_each,
                current: r.current,
                stale: r.stale,
                missing: r.missing,
                extra: r.extra,
                all_received_ns: r.all_received_ns.clone(),
                cleared: r.cleared,
                left_after_clear: r.left_after_clear,
            }),
            wills: result.wills.as_ref().map(|w| pb::WillOutcome {
                connected: w.connected,
                failed: w.failed,
                dropped: w.dropped,
                delivered: w.delivered,
                duplicates: w.duplicates,
                unexpected: w.unexpected,
                disconnected: w.disconnected,
                watched: w.watched,
                from_drop_ns: w.from_drop_ns.clone(),
                drop_late_ns: w.drop_late_ns,
                delay_ns: w.delay_ns,
                cleared: w.cleared,
            }),
            groups: result
                .groups
                .iter()
                .map(|group| pb::GroupDeliveries {
                    filter: group.filter,
                    members: group
                        .members
                        .iter()
                        .map(|m| pb::MemberShare {
                            subscriber: m.subscriber,
                            delivered: m.delivered,
                        })
                        .collect(),
                    delivered: group
                        .delivered
                        .iter()
                        .map(|words| pb::Bitmap {
                            words: words.clone(),
                        })
                        .collect(),
                    duplicates: group.duplicates,
                })
                .collect(),
        })
    }
}

fn window_to_proto(window: &ClientWindow) -> pb::ClientWindow {
    pb::ClientWindow {
        client: window.client,
        first_ns: window.first_ns,
        last_ns: window.last_ns,
        count: window.count,
    }
}

#[cfg(test)]
mod tests {
    use loadgen_model::result::new_histogram;

    use super::*;

    /// A change that breaks an otherwise valid message.
    type Mutation = Box<dyn FnOnce(&mut pb::RunResult)>;
    use crate::convert::spec::tests::open_loop_spec;

    /// A result as a finished two-shard open-loop run would report it.
    fn filled_result() -> RunResult {
        let spec = open_loop_spec();
        let mut result = RunResult::empty(&spec, "run");
        result.shards = vec![
            Shard {
                publishers: 0..50,
                subscribers: 0..1,
            },
            Shard {
                publishers: 50..100,
                subscribers: 1..1,
            },
        ];
        for (i, latency_ns) in [180_000u64, 250_000, 1_200_000, 47_000_000]
            .iter()
            .enumerate()
        {
            result
                .latency
                .record_n(*latency_ns, i as u64 + 1)
                .expect("within bounds");
        }
        result
            .transit_latency
            .record_n(150_000, 3)
            .expect("within bounds");
        result.send_delay.record(35_000).expect("within bounds");
        result
            .read_delay
            .record_n(20_000, 3)
            .expect("within bounds");
        result.latency_intervals.record(2_000_000_000, 150_000);
        result.latency_intervals.record(3_500_000_000, 250_000);
        result
            .connect_time
            .record(2_500_000)
            .expect("within bounds");
        result.published.fill(40);
        result.acknowledged.fill(40);
        result.delivered_unique.fill(39);
        result.delivered_unique[99] = 40;
        result.received = 3_905;
        result.duplicates = 4;
        result.out_of_order = 2;
        result.publish_series.add(15_000_000, 120);
        result.publish_series.add(1_000_000_000, 80);
        result.receive_series.add(16_000_000, 119);
        result.publisher_windows = vec![ClientWindow {
            client: 7,
            first_ns: 1_000_000_000,
            last_ns: 9_750_000_000,
            count: 36,
        }];
        result.subscriber_windows = vec![ClientWindow {
            client: 0,
            first_ns: 1_000_200_000,
            last_ns: 9_751_000_000,
            count: 3_600,
        }];
        result.count_error("connection lost", 1);
        result.count_error("negative latency", 3);
        result.resources = ResourceUsage {
            cpu_user_ns: 1_500_000_000,
            cpu_system_ns: 700_000_000,
            peak_rss_bytes: 48 << 20,
            cpu_ns: 2_210_000_123,
            cpu_wait_ns: 31_000_000,
            throttled_ns: 5_000,
            cpu_capacity_milli: 1_500,
        };
        result.sent_late_after_end = 7;
        result.bytes_written = 123_456;
        result.expired = 17;
        result.most_unacknowledged = 9;
        result.clock_origin_unix_ns = 1_764_590_000_123_456_789;
        result.measured_window = Some(MeasuredWindow {
            start_ns: 50_000_000,
            from_ns: 2_050_000_000,
            until_ns: 12_050_000_000,
        });
        result.instances = vec![InstanceLoad {
            node: None,
            shard: result.shards[0].clone(),
            cpu_capacity_milli: 1_500,
            window_ms: 10_000.0,
            busy_percent: 41.5,
            peak_busy_percent: 60.25,
            cpu_wait_percent: 1.5,
            throttled_percent: 0.0,
            host_steal_percent: 12.5,
            host_cpu_pressure_percent: Some(9.25),
            cgroup_cpu_pressure_percent: None,
            broker_on_host: Some(BrokerOnHost {
                pid: 4242,
                command: "mosquitto".into(),
                threads: 1,
                cpu_ms: 9_500.0,
                cpus_used: 0.95,
                cpu_wait_percent: 3.25,
            }),
        }];
        result.load_wall_ns = 11_000_000_000;
        result.interrupted = true;
        let mut churn = ChurnOutcome::empty();
        churn.attempted = 500;
        churn.connected = 497;
        churn.disconnected = 496;
        churn.failures = [
            ("connect_timeout".to_string(), 3),
            ("disconnect_failed".to_string(), 1),
        ]
        .into_iter()
        .collect();
        churn.connect_time.record(1_200_000).expect("in range");
        churn.most_open = 31;
        churn.most_late_ns = 3_100_000;
        churn.first_arrival_ns = 50_000_000;
        churn.last_arrival_ns = 2_545_000_000;
        result.churn = Some(churn);
        let mut storm = ReconnectOutcome::empty();
        storm.lost = 40;
        storm.reconnected = 39;
        storm.gave_up = 1;
        storm.attempts = 95;
        storm.failures = [("connect_io".to_string(), 55)].into_iter().collect();
        storm.sessions_resumed = 20;
        storm.zero_rtt_attempted = 12;
        storm.zero_rtt_accepted = 9;
        storm.zero_rtt_rejected = 2;
        storm.resent = 17;
        storm.time_away.record(104_000_000).expect("in range");
        storm.first_lost_ns = 1_200_000_000;
        storm.last_back_ns = 1_304_000_000;
        result.reconnect = Some(storm);
        result.wills = Some(WillOutcome {
            connected: 200,
            failed: 0,
            dropped: 50,
            delivered: 3,
            duplicates: 1,
            unexpected: 2,
            disconnected: 150,
            watched: true,
            from_drop_ns: vec![2_000_100_000, 2_000_300_000, 2_001_000_000],
            drop_late_ns: 90_000,
            delay_ns: 2_000_000_000,
            cleared: 50,
        });
        result
    }

    fn encode(result: &RunResult) -> pb::RunResult {
        pb::RunResult::try_from(result).expect("a result encodes")
    }

    #[test]
    fn run_result_round_trips_through_protobuf_bytes() {
        let result = filled_result();
        let wire = prost::Message::encode_to_vec(&encode(&result));
        let message: pb::RunResult = prost::Message::decode(wire.as_slice()).expect("decodes");
        let back = RunResult::try_from(message).expect("converts back");
        assert_eq!(back, result);
        assert_eq!(back.latency.len(), 10);
        assert_eq!(back.latency.max(), result.latency.max());
    }

    #[test]
    fn shared_groups_round_trip_with_their_bitmaps() {
        let mut spec = open_loop_spec();
        spec.topology = loadgen_model::spec::Topology::Tree;
        spec.subscribers = 4;
        spec.topics = Some(loadgen_model::spec::TopicTree {
            pattern: "d/{n}".into(),
            counts: [("n".to_string(), 100)].into(),
            subscribe: vec!["$share/g/d/+".into(), "d/#".into()],
        });
        let mut result = RunResult::empty(&spec, "groups");
        let mut group = GroupDeliveries::new(0, 100);
        group.join(7, &[0b1011, u64::MAX]);
        group.members = vec![
            MemberShare {
                subscriber: 0,
                delivered: 60,
            },
            MemberShare {
                subscriber: 2,
                delivered: 7,
            },
        ];
        group.duplicates = 3;
        result.groups.push(group);
        assert_eq!(RunResult::try_from(encode(&result)), Ok(result));
    }

    #[test]
    fn empty_result_round_trips() {
        let result = RunResult::empty(&open_loop_spec(), "empty-run");
        assert_eq!(RunResult::try_from(encode(&result)), Ok(result));
    }

    #[test]
    fn latency_intervals_are_counted_before_they_are_decoded_and_checked_after() {
        let mut message = encode(&filled_result());
        assert_eq!(message.latency_intervals.len(), 2);
        let one = message.latency_intervals[0].clone();
        message.latency_intervals = (0..61)
            .map(|index| pb::LatencyInterval {
                index,
                ..one.clone()
            })
            .collect();
        let error = RunResult::try_from(message.clone()).expect_err("refused");
        assert_eq!(error.path(), "result.latency_intervals", "{error}");
        message.latency_intervals = vec![one.clone(), one];
        let error = RunResult::try_from(message).expect_err("a repeated index is refused");
        assert_eq!(error.path(), "result.latency_intervals", "{error}");
    }

    #[test]
    fn a_result_from_an_agent_without_transit_latency_decodes_with_it_empty() {
        let mut message = encode(&filled_result());
        message.transit_latency.clear();
        message.read_delay.clear();
        message.latency_interval_ns = 0;
        message.latency_intervals.clear();
        let decoded = RunResult::try_from(message).expect("decodes");
        assert_eq!(decoded.latency_intervals, Default::default());
        assert!(decoded.transit_latency.is_empty());
        assert!(decoded.read_delay.is_empty());
        assert_eq!(decoded.latency, filled_result().latency);
    }

    #[test]
    fn corrupt_histogram_bytes_name_the_field() {
        let mut message = encode(&filled_result());
        message.send_delay = vec![0x1c, 0x84, 0x93, 0x14, 0xff, 0x00];
        let error = RunResult::try_from(message).expect_err("corrupt histogram");
        assert!(
            matches!(error, ConversionError::Histogram { .. }),
            "{error}"
        );
        assert_eq!(error.path(), "result.send_delay");

        let mut message = encode(&filled_result());
        message.latency.truncate(message.latency.len() / 2);
        assert_eq!(
            RunResult::try_from(message).expect_err("truncated").path(),
            "result.latency"
        );
    }

    #[test]
    fn histograms_with_other_bounds_are_refused() {
        let mut other = Histogram::<u64>::new_with_bounds(1, 1_000_000, 2).expect("bounds");
        other.record(10).expect("within bounds");
        let mut message = encode(&filled_result());
        message.connect_time = histogram_v2::to_bytes(&other).expect("encodes");
        let error = RunResult::try_from(message).expect_err("other bounds");
        assert_eq!(error.path(), "result.connect_time");
        assert!(
            matches!(error, ConversionError::Invalid(FieldError { .. })),
            "{error}"
        );
        // The project's own bounds are accepted.
        let mut message = encode(&filled_result());
        message.connect_time = histogram_v2::to_bytes(&new_histogram()).expect("encodes");
        RunResult::try_from(message).expect("project bounds");
    }

    #[test]
    fn missing_parts_and_misfit_counts_name_their_path() {
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|m| m.spec = None), "result.spec"),
            (
                Box::new(|m| m.spec.as_mut().map_or((), |s| s.qos = 5)),
                "result.spec.qos",
            ),
            (Box::new(|m| m.header = 0), "result.header"),
            (
                Box::new(|m| m.header = pb::HeaderEncoding::Full.into()),
                "result.header",
            ),
            (Box::new(|m| m.resources = None), "result.resources"),
            (
                Box::new(|m| m.receive_series = None),
                "result.receive_series",
            ),
            (
                Box::new(|m| {
                    m.acknowledged.pop();
                }),
                "result.acknowledged",
            ),
            (
                Box::new(|m| m.shards[1].subscribers = Some(pb::IndexRange { start: 0, end: 2 })),
                "result.shards[1].subscribers",
            ),
            (
                Box::new(|m| m.shards[0].publishers = None),
                "result.shards[0].publishers",
            ),
            (
                Box::new(|m| m.publisher_windows[0].client = 100),
                "result.publisher_windows[0].client",
            ),
            (
                Box::new(|m| m.subscriber_windows[0].last_ns = 0),
                "result.subscriber_windows[0].last_ns",
            ),
            (
                Box::new(|m| {
                    m.spec.as_mut().map_or((), |s| {
                        s.shard = Some(pb::Shard::from(&Shard {
                            publishers: 0..1,
                            subscribers: 0..1,
                        }))
                    })
                }),
                "result.spec.shard",
            ),
        ];
        for (mutate, expected) in cases {
            let mut message = encode(&filled_result());
            mutate(&mut message);
            let error = RunResult::try_from(message).expect_err(expected);
            assert_eq!(error.path(), expected, "{error}");
        }
    }
}
