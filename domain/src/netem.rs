//! What a user asks netem to do on one interface, and the checks that keep it honest.
//!
//! The study's successor tool silently applied nothing for some parameter sets (delay and loss
//! without jitter, loss alone). Here every combination that passes [`NetemParams::validate`] is
//! applied as asked, and every one that cannot be applied as asked is refused with the field
//! name and the bad value.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Longest delay or jitter accepted: far above any round trip on Earth; beyond it a value is a
/// unit mistake. (netem's own 32-bit tick field would stop at about 274 s.)
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// Queue limit in packets that `tc` sets when none is given, and so the one used here.
pub const DEFAULT_LIMIT: u32 = 1000;

/// netem settings for the egress of one interface.
///
/// Delays are held by the kernel in 64 ns ticks and loss as a 32-bit fraction; the agent's
/// netem encoder turns these into the form the kernel really holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetemParams {
    /// Delay added to every packet leaving the interface.
    #[serde(default, with = "humantime_serde")]
    pub delay: Duration,
    /// Random variation of the delay: uniform within `delay ± jitter`.
    #[serde(default, with = "humantime_serde")]
    pub jitter: Duration,
    /// Share of packets dropped at random, in percent (0 to 100).
    #[serde(default)]
    pub loss_percent: f64,
    /// Egress rate limit in bytes per second; no limit when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_sec: Option<u64>,
    /// netem's queue length in packets; [`DEFAULT_LIMIT`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_packets: Option<u32>,
    /// Losses in bursts (netem's `loss gemodel`) instead of at random: with this set,
    /// `loss_percent` must be 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gilbert_elliott: Option<GilbertElliott>,
}

/// netem's Gilbert-Elliott loss model: each packet finds the link in a good or a bad state,
/// loses with the state's own chance, and moves the chain on. Losses so come in bursts
/// (radio fades, a congested uplink), which a random loss of the same mean does not make: a
/// TCP connection and a QUIC one suffer differently from a burst.
///
/// With the defaults for the state losses (0 % in the good state, 100 % in the bad one) this
/// is Gilbert's simple model: on average `100 / r_percent` packets in a row are lost, and
/// [`GilbertElliott::mean_loss_percent`] of all packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    /// Chance per packet, in percent, that the good state turns bad (netem's `p`).
    pub p_percent: f64,
    /// Chance per packet, in percent, that the bad state turns good (netem's `r`).
    pub r_percent: f64,
    /// Share of the packets lost in the bad state, percent (netem's `1-h`); 100 by default.
    #[serde(default = "all_lost")]
    pub bad_loss_percent: f64,
    /// Share of the packets lost in the good state, percent (netem's `1-k`); 0 by default.
    #[serde(default)]
    pub good_loss_percent: f64,
}

fn all_lost() -> f64 {
    100.0
}

impl GilbertElliott {
    /// The share of packets lost in the long run, percent: each state's loss weighted by the
    /// time the chain spends in it (bad: `p / (p + r)`). A chain that never moves (`p` = 0)
    /// stays good.
    pub fn mean_loss_percent(&self) -> f64 {
        let moves = self.p_percent + self.r_percent;
        if self.p_percent == 0.0 || moves == 0.0 {
            return self.good_loss_percent;
        }
        let bad = self.p_percent / moves;
        bad * self.bad_loss_percent + (1.0 - bad) * self.good_loss_percent
    }

    /// Its four percentages, each named as in a plan.
    pub fn fields(&self) -> [(&'static str, f64); 4] {
        [
            ("gilbert_elliott.p_percent", self.p_percent),
            ("gilbert_elliott.r_percent", self.r_percent),
            ("gilbert_elliott.bad_loss_percent", self.bad_loss_percent),
            ("gilbert_elliott.good_loss_percent", self.good_loss_percent),
        ]
    }
}

/// Why a [`NetemParams`] cannot be applied as asked. Each variant names the field.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParamsError {
    /// A delay or jitter given in milliseconds was negative, infinite or not a number.
    #[error("{field}: {value_ms} ms is not a duration (must be finite and >= 0)")]
    NotADuration {
        /// `delay` or `jitter`.
        field: &'static str,
        /// The value as given.
        value_ms: f64,
    },
    /// A delay or jitter is longer than [`MAX_DELAY`].
    #[error("{field}: {value:?} is longer than the maximum of {MAX_DELAY:?}")]
    TooLong {
        /// `delay` or `jitter`.
        field: &'static str,
        /// The value as given.
        value: Duration,
    },
    /// Jitter without a delay: netem varies the delay, so there would be nothing to vary.
    #[error("jitter: {jitter:?} given with no delay; set a delay for the jitter to vary")]
    JitterWithoutDelay {
        /// The jitter as given.
        jitter: Duration,
    },
    /// Jitter larger than the delay: netem would clip negative delays to zero, so the mean
    /// delay would no longer be the one asked for.
    #[error("jitter: {jitter:?} is larger than delay {delay:?}")]
    JitterExceedsDelay {
        /// The jitter as given.
        jitter: Duration,
        /// The delay as given.
        delay: Duration,
    },
    /// Loss outside 0-100 %, or not a number.
    #[error("loss_percent: {value} is outside 0-100")]
    LossOutOfRange {
        /// The value as given.
        value: f64,
    },
    /// A Gilbert-Elliott percentage outside 0-100, or not a number.
    #[error("{field}: {value} is outside 0-100")]
    ModelOutOfRange {
        /// `gilbert_elliott.<name>`.
        field: &'static str,
        /// The value as given.
        value: f64,
    },
    /// A chain that turns bad and never back: after about `100 / p` packets the link loses
    /// (nearly) everything for good, which no link to measure does.
    #[error(
        "gilbert_elliott.r_percent: 0 with p_percent above 0: once bad the link never recovers; give the chance per packet of recovering"
    )]
    NeverRecovers,
    /// Random loss and a loss model at once: netem applies one of them only.
    #[error(
        "loss_percent: {value} given with gilbert_elliott; netem applies one loss model, so give one"
    )]
    TwoLossModels {
        /// The random loss as given.
        value: f64,
    },
    /// A rate of zero, which would stop all traffic rather than leave it unlimited.
    #[error("rate_bytes_per_sec: 0 would stop all traffic; leave it unset for no limit")]
    ZeroRate,
    /// A queue limit of zero, which would drop every packet.
    #[error("limit_packets: 0 would drop every packet")]
    ZeroLimit,
}

impl ParamsError {
    /// The name of the offending field, as spelt in plans and on the wire.
    pub fn field(&self) -> &'static str {
        match self {
            Self::NotADuration { field, .. } | Self::TooLong { field, .. } => field,
            Self::JitterWithoutDelay { .. } | Self::JitterExceedsDelay { .. } => "jitter",
            Self::LossOutOfRange { .. } | Self::TwoLossModels { .. } => "loss_percent",
            Self::ModelOutOfRange { field, .. } => field,
            Self::NeverRecovers => "gilbert_elliott.r_percent",
            Self::ZeroRate => "rate_bytes_per_sec",
            Self::ZeroLimit => "limit_packets",
        }
    }
}

impl NetemParams {
    /// Builds validated settings from millisecond values, as they arrive from floats on the
    /// wire or in a study's table; a negative or non-finite value is refused, not clamped.
    pub fn from_millis(
        delay_ms: f64,
        jitter_ms: f64,
        loss_percent: f64,
    ) -> Result<Self, ParamsError> {
        let params = Self {
            delay: millis("delay", delay_ms)?,
            jitter: millis("jitter", jitter_ms)?,
            loss_percent,
            rate_bytes_per_sec: None,
            limit_packets: None,
            gilbert_elliott: None,
        };
        params.validate()?;
        Ok(params)
    }

    /// Checks that the kernel can do exactly what these settings ask.
    pub fn validate(&self) -> Result<(), ParamsError> {
        for (field, value) in [("delay", self.delay), ("jitter", self.jitter)] {
            if value > MAX_DELAY {
                return Err(ParamsError::TooLong { field, value });
            }
        }
        if !self.jitter.is_zero() && self.delay.is_zero() {
            return Err(ParamsError::JitterWithoutDelay {
                jitter: self.jitter,
            });
        }
        if self.jitter > self.delay {
            return Err(ParamsError::JitterExceedsDelay {
                jitter: self.jitter,
                delay: self.delay,
            });
        }
        // `contains` is false for NaN too.
        if !(0.0..=100.0).contains(&self.loss_percent) {
            return Err(ParamsError::LossOutOfRange {
                value: self.loss_percent,
            });
        }
        if let Some(model) = &self.gilbert_elliott {
            for (field, value) in model.fields() {
                if !(0.0..=100.0).contains(&value) {
                    return Err(ParamsError::ModelOutOfRange { field, value });
                }
            }
            if model.r_percent == 0.0 && model.p_percent > 0.0 && model.bad_loss_percent > 0.0 {
                return Err(ParamsError::NeverRecovers);
            }
            if self.loss_percent != 0.0 {
                return Err(ParamsError::TwoLossModels {
                    value: self.loss_percent,
                });
            }
        }
        if self.rate_bytes_per_sec == Some(0) {
            return Err(ParamsError::ZeroRate);
        }
        if self.limit_packets == Some(0) {
            return Err(ParamsError::ZeroLimit);
        }
        Ok(())
    }

    /// True when these settings change nothing about the traffic (the study's "local"
    /// scenario): the caller should clear the qdisc rather than apply an idle one.
    pub fn is_noop(&self) -> bool {
        self.delay.is_zero()
            && self.jitter.is_zero()
            && self.mean_loss_percent() == 0.0
            && self.rate_bytes_per_sec.is_none()
    }

    /// The share of packets lost in the long run, percent: the random loss, or the
    /// Gilbert-Elliott model's mean.
    pub fn mean_loss_percent(&self) -> f64 {
        match &self.gilbert_elliott {
            Some(model) => model.mean_loss_percent(),
            None => self.loss_percent,
        }
    }
}

fn millis(field: &'static str, value_ms: f64) -> Result<Duration, ParamsError> {
    if !value_ms.is_finite() || value_ms < 0.0 {
        return Err(ParamsError::NotADuration { field, value_ms });
    }
    let secs = value_ms / 1000.0;
    if secs > MAX_DELAY.as_secs_f64() {
        return Err(ParamsError::TooLong {
            field,
            value: MAX_DELAY,
        });
    }
    // Round to whole nanoseconds: 1.25 ms must not become 1.249999 ms through the float.
    Ok(Duration::from_nanos((value_ms * 1e6).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    #[test]
    fn every_combination_of_delay_jitter_loss_is_valid() {
        for (d, j, l) in [
            (10.0, 0.0, 0.0),
            (10.0, 2.0, 0.0),
            (0.0, 0.0, 1.0),
            (10.0, 0.0, 1.0),
            (10.0, 2.0, 1.0),
        ] {
            let p = NetemParams::from_millis(d, j, l).expect("valid");
            assert!(!p.is_noop(), "{p:?}");
        }
        let rate_only = NetemParams {
            rate_bytes_per_sec: Some(125_000),
            ..Default::default()
        };
        rate_only.validate().expect("rate alone is valid");
        assert!(!rate_only.is_noop());
        let limit_only = NetemParams {
            limit_packets: Some(500),
            ..Default::default()
        };
        limit_only.validate().expect("limit alone is valid");
        assert!(
            limit_only.is_noop(),
            "a queue limit alone changes no packet"
        );
    }

    #[test]
    fn from_millis_keeps_exact_values() {
        let p = NetemParams::from_millis(1.25, 0.25, 0.02).expect("valid");
        assert_eq!(p.delay, Duration::from_micros(1250));
        assert_eq!(p.jitter, Duration::from_micros(250));
        let p = NetemParams::from_millis(3.125, 0.625, 0.05).expect("valid");
        assert_eq!(p.delay, Duration::from_nanos(3_125_000));
        assert_eq!(p.jitter, Duration::from_nanos(625_000));
    }

    #[test]
    fn bad_values_name_the_field_and_value() {
        let cases: Vec<(Result<NetemParams, ParamsError>, &str, &str)> = vec![
            (NetemParams::from_millis(-5.0, 0.0, 0.0), "delay", "-5 ms"),
            (
                NetemParams::from_millis(f64::NAN, 0.0, 0.0),
                "delay",
                "NaN ms",
            ),
            (NetemParams::from_millis(5.0, -1.0, 0.0), "jitter", "-1 ms"),
            (
                NetemParams::from_millis(1e9, 0.0, 0.0),
                "delay",
                "longer than",
            ),
            (
                NetemParams::from_millis(10.0, 0.0, 150.0),
                "loss_percent",
                "150",
            ),
            (
                NetemParams::from_millis(10.0, 0.0, -0.1),
                "loss_percent",
                "-0.1",
            ),
            (
                NetemParams::from_millis(10.0, 0.0, f64::NAN),
                "loss_percent",
                "NaN",
            ),
            (
                NetemParams::from_millis(0.0, 1.0, 0.0),
                "jitter",
                "no delay",
            ),
            (
                NetemParams::from_millis(1.0, 2.0, 0.0),
                "jitter",
                "larger than delay",
            ),
        ];
        for (result, field, text) in cases {
            let err = result.expect_err(text);
            assert_eq!(err.field(), field, "{err}");
            let msg = err.to_string();
            assert!(
                msg.starts_with(field) && msg.contains(text),
                "{msg:?} lacks {field}/{text}"
            );
        }
        let p = NetemParams {
            delay: ms(120_000.0),
            ..Default::default()
        };
        assert_eq!(p.validate().map_err(|e| e.field()), Err("delay"));
        let p = NetemParams {
            rate_bytes_per_sec: Some(0),
            ..Default::default()
        };
        assert_eq!(p.validate(), Err(ParamsError::ZeroRate));
        let p = NetemParams {
            limit_packets: Some(0),
            ..Default::default()
        };
        assert_eq!(p.validate(), Err(ParamsError::ZeroLimit));
    }

    #[test]
    fn gilbert_elliott_reads_with_gilberts_defaults_and_has_its_mean() {
        let p: NetemParams = toml::from_str(
            "delay = \"1ms\"\n[gilbert_elliott]\np_percent = 5.0\nr_percent = 50.0\n",
        )
        .expect("parses");
        let model = p.gilbert_elliott.expect("a model");
        assert_eq!(
            (model.bad_loss_percent, model.good_loss_percent),
            (100.0, 0.0)
        );
        p.validate().expect("valid");
        // In the bad state 5 / 55 of the time, losing everything there.
        assert!((p.mean_loss_percent() - 500.0 / 55.0).abs() < 1e-9);
        assert!(!p.is_noop());
        let elliott = GilbertElliott {
            p_percent: 1.0,
            r_percent: 25.0,
            bad_loss_percent: 70.0,
            good_loss_percent: 0.1,
        };
        let expected = (1.0 * 70.0 + 25.0 * 0.1) / 26.0;
        assert!((elliott.mean_loss_percent() - expected).abs() < 1e-9);
        let never_bad = GilbertElliott {
            p_percent: 0.0,
            ..elliott
        };
        assert_eq!(never_bad.mean_loss_percent(), 0.1);
        let silent = NetemParams {
            gilbert_elliott: Some(GilbertElliott {
                good_loss_percent: 0.0,
                ..never_bad
            }),
            ..Default::default()
        };
        assert!(silent.is_noop(), "a chain that never loses changes nothing");
    }

    #[test]
    fn gilbert_elliott_refuses_bad_percentages_and_a_second_loss() {
        let model = GilbertElliott {
            p_percent: 5.0,
            r_percent: 50.0,
            bad_loss_percent: 100.0,
            good_loss_percent: 0.0,
        };
        for (bad, field) in [
            (
                GilbertElliott {
                    p_percent: 101.0,
                    ..model
                },
                "gilbert_elliott.p_percent",
            ),
            (
                GilbertElliott {
                    r_percent: f64::NAN,
                    ..model
                },
                "gilbert_elliott.r_percent",
            ),
            (
                GilbertElliott {
                    bad_loss_percent: -1.0,
                    ..model
                },
                "gilbert_elliott.bad_loss_percent",
            ),
            (
                GilbertElliott {
                    good_loss_percent: 200.0,
                    ..model
                },
                "gilbert_elliott.good_loss_percent",
            ),
        ] {
            let params = NetemParams {
                gilbert_elliott: Some(bad),
                ..Default::default()
            };
            let error = params.validate().expect_err(field);
            assert_eq!(error.field(), field);
            assert!(error.to_string().starts_with(field), "{error}");
        }
        let both = NetemParams {
            loss_percent: 1.0,
            gilbert_elliott: Some(model),
            ..Default::default()
        };
        let error = both.validate().expect_err("two loss models");
        assert_eq!(error.field(), "loss_percent");
        assert!(error.to_string().contains("one loss model"), "{error}");
        let stuck = NetemParams {
            gilbert_elliott: Some(GilbertElliott {
                r_percent: 0.0,
                ..model
            }),
            ..Default::default()
        };
        let error = stuck.validate().expect_err("never recovers");
        assert_eq!(error.field(), "gilbert_elliott.r_percent");
    }

    #[test]
    fn reads_from_toml_with_humantime_and_refuses_unknown_fields() {
        let p: NetemParams =
            toml::from_str("delay = \"1.25ms\"\njitter = \"250us\"\nloss_percent = 0.02\n")
                .expect("parses");
        assert_eq!(
            p,
            NetemParams::from_millis(1.25, 0.25, 0.02).expect("valid")
        );
        let err = toml::from_str::<NetemParams>("delay = \"1ms\"\nvariance = \"1ms\"\n")
            .expect_err("unknown");
        assert!(err.to_string().contains("variance"), "{err}");
    }
}
