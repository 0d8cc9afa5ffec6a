//! The latency test (the study's Fig. 2): boxplots per broker and scenario of the latency
//! histogram merged over repetitions, and the same numbers as a table.

use super::axes::{self, LegendItem, Scale};
use super::estimate::{Estimate, INTERVAL_MEANING};
use super::frame::Frame;
use super::input::{GroupKey, LatencyGroup, RunData};
use super::model::{Block, Figure, Section, Table, ms, ms_like};
use super::svg;
use super::workload_line;
use crate::plan::TestKind;

/// What box and whiskers mean, said the same way in every caption.
pub const BOX_MEANING: &str = "Box: 25th to 75th percentile (the interquartile range) of the latency \
     histogram merged over all repetitions of that broker and scenario; line across the box: \
     median; whiskers: 1st and 99th percentile (no outlier points are drawn). Latency is from \
     the publisher's intended send time to arrival at the subscriber, in ms.";

/// One section per latency test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    let plan = &data.manifest.plan;
    let tests: Vec<usize> = (0..plan.tests.len())
        .filter(|&t| plan.tests[t].kind == TestKind::Latency)
        .collect();
    tests
        .iter()
        .map(|&test| {
            let title = if tests.len() > 1 {
                format!("Latency (test {})", test + 1)
            } else {
                "Latency".to_string()
            };
            section(data, test, &title)
        })
        .collect()
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
    let group = |broker: usize, scenario: usize| {
        data.latency
            .get(&GroupKey {
                test,
                broker,
                scenario,
                point: 0,
            })
            .filter(|g| g.count > 0)
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
    let mut table = Table::new(
        &[
            "Broker",
            "Scenario",
            "Median (ms)",
            "IQR (ms)",
            "p25 (ms)",
            "p75 (ms)",
            "p1 (ms)",
            "p99 (ms)",
            "Samples",
            "Repetitions",
            "Median of the repetitions' medians [95 % CI] (ms)",
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
            table.row(vec![
                plan.brokers[broker].name.clone(),
                plan.scenarios[scenario].name.clone(),
                ms(g.p50),
                ms_like(g.iqr(), g.p50),
                ms(g.p25),
                ms(g.p75),
                ms(g.p1),
                ms(g.p99),
                g.count.to_string(),
                g.repetitions.to_string(),
                Estimate::of(
                    &data
                        .cells
                        .iter()
                        .filter(|c| c.test == test && c.broker == broker && c.scenario == scenario)
                        .map(|c| c.summary.latency.p50_us)
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
            &format!("{title}: end-to-end latency per broker and scenario"),
            &scenario_names,
            &broker_names,
            &boxes,
        ),
        caption: format!("{title} per broker (colour) and network scenario. {BOX_MEANING}"),
    }]));
    section.blocks.push(Block::Table(table));
    section.paragraph(format!(
        "Median, IQR and percentiles: of the histogram merged over all repetitions. The last \
         column treats each repetition as one measurement: {INTERVAL_MEANING}"
    ));
    section
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
