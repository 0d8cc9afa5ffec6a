//! The study's scenarios (Table II) and tests (Table III), as defaults that plans override.

use std::time::Duration;

use loadgen::WorkloadSpec;
use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, Qos};

use super::types::{TestEntry, TestKind, WarmupEntry};

/// Measured time of a sustained throughput cell unless the plan says otherwise.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Warm-up of a sustained throughput cell unless the plan says otherwise.
pub const DEFAULT_WARMUP: Duration = Duration::from_secs(2);

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

/// The workload of a test kind before the plan's overrides, and the points it sweeps.
pub fn test_preset(kind: TestKind) -> (WorkloadSpec, Vec<ByteSize>, Vec<u32>) {
    match kind {
        TestKind::Latency => (loadgen::cli::latency_preset(), Vec::new(), Vec::new()),
        TestKind::Payload => (
            loadgen::cli::latency_preset(),
            vec![ByteSize(1_000), ByteSize(10_000), ByteSize(1_000_000)],
            Vec::new(),
        ),
        TestKind::Burst => (
            loadgen::cli::throughput_preset(),
            Vec::new(),
            vec![100, 200, 300, 400, 500, 600, 700, 800],
        ),
        TestKind::Throughput => {
            let mut spec = loadgen::cli::throughput_preset();
            spec.messages_per_publisher = 0;
            spec.duration = Some(DEFAULT_DURATION);
            spec.warmup = Some(DEFAULT_WARMUP);
            spec.pacing = Pacing::ClosedLoop;
            (spec, Vec::new(), vec![100, 200, 400, 800])
        }
        TestKind::Saturation => {
            // The probes' timing comes from the search settings; this is their workload.
            let mut spec = loadgen::cli::throughput_preset();
            let search = loadgen::saturation::SearchSettings::default();
            spec.messages_per_publisher = 0;
            spec.duration = Some(search.probe);
            spec.warmup = Some(search.probe_warmup);
            spec.pacing = Pacing::ClosedLoop;
            (spec, Vec::new(), vec![100])
        }
    }
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
