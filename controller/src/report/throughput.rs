//! Throughput vs clients (the study's Fig. 4 and 5): the aggregate publish and receive rates
//! over the steady window, beside the per-client median rate the study's tool printed.

use std::collections::{BTreeMap, BTreeSet};

use loadgen::Summary;
use loadgen::summary::WindowKind;

use super::chart::{LineChart, Series, SeriesPoint};
use super::input::RunData;
use super::model::{Block, Figure, Section, Table, rate};
use super::svg;
use super::workload_line;
use crate::plan::TestKind;

/// Why two rates are shown, after the study's tool (PAPER.md, "What we found").
pub const TWO_RATES: &str = "Two different rates are shown, and they are not comparable with each other. \
     AGGREGATE: the messages of all clients together per second, over the steady window in which \
     every client was active; this is what the broker sustained. PER-CLIENT MEDIAN: each client's \
     own messages over its own first-to-last message, median over the clients; this is what the \
     study's tool (mqtt-stresser) printed, so the study's Fig. 4 and 5 compare with this column, \
     not with the aggregate. mqtt-stresser also started its receive clock only after a client \
     had finished publishing, so its receive medians were lower still. The aggregate can be many \
     times the per-client median: 100 clients x 1000 QoS 0 messages against Mosquitto on one \
     2-core machine moved about 140,000 msg/s through the broker each way, while mqtt-stresser \
     printed medians of 7,800 msg/s publish and 3,600 msg/s receive.";

/// One section per throughput test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    let plan = &data.manifest.plan;
    let tests: Vec<usize> = (0..plan.tests.len())
        .filter(|&t| plan.tests[t].kind == TestKind::Throughput)
        .collect();
    tests
        .iter()
        .map(|&test| {
            let title = if tests.len() > 1 {
                format!("Throughput vs clients (test {})", test + 1)
            } else {
                "Throughput vs clients".to_string()
            };
            section(data, test, &title)
        })
        .collect()
}

/// Mean, min and max of one figure over repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Over `values` (not empty).
    pub fn of(values: &[f64]) -> Self {
        let n = values.len().max(1) as f64;
        Spread {
            mean: values.iter().sum::<f64>() / n,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// `mean (min-max)`, or just the mean when all repetitions agree.
    pub fn text(&self) -> String {
        if rate(self.min) == rate(self.max) {
            rate(self.mean)
        } else {
            format!(
                "{} ({}-{})",
                rate(self.mean),
                rate(self.min),
                rate(self.max)
            )
        }
    }

    fn point(&self, x: f64) -> SeriesPoint {
        SeriesPoint {
            x,
            y: self.mean,
            low: self.min,
            high: self.max,
        }
    }
}

/// Reads one rate of a cell.
type RateOf = fn(&Summary) -> f64;

/// The four rates in display order: publish aggregate, publish per-client median, receive
/// aggregate, receive per-client median.
const RATES: [RateOf; 4] = [
    |s| s.publish_rate.msgs_per_s,
    |s| s.publish_rate_per_client.median_msgs_per_s,
    |s| s.receive_rate.msgs_per_s,
    |s| s.receive_rate_per_client.median_msgs_per_s,
];

fn section(data: &RunData, test: usize, title: &str) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(&format!("throughput-{test}"), title);
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
            "Publish AGGREGATE (msg/s)",
            "Publish PER-CLIENT median (msg/s)",
            "Receive AGGREGATE (msg/s)",
            "Receive PER-CLIENT median (msg/s)",
            "Lost (%)",
            "Repetitions",
            "Aggregate window",
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
            let spreads: Vec<Spread> = RATES
                .iter()
                .map(|figure| Spread::of(&summaries.iter().map(|s| figure(s)).collect::<Vec<_>>()))
                .collect();
            for (line, spread) in lines.iter_mut().zip(&spreads) {
                line.push(spread.point(pairs as f64));
            }
            let lost: Vec<f64> = summaries.iter().filter_map(|s| s.lost_percent).collect();
            let not_steady = summaries
                .iter()
                .flat_map(|s| [s.publish_rate.window, s.receive_rate.window])
                .filter(|w| *w != WindowKind::Steady)
                .count();
            let mut row = vec![
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                pairs.to_string(),
            ];
            row.extend(spreads.iter().map(Spread::text));
            row.push(if lost.is_empty() {
                "n/a".to_string()
            } else {
                format!("{:.3}", Spread::of(&lost).mean)
            });
            row.push(summaries.len().to_string());
            row.push(if not_steady == 0 {
                "steady".to_string()
            } else {
                format!("not steady in {not_steady} of {}", 2 * summaries.len())
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
        for (i, kind) in [(aggregate, "AGGREGATE"), (per_client, "PER-CLIENT MEDIAN")] {
            let what = if kind == "AGGREGATE" {
                "all clients together, steady window"
            } else {
                "median client, as mqtt-stresser printed"
            };
            let chart = LineChart {
                title: format!("{verb} rate, {kind} ({what})"),
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
                    "throughput-{test}-{}-{}.svg",
                    verb.to_lowercase(),
                    if i == aggregate {
                        "aggregate"
                    } else {
                        "per-client"
                    }
                ),
                svg: chart.render(480.0, 340.0),
                caption: format!(
                    "{verb} rate {kind} ({what}) in msg/s against client pairs, one line per \
                     broker; marker: mean over repetitions, error bar: min to max over \
                     repetitions. The two {} charts share their y scale.",
                    verb.to_lowercase()
                ),
            });
        }
    }
    let (publish, receive) = figures.split_at(2);
    section.blocks.push(Block::Figures(publish.to_vec()));
    section.blocks.push(Block::Figures(receive.to_vec()));
    section.paragraph(
        "Each rate: mean over repetitions, with min-max in brackets when they differ. Lost: \
         expected deliveries that never arrived (QoS 0 allows loss). Aggregate window: whether \
         the aggregate rates came from the steady window or, where clients hardly overlapped, \
         the full first-to-last message window.",
    );
    section.blocks.push(Block::Table(table));
    section
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_show_min_and_max_only_when_they_differ() {
        let spread = Spread::of(&[100.0, 300.0]);
        assert_eq!((spread.mean, spread.min, spread.max), (200.0, 100.0, 300.0));
        assert_eq!(spread.text(), "200 (100-300)");
        assert_eq!(Spread::of(&[7_800.2, 7_799.9]).text(), "7,800");
    }
}
