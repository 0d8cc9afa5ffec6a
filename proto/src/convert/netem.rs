//! netem on the wire: `NetemSpec` <-> [`domain::NetemParams`]; errors name `netem.<field>`.

use std::time::Duration;

use domain::{FieldError, GilbertElliott, NetemParams};

use super::{ConversionError, duration_to_proto, field, required};
use crate::agent::v1 as pb;

/// A required, non-negative duration field of the message at `at`.
fn duration(
    value: Option<&prost_types::Duration>,
    at: &str,
    name: &str,
) -> Result<Duration, ConversionError> {
    let value = required(value, at, name)?;
    let invalid = |problem: String| {
        ConversionError::Invalid(FieldError {
            path: field(at, name),
            value: value.to_string(),
            problem,
        })
    };
    let seconds = u64::try_from(value.seconds).map_err(|_| invalid("is negative".into()))?;
    let nanos = u32::try_from(value.nanos).map_err(|_| invalid("is negative".into()))?;
    Ok(Duration::new(seconds, nanos))
}

/// A requested netem spec as validated parameters.
impl TryFrom<&pb::NetemSpec> for NetemParams {
    type Error = ConversionError;

    fn try_from(spec: &pb::NetemSpec) -> Result<Self, ConversionError> {
        let at = "netem";
        let params = NetemParams {
            delay: duration(spec.delay.as_ref(), at, "delay")?,
            jitter: duration(spec.jitter.as_ref(), at, "jitter")?,
            loss_percent: spec.loss_percent,
            rate_bytes_per_sec: spec.rate_bytes_per_sec,
            limit_packets: spec.limit_packets,
            gilbert_elliott: spec.gilbert_elliott.as_ref().map(|model| GilbertElliott {
                p_percent: model.p_percent,
                r_percent: model.r_percent,
                bad_loss_percent: model.bad_loss_percent,
                good_loss_percent: model.good_loss_percent,
            }),
        };
        params.validate().map_err(|error| ConversionError::Rule {
            path: field(at, error.field()),
            problem: error.to_string(),
        })?;
        Ok(params)
    }
}

/// Parameters (asked, or read back) as a message.
impl From<&NetemParams> for pb::NetemSpec {
    fn from(params: &NetemParams) -> Self {
        pb::NetemSpec {
            delay: Some(duration_to_proto(params.delay)),
            jitter: Some(duration_to_proto(params.jitter)),
            loss_percent: params.loss_percent,
            rate_bytes_per_sec: params.rate_bytes_per_sec,
            limit_packets: params.limit_packets,
            gilbert_elliott: params.gilbert_elliott.map(|model| pb::GilbertElliott {
                p_percent: model.p_percent,
                r_percent: model.r_percent,
                bad_loss_percent: model.bad_loss_percent,
                good_loss_percent: model.good_loss_percent,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(delay_ms: i32, loss: f64) -> pb::NetemSpec {
        pb::NetemSpec {
            delay: Some(prost_types::Duration {
                seconds: 0,
                nanos: delay_ms * 1_000_000,
            }),
            jitter: Some(prost_types::Duration::default()),
            loss_percent: loss,
            rate_bytes_per_sec: None,
            limit_packets: None,
            gilbert_elliott: None,
        }
    }

    #[test]
    fn a_gilbert_elliott_model_crosses_the_wire_and_its_fields_are_named() {
        let params = NetemParams {
            gilbert_elliott: Some(GilbertElliott {
                p_percent: 1.0,
                r_percent: 25.0,
                bad_loss_percent: 70.0,
                good_loss_percent: 0.1,
            }),
            ..NetemParams::from_millis(10.0, 0.0, 0.0).expect("valid")
        };
        let wire = pb::NetemSpec::from(&params);
        assert_eq!(NetemParams::try_from(&wire).expect("valid"), params);
        let mut bad = wire;
        if let Some(model) = bad.gilbert_elliott.as_mut() {
            model.r_percent = 120.0;
        }
        let error = NetemParams::try_from(&bad).expect_err("out of range");
        assert!(
            error
                .to_string()
                .contains("netem.gilbert_elliott.r_percent"),
            "{error}"
        );
        let mut both = wire;
        both.loss_percent = 1.0;
        let error = NetemParams::try_from(&both).expect_err("two models");
        assert!(error.to_string().contains("netem.loss_percent"), "{error}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let error = NetemParams::try_from(&spec(5, 150.0)).expect_err("loss above 100");
        assert!(error.to_string().starts_with("netem.loss"), "{error}");
        let error = NetemParams::try_from(&spec(-5, 0.0)).expect_err("negative delay");
        assert!(error.to_string().starts_with("netem.delay"), "{error}");
        let mut no_delay = spec(5, 0.0);
        no_delay.delay = None;
        assert_eq!(
            NetemParams::try_from(&no_delay)
                .expect_err("missing")
                .to_string(),
            "netem.delay: missing"
        );
    }

    #[test]
    fn a_spec_round_trips_through_params() {
        let params = NetemParams::try_from(&spec(3, 0.05)).expect("valid");
        assert_eq!(
            NetemParams::try_from(&pb::NetemSpec::from(&params)).expect("valid"),
            params
        );
    }
}
