//! A scenario's impairment: its totals (a preset's, or the plan's own), the netem each
//! node of the link gets under the scenario's split, and the record of what was asked.

use std::time::Duration;

use domain::{GilbertElliott, NetemParams};

use crate::plan::{DelaySplit, ScenarioEntry, scenario_preset};
use crate::results::NetemRecord;

/// The scenario's totals; the random loss is none where a loss model replaces it.
pub(super) fn totals(scenario: &ScenarioEntry) -> (Duration, Duration, f64) {
    let preset = scenario_preset(&scenario.name).unwrap_or((Duration::ZERO, Duration::ZERO, 0.0));
    let loss = match scenario.gilbert_elliott {
        Some(_) => 0.0,
        None => scenario.loss_percent.unwrap_or(preset.2),
    };
    (
        scenario.delay.unwrap_or(preset.0),
        scenario.jitter.unwrap_or(preset.1),
        loss,
    )
}

/// netem of `delay`, `jitter` and `loss` percent on one node's link, or of the loss model.
fn netem_params(
    delay: Duration,
    jitter: Duration,
    loss: f64,
    model: Option<GilbertElliott>,
) -> NetemParams {
    NetemParams {
        delay,
        jitter,
        loss_percent: loss,
        rate_bytes_per_sec: None,
        limit_packets: None,
        gilbert_elliott: model,
    }
}

/// The record of netem as asked (the kernel's read back is recorded beside it).
pub(super) fn asked_record(params: &NetemParams) -> NetemRecord {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    NetemRecord {
        delay_ns: ns(params.delay),
        jitter_ns: ns(params.jitter),
        loss_percent: params.loss_percent,
        rate_bytes_per_sec: params.rate_bytes_per_sec,
        limit_packets: params.limit_packets,
        gilbert_elliott: params.gilbert_elliott,
    }
}

/// Whether `scenario` impairs the link at all (some delay, jitter or loss).
pub(super) fn impairs(scenario: &ScenarioEntry) -> bool {
    let (delay, jitter, loss) = totals(scenario);
    let bursts = scenario
        .gilbert_elliott
        .is_some_and(|model| model.mean_loss_percent() > 0.0);
    !(delay.is_zero() && jitter.is_zero() && loss == 0.0 && !bursts)
}

/// The netem `node` gets under `scenario` when the broker runs on `broker_node`: half the
/// totals at each end, or all of them on the broker's side; none for a node left alone.
pub(super) fn on_node(
    scenario: &ScenarioEntry,
    node: &str,
    broker_node: Option<&str>,
) -> Option<NetemParams> {
    let (delay, jitter, loss) = totals(scenario);
    // A loss model is per direction, never halved.
    let model = scenario.gilbert_elliott;
    match scenario.split {
        DelaySplit::HalfEachEnd => Some(netem_params(delay / 2, jitter / 2, loss / 2.0, model)),
        DelaySplit::BrokerSide if Some(node) == broker_node => {
            Some(netem_params(delay, jitter, loss, model))
        }
        DelaySplit::BrokerSide => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn described_netem_reads_back_in_the_report() {
        let params = netem_params(
            Duration::from_micros(1_250),
            Duration::from_micros(250),
            0.02,
            None,
        );
        let record = asked_record(&params);
        assert_eq!(record.to_string(), "delay 1.25ms jitter 0.25ms loss 0.02%");
        assert_eq!(record.delay(), Duration::from_micros(1_250));
    }

    #[test]
    fn a_loss_model_is_given_whole_to_each_end_and_replaces_the_presets_loss() {
        let model = GilbertElliott {
            p_percent: 1.0,
            r_percent: 25.0,
            bad_loss_percent: 100.0,
            good_loss_percent: 0.0,
        };
        let scenario = ScenarioEntry {
            name: "edge".to_string(),
            delay: None,
            jitter: None,
            loss_percent: None,
            gilbert_elliott: Some(model),
            split: DelaySplit::HalfEachEnd,
        };
        let netem = on_node(&scenario, "worker", Some("worker")).expect("each end");
        assert_eq!(netem.gilbert_elliott, Some(model), "not halved");
        assert_eq!(
            netem.loss_percent, 0.0,
            "the edge preset's random loss is replaced"
        );
        assert_eq!(
            netem.delay,
            Duration::from_micros(1_250),
            "the delay is halved"
        );
        netem.validate().expect("valid");
        assert!(impairs(&ScenarioEntry {
            name: "bursts".to_string(),
            delay: Some(Duration::ZERO),
            jitter: Some(Duration::ZERO),
            ..scenario.clone()
        }));
        let broker_side = ScenarioEntry {
            split: DelaySplit::BrokerSide,
            ..scenario
        };
        assert_eq!(on_node(&broker_side, "tester", Some("worker")), None);
        assert_eq!(
            on_node(&broker_side, "worker", Some("worker")).and_then(|n| n.gilbert_elliott),
            Some(model)
        );
    }
}
