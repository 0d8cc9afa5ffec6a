//! Sustained throughput vs clients: rates the broker kept for a whole measured window, with
//! their intervals over repetitions, what the broker spent per delivery, and each cell's
//! rates over time. Only cells judged sustained (steady, and loadgen not the limit) enter the
//! medians; the others are counted and their reasons given.

use std::collections::{BTreeMap, BTreeSet};

use loadgen::summary::RateKind;

use super::chart::{LineChart, Series};
use super::estimate::{ERROR_BAR_MEANING, Estimate, INTERVAL_MEANING};
use super::input::{CellFigures, RunData};
use super::model::{Block, Figure, Section, Table, ms, rate};
use super::svg;
use super::timeseries;
use crate::plan::{Measures, TestKind};

/// One section per throughput test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    super::sections_of(
        data,
        |k| k.measures() == Measures::SustainedRate,
        TestKind::Throughput,
        "Sustained throughput vs clients",
        section,
    )
}

/// A cell's rate counts as the broker's sustained rate.
pub fn sustained(cell: &CellFigures) -> bool {
    cell.summary.rate_kind == RateKind::Sustained && cell.extras.generator_limit.is_none()
}

/// Why a cell's rate does not count, in a few words.
fn not_counted(cell: &CellFigures) -> String {
    if let Some(limit) = &cell.extras.generator_limit {
        return format!("GENERATOR-LIMITED: {limit}");
    }
    match &cell.summary.steadiness {
        Some(steadiness) if !steadiness.reasons.is_empty() => {
            format!("not steady: {}", steadiness.reasons.join("; "))
        }
        _ => cell.summary.rate_kind.as_str().to_string(),
    }
}

fn section(data: &RunData, test: usize, title: &str) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(&format!("throughput-{test}"), title);
    let entry = &plan.tests[test];
    let cells: Vec<&CellFigures> = data.cells.iter().filter(|c| c.test == test).collect();
    let Some(first) = cells.first() else {
        section.paragraph("No cell of this test was measured (see the cells not measured).");
        return section;
    };
    let s = &first.summary;
    let pacing = match entry.rate {
        Some(offered) => format!("open loop at an offered {} msg/s", rate(offered as f64)),
        None => "closed loop (each publisher keeps its window full)".to_string(),
    };
    section.paragraph(format!(
        "Workload: N publisher/subscriber pairs (one cell per N), MQTT {}, QoS {}, {} B payload, \
         {pacing}, measured for {} s after a {} s warm-up. A cell's rate is SUSTAINED when both \
         halves of its measured window lie within 5 % of the whole, the backlog of deliveries \
         owed stayed bounded, at an offered rate at least 99 % of it arrived, and loadgen was \
         not the limit; only such cells enter the rates below. {INTERVAL_MEANING}",
        s.protocol,
        s.qos,
        s.payload_bytes,
        s.duration_s.unwrap_or(0.0),
        s.warmup_s.unwrap_or(0.0)
    ));
    if let Some(cadence) = s.read_cadence_ms {
        section.paragraph(format!(
            "Latency in this table is a by-product of the rate: loadgen's subscribers read at \
             most every {cadence} ms while deliveries keep coming (receive coalescing, which \
             keeps the instrument's cost to a broker on the same host low), so p50 and p99 \
             include up to about two such cycles. The latency tests read every delivery at once."
        ));
    }
    // (broker, scenario) -> pairs -> cells.
    let mut groups: BTreeMap<(usize, usize), BTreeMap<u64, Vec<&CellFigures>>> = BTreeMap::new();
    for cell in &cells {
        groups
            .entry((cell.broker, cell.scenario))
            .or_default()
            .entry(cell.point)
            .or_default()
            .push(cell);
    }
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
            "SUSTAINED receive (msg/s)",
            "Sustained publish (msg/s)",
            "Sustained cells",
            "Latency p50 / p99 (ms)",
            "Broker CPU (% of a core)",
            "Broker CPU per delivery (µs)",
            "Broker peak memory (MB)",
            "loadgen busy (%), send delay p99 (ms)",
            "Not counted",
        ],
        2,
    );
    let mut lines: Vec<Series> = Vec::new();
    let mut domain = Vec::new();
    for (&(broker, scenario), points) in &groups {
        let label = if several_scenarios {
            format!(
                "{} / {}",
                plan.brokers[broker].name, plan.scenarios[scenario].name
            )
        } else {
            plan.brokers[broker].name.clone()
        };
        let mut line = Vec::new();
        for (&pairs, cells) in points {
            let counted: Vec<&&CellFigures> = cells.iter().filter(|c| sustained(c)).collect();
            let figure = |f: &dyn Fn(&CellFigures) -> Option<f64>| {
                Estimate::of(&counted.iter().filter_map(|c| f(c)).collect::<Vec<_>>())
            };
            let receive = figure(&|c| c.summary.steadiness.as_ref().map(|s| s.receive_msgs_per_s));
            let publish = figure(&|c| c.summary.steadiness.as_ref().map(|s| s.publish_msgs_per_s));
            if let Some(receive) = receive {
                line.push(receive.point(pairs as f64));
                domain.extend([receive.low, receive.high]);
            }
            let text = |e: Option<Estimate>, f: fn(f64) -> String| {
                e.map_or("-".to_string(), |e| e.text(f))
            };
            let p50 = figure(&|c| Some(c.summary.latency.p50_us));
            let p99 = figure(&|c| Some(c.summary.latency.p99_us));
            let latency = match (p50, p99) {
                (Some(p50), Some(p99)) => format!("{} / {}", ms(p50.median), ms(p99.median)),
                _ => "-".to_string(),
            };
            let one_decimal = |v: f64| format!("{v:.1}");
            let reasons: BTreeSet<String> = cells
                .iter()
                .filter(|c| !sustained(c))
                .map(|c| not_counted(c))
                .collect();
            table.row(vec![
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                pairs.to_string(),
                text(receive, rate),
                text(publish, rate),
                format!("{} of {}", counted.len(), cells.len()),
                latency,
                text(figure(&|c| c.extras.broker_cpu_percent), |v| {
                    format!("{v:.0}")
                }),
                text(figure(&|c| c.extras.broker_cpu_us_per_delivery), |v| {
                    format!("{v:.2}")
                }),
                text(figure(&|c| c.extras.broker_peak_rss_mb), one_decimal),
                format!(
                    "{}, {}",
                    text(
                        Estimate::of(
                            &cells
                                .iter()
                                .map(|c| c.summary.generator.busy_percent)
                                .collect::<Vec<_>>()
                        ),
                        |v| format!("{v:.0}"),
                    ),
                    match Estimate::of(
                        &cells
                            .iter()
                            .filter(|c| c.summary.send_delay.count > 0)
                            .map(|c| c.summary.send_delay.p99_us)
                            .collect::<Vec<_>>(),
                    ) {
                        Some(delay) => ms(delay.median),
                        None => "closed loop".to_string(),
                    }
                ),
                reasons.into_iter().collect::<Vec<_>>().join(" | "),
            ]);
        }
        lines.push(Series {
            label,
            colour: svg::colour(brokers.iter().position(|&b| b == broker).unwrap_or(0)),
            dash: if several_scenarios {
                svg::dash(scenarios.iter().position(|&s| s == scenario).unwrap_or(0))
            } else {
                ""
            },
            points: line,
        });
    }
    let x_ticks: Vec<(f64, String)> = groups
        .values()
        .flat_map(|points| points.keys().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|p| (p as f64, p.to_string()))
        .collect();
    if lines.iter().any(|l| !l.points.is_empty()) {
        let chart = LineChart {
            title: "Sustained receive rate".to_string(),
            x_label: "client pairs (publishers = subscribers)".to_string(),
            y_label: "deliveries per second".to_string(),
            x_ticks,
            x_log: false,
            y_domain: domain,
            y_log_ratio: 30.0,
            series: lines,
        };
        section.blocks.push(Block::Figures(vec![Figure {
            file: format!("throughput-{test}-sustained.svg"),
            svg: chart.render(480.0, 340.0),
            caption: format!(
                "Sustained receive rate (all subscribers together over the measured window) \
                 against client pairs, one line per broker; marker: median over the sustained \
                 repetitions, {ERROR_BAR_MEANING}. Points without a sustained repetition are \
                 left out."
            ),
        }]));
    } else {
        section.paragraph(
            "No cell of this test was sustained: there is no sustained rate to draw (the table \
             says why each was not).",
        );
    }
    section.blocks.push(Block::Table(table));
    section.paragraph(
        "Broker CPU: the broker process's (or pod's) mean CPU over the measured window, from \
         its node's samples every 500 ms; per delivery: that CPU time divided by the \
         deliveries in the window. On one host the broker's write() also does the receiving \
         side's TCP work, so these figures are higher there than on a real network. loadgen \
         busy: its CPU as a share of what it may use; GENERATOR-LIMITED cells measured \
         loadgen, not the broker.",
    );
    let mut over_time = Vec::new();
    for (&(broker, scenario), points) in &groups {
        // The largest client count's first repetition: where steadiness is hardest.
        let Some(cell) = points
            .iter()
            .next_back()
            .and_then(|(_, cells)| cells.iter().min_by_key(|c| c.repetition))
        else {
            continue;
        };
        let Some(series) = &cell.series else {
            continue;
        };
        let name = format!(
            "{}, {}, {} pairs",
            plan.brokers[broker].name, plan.scenarios[scenario].name, cell.point
        );
        over_time.push(timeseries::figure(
            &name,
            series,
            format!("throughput-{test}-series-b{broker}-s{scenario}.svg"),
            &format!(
                "{name}, repetition {} ({})",
                cell.repetition,
                cell.summary.rate_kind.as_str()
            ),
        ));
    }
    if !over_time.is_empty() {
        section.heading("Over time");
        for pair in over_time.chunks(2) {
            section.blocks.push(Block::Figures(pair.to_vec()));
        }
    }
    section
}
