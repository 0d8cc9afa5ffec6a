//! The figures of a run, derived from a [`RunResult`], each named for what it is.
//!
//! Field names carry their units (`_us`, `_msgs_per_s`, `_percent`) so the JSON needs no
//! legend. Two kinds of rate are kept apart on purpose: the *aggregate* rate of all clients
//! together over a window, and the distribution of *per-client* rates (what the study's tool,
//! mqtt-stresser, printed as its median). And every aggregate says what it is
//! ([`RateKind`]): a burst's rates describe a few hundred milliseconds of filling and
//! draining queues, not a rate the broker sustains; only a timed run judged steady
//! ([`crate::steadiness`]) gives a sustained rate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::generator::GeneratorCheck;
use crate::header::{HEADER_PROPERTY, HeaderEncoding, HeaderPlace, PROPERTY_OVERHEAD};
pub use crate::percentiles::LatencySummary;
use crate::result::{ClientWindow, RunResult};
use crate::series::RateSeries;
use crate::spec::{Pacing, Qos};
use crate::steadiness::Steadiness;

/// What a run's aggregate rates are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateKind {
    /// A counted burst (the study's throughput test): rates over its short window, which is
    /// mostly queues filling and draining; not a rate the broker sustains.
    Burst,
    /// A counted open-loop run (the latency tests): the rate follows the schedule.
    Paced,
    /// A timed run judged steady: a rate the broker sustained over the measured window.
    Sustained,
    /// A timed run that was not steady (see the steadiness reasons): not a sustained rate.
    Unsteady,
    /// A timed run in which loadgen itself was the limit (see the generator check): its
    /// rates are loadgen's, not the broker's.
    GeneratorLimited,
}

impl RateKind {
    /// As written in tables: `burst`, `paced`, `sustained`, `unsteady`.
    pub fn as_str(self) -> &'static str {
        match self {
            RateKind::Burst => "burst",
            RateKind::Paced => "paced",
            RateKind::Sustained => "sustained",
            RateKind::Unsteady => "unsteady",
            RateKind::GeneratorLimited => "generator-limited",
        }
    }
}

/// Which window an aggregate rate was taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowKind {
    /// A timed run's measured window: after the warm-up until publishing ended, in whole
    /// 10 ms buckets.
    Measured,
    /// While every client was active: from the last client's first measured message to the
    /// first client's last one, in whole 10 ms buckets.
    Steady,
    /// The steady window was too short (clients hardly overlapped): first to last measured
    /// message of any client.
    Full,
    /// Fewer than two measured messages: no rate.
    None,
}

/// An aggregate rate and the window it was measured over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AggregateRate {
    /// Messages per second of all clients together.
    pub msgs_per_s: f64,
    /// The window's kind.
    pub window: WindowKind,
    /// Window start, ms on the run clock.
    pub window_start_ms: f64,
    /// Window length, ms.
    pub window_ms: f64,
}

/// Distribution of per-client rates (each client's measured messages over its own window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PerClientRates {
    /// Clients with at least two measured messages.
    pub clients: u64,
    /// Slowest client.
    pub min_msgs_per_s: f64,
    /// Median client (mqtt-stresser's figure).
    pub median_msgs_per_s: f64,
    /// Fastest client.
    pub max_msgs_per_s: f64,
}

impl PerClientRates {
    /// The median client's rate, or `None` when no client had a window of its own (all of a
    /// client's messages arrived in one read): 0 would read as a client that received nothing.
    pub fn median(&self) -> Option<f64> {
        (self.clients > 0).then_some(self.median_msgs_per_s)
    }

    /// Slowest, median and fastest client, when any client was measured.
    pub fn spread(&self) -> Option<[f64; 3]> {
        (self.clients > 0).then_some([
            self.min_msgs_per_s,
            self.median_msgs_per_s,
            self.max_msgs_per_s,
        ])
    }
}

/// Every figure of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Run id.
    pub run_id: String,
    /// Broker address.
    pub broker: String,
    /// MQTT version.
    pub protocol: String,
    /// QoS of publishes (and of subscriptions unless `subscriber_qos` is given).
    pub qos: u8,
    /// QoS of subscriptions, when not `qos`; deliveries are judged at the lower of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscriber_qos: Option<u8>,
    /// Publisher connections.
    pub publishers: u32,
    /// Subscriber connections.
    pub subscribers: u32,
    /// Topic layout.
    pub topology: String,
    /// "open-loop", "rate", "closed-loop" or "burst".
    pub pacing: String,
    /// Open loop: interval per publisher, ms.
    pub interval_ms: Option<f64>,
    /// Open loop: the publish rate the schedule offers, all publishers together, msg/s.
    pub offered_rate_msgs_per_s: Option<f64>,
    /// Timed runs: the measured window's length, s.
    pub duration_s: Option<f64>,
    /// Timed runs: the warm-up before it, s.
    pub warmup_s: Option<f64>,
    /// What the aggregate rates below are: burst, paced, sustained or unsteady.
    pub rate_kind: RateKind,
    /// Payload size on the wire, bytes.
    pub payload_bytes: u64,
    /// Which measurement header the payload carried, and why.
    pub header: String,
    /// Messages per publisher, warm-up included.
    pub messages_per_publisher: u64,
    /// Warm-up messages per publisher, excluded from latency and rates.
    pub warmup_messages: u64,
    /// PUBLISH packets written to the broker, warm-up included.
    pub published: u64,
    /// QoS 1/2 handshakes completed by the broker.
    pub acknowledged: u64,
    /// Deliveries the workload should produce: each published message times its subscribers.
    pub expected_deliveries: u64,
    /// PUBLISH packets subscribers received, copies included.
    pub received: u64,
    /// Distinct (publisher, seq) per subscriber received.
    pub delivered_unique: u64,
    /// Expected deliveries that never arrived; `None` when only part of the workload ran here.
    pub lost: Option<u64>,
    /// Lost as a share of expected deliveries.
    pub lost_percent: Option<f64>,
    /// Expected deliveries the broker dropped because their MQTT 5 message expiry ran out
    /// while it held them for an absent subscriber: not lost, and not delivered.
    #[serde(default)]
    pub expired: u64,
    /// Most QoS 1/2 deliveries one subscriber received at once before acknowledging any (a
    /// lower bound of the broker's window to a subscriber; above an MQTT 5 receive maximum,
    /// a violation).
    #[serde(default)]
    pub most_unacknowledged: u64,
    /// Copies of messages already received.
    pub duplicates: u64,
    /// First deliveries that came after a later message of the same publisher.
    pub out_of_order: u64,
    /// MQTT bytes the publishers wrote per message published (their PUBLISHes with the few
    /// packets beside them, before TLS or WebSocket framing): what one message costs; absent
    /// in results that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_publish: Option<f64>,
    /// What the QoS forbids and still happened (empty when the broker kept its promises).
    pub qos_violations: Vec<String>,
    /// End-to-end latency of measured messages (open loop: from the intended send time).
    pub latency: LatencySummary,
    /// Transit latency of the same messages: from the moment loadgen handed each to the
    /// socket. The broker's (and the network's) figure when loadgen itself left late; equal
    /// to `latency` without a schedule.
    #[serde(default)]
    pub transit_latency: LatencySummary,
    /// Open loop: whose the latency tail is, the broker's or loadgen's own send delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_tail: Option<crate::tail::LatencyTail>,
    /// Receive coalescing: while deliveries kept coming, each subscriber read at most once
    /// per this many ms, so the latency includes up to about two such cycles; `None` when
    /// every delivery was read at once ([`crate::spec::Coalescing`]).
    #[serde(default)]
    pub read_cadence_ms: Option<f64>,
    /// Open loop: how late messages left relative to their schedule.
    pub send_delay: LatencySummary,
    /// How long after the newest bytes of a read reached the subscriber host's kernel
    /// loadgen read its deliveries: loadgen's late reads, at least (empty without kernel
    /// receive stamps).
    #[serde(default)]
    pub read_delay: LatencySummary,
    /// Connection set-up time per client.
    pub connect_time: LatencySummary,
    /// Aggregate publish rate of all publishers.
    pub publish_rate: AggregateRate,
    /// Aggregate receive rate of all subscribers.
    pub receive_rate: AggregateRate,
    /// Per-publisher rate distribution.
    pub publish_rate_per_client: PerClientRates,
    /// Per-subscriber rate distribution.
    pub receive_rate_per_client: PerClientRates,
    /// Timed runs: whether the broker sustained the rate, and by which criteria.
    pub steadiness: Option<Steadiness>,
    /// Whether loadgen itself was the limit.
    pub generator: GeneratorCheck,
    /// The broker's own process over the window, when it ran on loadgen's host.
    #[serde(default)]
    pub broker_on_host: Option<crate::broker_on_host::BrokerOnHostSummary>,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
    /// Loadgen's CPU (user + system) per message published, its deliveries included, µs:
    /// the publishing and the receiving side of one message together.
    pub loadgen_cpu_per_message_us: f64,
    /// Loadgen's user + system CPU during the load, ms.
    pub loadgen_cpu_ms: f64,
    /// Loadgen's peak resident memory, MB.
    pub loadgen_peak_rss_mb: f64,
    /// Wall time from the start barrier to the end of the drain, ms.
    pub load_wall_ms: f64,
    /// The run was cancelled.
    pub interrupted: bool,
    /// The churn fleet beside the workload, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn: Option<ChurnSummary>,
    /// Lost connections and how they came back, when the workload reconnects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect: Option<ReconnectSummary>,
    /// Shared subscriptions, each judged once per group, with its members' shares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_groups: Vec<crate::groups::GroupSummary>,
    /// What the late subscribers found of the retained messages, when the workload retains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained: Option<crate::retained::RetainedOutcome>,
    /// What the will clients did and their watcher got, when the workload has wills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wills: Option<crate::wills::WillOutcome>,
}

/// A reconnect storm: connections lost and back, how long the fleet took to be whole again,
/// each client's time away, what failed meanwhile and what was sent again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconnectSummary {
    /// Connections lost mid-run.
    pub lost: u64,
    /// Lost connections open again.
    pub reconnected: u64,
    /// Lost connections not back within the policy's time.
    pub gave_up: u64,
    /// Lost connections still trying when the run ended.
    pub interrupted: u64,
    /// From the first loss to the last reconnection, ms, when every lost connection came
    /// back.
    pub full_reconnection_ms: Option<f64>,
    /// Per reconnection, from the loss to open again.
    pub time_away: LatencySummary,
    /// CONNECTs tried, failed ones included.
    pub attempts: u64,
    /// Failed attempts by kind.
    pub failures: BTreeMap<String, u64>,
    /// Reconnections to a session the broker had kept.
    pub sessions_resumed: u64,
    /// Connections opened again over QUIC with 0-RTT data.
    #[serde(default)]
    pub zero_rtt_attempted: u64,
    /// Of those, the ones the broker accepted.
    #[serde(default)]
    pub zero_rtt_accepted: u64,
    /// Of those, the ones the broker rejected (the rest had no verdict within the attempt).
    #[serde(default)]
    pub zero_rtt_rejected: u64,
    /// QoS 1 messages sent again after a reconnect.
    pub resent: u64,
}

impl ReconnectSummary {
    fn of(result: &RunResult) -> Option<Self> {
        let outcome = result.reconnect.as_ref()?;
        Some(ReconnectSummary {
            lost: outcome.lost,
            reconnected: outcome.reconnected,
            gave_up: outcome.gave_up,
            interrupted: outcome.interrupted,
            full_reconnection_ms: outcome.full_reconnection_ns().map(|ns| ns as f64 / 1e6),
            time_away: LatencySummary::of(&outcome.time_away),
            attempts: outcome.attempts,
            failures: outcome.failures.clone(),
            sessions_resumed: outcome.sessions_resumed,
            zero_rtt_attempted: outcome.zero_rtt_attempted,
            zero_rtt_accepted: outcome.zero_rtt_accepted,
            zero_rtt_rejected: outcome.zero_rtt_rejected,
            resent: outcome.resent,
        })
    }
}

/// What a churn fleet did: arrivals asked and achieved, how long CONNECT took, what the
/// broker refused and what failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChurnSummary {
    /// New connections per second asked for.
    pub rate_asked: f64,
    /// Arrivals per second achieved, first to last (an open-loop schedule: lower only
    /// when loadgen fell behind, see `most_late_ms`).
    pub rate_achieved: Option<f64>,
    /// Arrivals that tried, and those accepted.
    pub attempted: u64,
    /// Arrivals whose CONNECT was accepted.
    pub connected: u64,
    /// Accepted clients that disconnected cleanly after their hold.
    pub disconnected: u64,
    /// Refusals and failures by kind.
    pub failures: BTreeMap<String, u64>,
    /// TCP (+ TLS, + WebSocket upgrade) + CONNECT/CONNACK per accepted arrival.
    pub connect_time: LatencySummary,
    /// Most churn clients connected at once.
    pub most_open: u64,
    /// Latest an arrival left behind its schedule, ms.
    pub most_late_ms: f64,
}

impl ChurnSummary {
    fn of(result: &RunResult) -> Option<Self> {
        let (asked, outcome) = (result.spec.churn.as_ref()?, result.churn.as_ref()?);
        Some(ChurnSummary {
            rate_asked: asked.rate,
            rate_achieved: outcome.arrival_rate(),
            attempted: outcome.attempted,
            connected: outcome.connected,
            disconnected: outcome.disconnected,
            failures: outcome.failures.clone(),
            connect_time: LatencySummary::of(&outcome.connect_time),
            most_open: outcome.most_open,
            most_late_ms: outcome.most_late_ns as f64 / 1e6,
        })
    }
}

impl Summary {
    /// Derives every figure from a (possibly merged) result.
    pub fn of(result: &RunResult) -> Self {
        let spec = &result.spec;
        let published: u64 = result.published.iter().sum();
        let expected_deliveries = result.expected_deliveries();
        let delivered_unique: u64 = result.delivered_unique.iter().sum();
        let lost = result.lost_deliveries();
        let lost_percent = lost.map(|lost| percent(lost, expected_deliveries));
        let cpu_ns = result.resources.total_cpu_ns();
        let steadiness = crate::steadiness::judge(result);
        let generator = crate::generator::check(result);
        let rate_kind = match (&steadiness, &spec.pacing) {
            _ if result.measured_window.is_some() && generator.limited => {
                RateKind::GeneratorLimited
            }
            (Some(verdict), _) if verdict.steady => RateKind::Sustained,
            (Some(_), _) => RateKind::Unsteady,
            (None, _) if result.measured_window.is_some() => RateKind::Unsteady,
            (None, Pacing::Burst | Pacing::ClosedLoop) => RateKind::Burst,
            (None, _) => RateKind::Paced,
        };
        let (publish_rate, receive_rate) = match result.measured_window {
            Some(window) => (
                measured_rate(&result.publish_series, window),
                measured_rate(&result.receive_series, window),
            ),
            None => (
                aggregate_rate(&result.publish_series, &result.publisher_windows),
                aggregate_rate(&result.receive_series, &result.subscriber_windows),
            ),
        };
        let per_publisher_interval_s = match spec.pacing {
            Pacing::OpenLoop { interval } => Some(interval.as_secs_f64()),
            Pacing::Rate { rate } => Some(f64::from(spec.publishers) / rate.max(1) as f64),
            Pacing::ClosedLoop | Pacing::Burst => None,
        };
        Summary {
            run_id: result.run_id.clone(),
            broker: spec.broker.to_string(),
            protocol: spec.broker.protocol.to_string(),
            qos: spec.qos.level(),
            subscriber_qos: spec
                .subscriber_qos
                .filter(|qos| *qos != spec.qos)
                .map(Qos::level),
            publishers: spec.publishers,
            subscribers: spec.subscribers,
            topology: spec.topology.to_string(),
            pacing: spec.pacing.mode().to_string(),
            interval_ms: per_publisher_interval_s.map(|s| s * 1e3),
            offered_rate_msgs_per_s: per_publisher_interval_s
                .map(|s| f64::from(spec.publishers) / s.max(f64::MIN_POSITIVE)),
            duration_s: spec.duration.map(|d| d.as_secs_f64()),
            warmup_s: spec
                .duration
                .map(|_| spec.warmup.unwrap_or_default().as_secs_f64()),
            rate_kind,
            payload_bytes: spec.payload.bytes(),
            header: header_note(result.header, spec.payload.bytes(), spec.header_in),
            messages_per_publisher: spec.messages_per_publisher,
            warmup_messages: spec.warmup_messages,
            published,
            acknowledged: result.acknowledged.iter().sum(),
            expected_deliveries,
            received: result.received,
            delivered_unique,
            lost,
            lost_percent,
            expired: result.expired,
            most_unacknowledged: result.most_unacknowledged,
            duplicates: result.duplicates,
            out_of_order: result.out_of_order,
            bytes_per_publish: (result.bytes_written > 0 && published > 0)
                .then(|| result.bytes_written as f64 / published as f64),
            qos_violations: qos_violations(
                spec,
                lost,
                result.duplicates,
                result.most_unacknowledged,
                &result.errors,
            ),
            latency: LatencySummary::of(&result.latency),
            transit_latency: LatencySummary::of(&result.transit_latency),
            latency_tail: crate::tail::judge(
                &crate::tail::TailFigures {
                    open_loop: LatencySummary::of(&result.latency),
                    transit: LatencySummary::of(&result.transit_latency),
                    send_delay: LatencySummary::of(&result.send_delay),
                    read_delay: LatencySummary::of(&result.read_delay),
                },
                generator.host_cpu_pressure_percent,
            ),
            read_cadence_ms: spec
                .read_cadence()
                .map(|cadence| cadence.as_secs_f64() * 1e3),
            send_delay: LatencySummary::of(&result.send_delay),
            read_delay: LatencySummary::of(&result.read_delay),
            connect_time: LatencySummary::of(&result.connect_time),
            publish_rate,
            receive_rate,
            publish_rate_per_client: per_client(&result.publisher_windows),
            receive_rate_per_client: per_client(&result.subscriber_windows),
            steadiness,
            generator,
            broker_on_host: crate::broker_on_host::summarise(result),
            errors: result
                .errors
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (k.clone(), *n))
                .collect(),
            loadgen_cpu_per_message_us: if published == 0 {
                0.0
            } else {
                cpu_ns as f64 / 1e3 / published as f64
            },
            loadgen_cpu_ms: cpu_ns as f64 / 1e6,
            loadgen_peak_rss_mb: result.resources.peak_rss_bytes as f64 / 1e6,
            load_wall_ms: result.load_wall_ns as f64 / 1e6,
            interrupted: result.interrupted,
            churn: ChurnSummary::of(result),
            reconnect: ReconnectSummary::of(result),
            shared_groups: crate::groups::GroupSummary::of_all(result),
            retained: result.retained.clone(),
            wills: result.wills.clone(),
        }
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn header_note(header: HeaderEncoding, payload: u64, place: HeaderPlace) -> String {
    if place.is_property() {
        return format!(
            "{header} header in the MQTT 5 user property \"{HEADER_PROPERTY}\" ({PROPERTY_OVERHEAD} B per PUBLISH), outside the {payload} B payload"
        );
    }
    match header {
        HeaderEncoding::Full => format!("{header} header inside the {payload} B payload"),
        HeaderEncoding::Compact => format!(
            "{header} header inside the {payload} B payload (too small for the 16-byte one: \
             u16 publisher, u24 sequence, 40-bit ns stamp)"
        ),
    }
}

/// The error count of deliveries above their subscription's QoS (loadgen's subscribers count
/// it): a broker that did not downgrade.
pub const ABOVE_SUBSCRIPTION_QOS: &str = "qos_above_subscription";

/// The prefixes of the counts that are a broker's answer by reason code: refusals of CONNECT,
/// SUBSCRIBE and PUBLISH, subscriptions granted below the QoS asked, and the broker's own
/// DISCONNECTs.
pub const BROKER_ANSWER_PREFIXES: [&str; 6] = [
    "connack_refused_",
    "suback_refused_",
    "suback_granted_",
    "puback_refused_",
    "pubrec_refused_",
    "broker_disconnect_",
];

/// Whether the count `kind` is a broker's answer by reason code.
pub fn is_broker_answer(kind: &str) -> bool {
    BROKER_ANSWER_PREFIXES
        .iter()
        .any(|prefix| kind.starts_with(prefix))
}

#[cfg(test)]
mod answer_tests {
    use super::is_broker_answer;

    #[test]
    fn only_the_brokers_reason_codes_are_its_answers() {
        for answer in [
            "connack_refused_not_authorized",
            "suback_granted_qos_0_below_asked",
            "broker_disconnect_server_busy",
        ] {
            assert!(is_broker_answer(answer), "{answer}");
        }
        // loadgen's own failures, and the lost connection a DISCONNECT comes with.
        for own in [
            "disconnect_failed",
            "broker_disconnected",
            "connect_timeout",
        ] {
            assert!(!is_broker_answer(own), "{own}");
        }
    }
}

impl Summary {
    /// Every count of the broker's answers by reason code: the run's, its churn fleet's and
    /// its reconnecting clients'.
    pub fn broker_answers(&self) -> BTreeMap<String, u64> {
        let mut answers = BTreeMap::new();
        let churn = self.churn.iter().flat_map(|c| &c.failures);
        let reconnect = self.reconnect.iter().flat_map(|r| &r.failures);
        for (kind, count) in self.errors.iter().chain(churn).chain(reconnect) {
            if is_broker_answer(kind) {
                *answers.entry(kind.clone()).or_insert(0) += count;
            }
        }
        answers
    }
}

/// The error count of live deliveries whose RETAIN flag their subscription did not allow:
/// set without retain-as-published (MQTT §3.3.1.3: a broker clears it on a delivery to an
/// established subscription), or cleared with it on a retained publish.
pub const RETAIN_FLAG_WRONG: &str = "retain_flag_wrong";

/// The error count of deliveries older than their MQTT 5 message expiry by more than
/// brokers' whole-second clocks allow ([`crate::spec::delivered_past_expiry`]): messages the
/// broker should have dropped.
pub const DELIVERED_PAST_EXPIRY: &str = "delivered_past_expiry";

/// What the effective QoS (the lower of publish and subscription) promised and was broken.
/// A loss the broker announced by reason code is named with its refusals; duplicates are
/// legal wherever QoS 1 is on the way (a QoS 1 publish may reach a QoS 0 subscription twice).
fn qos_violations(
    spec: &crate::spec::WorkloadSpec,
    lost: Option<u64>,
    duplicates: u64,
    most_unacknowledged: u64,
    errors: &BTreeMap<String, u64>,
) -> Vec<String> {
    let qos = spec.effective_qos();
    let mut violations = Vec::new();
    let above = errors.get(ABOVE_SUBSCRIPTION_QOS).copied().unwrap_or(0);
    if above > 0 {
        violations.push(format!(
            "{above} deliveries above the subscription's QoS (the broker did not downgrade)"
        ));
    }
    if let Some(most) = spec.connection.receive_maximum
        && most_unacknowledged > u64::from(most)
    {
        violations.push(format!(
            "{most_unacknowledged} QoS 1/2 deliveries reached a subscriber at once, above its receive maximum {most}"
        ));
    }
    let retain_flag_wrong = errors.get(RETAIN_FLAG_WRONG).copied().unwrap_or(0);
    if retain_flag_wrong > 0 {
        let (flag, subscription) = if spec.live_retain_flag() {
            ("cleared", "with retain-as-published")
        } else {
            ("set", "without retain-as-published")
        };
        violations.push(format!(
            "{retain_flag_wrong} live deliveries with the RETAIN flag {flag} on a subscription {subscription} (MQTT §3.3.1.3)"
        ));
    }
    let past_expiry = errors.get(DELIVERED_PAST_EXPIRY).copied().unwrap_or(0);
    if past_expiry > 0 {
        violations.push(format!(
            "{past_expiry} deliveries past their message expiry (the broker should have dropped them)"
        ));
    }
    if qos != Qos::AtMostOnce && lost.is_some_and(|lost| lost > 0) {
        let refused: u64 = errors
            .iter()
            .filter(|(name, _)| name.contains("_refused_"))
            .map(|(_, count)| *count)
            .sum();
        let announced = if refused > 0 {
            format!(" ({refused} messages refused by the broker's reason code, its answer)")
        } else {
            String::new()
        };
        violations.push(format!(
            "QoS {} lost {} deliveries{announced}",
            qos.level(),
            lost.unwrap_or(0)
        ));
    }
    let at_least_once = qos == Qos::AtLeastOnce || spec.qos == Qos::AtLeastOnce;
    if !at_least_once && duplicates > 0 {
        violations.push(format!(
            "QoS {} delivered {duplicates} duplicates",
            qos.level()
        ));
    }
    violations
}

/// A timed run's rate over its measured window.
fn measured_rate(series: &RateSeries, window: crate::result::MeasuredWindow) -> AggregateRate {
    match crate::steadiness::whole_buckets(window).and_then(|(first, last)| {
        let bucket = crate::series::BUCKET_NS;
        series.rate_within(first * bucket, last * bucket)
    }) {
        Some((rate, from, to)) => AggregateRate {
            msgs_per_s: rate,
            window: WindowKind::Measured,
            window_start_ms: from as f64 / 1e6,
            window_ms: (to - from) as f64 / 1e6,
        },
        None => AggregateRate {
            msgs_per_s: 0.0,
            window: WindowKind::None,
            window_start_ms: 0.0,
            window_ms: 0.0,
        },
    }
}

fn aggregate_rate(series: &RateSeries, windows: &[ClientWindow]) -> AggregateRate {
    let none = AggregateRate {
        msgs_per_s: 0.0,
        window: WindowKind::None,
        window_start_ms: 0.0,
        window_ms: 0.0,
    };
    let total: u64 = windows.iter().map(|w| w.count).sum();
    let (Some(first), Some(last)) = (
        windows.iter().map(|w| w.first_ns).min(),
        windows.iter().map(|w| w.last_ns).max(),
    ) else {
        return none;
    };
    let active: Vec<&ClientWindow> = windows.iter().filter(|w| w.count >= 2).collect();
    let steady_start = active.iter().map(|w| w.first_ns).max();
    let steady_end = active.iter().map(|w| w.last_ns).min();
    if let (Some(start), Some(end)) = (steady_start, steady_end)
        && let Some((rate, from, to)) = series.rate_within(start, end)
        // Fewer than 5 whole buckets (50 ms) is too short to call steady.
        && to - from >= 5 * crate::series::BUCKET_NS
    {
        return AggregateRate {
            msgs_per_s: rate,
            window: WindowKind::Steady,
            window_start_ms: from as f64 / 1e6,
            window_ms: (to - from) as f64 / 1e6,
        };
    }
    if total < 2 || last == first {
        return none;
    }
    // count - 1 intervals lie between the first and the last message.
    AggregateRate {
        msgs_per_s: (total - 1) as f64 * 1e9 / (last - first) as f64,
        window: WindowKind::Full,
        window_start_ms: first as f64 / 1e6,
        window_ms: (last - first) as f64 / 1e6,
    }
}

fn per_client(windows: &[ClientWindow]) -> PerClientRates {
    let mut rates: Vec<f64> = windows
        .iter()
        .filter(|w| w.count >= 2 && w.last_ns > w.first_ns)
        .map(|w| (w.count - 1) as f64 * 1e9 / (w.last_ns - w.first_ns) as f64)
        .collect();
    if rates.is_empty() {
        return PerClientRates::default();
    }
    rates.sort_by(f64::total_cmp);
    let middle = rates.len() / 2;
    let median = if rates.len().is_multiple_of(2) {
        (rates[middle - 1] + rates[middle]) / 2.0
    } else {
        rates[middle]
    };
    PerClientRates {
        clients: rates.len() as u64,
        min_msgs_per_s: rates[0],
        median_msgs_per_s: median,
        max_msgs_per_s: rates[rates.len() - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(client: u32, first_ns: u64, last_ns: u64, count: u64) -> ClientWindow {
        ClientWindow {
            client,
            first_ns,
            last_ns,
            count,
        }
    }

    #[test]
    fn a_run_is_judged_at_its_effective_qos_and_a_missed_downgrade_is_named() {
        let mut spec = crate::presets::latency();
        spec.subscriber_qos = Some(Qos::AtMostOnce);
        assert_eq!(spec.effective_qos(), Qos::AtMostOnce);
        let none = BTreeMap::new();
        let above = BTreeMap::from([(ABOVE_SUBSCRIPTION_QOS.to_string(), 3)]);
        // Losses at an effective QoS 0 are allowed, and so are the duplicates a QoS 1
        // publish may bring; a delivery above the subscription is not.
        assert!(qos_violations(&spec, Some(5), 2, 0, &none).is_empty());
        assert_eq!(
            qos_violations(&spec, Some(5), 0, 0, &above),
            vec!["3 deliveries above the subscription's QoS (the broker did not downgrade)"]
        );
        spec.subscriber_qos = Some(Qos::ExactlyOnce);
        assert_eq!(
            spec.effective_qos(),
            Qos::AtLeastOnce,
            "never above the publish QoS"
        );
        assert_eq!(
            qos_violations(&spec, Some(1), 2, 0, &none),
            vec!["QoS 1 lost 1 deliveries"]
        );
        let refused = BTreeMap::from([("puback_refused_not_authorized".to_string(), 40)]);
        assert_eq!(
            qos_violations(&spec, Some(40), 0, 0, &refused),
            vec![
                "QoS 1 lost 40 deliveries (40 messages refused by the broker's reason code, \
                 its answer)"
            ]
        );
        spec.qos = Qos::AtMostOnce;
        spec.subscriber_qos = Some(Qos::AtMostOnce);
        assert_eq!(
            qos_violations(&spec, None, 1, 0, &none),
            vec!["QoS 0 delivered 1 duplicates"]
        );
        spec.broker.protocol = crate::spec::MqttVersion::V5;
        spec.connection.receive_maximum = Some(2);
        assert!(qos_violations(&spec, None, 0, 2, &none).is_empty());
        assert_eq!(
            qos_violations(&spec, None, 0, 3, &none),
            vec!["3 QoS 1/2 deliveries reached a subscriber at once, above its receive maximum 2"]
        );
    }

    #[test]
    fn a_client_whose_messages_arrived_at_once_has_no_rate_rather_than_zero() {
        // Each subscriber got all of its messages in one read: no window, so no rate.
        let at_once = per_client(&[window(0, 5_000, 5_000, 40), window(1, 7_000, 7_000, 40)]);
        assert_eq!(at_once.clients, 0);
        assert_eq!(at_once.median(), None);
        assert_eq!(at_once.spread(), None);
        // 11 messages over 1 s and 21 over 1 s: 10 and 20 msg/s, median 15.
        let spread = per_client(&[
            window(0, 0, 1_000_000_000, 11),
            window(1, 0, 1_000_000_000, 21),
            window(2, 3, 3, 9),
        ]);
        assert_eq!(spread.clients, 2);
        assert_eq!(spread.median(), Some(15.0));
        assert_eq!(spread.spread(), Some([10.0, 15.0, 20.0]));
    }
}
