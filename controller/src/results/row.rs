//! One row of `summary.csv`, the type it is written and read through.
//!
//! Columns, in this order: which cell and how it ended; every figure of loadgen's
//! [`Summary`], named as there with nested names joined by `_` (its `broker`, the address
//! dialled, as `broker_address`), empty when the cell was not measured; then what the
//! controller adds: the broker's CPU and memory over the cell, who was the limit, and a
//! saturation search's outcome.

use loadgen::saturation::SearchEnd;
use loadgen::summary::{RateKind, WindowKind};
use serde::{Deserialize, Serialize};

use super::fields::{ErrorCounts, TextList, decimals_or_empty, point_label, yes_no};
use super::{CellRecord, CellStatus};
use crate::plan::{CellPoint, TestKind};

/// One row of `summary.csv`: one cell, as the run recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    /// Cell id: `broker/scenario/<test index>-<kind>/<point>/<repetition>`.
    pub cell: String,
    /// The broker's name in the plan.
    pub broker: String,
    /// Scenario name.
    pub scenario: String,
    /// Test kind.
    pub test: TestKind,
    /// Sweep point, written as its label: `-`, a payload size, a number of client pairs.
    #[serde(with = "point_label")]
    pub point: CellPoint,
    /// 1-based repetition.
    pub repetition: u32,
    /// How the cell ended.
    pub status: CellStatus,
    /// Why it failed or was skipped, on one line.
    pub reason: String,
    /// loadgen's run id.
    pub run_id: Option<String>,
    /// The address loadgen dialled (loadgen's `broker`).
    pub broker_address: Option<String>,
    /// MQTT version.
    pub protocol: Option<String>,
    /// QoS of publishes and subscriptions.
    pub qos: Option<u8>,
    /// Publisher connections.
    pub publishers: Option<u32>,
    /// Subscriber connections.
    pub subscribers: Option<u32>,
    /// Topic layout.
    pub topology: Option<String>,
    /// `open-loop`, `rate`, `closed-loop` or `burst`.
    pub pacing: Option<String>,
    /// Open loop: interval per publisher, ms.
    pub interval_ms: Option<f64>,
    /// Open loop: the rate the schedule offers, all publishers together, msg/s.
    pub offered_rate_msgs_per_s: Option<f64>,
    /// Timed runs: the measured window's length, s.
    pub duration_s: Option<f64>,
    /// Timed runs: the warm-up before it, s.
    pub warmup_s: Option<f64>,
    /// What the aggregate rates are: burst, paced, sustained, unsteady, generator-limited.
    pub rate_kind: Option<RateKind>,
    /// Payload size on the wire, bytes.
    pub payload_bytes: Option<u64>,
    /// Which measurement header the payload carried, and why.
    pub header: Option<String>,
    /// Messages per publisher, warm-up included.
    pub messages_per_publisher: Option<u64>,
    /// Warm-up messages per publisher.
    pub warmup_messages: Option<u64>,
    /// PUBLISH packets written to the broker, warm-up included.
    pub published: Option<u64>,
    /// QoS 1/2 handshakes completed by the broker.
    pub acknowledged: Option<u64>,
    /// Deliveries the workload should produce.
    pub expected_deliveries: Option<u64>,
    /// PUBLISH packets subscribers received, copies included.
    pub received: Option<u64>,
    /// Distinct (publisher, seq) per subscriber received.
    pub delivered_unique: Option<u64>,
    /// Expected deliveries that never arrived.
    pub lost: Option<u64>,
    /// Lost as a share of expected deliveries, percent.
    pub lost_percent: Option<f64>,
    /// Expected deliveries the broker dropped because their MQTT 5 message expiry ran out
    /// while it held them for an absent subscriber (not lost); absent in older folders.
    #[serde(default)]
    pub expired: Option<u64>,
    /// Most QoS 1/2 deliveries one subscriber held unacknowledged at once (a lower bound of
    /// the broker's window to it); absent in older folders.
    #[serde(default)]
    pub most_unacknowledged: Option<u64>,
    /// Copies of messages already received.
    pub duplicates: Option<u64>,
    /// First deliveries that came after a later message of the same publisher.
    pub out_of_order: Option<u64>,
    /// What the QoS forbids and still happened.
    #[serde(default)]
    pub qos_violations: TextList,
    /// Latency: samples.
    pub latency_count: Option<u64>,
    /// Latency: smallest, µs.
    pub latency_min_us: Option<f64>,
    /// Latency: median, µs.
    pub latency_p50_us: Option<f64>,
    /// Latency: 90th percentile, µs.
    pub latency_p90_us: Option<f64>,
    /// Latency: 99th percentile, µs.
    pub latency_p99_us: Option<f64>,
    /// Latency: 99.9th percentile, µs.
    pub latency_p999_us: Option<f64>,
    /// Latency: largest, µs.
    pub latency_max_us: Option<f64>,
    /// Latency: mean, µs.
    pub latency_mean_us: Option<f64>,
    /// Latency: interquartile range, µs.
    pub latency_iqr_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): samples.
    #[serde(default)]
    pub transit_latency_count: Option<u64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): smallest, µs.
    #[serde(default)]
    pub transit_latency_min_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): median, µs.
    #[serde(default)]
    pub transit_latency_p50_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): 90th percentile, µs.
    #[serde(default)]
    pub transit_latency_p90_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): 99th percentile, µs.
    #[serde(default)]
    pub transit_latency_p99_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): 99.9th percentile, µs.
    #[serde(default)]
    pub transit_latency_p999_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): largest, µs.
    #[serde(default)]
    pub transit_latency_max_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): mean, µs.
    #[serde(default)]
    pub transit_latency_mean_us: Option<f64>,
    /// Transit latency (from the actual send, loadgen's own lateness left out): interquartile range, µs.
    #[serde(default)]
    pub transit_latency_iqr_us: Option<f64>,
    /// Open loop: whose the latency tail is (`broker` or `loadgen`: mostly send delay).
    #[serde(default)]
    pub latency_tail: Option<String>,
    /// Send delay (open loop: how late messages left): samples.
    pub send_delay_count: Option<u64>,
    /// Send delay (open loop: how late messages left): smallest, µs.
    pub send_delay_min_us: Option<f64>,
    /// Send delay (open loop: how late messages left): median, µs.
    pub send_delay_p50_us: Option<f64>,
    /// Send delay (open loop: how late messages left): 90th percentile, µs.
    pub send_delay_p90_us: Option<f64>,
    /// Send delay (open loop: how late messages left): 99th percentile, µs.
    pub send_delay_p99_us: Option<f64>,
    /// Send delay (open loop: how late messages left): 99.9th percentile, µs.
    pub send_delay_p999_us: Option<f64>,
    /// Send delay (open loop: how late messages left): largest, µs.
    pub send_delay_max_us: Option<f64>,
    /// Send delay (open loop: how late messages left): mean, µs.
    pub send_delay_mean_us: Option<f64>,
    /// Send delay (open loop: how late messages left): interquartile range, µs.
    pub send_delay_iqr_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): samples.
    #[serde(default)]
    pub read_delay_count: Option<u64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): smallest, µs.
    #[serde(default)]
    pub read_delay_min_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): median, µs.
    #[serde(default)]
    pub read_delay_p50_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): 90th percentile, µs.
    #[serde(default)]
    pub read_delay_p90_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): 99th percentile, µs.
    #[serde(default)]
    pub read_delay_p99_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): 99.9th percentile, µs.
    #[serde(default)]
    pub read_delay_p999_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): largest, µs.
    #[serde(default)]
    pub read_delay_max_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): mean, µs.
    #[serde(default)]
    pub read_delay_mean_us: Option<f64>,
    /// Read delay (loadgen's late read after the kernel received the bytes, at least): interquartile range, µs.
    #[serde(default)]
    pub read_delay_iqr_us: Option<f64>,
    /// Connection set-up time: samples.
    pub connect_time_count: Option<u64>,
    /// Connection set-up time: smallest, µs.
    pub connect_time_min_us: Option<f64>,
    /// Connection set-up time: median, µs.
    pub connect_time_p50_us: Option<f64>,
    /// Connection set-up time: 90th percentile, µs.
    pub connect_time_p90_us: Option<f64>,
    /// Connection set-up time: 99th percentile, µs.
    pub connect_time_p99_us: Option<f64>,
    /// Connection set-up time: 99.9th percentile, µs.
    pub connect_time_p999_us: Option<f64>,
    /// Connection set-up time: largest, µs.
    pub connect_time_max_us: Option<f64>,
    /// Connection set-up time: mean, µs.
    pub connect_time_mean_us: Option<f64>,
    /// Connection set-up time: interquartile range, µs.
    pub connect_time_iqr_us: Option<f64>,
    /// Aggregate publish rate of all clients together, msg/s.
    pub publish_rate_msgs_per_s: Option<f64>,
    /// Aggregate publish rate: the window's kind.
    pub publish_rate_window: Option<WindowKind>,
    /// Aggregate publish rate: window start on the run clock, ms.
    pub publish_rate_window_start_ms: Option<f64>,
    /// Aggregate publish rate: window length, ms.
    pub publish_rate_window_ms: Option<f64>,
    /// Aggregate receive rate of all clients together, msg/s.
    pub receive_rate_msgs_per_s: Option<f64>,
    /// Aggregate receive rate: the window's kind.
    pub receive_rate_window: Option<WindowKind>,
    /// Aggregate receive rate: window start on the run clock, ms.
    pub receive_rate_window_start_ms: Option<f64>,
    /// Aggregate receive rate: window length, ms.
    pub receive_rate_window_ms: Option<f64>,
    /// Per-publisher rates: clients with at least two measured messages.
    pub publish_rate_per_client_clients: Option<u64>,
    /// Per-publisher rates: slowest client, msg/s.
    pub publish_rate_per_client_min_msgs_per_s: Option<f64>,
    /// Per-publisher rates: median client (mqtt-stresser's figure), msg/s.
    pub publish_rate_per_client_median_msgs_per_s: Option<f64>,
    /// Per-publisher rates: fastest client, msg/s.
    pub publish_rate_per_client_max_msgs_per_s: Option<f64>,
    /// Per-subscriber rates: clients with at least two measured messages.
    pub receive_rate_per_client_clients: Option<u64>,
    /// Per-subscriber rates: slowest client, msg/s.
    pub receive_rate_per_client_min_msgs_per_s: Option<f64>,
    /// Per-subscriber rates: median client (mqtt-stresser's figure), msg/s.
    pub receive_rate_per_client_median_msgs_per_s: Option<f64>,
    /// Per-subscriber rates: fastest client, msg/s.
    pub receive_rate_per_client_max_msgs_per_s: Option<f64>,
    /// Timed runs: every steadiness criterion held.
    pub steadiness_steady: Option<bool>,
    /// Timed runs: which criteria failed.
    #[serde(default)]
    pub steadiness_reasons: TextList,
    /// Timed runs: the measured window's start on the run clock, ms.
    pub steadiness_window_start_ms: Option<f64>,
    /// Timed runs: its length, ms.
    pub steadiness_window_ms: Option<f64>,
    /// Timed runs: the offered publish rate, msg/s.
    pub steadiness_offered_msgs_per_s: Option<f64>,
    /// Timed runs: publishes per second over the window.
    pub steadiness_publish_msgs_per_s: Option<f64>,
    /// Timed runs: deliveries per second over the window.
    pub steadiness_receive_msgs_per_s: Option<f64>,
    /// Timed runs: deliveries per second over its first half.
    pub steadiness_receive_first_half_msgs_per_s: Option<f64>,
    /// Timed runs: deliveries per second over its second half.
    pub steadiness_receive_second_half_msgs_per_s: Option<f64>,
    /// Timed runs: deliveries per second of the slowest whole second.
    pub steadiness_receive_slowest_second_msgs_per_s: Option<f64>,
    /// Timed runs: deliveries per second of the fastest whole second.
    pub steadiness_receive_fastest_second_msgs_per_s: Option<f64>,
    /// Timed runs: deliveries owed at the window's start.
    pub steadiness_backlog_at_start: Option<i64>,
    /// Timed runs: deliveries owed at its end.
    pub steadiness_backlog_at_end: Option<i64>,
    /// Timed runs: deliveries as a share of what the offered rate asked for, percent.
    pub steadiness_delivered_percent_of_offered: Option<f64>,
    /// loadgen itself was, or may have been, the limit.
    pub generator_limited: Option<bool>,
    /// Why loadgen was the limit.
    #[serde(default)]
    pub generator_reasons: TextList,
    /// What held loadgen back without costing the run.
    #[serde(default)]
    pub generator_warnings: TextList,
    /// loadgen's highest CPU share of its capacity over the window, percent.
    pub generator_busy_percent: Option<f64>,
    /// the same over its busiest 1-s stretch, percent.
    pub generator_peak_busy_percent: Option<f64>,
    /// loadgen's highest share of runnable time spent waiting for a CPU, percent.
    pub generator_cpu_wait_percent: Option<f64>,
    /// loadgen's highest share of the window throttled by a CPU quota, percent.
    pub generator_throttled_percent: Option<f64>,
    /// CPUs loadgen could use.
    pub generator_cpu_capacity: Option<f64>,
    /// Open loop: messages that left after the schedule's end although due before it.
    pub generator_sent_late_after_end: Option<u64>,
    /// Host CPU pressure over the window (PSI "some", highest of the loadgen hosts), percent.
    #[serde(default)]
    pub generator_host_cpu_pressure_percent: Option<f64>,
    /// Failures by kind.
    #[serde(default)]
    pub errors: ErrorCounts,
    /// loadgen's CPU per message published, its deliveries included, µs.
    pub loadgen_cpu_per_message_us: Option<f64>,
    /// loadgen's CPU during the load, ms.
    pub loadgen_cpu_ms: Option<f64>,
    /// loadgen's peak resident memory, MB.
    pub loadgen_peak_rss_mb: Option<f64>,
    /// Wall time from the start barrier to the end of the drain, ms.
    pub load_wall_ms: Option<f64>,
    /// The run was cancelled.
    pub interrupted: Option<bool>,
    /// The broker's mean CPU over the cell's window, percent of one core.
    #[serde(serialize_with = "decimals_or_empty::<2, _>")]
    pub broker_cpu_percent: Option<f64>,
    /// The broker's CPU per delivered message, µs.
    #[serde(serialize_with = "decimals_or_empty::<3, _>")]
    pub broker_cpu_us_per_delivery: Option<f64>,
    /// The broker's peak resident memory, MB.
    #[serde(serialize_with = "decimals_or_empty::<1, _>")]
    pub broker_peak_rss_mb: Option<f64>,
    /// Broker samples inside the window.
    pub broker_samples: Option<usize>,
    /// Measured cells: whether the generator, not the broker, was the limit (`yes`/`no`).
    #[serde(with = "yes_no", default)]
    pub limited_by_generator: Option<bool>,
    /// Why the generator was the limit.
    pub limit_reason: Option<String>,
    /// A saturation search: the highest offered rate sustained, msg/s.
    pub saturation_rate: Option<u64>,
    /// A saturation search: deliveries per second at that rate.
    #[serde(serialize_with = "decimals_or_empty::<0, _>")]
    pub saturation_delivered_msgs_per_s: Option<f64>,
    /// A saturation search: the lowest offered rate not sustained, msg/s.
    pub saturation_failed_rate: Option<u64>,
    /// A saturation search: why it ended.
    pub saturation_end: Option<SearchEnd>,
    /// A saturation search: probes run.
    pub saturation_probes: Option<usize>,
    /// A churn fleet beside the workload: new connections per second asked for.
    #[serde(default)]
    pub churn_rate_asked: Option<f64>,
    /// A churn fleet: arrivals per second achieved, first to last.
    #[serde(default, serialize_with = "decimals_or_empty::<1, _>")]
    pub churn_rate_achieved: Option<f64>,
    /// A churn fleet: arrivals that tried to connect.
    #[serde(default)]
    pub churn_attempted: Option<u64>,
    /// A churn fleet: arrivals whose CONNECT was accepted.
    #[serde(default)]
    pub churn_connected: Option<u64>,
    /// A churn fleet: accepted clients that disconnected cleanly after their hold.
    #[serde(default)]
    pub churn_disconnected: Option<u64>,
    /// A churn fleet: refusals (by the broker's reason) and failures, by kind.
    #[serde(default)]
    pub churn_failures: ErrorCounts,
    /// A churn fleet: connect time of accepted arrivals, median, µs.
    #[serde(default)]
    pub churn_connect_p50_us: Option<f64>,
    /// A churn fleet: connect time of accepted arrivals, 99th percentile, µs.
    #[serde(default)]
    pub churn_connect_p99_us: Option<f64>,
    /// A churn fleet: most of its clients connected at once.
    #[serde(default)]
    pub churn_most_open: Option<u64>,
    /// A reconnecting workload: connections lost mid-run.
    #[serde(default)]
    pub reconnect_lost: Option<u64>,
    /// A reconnecting workload: lost connections open again.
    #[serde(default)]
    pub reconnect_back: Option<u64>,
    /// A reconnecting workload: lost connections not back in time (or when the run ended).
    #[serde(default)]
    pub reconnect_not_back: Option<u64>,
    /// A reconnecting workload: from the first loss to the last reconnection, ms (empty when
    /// not every connection came back).
    #[serde(default, serialize_with = "decimals_or_empty::<1, _>")]
    pub reconnect_full_ms: Option<f64>,
    /// A reconnecting workload: each reconnection's time away, median, µs.
    #[serde(default)]
    pub reconnect_away_p50_us: Option<f64>,
    /// A reconnecting workload: the longest time away, µs.
    #[serde(default)]
    pub reconnect_away_max_us: Option<f64>,
    /// A reconnecting workload: failed attempts by kind.
    #[serde(default)]
    pub reconnect_failures: ErrorCounts,
    /// A reconnecting workload: QoS 1 messages sent again after a reconnect.
    #[serde(default)]
    pub reconnect_resent: Option<u64>,
}

impl SummaryRow {
    /// The columns a row cannot be read without; the others are empty in older folders.
    pub const REQUIRED_COLUMNS: [&str; 8] = [
        "cell",
        "broker",
        "scenario",
        "test",
        "point",
        "repetition",
        "status",
        "reason",
    ];

    /// The row of a finished cell.
    pub fn of(record: &CellRecord) -> Self {
        let summary = record.summary.as_ref();
        let steadiness = summary.and_then(|s| s.steadiness.as_ref());
        let usage = record.usage.as_ref();
        let saturation = record.saturation.as_ref();
        let churn = summary.and_then(|s| s.churn.as_ref());
        let storm = summary.and_then(|s| s.reconnect.as_ref());
        SummaryRow {
            cell: record.cell.clone(),
            broker: record.broker.clone(),
            scenario: record.scenario.clone(),
            test: record.test,
            point: record.point,
            repetition: record.repetition,
            status: record.status,
            reason: record.reason.replace('\n', " "),
            run_id: summary.map(|s| s.run_id.clone()),
            broker_address: summary.map(|s| s.broker.clone()),
            protocol: summary.map(|s| s.protocol.clone()),
            qos: summary.map(|s| s.qos),
            publishers: summary.map(|s| s.publishers),
            subscribers: summary.map(|s| s.subscribers),
            topology: summary.map(|s| s.topology.clone()),
            pacing: summary.map(|s| s.pacing.clone()),
            interval_ms: summary.and_then(|s| s.interval_ms),
            offered_rate_msgs_per_s: summary.and_then(|s| s.offered_rate_msgs_per_s),
            duration_s: summary.and_then(|s| s.duration_s),
            warmup_s: summary.and_then(|s| s.warmup_s),
            rate_kind: summary.map(|s| s.rate_kind),
            payload_bytes: summary.map(|s| s.payload_bytes),
            header: summary.map(|s| s.header.clone()),
            messages_per_publisher: summary.map(|s| s.messages_per_publisher),
            warmup_messages: summary.map(|s| s.warmup_messages),
            published: summary.map(|s| s.published),
            acknowledged: summary.map(|s| s.acknowledged),
            expected_deliveries: summary.map(|s| s.expected_deliveries),
            received: summary.map(|s| s.received),
            delivered_unique: summary.map(|s| s.delivered_unique),
            lost: summary.and_then(|s| s.lost),
            lost_percent: summary.and_then(|s| s.lost_percent),
            expired: summary.map(|s| s.expired),
            most_unacknowledged: summary.map(|s| s.most_unacknowledged),
            duplicates: summary.map(|s| s.duplicates),
            out_of_order: summary.map(|s| s.out_of_order),
            qos_violations: TextList(
                summary
                    .map(|s| s.qos_violations.clone())
                    .unwrap_or_default(),
            ),
            latency_count: summary.map(|s| s.latency.count),
            latency_min_us: summary.map(|s| s.latency.min_us),
            latency_p50_us: summary.map(|s| s.latency.p50_us),
            latency_p90_us: summary.map(|s| s.latency.p90_us),
            latency_p99_us: summary.map(|s| s.latency.p99_us),
            latency_p999_us: summary.map(|s| s.latency.p999_us),
            latency_max_us: summary.map(|s| s.latency.max_us),
            latency_mean_us: summary.map(|s| s.latency.mean_us),
            latency_iqr_us: summary.map(|s| s.latency.iqr_us),
            transit_latency_count: summary.map(|s| s.transit_latency.count),
            transit_latency_min_us: summary.map(|s| s.transit_latency.min_us),
            transit_latency_p50_us: summary.map(|s| s.transit_latency.p50_us),
            transit_latency_p90_us: summary.map(|s| s.transit_latency.p90_us),
            transit_latency_p99_us: summary.map(|s| s.transit_latency.p99_us),
            transit_latency_p999_us: summary.map(|s| s.transit_latency.p999_us),
            transit_latency_max_us: summary.map(|s| s.transit_latency.max_us),
            transit_latency_mean_us: summary.map(|s| s.transit_latency.mean_us),
            transit_latency_iqr_us: summary.map(|s| s.transit_latency.iqr_us),
            latency_tail: summary.and_then(|s| s.latency_tail.as_ref()).map(|tail| {
                match tail.owner {
                    loadgen::tail::TailOwner::Broker => "broker".to_string(),
                    loadgen::tail::TailOwner::Loadgen => "loadgen".to_string(),
                }
            }),
            send_delay_count: summary.map(|s| s.send_delay.count),
            send_delay_min_us: summary.map(|s| s.send_delay.min_us),
            send_delay_p50_us: summary.map(|s| s.send_delay.p50_us),
            send_delay_p90_us: summary.map(|s| s.send_delay.p90_us),
            send_delay_p99_us: summary.map(|s| s.send_delay.p99_us),
            send_delay_p999_us: summary.map(|s| s.send_delay.p999_us),
            send_delay_max_us: summary.map(|s| s.send_delay.max_us),
            send_delay_mean_us: summary.map(|s| s.send_delay.mean_us),
            send_delay_iqr_us: summary.map(|s| s.send_delay.iqr_us),
            read_delay_count: summary.map(|s| s.read_delay.count),
            read_delay_min_us: summary.map(|s| s.read_delay.min_us),
            read_delay_p50_us: summary.map(|s| s.read_delay.p50_us),
            read_delay_p90_us: summary.map(|s| s.read_delay.p90_us),
            read_delay_p99_us: summary.map(|s| s.read_delay.p99_us),
            read_delay_p999_us: summary.map(|s| s.read_delay.p999_us),
            read_delay_max_us: summary.map(|s| s.read_delay.max_us),
            read_delay_mean_us: summary.map(|s| s.read_delay.mean_us),
            read_delay_iqr_us: summary.map(|s| s.read_delay.iqr_us),
            connect_time_count: summary.map(|s| s.connect_time.count),
            connect_time_min_us: summary.map(|s| s.connect_time.min_us),
            connect_time_p50_us: summary.map(|s| s.connect_time.p50_us),
            connect_time_p90_us: summary.map(|s| s.connect_time.p90_us),
            connect_time_p99_us: summary.map(|s| s.connect_time.p99_us),
            connect_time_p999_us: summary.map(|s| s.connect_time.p999_us),
            connect_time_max_us: summary.map(|s| s.connect_time.max_us),
            connect_time_mean_us: summary.map(|s| s.connect_time.mean_us),
            connect_time_iqr_us: summary.map(|s| s.connect_time.iqr_us),
            publish_rate_msgs_per_s: summary.map(|s| s.publish_rate.msgs_per_s),
            publish_rate_window: summary.map(|s| s.publish_rate.window),
            publish_rate_window_start_ms: summary.map(|s| s.publish_rate.window_start_ms),
            publish_rate_window_ms: summary.map(|s| s.publish_rate.window_ms),
            receive_rate_msgs_per_s: summary.map(|s| s.receive_rate.msgs_per_s),
            receive_rate_window: summary.map(|s| s.receive_rate.window),
            receive_rate_window_start_ms: summary.map(|s| s.receive_rate.window_start_ms),
            receive_rate_window_ms: summary.map(|s| s.receive_rate.window_ms),
            publish_rate_per_client_clients: summary.map(|s| s.publish_rate_per_client.clients),
            publish_rate_per_client_min_msgs_per_s: summary
                .and_then(|s| s.publish_rate_per_client.spread())
                .map(|rates| rates[0]),
            publish_rate_per_client_median_msgs_per_s: summary
                .and_then(|s| s.publish_rate_per_client.spread())
                .map(|rates| rates[1]),
            publish_rate_per_client_max_msgs_per_s: summary
                .and_then(|s| s.publish_rate_per_client.spread())
                .map(|rates| rates[2]),
            receive_rate_per_client_clients: summary.map(|s| s.receive_rate_per_client.clients),
            receive_rate_per_client_min_msgs_per_s: summary
                .and_then(|s| s.receive_rate_per_client.spread())
                .map(|rates| rates[0]),
            receive_rate_per_client_median_msgs_per_s: summary
                .and_then(|s| s.receive_rate_per_client.spread())
                .map(|rates| rates[1]),
            receive_rate_per_client_max_msgs_per_s: summary
                .and_then(|s| s.receive_rate_per_client.spread())
                .map(|rates| rates[2]),
            steadiness_steady: steadiness.map(|s| s.steady),
            steadiness_reasons: TextList(steadiness.map(|s| s.reasons.clone()).unwrap_or_default()),
            steadiness_window_start_ms: steadiness.map(|s| s.window_start_ms),
            steadiness_window_ms: steadiness.map(|s| s.window_ms),
            steadiness_offered_msgs_per_s: steadiness.and_then(|s| s.offered_msgs_per_s),
            steadiness_publish_msgs_per_s: steadiness.map(|s| s.publish_msgs_per_s),
            steadiness_receive_msgs_per_s: steadiness.map(|s| s.receive_msgs_per_s),
            steadiness_receive_first_half_msgs_per_s: steadiness
                .map(|s| s.receive_first_half_msgs_per_s),
            steadiness_receive_second_half_msgs_per_s: steadiness
                .map(|s| s.receive_second_half_msgs_per_s),
            steadiness_receive_slowest_second_msgs_per_s: steadiness
                .and_then(|s| s.receive_slowest_second_msgs_per_s),
            steadiness_receive_fastest_second_msgs_per_s: steadiness
                .and_then(|s| s.receive_fastest_second_msgs_per_s),
            steadiness_backlog_at_start: steadiness.map(|s| s.backlog_at_start),
            steadiness_backlog_at_end: steadiness.map(|s| s.backlog_at_end),
            steadiness_delivered_percent_of_offered: steadiness
                .and_then(|s| s.delivered_percent_of_offered),
            generator_limited: summary.map(|s| s.generator.limited),
            generator_reasons: TextList(
                summary
                    .map(|s| s.generator.reasons.clone())
                    .unwrap_or_default(),
            ),
            generator_warnings: TextList(
                summary
                    .map(|s| s.generator.warnings.clone())
                    .unwrap_or_default(),
            ),
            generator_busy_percent: summary.map(|s| s.generator.busy_percent),
            generator_peak_busy_percent: summary.map(|s| s.generator.peak_busy_percent),
            generator_cpu_wait_percent: summary.map(|s| s.generator.cpu_wait_percent),
            generator_throttled_percent: summary.map(|s| s.generator.throttled_percent),
            generator_cpu_capacity: summary.map(|s| s.generator.cpu_capacity),
            generator_sent_late_after_end: summary.map(|s| s.generator.sent_late_after_end),
            generator_host_cpu_pressure_percent: summary
                .and_then(|s| s.generator.host_cpu_pressure_percent),
            errors: ErrorCounts(summary.map(|s| s.errors.clone()).unwrap_or_default()),
            loadgen_cpu_per_message_us: summary.map(|s| s.loadgen_cpu_per_message_us),
            loadgen_cpu_ms: summary.map(|s| s.loadgen_cpu_ms),
            loadgen_peak_rss_mb: summary.map(|s| s.loadgen_peak_rss_mb),
            load_wall_ms: summary.map(|s| s.load_wall_ms),
            interrupted: summary.map(|s| s.interrupted),
            broker_cpu_percent: usage.map(|u| u.cpu_percent),
            broker_cpu_us_per_delivery: usage.and_then(|u| u.cpu_us_per_delivery),
            broker_peak_rss_mb: usage.map(|u| u.peak_rss_mb),
            broker_samples: usage.map(|u| u.samples),
            limited_by_generator: summary.map(|_| record.generator_limit.is_some()),
            limit_reason: record.generator_limit.clone(),
            saturation_rate: saturation.and_then(|s| s.rate),
            saturation_delivered_msgs_per_s: saturation.and_then(|s| s.delivered_msgs_per_s),
            saturation_failed_rate: saturation.and_then(|s| s.failed_rate),
            saturation_end: saturation.map(|s| s.end),
            saturation_probes: saturation.map(|s| s.probes),
            churn_rate_asked: churn.map(|c| c.rate_asked),
            churn_rate_achieved: churn.and_then(|c| c.rate_achieved),
            churn_attempted: churn.map(|c| c.attempted),
            churn_connected: churn.map(|c| c.connected),
            churn_disconnected: churn.map(|c| c.disconnected),
            churn_failures: ErrorCounts(churn.map(|c| c.failures.clone()).unwrap_or_default()),
            churn_connect_p50_us: churn.map(|c| c.connect_time.p50_us),
            churn_connect_p99_us: churn.map(|c| c.connect_time.p99_us),
            churn_most_open: churn.map(|c| c.most_open),
            reconnect_lost: storm.map(|r| r.lost),
            reconnect_back: storm.map(|r| r.reconnected),
            reconnect_not_back: storm.map(|r| r.gave_up + r.interrupted),
            reconnect_full_ms: storm.and_then(|r| r.full_reconnection_ms),
            reconnect_away_p50_us: storm.map(|r| r.time_away.p50_us),
            reconnect_away_max_us: storm.map(|r| r.time_away.max_us),
            reconnect_failures: ErrorCounts(storm.map(|r| r.failures.clone()).unwrap_or_default()),
            reconnect_resent: storm.map(|r| r.resent),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns of summary.csv as users and tests read them: names and order are fixed.
    const HEADER: &str = "cell,broker,scenario,test,point,repetition,status,reason,run_id,broker_address,protocol,qos,publishers,subscribers,topology,pacing,interval_ms,offered_rate_msgs_per_s,duration_s,warmup_s,rate_kind,payload_bytes,header,messages_per_publisher,warmup_messages,published,acknowledged,expected_deliveries,received,delivered_unique,lost,lost_percent,expired,most_unacknowledged,duplicates,out_of_order,qos_violations,latency_count,latency_min_us,latency_p50_us,latency_p90_us,latency_p99_us,latency_p999_us,latency_max_us,latency_mean_us,latency_iqr_us,transit_latency_count,transit_latency_min_us,transit_latency_p50_us,transit_latency_p90_us,transit_latency_p99_us,transit_latency_p999_us,transit_latency_max_us,transit_latency_mean_us,transit_latency_iqr_us,latency_tail,send_delay_count,send_delay_min_us,send_delay_p50_us,send_delay_p90_us,send_delay_p99_us,send_delay_p999_us,send_delay_max_us,send_delay_mean_us,send_delay_iqr_us,read_delay_count,read_delay_min_us,read_delay_p50_us,read_delay_p90_us,read_delay_p99_us,read_delay_p999_us,read_delay_max_us,read_delay_mean_us,read_delay_iqr_us,connect_time_count,connect_time_min_us,connect_time_p50_us,connect_time_p90_us,connect_time_p99_us,connect_time_p999_us,connect_time_max_us,connect_time_mean_us,connect_time_iqr_us,publish_rate_msgs_per_s,publish_rate_window,publish_rate_window_start_ms,publish_rate_window_ms,receive_rate_msgs_per_s,receive_rate_window,receive_rate_window_start_ms,receive_rate_window_ms,publish_rate_per_client_clients,publish_rate_per_client_min_msgs_per_s,publish_rate_per_client_median_msgs_per_s,publish_rate_per_client_max_msgs_per_s,receive_rate_per_client_clients,receive_rate_per_client_min_msgs_per_s,receive_rate_per_client_median_msgs_per_s,receive_rate_per_client_max_msgs_per_s,steadiness_steady,steadiness_reasons,steadiness_window_start_ms,steadiness_window_ms,steadiness_offered_msgs_per_s,steadiness_publish_msgs_per_s,steadiness_receive_msgs_per_s,steadiness_receive_first_half_msgs_per_s,steadiness_receive_second_half_msgs_per_s,steadiness_receive_slowest_second_msgs_per_s,steadiness_receive_fastest_second_msgs_per_s,steadiness_backlog_at_start,steadiness_backlog_at_end,steadiness_delivered_percent_of_offered,generator_limited,generator_reasons,generator_warnings,generator_busy_percent,generator_peak_busy_percent,generator_cpu_wait_percent,generator_throttled_percent,generator_cpu_capacity,generator_sent_late_after_end,generator_host_cpu_pressure_percent,errors,loadgen_cpu_per_message_us,loadgen_cpu_ms,loadgen_peak_rss_mb,load_wall_ms,interrupted,broker_cpu_percent,broker_cpu_us_per_delivery,broker_peak_rss_mb,broker_samples,limited_by_generator,limit_reason,saturation_rate,saturation_delivered_msgs_per_s,saturation_failed_rate,saturation_end,saturation_probes,churn_rate_asked,churn_rate_achieved,churn_attempted,churn_connected,churn_disconnected,churn_failures,churn_connect_p50_us,churn_connect_p99_us,churn_most_open,reconnect_lost,reconnect_back,reconnect_not_back,reconnect_full_ms,reconnect_away_p50_us,reconnect_away_max_us,reconnect_failures,reconnect_resent";

    #[test]
    fn the_columns_are_the_ones_users_read() {
        let spec = loadgen::presets::latency();
        let mut result = loadgen::RunResult::empty(&spec, "r");
        result.shards.push(spec.effective_shard());
        let record = CellRecord {
            cell: "b/local/0-latency/-/1".into(),
            broker: "b".into(),
            scenario: "local".into(),
            test: TestKind::Latency,
            point: CellPoint::Single,
            repetition: 1,
            status: CellStatus::Ok,
            reason: String::new(),
            earlier_failures: 0,
            spec: None,
            summary: Some(loadgen::Summary::of(&result)),
            usage: None,
            generator_limit: None,
            saturation: None,
        };
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.serialize(SummaryRow::of(&record)).expect("row");
        let text = String::from_utf8(writer.into_inner().expect("flush")).expect("utf-8");
        assert_eq!(text.lines().next(), Some(HEADER));
        assert!(HEADER.starts_with(&SummaryRow::REQUIRED_COLUMNS.join(",")));
    }
}
