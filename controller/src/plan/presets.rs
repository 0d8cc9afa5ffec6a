//! The study's scenarios (Table II), its tests (Table III) as loadgen defines them
//! ([`loadgen::presets`]), and the plan's overrides of a test's workload.

use std::time::Duration;

use loadgen::WorkloadSpec;
use loadgen::presets::StudyTest;
use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, Qos};

use super::types::{TestEntry, TestKind, WarmupEntry};

/// Measured time of a sustained throughput cell unless the plan says otherwise.
pub const DEFAULT_DURATION: Duration = loadgen::presets::SUSTAINED_DURATION;
/// Warm-up of a sustained throughput cell unless the plan says otherwise.
pub const DEFAULT_WARMUP: Duration = loadgen::presets::SUSTAINED_WARMUP;

/// Totals between two nodes of a preset scenario: (delay, jitter, loss %).
pub fn scenario_preset(name: &str) -> Option<(Duration, Duration, f64)> {
    let us = Duration::from_micros;
    match name {
        "local" => Some((Duration::ZERO, Duration::ZERO, 0.0)),
        "edge" => Some((us(2_500), us(500), 0.04)),
        "cloud" => Some((us(6_250), us(1_250), 0.1)),
        _ => None,
    }
}

/// The workload of a test kind before the plan's overrides, and the points it sweeps
/// (payload sizes, client pairs): the study's test of that kind, as loadgen defines it.
pub fn test_preset(kind: TestKind) -> (WorkloadSpec, Vec<ByteSize>, Vec<u32>) {
    let test = match kind {
        TestKind::Latency => StudyTest::Latency,
        TestKind::Payload => StudyTest::Payload,
        TestKind::Burst => StudyTest::Burst,
        TestKind::Throughput => StudyTest::Throughput,
        TestKind::Saturation => StudyTest::Saturation,
    };
    let preset = test.preset();
    (preset.workload, preset.payload_sizes, preset.client_pairs)
}

/// The workload of one test at one point (payload size or client pairs), with the plan's
/// overrides applied; the broker address is filled in when the cell runs.
pub fn workload_for(
    test: &TestEntry,
    payload: Option<ByteSize>,
    clients: Option<u32>,
) -> Result<WorkloadSpec, String> {
    let (mut spec, _, _) = test_preset(test.kind);
    if let Some(publishers) = test.publishers {
        spec.publishers = publishers;
    }
    if let Some(subscribers) = test.subscribers {
        spec.subscribers = subscribers;
    }
    if let Some(messages) = test.messages {
        spec.messages_per_publisher = messages;
    }
    match test.warmup {
        Some(WarmupEntry::Messages(count)) => spec.warmup_messages = count,
        Some(WarmupEntry::Time(time)) => spec.warmup = Some(time),
        None => {}
    }
    if let Some(duration) = test.duration {
        spec.duration = Some(duration);
    }
    if let Some(rate) = test.rate {
        spec.pacing = Pacing::Rate { rate };
    }
    if let Some(interval) = test.interval {
        spec.pacing = Pacing::OpenLoop { interval };
    }
    if let Some(search) = &test.search {
        spec.duration = Some(search.probe);
        spec.warmup = Some(search.probe_warmup);
    }
    if let Some(level) = test.qos {
        spec.qos = Qos::try_from(level)?;
    }
    if let Some(size) = test.payload {
        spec.payload = size;
    }
    if let Some(size) = payload {
        spec.payload = size;
    }
    if let Some(pairs) = clients {
        spec.publishers = pairs;
        spec.subscribers = pairs;
    }
    Ok(spec)
}
