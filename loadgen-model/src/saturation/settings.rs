//! How a search runs: probe length, latency bound, time budget, precision.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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

impl SearchSettings {
    /// Checks the settings; errors name the field (prefixed with `at`).
    pub fn validate(&self, at: &str) -> Result<(), crate::spec::SpecError> {
        let invalid = |name: &str, value: String, problem: &str| crate::spec::SpecError {
            path: format!("{at}{name}"),
            value,
            problem: problem.to_string(),
        };
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        // A probe is a timed run, bounded as one; a p99 bound beyond it admits anything.
        let longest = crate::spec::MAX_DURATION;
        for (name, value) in [
            ("probe", self.probe),
            ("probe_warmup", self.probe_warmup),
            ("p99_bound", self.p99_bound),
        ] {
            if value > longest {
                return Err(invalid(
                    name,
                    shown(value),
                    &format!("at most {}", shown(longest)),
                ));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
