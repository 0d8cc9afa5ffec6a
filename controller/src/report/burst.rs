//! The study's throughput test as it ran it (Fig. 4 and 5), kept for comparison: N pairs, M
//! messages as fast as possible. Its rates are BURST rates (a few hundred ms of queues filling
//! and draining, never a rate the broker sustains), shown beside the per-client median the
//! study's tool printed; the sustained rates are in the throughput section.

use std::collections::{BTreeMap, BTreeSet};

use loadgen::Summary;
use loadgen::summary::WindowKind;

use super::chart::{LineChart, Series, SeriesPoint};
use super::estimate::{ERROR_BAR_MEANING, Estimate, INTERVAL_MEANING};
use super::input::RunData;
use super::model::{Block, Figure, Section, Table, rate};
use super::svg;
use super::workload_line;
use crate::plan::{Measures, TestKind};

/// Why two rates are shown, after the study's tool (PAPER.md, "What we found").
pub const TWO_RATES: &str = "These are BURST figures: each publisher sends its messages as fast as \
     possible and stops, so the whole cell lasts a few hundred milliseconds, most of it queues \
     filling and draining. Neither rate is one the broker sustains (the throughput and \
     saturation sections measure that). Two different rates are shown, and they are not \
     comparable with each other. BURST AGGREGATE: the messages of all clients together per \
     second, over the window (length in the last column) in which every client was active. \
     PER-CLIENT MEDIAN: each client's own messages over its own first-to-last message, median \
     over the clients; this is what the study's tool (mqtt-stresser) printed, so the study's \
     Fig. 4 and 5 compare with this column. mqtt-stresser also started its receive clock only \
     after a client had finished publishing, so its receive medians were lower still: 100 \
     clients x 1000 QoS 0 messages against Mosquitto on one 2-core machine moved about 140,000 \
     msg/s through the broker each way, while mqtt-stresser printed medians of 7,800 msg/s \
     publish and 3,600 msg/s receive.";

/// One section per burst test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    super::sections_of(
        data,
        |k| k.measures() == Measures::BurstRate,
        TestKind::Burst,
        "The study's burst test, not sustained rates",
        section,
    )
}

/// Reads one rate of a cell; `None` when the cell has no such figure.
type RateOf = fn(&Summary) -> Option<f64>;

/// The four rates in display order: publish aggregate, publish per-client median, receive
/// aggregate, receive per-client median (absent when no client had a window of its own).
const RATES: [RateOf; 4] = [
    |s| Some(s.publish_rate.msgs_per_s),
    |s| s.publish_rate_per_client.median(),
    |s| Some(s.receive_rate.msgs_per_s),
    |s| s.receive_rate_per_client.median(),
];

fn section(data: &RunData, test: usize, title: &str) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(&format!("burst-{test}"), title);
    if let Some(line) = workload_line(data, test) {
        section.paragraph(line);
    }
    // (broker, scenario) -> pairs -> summaries of the repetitions.
    let mut groups: BTreeMap<(usize, usize), BTreeMap<u64, Vec<&Summary>>> = BTreeMap::new();
    for cell in data.cells.iter().filter(|c| c.test == test) {
        groups
            .entry((cell.broker, cell.scenario))
            .or_default()
            .entry(cell.point)
            .or_default()
            .push(&cell.summary);
    }
    if groups.is_empty() {
        section.paragraph(
            "No cell of this test was measured (see the failed and skipped cells above).",
        );
        return section;
    }
    section.paragraph(TWO_RATES);
    let several_scenarios = groups.keys().map(|(_, s)| s).collect::<BTreeSet<_>>().len() > 1;
    let brokers: Vec<usize> = groups
        .keys()
        .map(|(b, _)| *b)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let scenarios: Vec<usize> = groups
        .keys()
        .map(|(_, s)| *s)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut table = Table::new(
        &[
            "Broker",
            "Scenario",
            "Client pairs",
            "Publish BURST aggregate (msg/s)",
            "Publish PER-CLIENT median (msg/s)",
            "Receive BURST aggregate (msg/s)",
            "Receive PER-CLIENT median (msg/s)",
            "Lost (%)",
            "Repetitions",
            "Burst window",
        ],
        2,
    );
    let mut series: [Vec<Series>; 4] = Default::default();
    for (&(broker, scenario), points) in &groups {
        let label = if several_scenarios {
            format!(
                "{} / {}",
                plan.brokers[broker].name, plan.scenarios[scenario].name
            )
        } else {
            plan.brokers[broker].name.clone()
        };
        let colour_index = brokers.iter().position(|&b| b == broker).unwrap_or(0);
        let dash_index = scenarios.iter().position(|&s| s == scenario).unwrap_or(0);
        let mut lines: [Vec<SeriesPoint>; 4] = Default::default();
        for (&pairs, summaries) in points {
            // One estimate per rate, in RATES' order, so each lands in its own column, with
            // how many repetitions had the figure.
            let estimates: Vec<Option<(Estimate, usize)>> = RATES
                .iter()
                .map(|figure| {
                    let values: Vec<f64> = summaries.iter().filter_map(|s| figure(s)).collect();
                    Estimate::of(&values).map(|estimate| (estimate, values.len()))
                })
                .collect();
            for (line, estimate) in lines.iter_mut().zip(&estimates) {
                if let Some((estimate, _)) = estimate {
                    line.push(estimate.point(pairs as f64));
                }
            }
            let lost: Vec<f64> = summaries.iter().filter_map(|s| s.lost_percent).collect();
            let windows: Vec<f64> = summaries.iter().map(|s| s.receive_rate.window_ms).collect();
            let full_windows = summaries
                .iter()
                .flat_map(|s| [s.publish_rate.window, s.receive_rate.window])
                .filter(|w| *w != WindowKind::Steady)
                .count();
            let mut row = vec![
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                pairs.to_string(),
            ];
            row.extend(estimates.iter().map(|estimate| match estimate {
                None => "n/a".to_string(),
                Some((estimate, had)) if *had < summaries.len() => format!(
                    "{} ({had} of {} repetitions)",
                    estimate.text(rate),
                    summaries.len()
                ),
                Some((estimate, _)) => estimate.text(rate),
            }));
            row.push(match Estimate::of(&lost) {
                None => "n/a".to_string(),
                Some(lost) => format!("{:.3}", lost.median),
            });
            row.push(summaries.len().to_string());
            let window = Estimate::of(&windows).map_or(0.0, |w| w.median);
            row.push(if full_windows == 0 {
                format!("{window:.0} ms, all clients active")
            } else {
                format!(
                    "{window:.0} ms; {full_windows} of {} from first to last message (clients hardly overlapped)",
                    2 * summaries.len()
                )
            });
            table.row(row);
        }
        for (all, points) in series.iter_mut().zip(lines) {
            all.push(Series {
                label: label.clone(),
                colour: svg::colour(colour_index),
                dash: if several_scenarios {
                    svg::dash(dash_index)
                } else {
                    ""
                },
                points,
            });
        }
    }
    let mut x_ticks: Vec<(f64, String)> = groups
        .values()
        .flat_map(|points| points.keys().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|p| (p as f64, p.to_string()))
        .collect();
    x_ticks.dedup();
    let mut figures = Vec::new();
    for direction in 0..2 {
        let (aggregate, per_client) = (2 * direction, 2 * direction + 1);
        let domain: Vec<f64> = [aggregate, per_client]
            .iter()
            .flat_map(|&i| {
                series[i]
                    .iter()
                    .flat_map(|s| s.points.iter().flat_map(|p| [p.low, p.high]))
            })
            .collect();
        let verb = if direction == 0 { "Publish" } else { "Receive" };
        for (i, kind) in [
            (aggregate, "BURST aggregate"),
            (per_client, "per-client median"),
        ] {
            let what = if i == aggregate {
                "all clients together over a burst of a few hundred ms; not a sustained rate"
            } else {
                "the median client, as mqtt-stresser printed it"
            };
            let chart = LineChart {
                // Short titles: a chart's title must fit its width.
                title: format!("{verb}, {kind}"),
                x_label: "client pairs (publishers = subscribers)".to_string(),
                y_label: format!("{} rate (msg/s)", verb.to_lowercase()),
                x_ticks: x_ticks.clone(),
                x_log: false,
                y_domain: domain.clone(),
                y_log_ratio: 30.0,
                series: series[i].clone(),
            };
            figures.push(Figure {
                file: format!(
                    "burst-{test}-{}-{}.svg",
                    verb.to_lowercase(),
                    if i == aggregate {
                        "aggregate"
                    } else {
                        "per-client"
                    }
                ),
                svg: chart.render(480.0, 340.0),
                caption: format!(
                    "{verb} rate, {kind} ({what}), in msg/s against client pairs, one line per \
                     broker; marker: median over repetitions, {ERROR_BAR_MEANING}. The two {} \
                     charts share their y scale.",
                    verb.to_lowercase()
                ),
            });
        }
    }
    let (publish, receive) = figures.split_at(2);
    section.blocks.push(Block::Figures(publish.to_vec()));
    section.blocks.push(Block::Figures(receive.to_vec()));
    section.paragraph(format!(
        "{INTERVAL_MEANING} Lost: expected deliveries that never arrived (QoS 0 allows loss), \
         median over repetitions. Burst window: the median length of the window the burst \
         aggregate was taken over. A repetition in which no client had a window of its own \
         (each got all its messages in one read) has no per-client median: the column gives \
         the repetitions that had one, or n/a."
    ));
    section.blocks.push(Block::Table(table));
    section
}
