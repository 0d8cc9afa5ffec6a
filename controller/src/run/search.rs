//! A saturation cell: the search of `loadgen::saturation` run on the plan's loadgen agents,
//! one probe (a timed RunLoad at an offered rate) after the other, within the search's budget.

use std::collections::HashMap;
use std::time::Instant;

use loadgen::saturation::{ProbeOutcome, SaturationReport, Search, SearchSettings, probe_spec};
use loadgen::{RunResult, Summary, WorkloadSpec};

use super::agents::AgentHandle;
use super::load::run_load;
use crate::plan::{Cell, Plan};

/// What a search found, and the result of the probe at the rate it found (none when nothing
/// was sustained).
pub(super) type Found = (Box<SaturationReport>, Option<Box<RunResult>>);

/// Runs the search: what it found, or why every probe failed.
pub(super) async fn run(
    plan: &Plan,
    cell: &Cell,
    base: &WorkloadSpec,
    settings: SearchSettings,
    agents: &HashMap<String, AgentHandle>,
) -> Result<Found, String> {
    let mut search = Search::new(settings.clone());
    let mut best: Option<(u64, Box<loadgen::RunResult>)> = None;
    let base_id = base.run_id.clone().unwrap_or_else(|| "search".to_string());
    let mut probes = 0u32;
    while let Some(probe) = search.next_probe() {
        probes += 1;
        let mut spec = probe_spec(base, probe, &settings);
        // Each probe is a run of its own: its own topics and client ids.
        spec.run_id = Some(format!("{base_id}-p{probes}"));
        let began = Instant::now();
        let outcome = match run_load(plan, cell, spec, agents).await {
            Ok(result) => {
                let outcome =
                    ProbeOutcome::of(probe, &Summary::of(&result), &settings, began.elapsed());
                if let (loadgen::saturation::Probe::Offered { rate }, true) = (
                    probe,
                    outcome.verdict == loadgen::saturation::ProbeVerdict::Sustained,
                ) && best.as_ref().is_none_or(|(r, _)| rate > *r)
                {
                    best = Some((rate, Box::new(result)));
                }
                outcome
            }
            Err(reason) => ProbeOutcome::failed(probe, reason, began.elapsed()),
        };
        tracing::info!(
            probe = ?outcome.probe,
            verdict = ?outcome.verdict,
            receive = outcome.receive_msgs_per_s,
            "saturation probe"
        );
        search.record(outcome);
    }
    let report = search.report();
    if report
        .probes
        .iter()
        .all(|p| p.verdict == loadgen::saturation::ProbeVerdict::Failed)
    {
        let reason = report
            .probes
            .first()
            .and_then(|p| p.reasons.first().cloned())
            .unwrap_or_else(|| "no probe ran".to_string());
        return Err(reason);
    }
    Ok((Box::new(report), best.map(|(_, result)| result)))
}
