//! One probe: what it runs, its workload, and how its figures are judged.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SearchSettings;
use crate::spec::{Pacing, WorkloadSpec};
use crate::summary::Summary;

/// What a search asks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Probe {
    /// A closed loop, to estimate what the broker gets through.
    Estimate,
    /// An offered rate, msg/s of all publishers together.
    Offered {
        /// The rate.
        rate: u64,
    },
}

/// How a probe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeVerdict {
    /// The broker sustained the offered rate within the latency bound.
    Sustained,
    /// It did not (see the reasons).
    NotSustained,
    /// loadgen itself was the limit: the probe says nothing about the broker.
    GeneratorLimited,
    /// The probe could not run (connection refused, cell error).
    Failed,
    /// The capacity estimate (closed loop).
    Estimate,
}

/// One probe's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// What was run.
    pub probe: Probe,
    /// How it ended.
    pub verdict: ProbeVerdict,
    /// Publishes per second over the measured window.
    pub publish_msgs_per_s: f64,
    /// Deliveries per second over the measured window.
    pub receive_msgs_per_s: f64,
    /// Median latency, µs (open loop: from the intended send time).
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Why it was not sustained, or what limited loadgen.
    pub reasons: Vec<String>,
    /// loadgen was at its own limit (a sustained probe then ends the search).
    pub generator_limited: bool,
    /// Wall time the probe took, s.
    pub elapsed_s: f64,
}

impl ProbeOutcome {
    /// Judges a probe's summary against the settings.
    pub fn of(
        probe: Probe,
        summary: &Summary,
        settings: &SearchSettings,
        elapsed: Duration,
    ) -> Self {
        let mut reasons = Vec::new();
        let steady = summary.steadiness.as_ref().is_some_and(|s| s.steady);
        if let Some(steadiness) = &summary.steadiness {
            reasons.extend(steadiness.reasons.iter().cloned());
        } else {
            reasons.push("the probe has no measured window".to_string());
        }
        let bound_us = settings.p99_bound.as_secs_f64() * 1e6;
        let within_bound = summary.latency.count > 0 && summary.latency.p99_us <= bound_us;
        if summary.latency.count == 0 {
            reasons.push("no latency was measured".to_string());
        } else if !within_bound {
            reasons.push(format!(
                "p99 latency {:.1} ms exceeds the bound of {:.1} ms",
                summary.latency.p99_us / 1e3,
                bound_us / 1e3
            ));
        }
        let sustained = steady && within_bound;
        let verdict = match probe {
            Probe::Estimate => ProbeVerdict::Estimate,
            _ if summary.generator.limited && !sustained => {
                reasons.extend(summary.generator.reasons.iter().cloned());
                ProbeVerdict::GeneratorLimited
            }
            _ if sustained => ProbeVerdict::Sustained,
            _ => ProbeVerdict::NotSustained,
        };
        if verdict == ProbeVerdict::Sustained && summary.generator.limited {
            reasons.extend(summary.generator.reasons.iter().cloned());
        }
        ProbeOutcome {
            probe,
            verdict,
            publish_msgs_per_s: summary
                .steadiness
                .as_ref()
                .map_or(summary.publish_rate.msgs_per_s, |s| s.publish_msgs_per_s),
            receive_msgs_per_s: summary
                .steadiness
                .as_ref()
                .map_or(summary.receive_rate.msgs_per_s, |s| s.receive_msgs_per_s),
            p50_us: summary.latency.p50_us,
            p99_us: summary.latency.p99_us,
            reasons,
            generator_limited: summary.generator.limited,
            elapsed_s: elapsed.as_secs_f64(),
        }
    }

    /// A probe that could not run.
    pub fn failed(probe: Probe, reason: String, elapsed: Duration) -> Self {
        ProbeOutcome {
            probe,
            verdict: ProbeVerdict::Failed,
            publish_msgs_per_s: 0.0,
            receive_msgs_per_s: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            reasons: vec![reason],
            generator_limited: false,
            elapsed_s: elapsed.as_secs_f64(),
        }
    }
}

/// The workload of one probe: `base`'s clients and messages, timed, at the probe's pacing.
pub fn probe_spec(base: &WorkloadSpec, probe: Probe, settings: &SearchSettings) -> WorkloadSpec {
    let mut spec = base.clone();
    spec.messages_per_publisher = 0;
    spec.warmup_messages = 0;
    spec.duration = Some(settings.probe);
    spec.warmup = Some(settings.probe_warmup);
    spec.pacing = match probe {
        Probe::Estimate => Pacing::ClosedLoop,
        Probe::Offered { rate } => Pacing::Rate { rate },
    };
    spec
}
