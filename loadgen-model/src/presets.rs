//! The study's tests (its Table III): each test's workload and the points it sweeps.
//!
//! The `loadgen` command starts from these workloads (`loadgen latency`, `loadgen throughput`)
//! and the controller's plan maps its test kinds onto [`StudyTest`], so a test means the same
//! thing whichever of the two runs it. Flags and plan entries override any field.

use std::time::Duration;

use crate::saturation::SearchSettings;
use crate::size::ByteSize;
use crate::spec::{
    BrokerTarget, ConnectionOptions, DrainOptions, EngineOptions, MqttVersion, Pacing, Qos,
    Topology, Transport, WorkloadSpec,
};

/// Payload sizes the latency-vs-payload test sweeps: 1 kB, 10 kB and 1 MB.
pub const PAYLOAD_SIZES: [ByteSize; 3] = [ByteSize(1_000), ByteSize(10_000), ByteSize(1_000_000)];
/// Client pairs the study's burst throughput test sweeps.
pub const BURST_CLIENTS: [u32; 8] = [100, 200, 300, 400, 500, 600, 700, 800];
/// Client pairs the sustained throughput test sweeps.
pub const SUSTAINED_CLIENTS: [u32; 4] = [100, 200, 400, 800];
/// Client pairs whose saturation point is searched for.
pub const SATURATION_CLIENTS: [u32; 1] = [100];
/// Measured time of a sustained throughput run.
pub const SUSTAINED_DURATION: Duration = Duration::from_secs(10);
/// Warm-up of a sustained throughput run.
pub const SUSTAINED_WARMUP: Duration = Duration::from_secs(2);

/// The study's latency test (Table III): 100 publishers -> 1 subscriber, QoS 1, 10 B, every
/// 250 ms. The study sent 1 message per publisher; 20 (2 warm-up) give percentiles worth
/// reading, and `--messages 1 --warmup 0` reproduces the study exactly.
pub fn latency() -> WorkloadSpec {
    WorkloadSpec {
        broker: BrokerTarget {
            host: "127.0.0.1".to_string(),
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
        publishers: 100,
        subscribers: 1,
        topology: Topology::Shared,
        topics: None,
        topic_prefix: "continuum".to_string(),
        qos: Qos::AtLeastOnce,
        payload: ByteSize(10),
        header_in: Default::default(),
        messages_per_publisher: 20,
        warmup_messages: 2,
        duration: None,
        warmup: None,
        pacing: Pacing::OpenLoop {
            interval: Duration::from_millis(250),
        },
        connection: ConnectionOptions::default(),
        engine: EngineOptions::default(),
        drain: DrainOptions::default(),
        subscriber_rate_limit: None,
        shard: None,
        run_id: None,
        churn: None,
        retain: None,
        wills: None,
        subscriber_qos: None,
    }
}

/// The study's throughput test: N pairs, QoS 0, 10 B, burst.
pub fn throughput() -> WorkloadSpec {
    WorkloadSpec {
        publishers: 100,
        subscribers: 100,
        topology: Topology::Pairs,
        qos: Qos::AtMostOnce,
        messages_per_publisher: 1000,
        warmup_messages: 0,
        pacing: Pacing::Burst,
        ..latency()
    }
}

/// The throughput test made sustained: the same pairs as a closed loop for
/// [`SUSTAINED_DURATION`] after [`SUSTAINED_WARMUP`], so the rate is one the broker keeps up.
pub fn sustained() -> WorkloadSpec {
    timed(throughput(), SUSTAINED_DURATION, SUSTAINED_WARMUP)
}

/// The workload of the saturation search's probes; their timing comes from the search
/// settings (the defaults here), their pacing from the probe.
pub fn saturation() -> WorkloadSpec {
    let search = SearchSettings::default();
    timed(throughput(), search.probe, search.probe_warmup)
}

/// `spec` as a closed loop for `duration` after `warmup`, its message counts given up.
fn timed(mut spec: WorkloadSpec, duration: Duration, warmup: Duration) -> WorkloadSpec {
    spec.messages_per_publisher = 0;
    spec.duration = Some(duration);
    spec.warmup = Some(warmup);
    spec.pacing = Pacing::ClosedLoop;
    spec
}

/// One of the study's tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StudyTest {
    /// Latency offset: 100 publishers -> 1 subscriber, 10 B, QoS 1, every 250 ms.
    Latency,
    /// Latency vs payload: as latency, for each of [`PAYLOAD_SIZES`].
    Payload,
    /// The study's throughput test, a burst, for each of [`BURST_CLIENTS`] pairs.
    Burst,
    /// Sustained throughput, for each of [`SUSTAINED_CLIENTS`] pairs.
    Throughput,
    /// The saturation point, searched for each of [`SATURATION_CLIENTS`] pairs.
    Saturation,
}

/// A study test's workload and the points it sweeps (at most one of the two sweeps is used).
#[derive(Debug, Clone, PartialEq)]
pub struct TestPreset {
    /// The workload before any override.
    pub workload: WorkloadSpec,
    /// Payload sizes swept (empty: the workload's own size).
    pub payload_sizes: Vec<ByteSize>,
    /// Client pairs swept (empty: the workload's own clients).
    pub client_pairs: Vec<u32>,
}

impl StudyTest {
    /// The test's workload and sweep.
    pub fn preset(self) -> TestPreset {
        let (workload, payload_sizes, client_pairs) = match self {
            StudyTest::Latency => (latency(), Vec::new(), Vec::new()),
            StudyTest::Payload => (latency(), PAYLOAD_SIZES.to_vec(), Vec::new()),
            StudyTest::Burst => (throughput(), Vec::new(), BURST_CLIENTS.to_vec()),
            StudyTest::Throughput => (sustained(), Vec::new(), SUSTAINED_CLIENTS.to_vec()),
            StudyTest::Saturation => (saturation(), Vec::new(), SATURATION_CLIENTS.to_vec()),
        };
        TestPreset {
            workload,
            payload_sizes,
            client_pairs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_the_study_tests_and_valid() {
        let latency = latency();
        assert_eq!(
            (latency.publishers, latency.subscribers, latency.qos.level()),
            (100, 1, 1)
        );
        assert_eq!(latency.payload, ByteSize(10));
        latency.validate().expect("latency preset");
        let throughput = throughput();
        assert_eq!(
            (
                throughput.topology,
                throughput.qos.level(),
                throughput.pacing.clone()
            ),
            (Topology::Pairs, 0, Pacing::Burst)
        );
        throughput.validate().expect("throughput preset");
    }

    #[test]
    fn every_study_test_starts_from_a_valid_workload() {
        for test in [
            StudyTest::Latency,
            StudyTest::Payload,
            StudyTest::Burst,
            StudyTest::Throughput,
            StudyTest::Saturation,
        ] {
            let preset = test.preset();
            preset.workload.validate().expect("valid preset");
            assert!(
                preset.payload_sizes.is_empty() || preset.client_pairs.is_empty(),
                "{test:?} sweeps one thing"
            );
        }
    }
}
