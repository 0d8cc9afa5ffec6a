//! The saturation point: for each broker, scenario and client count, the highest offered rate
//! the broker sustained (delivered ≥ 99 %, backlog bounded, p99 under the bound), with its
//! interval over repetitions; and latency against offered load from the search's probes
//! (the "hockey stick").

use std::collections::{BTreeMap, BTreeSet};

use loadgen::saturation::{Probe, ProbeVerdict, SearchEnd};

use super::axes::tick_label;
use super::chart::{LineChart, Series, SeriesPoint};
use super::estimate::{ERROR_BAR_MEANING, Estimate, INTERVAL_MEANING};
use super::input::{RunData, SearchFigures};
use super::model::{Block, Figure, Section, Table, rate};
use super::svg;
use crate::plan::{Measures, TestKind};

/// One section per saturation test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    super::sections_of(
        data,
        |k| k.measures() == Measures::SaturationRate,
        TestKind::Saturation,
        "Saturation point",
        section,
    )
}

/// How often the search's probes (each an offered rate) read at most while deliveries keep
/// coming, if they coalesce reads.
fn probe_read_cadence(plan: &crate::plan::Plan, test: usize) -> Option<std::time::Duration> {
    let mut probe = plan.first_workload(test).ok()?;
    probe.pacing = loadgen::spec::Pacing::Rate { rate: 1 };
    probe.read_cadence()
}

/// In words, why a search ended.
pub fn end_text(end: SearchEnd) -> &'static str {
    match end {
        SearchEnd::Converged => "found within 5 %",
        SearchEnd::BudgetSpent => "time budget spent",
        SearchEnd::GeneratorLimited => "loadgen's own limit reached: at least this",
        SearchEnd::NothingSustained => "nothing sustained",
    }
}

fn section(data: &RunData, test: usize, title: &str) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(&format!("saturation-{test}"), title);
    let searches: Vec<&SearchFigures> = data.searches.iter().filter(|s| s.test == test).collect();
    let settings = plan.tests[test].search.clone().unwrap_or_default();
    section.paragraph(format!(
        "For each client count, a search for the highest offered rate (publishes per second of \
         all publishers together, open loop) the broker sustains: a probe of {} after {} \
         warm-up counts when both halves of its window lie within 5 % of the whole, the backlog \
         stays bounded, at least 99 % of the offered deliveries arrive and p99 latency stays \
         under {}. It starts at half of what a closed loop gets through, grows by a quarter \
         per probe until one fails, then bisects to 5 %, within {} per search. A probe in \
         which loadgen was the limit ends the search: the rate is then a lower bound. \
         {INTERVAL_MEANING}",
        humantime::format_duration(settings.probe),
        humantime::format_duration(settings.probe_warmup),
        humantime::format_duration(settings.p99_bound),
        humantime::format_duration(settings.budget),
    ));
    if searches.is_empty() {
        section.paragraph("No search of this test was recorded (see the cells not measured).");
        return section;
    }
    let mut groups: BTreeMap<(usize, usize), BTreeMap<u64, Vec<&SearchFigures>>> = BTreeMap::new();
    for search in &searches {
        groups
            .entry((search.broker, search.scenario))
            .or_default()
            .entry(search.point)
            .or_default()
            .push(search);
    }
    let several_scenarios = groups.keys().map(|(_, s)| s).collect::<BTreeSet<_>>().len() > 1;
    let brokers: Vec<usize> = groups
        .keys()
        .map(|(b, _)| *b)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let label = |broker: usize, scenario: usize| {
        if several_scenarios {
            format!(
                "{} / {}",
                plan.brokers[broker].name, plan.scenarios[scenario].name
            )
        } else {
            plan.brokers[broker].name.clone()
        }
    };
    let mut table = Table::new(
        &[
            "Broker",
            "Scenario",
            "Client pairs",
            "Highest sustained offered rate (msg/s)",
            "Deliveries/s there",
            "Lowest failed (msg/s)",
            "Searches ended",
            "Probes",
            "Broker CPU there (% of a core)",
        ],
        2,
    );
    let mut rate_lines = Vec::new();
    let mut domain = Vec::new();
    let mut hockey = Vec::new();
    let mut hockey_domain = Vec::new();
    let mut top_offered: f64 = 0.0;
    for (&(broker, scenario), points) in &groups {
        let colour = svg::colour(brokers.iter().position(|&b| b == broker).unwrap_or(0));
        let mut line = Vec::new();
        for (&pairs, searches) in points {
            let found: Vec<f64> = searches
                .iter()
                .filter_map(|s| s.report.rate)
                .map(|r| r as f64)
                .collect();
            let estimate = Estimate::of(&found);
            if let Some(estimate) = estimate {
                line.push(estimate.point(pairs as f64));
                domain.extend([estimate.low, estimate.high]);
            }
            let delivered = Estimate::of(
                &searches
                    .iter()
                    .filter_map(|s| s.report.delivered_msgs_per_s)
                    .collect::<Vec<_>>(),
            );
            let failed = Estimate::of(
                &searches
                    .iter()
                    .filter_map(|s| s.report.failed_rate)
                    .map(|r| r as f64)
                    .collect::<Vec<_>>(),
            );
            let ends: BTreeSet<&str> = searches.iter().map(|s| end_text(s.report.end)).collect();
            let probes: usize = searches.iter().map(|s| s.report.probes.len()).sum();
            let cpu = Estimate::of(
                &searches
                    .iter()
                    .filter_map(|s| s.extras.broker_cpu_percent)
                    .collect::<Vec<_>>(),
            );
            table.row(vec![
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                pairs.to_string(),
                estimate.map_or("none".to_string(), |e| e.text(rate)),
                delivered.map_or("-".to_string(), |e| e.text(rate)),
                failed.map_or("-".to_string(), |e| e.text(rate)),
                format!(
                    "{} ({} of {})",
                    ends.into_iter().collect::<Vec<_>>().join(", "),
                    found.len(),
                    searches.len()
                ),
                probes.to_string(),
                cpu.map_or("-".to_string(), |e| e.text(|v| format!("{v:.0}"))),
            ]);
        }
        rate_lines.push(Series {
            label: label(broker, scenario),
            colour,
            dash: "",
            points: line,
        });
        // The hockey stick of the smallest client count's first repetition.
        if let Some(search) = points
            .values()
            .next()
            .and_then(|s| s.iter().min_by_key(|s| s.repetition))
        {
            let probes: Vec<(f64, f64, f64)> = search
                .report
                .probes
                .iter()
                .filter_map(|p| match (p.probe, p.verdict) {
                    (Probe::Offered { rate }, v) if v != ProbeVerdict::Failed => {
                        Some((rate as f64, p.p50_us / 1e3, p.p99_us / 1e3))
                    }
                    _ => None,
                })
                .collect();
            for (offered, p50, p99) in &probes {
                top_offered = top_offered.max(*offered);
                hockey_domain.extend([*p50, *p99]);
            }
            let point = |x: f64, y: f64| SeriesPoint {
                x,
                y,
                low: y,
                high: y,
            };
            hockey.push(Series {
                label: format!("{} p99 ({} pairs)", label(broker, scenario), search.point),
                colour,
                dash: "",
                points: probes.iter().map(|(x, _, p99)| point(*x, *p99)).collect(),
            });
            hockey.push(Series {
                label: format!("{} p50", label(broker, scenario)),
                colour,
                dash: "4 3",
                points: probes.iter().map(|(x, p50, _)| point(*x, *p50)).collect(),
            });
        }
    }
    let clients: Vec<(f64, String)> = groups
        .values()
        .flat_map(|p| p.keys().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|p| (p as f64, p.to_string()))
        .collect();
    let mut figures = Vec::new();
    if rate_lines.iter().any(|l| !l.points.is_empty()) {
        figures.push(Figure {
            file: format!("saturation-{test}-rate.svg"),
            svg: LineChart {
                title: "Highest sustained offered rate".to_string(),
                x_label: "client pairs".to_string(),
                y_label: "offered rate (msg/s)".to_string(),
                x_ticks: clients,
                x_log: false,
                y_domain: domain,
                y_log_ratio: 30.0,
                series: rate_lines,
            }
            .render(480.0, 340.0),
            caption: format!(
                "The highest offered rate each broker sustained against client pairs; marker: \
                 median over repetitions, {ERROR_BAR_MEANING}."
            ),
        });
    }
    if top_offered > 0.0 {
        let ticks = (0..=4)
            .map(|i| {
                let v = top_offered * f64::from(i) / 4.0;
                (v, tick_label(v))
            })
            .collect();
        figures.push(Figure {
            file: format!("saturation-{test}-latency.svg"),
            svg: LineChart {
                title: "Latency vs offered load".to_string(),
                x_label: "offered rate (msg/s)".to_string(),
                y_label: "latency (ms)".to_string(),
                x_ticks: ticks,
                x_log: false,
                y_domain: hockey_domain,
                y_log_ratio: 10.0,
                series: hockey,
            }
            .render(480.0, 340.0),
            caption: format!(
                "Latency (p99 solid, p50 dashed) of every probe of one search per broker \
                 against its offered rate: flat while the broker keeps up, rising steeply past \
                 its saturation point. Latency is from the intended send time, so queueing at \
                 the broker shows in full.{} The bound was {}.",
                probe_read_cadence(plan, test)
                    .map(|cadence| format!(
                        " It is not the broker's alone: the probes' subscribers read at most \
                         every {} while deliveries keep coming (receive coalescing), so each \
                         figure includes up to about two such cycles of loadgen's.",
                        humantime::format_duration(cadence)
                    ))
                    .unwrap_or_default(),
                humantime::format_duration(settings.p99_bound)
            ),
        });
    }
    if !figures.is_empty() {
        section.blocks.push(Block::Figures(figures));
    }
    section.blocks.push(Block::Table(table));
    section
}
