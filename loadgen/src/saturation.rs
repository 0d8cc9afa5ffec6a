//! The saturation point: the highest offered rate a broker sustains, found by a bounded search
//! of short timed runs (probes).
//!
//! A probe at an offered rate counts as sustained when its steadiness verdict holds (both
//! halves within 5 %, backlog bounded, at least 99 % of the offered deliveries received) and
//! its p99 latency stays under a bound. The search first measures what a closed loop gets
//! through (an estimate of capacity), starts at half of it and grows by a quarter per probe
//! until a probe fails, then bisects between the highest sustained and the lowest failed rate
//! until they lie within the precision, all within a time budget. A probe in which loadgen
//! itself was the limit ends the search: above it, nothing can be said about the broker.
//!
//! [`Search`] only decides what to run next; the `loadgen saturate` command runs probes
//! locally and the controller runs them on its agents.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spec::{Pacing, WorkloadSpec};
use crate::summary::Summary;

/// How a search runs, with defaults that keep one search within a minute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchSettings {
    /// Measured window of each probe.
    #[serde(with = "humantime_serde")]
    pub probe: Duration,
    /// Warm-up of each probe.
    #[serde(with = "humantime_serde")]
    pub probe_warmup: Duration,
    /// A probe whose p99 latency exceeds this is not sustained.
    #[serde(with = "humantime_serde")]
    pub p99_bound: Duration,
    /// Wall time the whole search may take; no probe starts that would not end within it.
    #[serde(with = "humantime_serde")]
    pub budget: Duration,
    /// The first offered rate (msg/s of all publishers together); measured with a closed-loop
    /// probe when absent.
    pub start_rate: Option<u64>,
    /// The search ends when the highest sustained and the lowest failed rate are this close
    /// (a share, 0.05 = 5 %).
    pub precision: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        SearchSettings {
            probe: Duration::from_secs(3),
            probe_warmup: Duration::from_secs(1),
            p99_bound: Duration::from_millis(100),
            budget: Duration::from_secs(60),
            start_rate: None,
            precision: 0.05,
        }
    }
}

/// Each growing step multiplies the rate by this.
const GROWTH: f64 = 1.25;
/// The first offered rate as a share of what the closed loop got through.
const START_SHARE: f64 = 0.5;

impl SearchSettings {
    /// Checks the settings; errors name the field (prefixed with `at`).
    pub fn validate(&self, at: &str) -> Result<(), crate::spec::SpecError> {
        let invalid = |name: &str, value: String, problem: &str| crate::spec::SpecError {
            path: format!("{at}{name}"),
            value,
            problem: problem.to_string(),
        };
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        if self.probe.is_zero() {
            return Err(invalid(
                "probe",
                "0s".into(),
                "a probe must last above zero",
            ));
        }
        if self.p99_bound.is_zero() {
            return Err(invalid(
                "p99_bound",
                "0s".into(),
                "a latency bound of zero admits nothing",
            ));
        }
        if self.budget.is_zero() {
            return Err(invalid(
                "budget",
                "0s".into(),
                "a search needs a time budget above zero",
            ));
        }
        let one_probe = self.probe.saturating_add(self.probe_warmup);
        if self.budget < one_probe.saturating_mul(2) {
            return Err(invalid(
                "budget",
                shown(self.budget),
                &format!(
                    "too short for two probes of {} each (warm-up included)",
                    shown(one_probe)
                ),
            ));
        }
        if self.budget > Duration::from_secs(24 * 3600) {
            return Err(invalid("budget", shown(self.budget), "at most 24h"));
        }
        if self.start_rate == Some(0) {
            return Err(invalid(
                "start_rate",
                "0".into(),
                "must be above zero when set",
            ));
        }
        if !(self.precision > 0.0 && self.precision < 1.0) {
            return Err(invalid(
                "precision",
                self.precision.to_string(),
                "must lie between 0 and 1 (0.05 = 5 %)",
            ));
        }
        Ok(())
    }
}

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

/// Why a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchEnd {
    /// The highest sustained and the lowest failed rate lie within the precision.
    Converged,
    /// The time budget ran out before that.
    BudgetSpent,
    /// loadgen reached its own limit: the broker sustained at least `rate`.
    GeneratorLimited,
    /// Even the lowest rate tried was not sustained, or probes failed.
    NothingSustained,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaturationReport {
    /// The highest offered rate sustained, msg/s (publishes of all publishers together).
    pub rate: Option<u64>,
    /// Deliveries per second at that rate.
    pub delivered_msgs_per_s: Option<f64>,
    /// The lowest offered rate not sustained.
    pub failed_rate: Option<u64>,
    /// Why the search ended.
    pub end: SearchEnd,
    /// Every probe, in the order run.
    pub probes: Vec<ProbeOutcome>,
    /// Wall time of the search, s.
    pub elapsed_s: f64,
}

/// The search: what to probe next, given what the probes so far showed.
#[derive(Debug, Clone)]
pub struct Search {
    settings: SearchSettings,
    probes: Vec<ProbeOutcome>,
    sustained: Option<u64>,
    failed: Option<u64>,
    end: Option<SearchEnd>,
    spent: Duration,
}

impl Search {
    /// A search with `settings` (validated by the caller).
    pub fn new(settings: SearchSettings) -> Self {
        Search {
            settings,
            probes: Vec::new(),
            sustained: None,
            failed: None,
            end: None,
            spent: Duration::ZERO,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &SearchSettings {
        &self.settings
    }

    /// The next probe, or `None` when the search is over.
    pub fn next_probe(&mut self) -> Option<Probe> {
        if self.end.is_some() {
            return None;
        }
        // A probe takes its warm-up and window plus connecting and draining: the last one's
        // wall time is the best guess of the next one's.
        let next_cost = self
            .probes
            .last()
            .map_or(self.settings.probe + self.settings.probe_warmup, |p| {
                Duration::from_secs_f64(p.elapsed_s)
            });
        if self.spent + next_cost > self.settings.budget {
            self.end = Some(SearchEnd::BudgetSpent);
            return None;
        }
        let rate = match (self.sustained, self.failed) {
            (None, None) => match (self.settings.start_rate, self.estimate()) {
                (Some(rate), _) => rate,
                (None, None) => return Some(Probe::Estimate),
                (None, Some(estimate)) => ((estimate * START_SHARE).round() as u64).max(1),
            },
            (Some(low), None) => ((low as f64 * GROWTH).ceil() as u64).max(low + 1),
            (None, Some(high)) => {
                if high <= 1 {
                    self.end = Some(SearchEnd::NothingSustained);
                    return None;
                }
                high / 2
            }
            (Some(low), Some(high)) => {
                if high as f64 <= low as f64 * (1.0 + self.settings.precision) || high <= low + 1 {
                    self.end = Some(SearchEnd::Converged);
                    return None;
                }
                ((low as f64 * high as f64).sqrt().round() as u64).clamp(low + 1, high - 1)
            }
        };
        Some(Probe::Offered { rate })
    }

    /// What the closed-loop estimate got through (publishes per second).
    fn estimate(&self) -> Option<f64> {
        self.probes
            .iter()
            .find(|p| p.verdict == ProbeVerdict::Estimate)
            .map(|p| p.publish_msgs_per_s)
            .filter(|rate| *rate > 0.0)
    }

    /// Accounts one probe.
    pub fn record(&mut self, outcome: ProbeOutcome) {
        self.spent += Duration::from_secs_f64(outcome.elapsed_s.max(0.0));
        match (outcome.probe, outcome.verdict) {
            (Probe::Estimate, _) if outcome.publish_msgs_per_s <= 0.0 => {
                self.end = Some(SearchEnd::NothingSustained);
            }
            (Probe::Offered { rate }, ProbeVerdict::Sustained) => {
                self.sustained = Some(self.sustained.map_or(rate, |r| r.max(rate)));
                if outcome.generator_limited {
                    // Sustained, but at loadgen's own limit: higher rates cannot be judged.
                    self.end = Some(SearchEnd::GeneratorLimited);
                }
            }
            (Probe::Offered { rate }, ProbeVerdict::NotSustained) => {
                self.failed = Some(self.failed.map_or(rate, |r| r.min(rate)));
            }
            (Probe::Offered { .. }, ProbeVerdict::GeneratorLimited) => {
                self.end = Some(SearchEnd::GeneratorLimited);
            }
            (Probe::Offered { .. }, ProbeVerdict::Failed) => {
                self.end = Some(SearchEnd::NothingSustained);
            }
            _ => {}
        }
        self.probes.push(outcome);
    }

    /// What the search found so far.
    pub fn report(&self) -> SaturationReport {
        let end = self.end.unwrap_or(SearchEnd::BudgetSpent);
        let end = if self.sustained.is_none() && end != SearchEnd::GeneratorLimited {
            SearchEnd::NothingSustained
        } else {
            end
        };
        SaturationReport {
            rate: self.sustained,
            delivered_msgs_per_s: self.sustained.and_then(|rate| {
                self.probes
                    .iter()
                    .find(|p| p.probe == Probe::Offered { rate })
                    .map(|p| p.receive_msgs_per_s)
            }),
            failed_rate: self.failed,
            end,
            probes: self.probes.clone(),
            elapsed_s: self.spent.as_secs_f64(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(probe: Probe, verdict: ProbeVerdict, publish: f64) -> ProbeOutcome {
        ProbeOutcome {
            probe,
            verdict,
            publish_msgs_per_s: publish,
            receive_msgs_per_s: publish,
            p50_us: 100.0,
            p99_us: 1000.0,
            reasons: Vec::new(),
            generator_limited: false,
            elapsed_s: 4.0,
        }
    }

    /// Runs a search against a broker that sustains everything up to `capacity`.
    fn search_against(capacity: u64, settings: SearchSettings) -> SaturationReport {
        let mut search = Search::new(settings);
        while let Some(probe) = search.next_probe() {
            let result = match probe {
                Probe::Estimate => outcome(probe, ProbeVerdict::Estimate, capacity as f64 * 1.1),
                Probe::Offered { rate } if rate <= capacity => {
                    outcome(probe, ProbeVerdict::Sustained, rate as f64)
                }
                Probe::Offered { .. } => {
                    outcome(probe, ProbeVerdict::NotSustained, capacity as f64)
                }
            };
            search.record(result);
        }
        search.report()
    }

    #[test]
    fn the_search_converges_on_the_capacity_within_its_precision_and_budget() {
        let report = search_against(100_000, SearchSettings::default());
        assert_eq!(report.end, SearchEnd::Converged, "{report:?}");
        let (low, high) = (
            report.rate.expect("found"),
            report.failed_rate.expect("bounded"),
        );
        assert!(low <= 100_000 && high > 100_000, "{low} .. {high}");
        assert!(high as f64 <= low as f64 * 1.05 + 1.0, "{low} .. {high}");
        assert!(report.elapsed_s <= 60.0, "{}", report.elapsed_s);
        assert_eq!(report.probes[0].probe, Probe::Estimate);
    }

    #[test]
    fn a_start_above_capacity_searches_downwards() {
        let settings = SearchSettings {
            start_rate: Some(1_000_000),
            budget: Duration::from_secs(600),
            ..SearchSettings::default()
        };
        let report = search_against(30_000, settings);
        assert_eq!(report.end, SearchEnd::Converged, "{report:?}");
        assert!(report.rate.expect("found") <= 30_000);
        assert!(report.failed_rate.expect("bounded") > 30_000);
    }

    #[test]
    fn the_budget_stops_the_search() {
        let settings = SearchSettings {
            budget: Duration::from_secs(10),
            ..SearchSettings::default()
        };
        let report = search_against(100_000, settings);
        assert!(report.probes.len() <= 2, "{report:?}");
        assert!(report.elapsed_s <= 10.0);
    }

    #[test]
    fn a_generator_limited_probe_ends_the_search_with_what_was_sustained() {
        let mut search = Search::new(SearchSettings {
            start_rate: Some(1_000),
            ..SearchSettings::default()
        });
        assert_eq!(search.next_probe(), Some(Probe::Offered { rate: 1_000 }));
        search.record(outcome(
            Probe::Offered { rate: 1_000 },
            ProbeVerdict::Sustained,
            1e3,
        ));
        assert_eq!(search.next_probe(), Some(Probe::Offered { rate: 1_250 }));
        search.record(outcome(
            Probe::Offered { rate: 1_250 },
            ProbeVerdict::GeneratorLimited,
            900.0,
        ));
        assert_eq!(search.next_probe(), None);
        let report = search.report();
        assert_eq!(
            (report.rate, report.end),
            (Some(1_000), SearchEnd::GeneratorLimited)
        );
    }

    #[test]
    fn bad_settings_name_their_field() {
        let cases = [
            (
                SearchSettings {
                    probe: Duration::ZERO,
                    ..Default::default()
                },
                "t.probe",
            ),
            (
                SearchSettings {
                    p99_bound: Duration::ZERO,
                    ..Default::default()
                },
                "t.p99_bound",
            ),
            (
                SearchSettings {
                    budget: Duration::ZERO,
                    ..Default::default()
                },
                "t.budget",
            ),
            (
                SearchSettings {
                    budget: Duration::from_secs(5),
                    ..Default::default()
                },
                "t.budget",
            ),
            (
                SearchSettings {
                    start_rate: Some(0),
                    ..Default::default()
                },
                "t.start_rate",
            ),
            (
                SearchSettings {
                    precision: 0.0,
                    ..Default::default()
                },
                "t.precision",
            ),
        ];
        for (settings, path) in cases {
            assert_eq!(settings.validate("t.").expect_err(path).path, path);
        }
        SearchSettings::default()
            .validate("t.")
            .expect("defaults are valid");
    }
}
