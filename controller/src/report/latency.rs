//! The latency test (the study's Fig. 2): boxplots per broker and scenario of the latency
//! histogram merged over repetitions, and the same numbers as a table.

use super::axes::{self, LegendItem, Scale};
use super::estimate::{Estimate, INTERVAL_MEANING};
use super::frame::Frame;
use super::input::{CellFigures, GroupKey, LatencyGroup, RunData};
use super::model::{Block, Figure, Section, Table, ms, ms_like};
use super::svg;
use super::workload_line;
use crate::plan::{Measures, Sweep, TestKind};
use loadgen::tail::TailOwner;

/// What box and whiskers mean, said the same way in every caption.
pub const BOX_MEANING: &str = "Box: 25th to 75th percentile (the interquartile range) of the latency \
     histogram merged over all repetitions of that broker and scenario; line across the box: \
     median; whiskers: 1st and 99th percentile (no outlier points are drawn). Latency is the \
     transit latency, from the moment loadgen handed the message to the socket to its arrival \
     at the subscriber, in ms: the broker's and the network's part, without loadgen's own \
     lateness (the open-loop latency, from the intended send time, is in the table).";

/// The same for results that predate the transit latency.
const OPEN_LOOP_BOX_MEANING: &str = "Box: 25th to 75th percentile (the interquartile range) of the \
     latency histogram merged over all repetitions of that broker and scenario; line across the \
     box: median; whiskers: 1st and 99th percentile (no outlier points are drawn). Latency is \
     from the publisher's intended send time to arrival at the subscriber (open loop), in ms: \
     these results predate the transit latency.";

/// One section per latency test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    super::sections_of(
        data,
        |k| k.measures() == Measures::Latency && k.sweep() == Sweep::Single,
        TestKind::Latency,
        "Latency",
        section,
    )
}

/// A box: its place on the x axis and its percentiles.
struct BoxMark<'a> {
    scenario: usize,
    slot: usize,
    group: &'a LatencyGroup,
}

fn section(data: &RunData, test: usize, title: &str) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(&format!("latency-{test}"), title);
    if let Some(line) = workload_line(data, test) {
        section.paragraph(line);
    }
    let key = |broker: usize, scenario: usize| GroupKey {
        test,
        broker,
        scenario,
        point: 0,
    };
    let open_loop = |broker: usize, scenario: usize| {
        data.latency
            .get(&key(broker, scenario))
            .filter(|g| g.count > 0)
    };
    let transit = |broker: usize, scenario: usize| {
        data.transit_latency
            .get(&key(broker, scenario))
            .filter(|g| g.count > 0)
    };
    // Brokers are compared by transit latency; results that predate it show the open loop.
    let by_transit = data
        .latency
        .keys()
        .filter(|k| k.test == test)
        .all(|k| data.transit_latency.contains_key(k));
    let group = |broker: usize, scenario: usize| {
        if by_transit {
            transit(broker, scenario)
        } else {
            open_loop(broker, scenario)
        }
    };
    let brokers: Vec<usize> = (0..plan.brokers.len())
        .filter(|&b| (0..plan.scenarios.len()).any(|s| group(b, s).is_some()))
        .collect();
    let scenarios: Vec<usize> = (0..plan.scenarios.len())
        .filter(|&s| brokers.iter().any(|&b| group(b, s).is_some()))
        .collect();
    if brokers.is_empty() {
        section.paragraph(
            "No cell of this test was measured (see the failed and skipped cells above).",
        );
        return section;
    }
    let mut boxes = Vec::new();
    let kind = if by_transit { "Transit" } else { "Open-loop" };
    let mut table = Table::new(
        &[
            "Broker",
            "Scenario",
            // Results that predate the transit latency keep the column they always had.
            if by_transit {
                "Transit median (ms)"
            } else {
                "Median (ms)"
            },
            "IQR (ms)",
            "p25 (ms)",
            "p75 (ms)",
            "p1 (ms)",
            "p99 (ms)",
            "Open-loop median (ms)",
            "Open-loop p99 (ms)",
            "Send delay p99 (ms, median of repetitions)",
            "Read delay p99 (ms, median of repetitions)",
            "Tail",
            "Samples",
            "Repetitions",
            "Median of the repetitions' medians [interval] (ms)",
        ],
        2,
    );
    for (slot, &broker) in brokers.iter().enumerate() {
        for (column, &scenario) in scenarios.iter().enumerate() {
            let Some(g) = group(broker, scenario) else {
                continue;
            };
            boxes.push(BoxMark {
                scenario: column,
                slot,
                group: g,
            });
            let cells: Vec<&CellFigures> = data
                .cells
                .iter()
                .filter(|c| c.test == test && c.broker == broker && c.scenario == scenario)
                .collect();
            let open = open_loop(broker, scenario);
            table.row(vec![
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                ms(g.p50),
                ms_like(g.iqr(), g.p50),
                ms(g.p25),
                ms(g.p75),
                ms(g.p1),
                ms(g.p99),
                open.map_or("-".to_string(), |o| ms(o.p50)),
                open.map_or("-".to_string(), |o| ms(o.p99)),
                median_p99(&cells, |s| &s.send_delay),
                median_p99(&cells, |s| &s.read_delay),
                tail_owner(&cells),
                g.count.to_string(),
                g.repetitions.to_string(),
                Estimate::of(
                    &cells
                        .iter()
                        .map(|c| {
                            if by_transit {
                                c.summary.transit_latency.p50_us
                            } else {
                                c.summary.latency.p50_us
                            }
                        })
                        .collect::<Vec<_>>(),
                )
                .map_or("-".to_string(), |e| e.text(ms)),
            ]);
        }
    }
    let scenario_names: Vec<String> = scenarios
        .iter()
        .map(|&s| plan.scenarios[s].name.clone())
        .collect();
    let broker_names: Vec<String> = brokers
        .iter()
        .map(|&b| plan.brokers[b].name.clone())
        .collect();
    section.blocks.push(Block::Figures(vec![Figure {
        file: format!("latency-{test}.svg"),
        svg: boxplot(
            &format!(
                "{title}: {} latency per broker and scenario",
                kind.to_lowercase()
            ),
            &scenario_names,
            &broker_names,
            &boxes,
        ),
        caption: format!(
            "{title} per broker (colour) and network scenario. {}",
            if by_transit {
                BOX_MEANING
            } else {
                OPEN_LOOP_BOX_MEANING
            }
        ),
    }]));
    section.blocks.push(Block::Table(table));
    section.paragraph(format!(
        "Median, IQR and percentiles: of the {} latency histogram merged over all repetitions; \
         the open-loop columns: from each message's intended send time, merged the same way; \
         send delay: how late messages left loadgen; read delay: how late loadgen read \
         deliveries after the kernel received them (from the kernel's receive stamp; - where \
         none was kept). Tail: whose the open-loop p99 is in each \
         repetition, the broker's or loadgen's (its send delay p99, or its read delay p99 after \
         the kernel received a delivery, at least half the open-loop p99 and at least 0.1 ms; \
         or the transit p99 at most half of it, the two p99s at least 0.1 ms apart); a tail \
         that is loadgen's says nothing about the broker. The last column treats each \
         repetition as one measurement: {INTERVAL_MEANING}",
        kind.to_lowercase()
    ));
    section
}

/// Whose the open-loop tail was over a group's repetitions: "broker's", "loadgen's", or
/// "loadgen's in 2 of 5"; "-" without a verdict (no schedule, or results that predate it).
/// The median over the repetitions of one latency figure's p99, ms; "-" where none was kept.
fn median_p99(
    cells: &[&CellFigures],
    figure: impl Fn(&loadgen::Summary) -> &loadgen::summary::LatencySummary,
) -> String {
    crate::stats::median(
        &cells
            .iter()
            .map(|c| figure(&c.summary))
            .filter(|f| f.count > 0)
            .map(|f| f.p99_us)
            .collect::<Vec<_>>(),
    )
    .map_or("-".to_string(), ms)
}

fn tail_owner(cells: &[&CellFigures]) -> String {
    let verdicts: Vec<TailOwner> = cells
        .iter()
        .filter_map(|c| c.summary.latency_tail.as_ref().map(|t| t.owner))
        .collect();
    let loadgens = verdicts
        .iter()
        .filter(|o| **o == TailOwner::Loadgen)
        .count();
    match (verdicts.len(), loadgens) {
        (0, _) => "-".to_string(),
        (_, 0) => "broker's".to_string(),
        (n, l) if l == n => "loadgen's".to_string(),
        (n, l) => format!("loadgen's in {l} of {n}"),
    }
}

/// Grouped boxplots: one group per scenario, one box per broker within it.
fn boxplot(title: &str, scenarios: &[String], brokers: &[String], boxes: &[BoxMark<'_>]) -> String {
    let slot_width = 44.0;
    let group_width = slot_width * brokers.len() as f64 + 36.0;
    let width = (group_width * scenarios.len() as f64 + 90.0).max(520.0);
    let height = 400.0;
    let items: Vec<LegendItem> = brokers
        .iter()
        .enumerate()
        .map(|(i, name)| LegendItem {
            label: name.clone(),
            colour: svg::colour(i),
            dash: "",
            line: false,
            marker: None,
        })
        .collect();
    let mut frame = Frame::new(width, height, title, &items);
    let plot = frame.plot();
    let doc = &mut frame.doc;
    let values: Vec<f64> = boxes
        .iter()
        .flat_map(|b| [b.group.p1 / 1e3, b.group.p99 / 1e3])
        .collect();
    let y = Scale::auto(&values, 30.0, plot.bottom, plot.top);
    let label = if y.log {
        "latency (ms, log scale)"
    } else {
        "latency (ms)"
    };
    axes::y_axis(doc, &plot, &y, label);
    let step = (plot.right - plot.left) / scenarios.len() as f64;
    let centre = |column: usize| plot.left + step * (column as f64 + 0.5);
    let ticks: Vec<(f64, String)> = scenarios
        .iter()
        .enumerate()
        .map(|(i, name)| (centre(i), name.clone()))
        .collect();
    axes::x_axis(doc, &plot, &ticks, "network scenario");
    let slot = (step * 0.8 / brokers.len() as f64).min(slot_width);
    for b in boxes {
        let x = centre(b.scenario) + (b.slot as f64 - (brokers.len() as f64 - 1.0) / 2.0) * slot;
        let half = slot * 0.32;
        let colour = svg::colour(b.slot);
        let at = |us: f64| y.map(us / 1e3);
        let g = b.group;
        doc.line((x, at(g.p99)), (x, at(g.p75)), "#333333", 1.2, "");
        doc.line((x, at(g.p25)), (x, at(g.p1)), "#333333", 1.2, "");
        for whisker in [g.p1, g.p99] {
            doc.line(
                (x - half / 2.0, at(whisker)),
                (x + half / 2.0, at(whisker)),
                "#333333",
                1.2,
                "",
            );
        }
        let top = at(g.p75);
        doc.rect(
            (x - half, top),
            (2.0 * half, at(g.p25) - top),
            colour,
            "#333333",
        );
        doc.line(
            (x - half, at(g.p50)),
            (x + half, at(g.p50)),
            "#ffffff",
            2.4,
            "",
        );
        doc.line(
            (x - half, at(g.p50)),
            (x + half, at(g.p50)),
            "#111111",
            1.2,
            "",
        );
    }
    frame.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_and_whiskers_sit_at_their_percentiles() {
        let group = LatencyGroup {
            count: 100,
            repetitions: 2,
            p1: 1_000.0,
            p25: 4_000.0,
            p50: 5_000.0,
            p75: 6_000.0,
            p99: 9_000.0,
            max: 9_500.0,
        };
        let boxes = [BoxMark {
            scenario: 0,
            slot: 0,
            group: &group,
        }];
        let svg = boxplot("t", &["local".into()], &["mosquitto".into()], &boxes);
        assert_eq!(
            svg.matches("<rect").count(),
            3,
            "background, legend swatch, box"
        );
        assert!(svg.contains(">mosquitto</text>") && svg.contains(">local</text>"));
        assert!(svg.contains("latency (ms)"));
        // Linear 0..10 ms over the plot from y=350 (0) up to y=51 (10): the box spans 4..6 ms.
        let plot_top = 34.0 + 17.0;
        let at = |ms: f64| 350.0 - ms / 10.0 * (350.0 - plot_top);
        let expected = format!(
            "y=\"{}\" width=\"{}\" height=\"{}\"",
            svg::num(at(6.0)),
            svg::num(2.0 * 44.0 * 0.32),
            svg::num(at(4.0) - at(6.0))
        );
        assert!(svg.contains(&expected), "{expected} in {svg}");
    }
}
