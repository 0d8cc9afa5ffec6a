//! The search itself: which probe to run next given the outcomes so far, and what it found.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Probe, ProbeOutcome, ProbeVerdict, SearchSettings};

/// Each growing step multiplies the rate by this.
const GROWTH: f64 = 1.25;
/// The first offered rate as a share of what the closed loop got through.
const START_SHARE: f64 = 0.5;

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
}
