//! The raw, mergeable result of one loadgen run (or of several merged).
//!
//! Everything here adds up exactly: histograms add, counts add, per-client windows concatenate
//! and rate series add bucket by bucket, so the result of a workload split over several
//! instances merges into what one instance would have recorded. Figures (percentiles, rates,
//! loss) are derived from it in [`crate::summary`].

use crate::groups::GroupDeliveries;
use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::header::HeaderEncoding;
pub use crate::reconnect::ReconnectOutcome;
use crate::series::RateSeries;
use crate::spec::{Shard, WorkloadSpec};

/// Highest value any histogram tracks: one hour in ns. Same bounds everywhere so they merge.
pub const HISTOGRAM_HIGHEST_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits of every histogram.
pub const HISTOGRAM_SIGFIG: u8 = 3;

/// An empty histogram with the project-wide bounds (ns, 1 ns .. 1 h, 3 digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_HIGHEST_NS, HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// First and last measured message of one client, and how many it measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientWindow {
    /// Global client index (publisher or subscriber).
    pub client: u32,
    /// First measured message, ns on the run clock.
    pub first_ns: u64,
    /// Last measured message, ns on the run clock.
    pub last_ns: u64,
    /// Measured messages.
    pub count: u64,
}

/// CPU and memory of the loadgen instance(s) while the load ran (from the start barrier to
/// the end of the drain), summed over instances where that makes sense.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    /// User CPU time, ns (clock-tick resolution).
    pub cpu_user_ns: u64,
    /// System CPU time, ns (clock-tick resolution).
    pub cpu_system_ns: u64,
    /// Peak resident set of the largest instance, bytes.
    pub peak_rss_bytes: u64,
    /// CPU time of loadgen's own threads (schedstat, ns resolution), ns.
    #[serde(default)]
    pub cpu_ns: u64,
    /// Time loadgen's threads were ready to run but waited for a CPU, ns: a starved
    /// generator.
    #[serde(default)]
    pub cpu_wait_ns: u64,
    /// Time a CPU quota of loadgen's cgroup held its tasks back, ns.
    #[serde(default)]
    pub throttled_ns: u64,
    /// CPU loadgen could use at most (its threads, the CPUs it may run on, its cgroup's
    /// quota, whichever is least), in thousandths of a CPU.
    #[serde(default)]
    pub cpu_capacity_milli: u32,
}

impl ResourceUsage {
    /// CPU time of the run: the precise figure where there is one.
    pub fn total_cpu_ns(&self) -> u64 {
        if self.cpu_ns > 0 {
            self.cpu_ns
        } else {
            self.cpu_user_ns + self.cpu_system_ns
        }
    }

    /// Adds another instance's usage.
    pub fn add(&mut self, other: &ResourceUsage) {
        self.cpu_user_ns += other.cpu_user_ns;
        self.cpu_system_ns += other.cpu_system_ns;
        self.peak_rss_bytes = self.peak_rss_bytes.max(other.peak_rss_bytes);
        self.cpu_ns += other.cpu_ns;
        self.cpu_wait_ns += other.cpu_wait_ns;
        self.throttled_ns += other.throttled_ns;
        self.cpu_capacity_milli = self
            .cpu_capacity_milli
            .saturating_add(other.cpu_capacity_milli);
    }
}

/// What one loadgen instance spent on its shard: whether the generator, not the broker, may
/// have been the limit. Kept per instance (a merge concatenates), since percentages of
/// different machines do not add.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceLoad {
    /// The node that ran it, when a controller ran it over several nodes (the controller
    /// names it; loadgen itself does not know its node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The part of the workload the instance ran.
    pub shard: Shard,
    /// CPU it could use at most (threads, affinity, cgroup quota), thousandths of a CPU.
    pub cpu_capacity_milli: u32,
    /// The window the percentages cover: the measured window of a timed run, else from the
    /// start to the last message published or received; ms.
    pub window_ms: f64,
    /// Its CPU time over the window as a share of its capacity, percent.
    pub busy_percent: f64,
    /// The highest share over any 1-s stretch of the window (all of it when shorter), percent.
    pub peak_busy_percent: f64,
    /// Time its threads were ready but waited for a CPU, as a share of their runnable time
    /// (running + waiting), percent.
    pub cpu_wait_percent: f64,
    /// Time its cgroup's CPU quota held it back, as a share of the window, percent.
    pub throttled_percent: f64,
    /// Time the hypervisor ran something else while the host's CPUs wanted to run (steal in
    /// `/proc/stat`), as a share of all the host's CPU time over the window, percent: on a
    /// virtual machine, CPU that neither loadgen nor a broker there got. Clock-tick resolution
    /// (10 ms per CPU), so a short burst's figure is coarse.
    #[serde(default)]
    pub host_steal_percent: f64,
    /// Share of the window in which some task of the host waited for a CPU (PSI "some" of
    /// `/proc/pressure/cpu`), percent: the host was contended, whoever was busy. `None`
    /// where the kernel keeps no PSI.
    #[serde(default)]
    pub host_cpu_pressure_percent: Option<f64>,
    /// The same for loadgen's own cgroup (v2 `cpu.pressure`), when it runs in one below the
    /// root.
    #[serde(default)]
    pub cgroup_cpu_pressure_percent: Option<f64>,
    /// The broker's process over the same window, when it ran on the instance's host.
    #[serde(default)]
    pub broker_on_host: Option<BrokerOnHost>,
}

/// What the broker's process spent over an instance's window, read from `/proc` on the host
/// both ran on (see [`crate::broker_on_host`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerOnHost {
    /// Its process id.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// Its threads when the run started.
    pub threads: u32,
    /// CPU time of all its threads over the window, ms.
    pub cpu_ms: f64,
    /// That CPU time over the window's length: CPUs it kept busy on average.
    pub cpus_used: f64,
    /// Time its threads were ready but waited for a CPU, as a share of their runnable time,
    /// percent.
    pub cpu_wait_percent: f64,
}

/// The measured window of a timed run on the run clock, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasuredWindow {
    /// The start barrier (publishing starts).
    pub start_ns: u64,
    /// The warm-up ends and the measured window begins.
    pub from_ns: u64,
    /// Publishing ends.
    pub until_ns: u64,
}

/// Everything one run recorded, in mergeable form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The whole workload (shard excluded).
    pub spec: WorkloadSpec,
    /// The run id in topics and client ids.
    pub run_id: String,
    /// Parts of the workload that contributed.
    pub shards: Vec<Shard>,
    /// The header the payloads carried.
    pub header: HeaderEncoding,
    /// End-to-end latency of measured messages (open loop: from the intended send time), ns.
    #[serde(with = "crate::histogram_v2")]
    pub latency: Histogram<u64>,
    /// Transit latency of the same messages: from the moment loadgen handed each to the
    /// socket to its arrival, ns. Without a schedule (burst, closed loop) it equals `latency`;
    /// in an open loop it leaves out the publisher's own lateness (`send_delay`). Absent from
    /// results written before it existed (then empty).
    #[serde(default = "new_histogram", with = "crate::histogram_v2")]
    pub transit_latency: Histogram<u64>,
    /// Open loop: actual minus intended send time of measured messages, ns.
    #[serde(with = "crate::histogram_v2")]
    pub send_delay: Histogram<u64>,
    /// How long after the newest bytes of its read reached the subscriber host's kernel
    /// loadgen read each measured delivery, ns: loadgen's own late read (exact for the last
    /// delivery of a read, a lower bound for the others; time loadgen chose to wait, for
    /// receive coalescing or a slow consumer, left out). Empty where the kernel gave no
    /// receive stamp, and in results written before it existed.
    #[serde(default = "new_histogram", with = "crate::histogram_v2")]
    pub read_delay: Histogram<u64>,
    /// `latency` per interval of the run clock, by when deliveries were received (the
    /// interval log's content). Empty in results written before it existed.
    #[serde(default)]
    pub latency_intervals: crate::intervals::IntervalHistograms,
    /// TCP + TLS + CONNECT/CONNACK (+ SUBACK for subscribers), ns, per connection.
    #[serde(with = "crate::histogram_v2")]
    pub connect_time: Histogram<u64>,
    /// Per global publisher: PUBLISH packets written to the broker, warm-up included.
    pub published: Vec<u64>,
    /// Per global publisher: QoS 1/2 handshakes the broker completed.
    pub acknowledged: Vec<u64>,
    /// Open loop, timed: messages due before the end of publishing that left after it (the
    /// publishers, or the broker's backpressure, fell behind the schedule).
    #[serde(default)]
    pub sent_late_after_end: u64,
    /// MQTT bytes the publishers wrote to the broker after CONNECT (their PUBLISHes, resends
    /// included, with PUBRELs and DISCONNECT), before any TLS or WebSocket framing, summed
    /// over publishers; 0 in results that predate it.
    #[serde(default)]
    pub bytes_written: u64,
    /// Per global publisher: distinct (publisher, seq) received, summed over subscribers.
    pub delivered_unique: Vec<u64>,
    /// PUBLISH packets received by subscribers, copies included.
    pub received: u64,
    /// Copies of messages a subscriber had already received.
    pub duplicates: u64,
    /// Deliveries owed that never arrived because their message expiry ran out while the
    /// broker held them for an absent subscriber ([`crate::spec::expirable_until`]):
    /// the broker's duty, not a loss. 0 in results that predate it.
    #[serde(default)]
    pub expired: u64,
    /// Most QoS 1/2 deliveries one subscriber received in one read before acknowledging any
    /// of them: a lower bound of the broker's largest window of unacknowledged deliveries to
    /// a subscriber (MQTT 5 bounds it by the subscriber's receive maximum). 0 in results that
    /// predate it.
    #[serde(default)]
    pub most_unacknowledged: u64,
    /// First deliveries that arrived after a later message of the same publisher.
    pub out_of_order: u64,
    /// Measured messages published per 10 ms bucket.
    pub publish_series: RateSeries,
    /// Measured messages received per 10 ms bucket.
    pub receive_series: RateSeries,
    /// Measured publishing window of each publisher.
    pub publisher_windows: Vec<ClientWindow>,
    /// Measured receiving window of each subscriber.
    pub subscriber_windows: Vec<ClientWindow>,
    /// Failures by kind (connection lost, broker disconnect, negative latency, ...).
    pub errors: BTreeMap<String, u64>,
    /// Loadgen's own CPU and memory.
    pub resources: ResourceUsage,
    /// Wall time from the start barrier to the end of the drain, ns.
    pub load_wall_ns: u64,
    /// The run was cancelled before it finished.
    pub interrupted: bool,
    /// Timed runs: the window the figures are taken over.
    #[serde(default)]
    pub measured_window: Option<MeasuredWindow>,
    /// The run clock's origin as Unix time on the (first) instance's host, ns: maps times of
    /// the run onto wall-clock samples such as a broker's counters or CPU.
    #[serde(default)]
    pub clock_origin_unix_ns: u64,
    /// What each instance spent (one entry per instance that contributed).
    #[serde(default)]
    pub instances: Vec<InstanceLoad>,
    /// The churn fleet's outcome, when the workload has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn: Option<ChurnOutcome>,
    /// What the clients went through when connections were lost, when the workload
    /// reconnects ([`crate::spec::Reconnect`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect: Option<ReconnectOutcome>,
    /// Shared subscriptions, judged once per group: which messages some member received,
    /// and the members' shares. Their members' first deliveries count in `delivered_unique`
    /// once per group; copies a second member got count in `duplicates`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupDeliveries>,
    /// What the late subscribers found of the retained messages, when the workload retains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained: Option<crate::retained::RetainedOutcome>,
    /// What the will clients did and their watcher got, when the workload has wills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wills: Option<crate::wills::WillOutcome>,
}

/// What a run's churn fleet did ([`crate::spec::Churn`]); times on the run clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChurnOutcome {
    /// Arrivals that tried to connect.
    pub attempted: u64,
    /// Arrivals whose CONNECT was accepted.
    pub connected: u64,
    /// Connected clients whose DISCONNECT was written after the hold.
    pub disconnected: u64,
    /// Arrivals the run's end (cancel) cut short.
    pub cancelled: u64,
    /// What went wrong, by kind: a refusal by its reason code (`connack_refused_server_busy`),
    /// `connect_timeout`,
    /// `connect_io`, `connect_protocol`, `disconnect_failed`.
    pub failures: BTreeMap<String, u64>,
    /// TCP (+ TLS, + WebSocket upgrade) + CONNECT/CONNACK of each accepted arrival.
    #[serde(with = "crate::histogram_v2")]
    pub connect_time: Histogram<u64>,
    /// Most churn clients connected at once.
    pub most_open: u64,
    /// Latest an arrival left behind its schedule, ns (loadgen's own lag).
    pub most_late_ns: u64,
    /// When the first arrival left.
    pub first_arrival_ns: u64,
    /// When the last arrival left.
    pub last_arrival_ns: u64,
}

impl ChurnOutcome {
    /// Nothing counted yet.
    pub fn empty() -> Self {
        ChurnOutcome {
            attempted: 0,
            connected: 0,
            disconnected: 0,
            cancelled: 0,
            failures: BTreeMap::new(),
            connect_time: new_histogram(),
            most_open: 0,
            most_late_ns: 0,
            first_arrival_ns: 0,
            last_arrival_ns: 0,
        }
    }

    /// Arrivals per second achieved, from the first to the last (`None` for fewer than two).
    pub fn arrival_rate(&self) -> Option<f64> {
        let span = self.last_arrival_ns.saturating_sub(self.first_arrival_ns);
        (self.attempted >= 2 && span > 0).then(|| (self.attempted - 1) as f64 * 1e9 / span as f64)
    }
}

impl RunResult {
    /// An empty result for `spec` (whole workload).
    pub fn empty(spec: &WorkloadSpec, run_id: &str) -> Self {
        let publishers = spec.publishers as usize;
        let mut whole = spec.clone();
        whole.shard = None;
        RunResult {
            spec: whole,
            run_id: run_id.to_string(),
            shards: Vec::new(),
            header: spec.header_encoding(),
            latency: new_histogram(),
            transit_latency: new_histogram(),
            send_delay: new_histogram(),
            read_delay: new_histogram(),
            latency_intervals: Default::default(),
            connect_time: new_histogram(),
            published: vec![0; publishers],
            acknowledged: vec![0; publishers],
            sent_late_after_end: 0,
            bytes_written: 0,
            delivered_unique: vec![0; publishers],
            received: 0,
            duplicates: 0,
            expired: 0,
            most_unacknowledged: 0,
            out_of_order: 0,
            publish_series: RateSeries::default(),
            receive_series: RateSeries::default(),
            publisher_windows: Vec::new(),
            subscriber_windows: Vec::new(),
            errors: BTreeMap::new(),
            resources: ResourceUsage::default(),
            load_wall_ns: 0,
            interrupted: false,
            measured_window: None,
            clock_origin_unix_ns: 0,
            instances: Vec::new(),
            churn: None,
            retained: None,
            wills: None,
            reconnect: None,
            groups: Vec::new(),
        }
    }

    /// Counts one failure of `kind`.
    pub fn count_error(&mut self, kind: &str, count: u64) {
        if count > 0 {
            *self.errors.entry(kind.to_string()).or_default() += count;
        }
    }

    /// True when the shards that contributed cover every publisher and subscriber, so loss
    /// can be judged.
    pub fn covers_whole_workload(&self) -> bool {
        let mut publishers = vec![false; self.spec.publishers as usize];
        let mut subscribers = vec![false; self.spec.subscribers as usize];
        for shard in &self.shards {
            for p in shard.publishers.clone() {
                publishers[p as usize] = true;
            }
            for s in shard.subscribers.clone() {
                subscribers[s as usize] = true;
            }
        }
        publishers
            .iter()
            .chain(&subscribers)
            .all(|covered| *covered)
    }

    /// Deliveries owed (each publish times its subscribers), warm-up included.
    pub fn expected_deliveries(&self) -> u64 {
        // A result's spec was checked when it was read, so its routing is known.
        let Ok(routing) = crate::spec::Routing::of(&self.spec) else {
            return 0;
        };
        (0u32..)
            .zip(&self.published)
            .map(|(publisher, count)| count * u64::from(routing.fanout_of(publisher)))
            .sum()
    }

    /// Deliveries owed and never received, those that expired apart; `None` when the result
    /// does not cover the whole workload (a shard alone cannot tell).
    pub fn lost_deliveries(&self) -> Option<u64> {
        let delivered: u64 = self.delivered_unique.iter().sum();
        self.covers_whole_workload().then(|| {
            self.expected_deliveries()
                .saturating_sub(delivered)
                .saturating_sub(self.expired)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::ByteSize;
    use crate::spec::{
        BrokerTarget, ConnectionOptions, DrainOptions, EngineOptions, MqttVersion, Pacing, Qos,
        Topology, Transport,
    };
    use crate::summary::Summary;

    fn spec() -> WorkloadSpec {
        WorkloadSpec {
            broker: BrokerTarget {
                host: "127.0.0.1".into(),
                port: 1883,
                protocol: MqttVersion::V311,
                tls_ca_file: None,
                tls_ca_pem: None,
                username: None,
                password: None,
                transport: Transport::Tcp,
                websocket_path: None,
                quic_zero_rtt: false,
                quic_streams: Default::default(),
            },
            publishers: 4,
            subscribers: 4,
            topology: Topology::Pairs,
            topics: None,
            topic_prefix: "t".into(),
            qos: Qos::AtLeastOnce,
            payload: ByteSize(16),
            header_in: Default::default(),
            messages_per_publisher: 50,
            warmup_messages: 0,
            duration: None,
            warmup: None,
            pacing: Pacing::Burst,
            connection: ConnectionOptions::default(),
            engine: EngineOptions::default(),
            drain: DrainOptions::default(),
            subscriber_rate_limit: None,
            shard: None,
            run_id: Some("merge".into()),
            churn: None,
            retain: None,
            wills: None,
            subscriber_qos: None,
        }
    }

    /// Records what one client pair (publisher p -> subscriber p) did into `result`: every
    /// message published, every third one lost, one duplicate.
    fn record_pair(result: &mut RunResult, p: u32) {
        let mut sent = 0;
        let mut delivered = 0;
        let mut first_receive = None;
        let mut last_receive = 0;
        for seq in 0..50u64 {
            let sent_ns = 1_000_000 * seq + u64::from(p) * 1_000;
            result.publish_series.add(sent_ns, 1);
            sent += 1;
            if seq % 3 == 0 {
                continue;
            }
            let received_ns = sent_ns + 50_000 + seq * 100 + u64::from(p);
            result
                .latency
                .record(received_ns - sent_ns)
                .expect("in range");
            result.receive_series.add(received_ns, 1);
            first_receive.get_or_insert(received_ns);
            last_receive = received_ns;
            delivered += 1;
        }
        result.published[p as usize] += sent;
        result.acknowledged[p as usize] += sent;
        result.delivered_unique[p as usize] += delivered;
        result.received += delivered + 1;
        result.duplicates += 1;
        result
            .connect_time
            .record(100_000 + u64::from(p))
            .expect("in range");
        result.publisher_windows.push(ClientWindow {
            client: p,
            first_ns: u64::from(p) * 1_000,
            last_ns: 49_000_000 + u64::from(p) * 1_000,
            count: sent,
        });
        result.subscriber_windows.push(ClientWindow {
            client: p,
            first_ns: first_receive.unwrap_or(0),
            last_ns: last_receive,
            count: delivered,
        });
        result.count_error("connection_closed", u64::from(p % 2));
    }

    #[test]
    fn two_shards_merged_equal_one_run() {
        let spec = spec();
        let mut whole = RunResult::empty(&spec, "merge");
        whole.shards.push(spec.effective_shard());
        let mut first = RunResult::empty(&spec, "merge");
        first.shards.push(Shard {
            publishers: 0..2,
            subscribers: 0..2,
        });
        let mut second = RunResult::empty(&spec, "merge");
        second.shards.push(Shard {
            publishers: 2..4,
            subscribers: 2..4,
        });
        for p in 0..4 {
            record_pair(&mut whole, p);
            record_pair(if p < 2 { &mut first } else { &mut second }, p);
        }
        assert!(
            !first.covers_whole_workload(),
            "a shard alone cannot judge loss"
        );
        assert_eq!(Summary::of(&first).lost, None);
        first.merge(&second).expect("same run");
        assert!(first.covers_whole_workload());
        assert_eq!(first.latency, whole.latency);
        assert_eq!(first.connect_time, whole.connect_time);
        assert_eq!(first.publish_series, whole.publish_series);
        assert_eq!(first.receive_series, whole.receive_series);
        assert_eq!(
            (first.published.clone(), first.delivered_unique.clone()),
            (whole.published.clone(), whole.delivered_unique.clone())
        );
        assert_eq!(first.errors, whole.errors);
        let (merged, single) = (Summary::of(&first), Summary::of(&whole));
        assert_eq!(merged, single);
        assert_eq!(single.lost, Some(4 * 17));
        assert_eq!(single.duplicates, 4);
        assert_eq!(
            single.qos_violations,
            vec!["QoS 1 lost 68 deliveries".to_string()]
        );
    }

    #[test]
    fn overlapping_shards_do_not_merge() {
        let mut a = RunResult::empty(&spec(), "merge");
        a.shards.push(Shard {
            publishers: 0..3,
            subscribers: 0..3,
        });
        let mut b = RunResult::empty(&spec(), "merge");
        b.shards.push(Shard {
            publishers: 2..4,
            subscribers: 3..4,
        });
        let error = a.merge(&b).expect_err("publisher 2 is in both");
        assert!(error.to_string().contains("counted twice"), "{error}");
    }

    #[test]
    fn results_of_other_runs_do_not_merge() {
        let mut a = RunResult::empty(&spec(), "a");
        let b = RunResult::empty(&spec(), "b");
        assert!(a.merge(&b).is_err());
    }

    #[test]
    fn raw_results_survive_json_with_their_histograms() {
        let spec = spec();
        let mut result = RunResult::empty(&spec, "merge");
        record_pair(&mut result, 1);
        let json = serde_json::to_string(&result).expect("serializes");
        let back: RunResult = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, result);
    }
}
