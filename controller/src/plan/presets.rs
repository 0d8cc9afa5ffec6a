//! The study's scenarios (Table II) and tests (Table III), as defaults that plans override.

use std::time::Duration;

use loadgen::WorkloadSpec;
use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, Qos};

use super::types::{TestEntry, TestKind};

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
        TestKind::Throughput => (
            loadgen::cli::throughput_preset(),
            Vec::new(),
            vec![100, 200, 300, 400, 500, 600, 700, 800],
        ),
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
    if let Some(warmup) = test.warmup {
        spec.warmup_messages = warmup;
    }
    if let Some(interval) = test.interval {
        spec.pacing = Pacing::OpenLoop { interval };
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
