//! The report's opening: what the run found, per scenario (which broker is ahead on latency
//! and on sustainable throughput, by how much, and whether it is significant), and the
//! conditions it ran under.

use std::collections::{BTreeMap, BTreeSet};

use super::comparison::{self, Comparison, Metric};
use super::input::RunData;
use super::model::{Block, Section};
use crate::plan::Measures;

/// A test and point with each broker's per-repetition values.
type Candidate = (usize, u64, Vec<(usize, Vec<f64>)>);

/// The findings section.
pub fn section(data: &RunData) -> Section {
    let plan = &data.manifest.plan;
    let names: Vec<String> = plan.brokers.iter().map(|b| b.name.clone()).collect();
    let mut section = Section::new("findings", "Findings");
    let samples = comparison::samples(data);
    let mut items = Vec::new();
    let mut untestable: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (s, scenario) in plan.scenarios.iter().enumerate() {
        // Per figure, the comparison at the point where most brokers were measured: for
        // latency the first test; for throughput the largest common client count.
        let mut best: BTreeMap<Metric, Candidate> = BTreeMap::new();
        for ((test, scenario_index, point, metric), brokers) in &samples {
            // Offered rates are judged below, from every measured cell.
            if *scenario_index != s || brokers.len() < 2 || *metric == Metric::LatencyAtOfferedRate
            {
                continue;
            }
            let candidate = (
                *test,
                *point,
                brokers.clone().into_iter().collect::<Vec<_>>(),
            );
            let better = match best.get(metric) {
                None => true,
                Some((t, p, b)) => match metric {
                    Metric::Latency | Metric::OpenLoopLatency => {
                        (candidate.2.len(), std::cmp::Reverse((*test, *point)))
                            > (b.len(), std::cmp::Reverse((*t, *p)))
                    }
                    _ => (candidate.2.len(), (*test, *point)) > (b.len(), (*t, *p)),
                },
            };
            if better {
                best.insert(*metric, candidate);
            }
        }
        for (metric, (test, point, brokers)) in &best {
            let Some(leader) = lead(*metric, brokers) else {
                continue;
            };
            let what = match metric {
                Metric::Latency => {
                    format!("Transit latency ({})", super::test_label(plan, *test))
                }
                Metric::OpenLoopLatency => {
                    format!("Open-loop latency ({})", super::test_label(plan, *test))
                }
                Metric::SustainedRate => format!("Sustained throughput at {point} pairs"),
                Metric::LatencyAtOfferedRate => continue,
                Metric::SaturationRate => format!("Saturation point at {point} pairs"),
            };
            if !leader.testable() {
                untestable.insert(leader.n);
            }
            items.push(format!(
                "{}: {what}: {}.",
                scenario.name,
                comparison::sentence(*metric, &names, &leader)
            ));
        }
        items.extend(offered_rate_findings(
            data,
            s,
            &samples,
            &names,
            &mut untestable,
        ));
    }
    if items.is_empty() {
        section.paragraph(
            "No figure was measured for two brokers in the same scenario, so there is no \
             comparison to report; the sections below give each broker's own figures.",
        );
    } else {
        section.paragraph(
            "Per scenario, the broker ahead on each figure against the runner-up: medians over \
             repetitions, the difference, and whether it is significant (two-sided \
             Mann-Whitney U over the repetitions, p < 0.05) with Cliff's delta as its effect \
             size. The tables below hold every pair. A sustained offered rate ranks nothing \
             (every broker that kept up delivered it): there the finding says who sustained it \
             and compares latency at that load.",
        );
        section.blocks.push(Block::List(items));
        if !untestable.is_empty() {
            section.paragraph(comparison::untestable_note(&untestable, plan.repetitions));
        }
    }
    section.paragraph(conditions(data));
    section
}

/// Per sustained test at an offered rate in `scenario`, at the point where most brokers were
/// measured: who sustained the rate in how many repetitions and, where two or more did, their
/// latency at that load. A rate every broker kept up with ranks nothing.
fn offered_rate_findings(
    data: &RunData,
    scenario: usize,
    samples: &comparison::Samples,
    names: &[String],
    untestable: &mut BTreeSet<(usize, usize)>,
) -> Vec<String> {
    let plan = &data.manifest.plan;
    // (test) -> point -> brokers measured there, and the offered rate.
    let mut measured: BTreeMap<usize, BTreeMap<u64, (BTreeSet<usize>, f64)>> = BTreeMap::new();
    for cell in data.cells.iter().filter(|c| c.scenario == scenario) {
        let Some(offered) = cell.summary.offered_rate_msgs_per_s else {
            continue;
        };
        if plan.tests[cell.test].kind.measures() != Measures::SustainedRate {
            continue;
        }
        let at = measured
            .entry(cell.test)
            .or_default()
            .entry(cell.point)
            .or_insert_with(|| (BTreeSet::new(), offered));
        at.0.insert(cell.broker);
    }
    let mut items = Vec::new();
    for (test, points) in measured {
        // The most brokers measured; among those, the largest client count.
        let Some((point, (brokers, offered))) = points
            .into_iter()
            .max_by_key(|(point, (brokers, _))| (brokers.len(), *point))
        else {
            continue;
        };
        if brokers.len() < 2 {
            continue;
        }
        let sustained: Vec<(usize, Vec<f64>)> = samples
            .get(&(test, scenario, point, Metric::LatencyAtOfferedRate))
            .map(|by_broker| by_broker.clone().into_iter().collect())
            .unwrap_or_default();
        let latency = match lead(Metric::LatencyAtOfferedRate, &sustained) {
            Some(leader) => {
                if !leader.testable() {
                    untestable.insert(leader.n);
                }
                format!(
                    "; latency at that load (transit, loadgen's receive cadence included): {}",
                    comparison::sentence(Metric::LatencyAtOfferedRate, names, &leader)
                )
            }
            None => {
                "; fewer than two sustained it, so no latency at that load is compared".to_string()
            }
        };
        items.push(format!(
            "{}: Offered rate ({}), {point} pairs at {} msg/s: {}{latency}.",
            plan.scenarios[scenario].name,
            super::test_label(plan, test),
            super::model::rate(offered),
            who_sustained(data, test, scenario, point, &sustained, names)
        ));
    }
    items
}

/// "repetitions that sustained it: mosquitto and emqx in 2 of 2, aedes in none of 2": every
/// broker measured at this test, scenario and point, by how many repetitions sustained the
/// rate (one in which loadgen was the limit does not count).
fn who_sustained(
    data: &RunData,
    test: usize,
    scenario: usize,
    point: u64,
    sustained: &[(usize, Vec<f64>)],
    names: &[String],
) -> String {
    let mut measured: BTreeMap<usize, usize> = BTreeMap::new();
    for cell in data
        .cells
        .iter()
        .filter(|c| c.test == test && c.scenario == scenario && c.point == point)
    {
        *measured.entry(cell.broker).or_default() += 1;
    }
    let kept = |broker: usize| {
        sustained
            .iter()
            .find(|(b, _)| *b == broker)
            .map_or(0, |(_, values)| values.len())
    };
    // Most sustained first; brokers alike in one group.
    let mut groups: BTreeMap<(std::cmp::Reverse<usize>, usize), Vec<&str>> = BTreeMap::new();
    for (&broker, &cells) in &measured {
        groups
            .entry((std::cmp::Reverse(kept(broker)), cells))
            .or_default()
            .push(names[broker].as_str());
    }
    let parts: Vec<String> = groups
        .into_iter()
        .map(|((std::cmp::Reverse(kept), cells), brokers)| match kept {
            0 => format!("{} in none of {cells}", listed(&brokers)),
            kept => format!("{} in {kept} of {cells}", listed(&brokers)),
        })
        .collect();
    format!("repetitions that sustained it: {}", parts.join(", "))
}

/// "a", "a and b", "a, b and c".
fn listed(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [only] => only.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The best broker against the runner-up.
fn lead(metric: Metric, brokers: &[(usize, Vec<f64>)]) -> Option<Comparison> {
    let mut ranked: Vec<(usize, f64, &Vec<f64>)> = brokers
        .iter()
        .filter_map(|(b, v)| Some((*b, crate::stats::median(v)?, v)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    if !metric.lower_is_better() {
        ranked.reverse();
    }
    let (first, second) = (ranked.first()?, ranked.get(1)?);
    comparison::compare(metric, (first.0, first.2), (second.0, second.2))
}

/// The run's conditions in one paragraph.
fn conditions(data: &RunData) -> String {
    let plan = &data.manifest.plan;
    let nodes: Vec<String> = data
        .manifest
        .nodes
        .iter()
        .map(|n| {
            format!(
                "{} ({} {} cores, kernel {})",
                n.name, n.arch, n.cores, n.kernel
            )
        })
        .collect();
    let measured = data.cells.len() + data.searches.len();
    let limited = data
        .cells
        .iter()
        .filter(|c| c.extras.generator_limit.is_some())
        .count();
    let not_measured = data.failed.len() + data.skipped.len();
    format!(
        "Conditions: {} broker(s) x {} scenario(s) x {} test(s), {} repetition(s) each, on {}. \
         {measured} cell(s) measured{}{}.",
        plan.brokers.len(),
        plan.scenarios.len(),
        plan.tests.len(),
        plan.repetitions,
        if nodes.is_empty() {
            "nodes the manifest does not name".to_string()
        } else {
            nodes.join(", ")
        },
        if limited > 0 {
            format!(
                ", {limited} of them GENERATOR-LIMITED (loadgen, not the broker, was the limit)"
            )
        } else {
            ", loadgen the limit in none".to_string()
        },
        if not_measured > 0 {
            format!("; {not_measured} not measured (listed at the end)")
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_a_list() {
        assert_eq!(listed(&[]), "");
        assert_eq!(listed(&["a"]), "a");
        assert_eq!(listed(&["a", "b"]), "a and b");
        assert_eq!(listed(&["a", "b", "c", "d"]), "a, b, c and d");
    }
}
