//! A scenario's impairment: its totals (a preset's, or the plan's own), the netem each
//! node of the link gets under the scenario's split, and the record of what was asked.

use std::time::Duration;

use domain::NetemParams;

use crate::plan::{DelaySplit, ScenarioEntry, scenario_preset};
use crate::results::NetemRecord;

/// The scenario's totals.
pub(super) fn totals(scenario: &ScenarioEntry) -> (Duration, Duration, f64) {
    let preset = scenario_preset(&scenario.name).unwrap_or((Duration::ZERO, Duration::ZERO, 0.0));
    (
        scenario.delay.unwrap_or(preset.0),
        scenario.jitter.unwrap_or(preset.1),
        scenario.loss_percent.unwrap_or(preset.2),
    )
}

/// netem of `delay`, `jitter` and `loss` percent on one node's link.
fn netem_params(delay: Duration, jitter: Duration, loss: f64) -> NetemParams {
    NetemParams {
        delay,
        jitter,
        loss_percent: loss,
        rate_bytes_per_sec: None,
        limit_packets: None,
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
    }
}

/// Whether `scenario` impairs the link at all (some delay, jitter or loss).
pub(super) fn impairs(scenario: &ScenarioEntry) -> bool {
    let (delay, jitter, loss) = totals(scenario);
    !(delay.is_zero() && jitter.is_zero() && loss == 0.0)
}

/// The netem `node` gets under `scenario` when the broker runs on `broker_node`: half the
/// totals at each end, or all of them on the broker's side; none for a node left alone.
pub(super) fn on_node(
    scenario: &ScenarioEntry,
    node: &str,
    broker_node: Option<&str>,
) -> Option<NetemParams> {
    let (delay, jitter, loss) = totals(scenario);
    match scenario.split {
        DelaySplit::HalfEachEnd => Some(netem_params(delay / 2, jitter / 2, loss / 2.0)),
        DelaySplit::BrokerSide if Some(node) == broker_node => {
            Some(netem_params(delay, jitter, loss))
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
        );
        let record = asked_record(&params);
        assert_eq!(record.to_string(), "delay 1.25ms jitter 0.25ms loss 0.02%");
        assert_eq!(record.delay(), Duration::from_micros(1_250));
    }
}
