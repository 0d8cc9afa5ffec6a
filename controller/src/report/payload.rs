//! Latency vs payload (the study's Tables IV and V): median-IQR per payload, broker and
//! scenario as a table, and median latency against payload size as one chart per scenario.

use std::collections::BTreeSet;

use loadgen::size::ByteSize;

use super::chart::{LineChart, Series, SeriesPoint};
use super::input::{GroupKey, LatencyGroup, RunData};
use super::model::{Block, Figure, Section, Table, ms, ms_like};
use super::svg;
use super::workload_line;
use crate::plan::{Measures, Sweep, TestKind};

/// One section per payload test in the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    super::sections_of(
        data,
        |k| k.measures() == Measures::Latency && k.sweep() == Sweep::Payloads,
        TestKind::Payload,
        "Latency vs payload",
        section,
    )
}

/// `median-IQR` in ms, as the study printed it.
pub fn median_iqr(group: &LatencyGroup) -> String {
    format!("{}-{}", ms(group.p50), ms_like(group.iqr(), group.p50))
}

fn section(data: &RunData, test: usize, title: &str) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(&format!("payload-{test}"), title);
    if let Some(line) = workload_line(data, test) {
        section.paragraph(line);
    }
    let groups: Vec<(&GroupKey, &LatencyGroup)> = data
        .latency
        .iter()
        .filter(|(key, group)| key.test == test && group.count > 0)
        .collect();
    if groups.is_empty() {
        section.paragraph(
            "No cell of this test was measured (see the failed and skipped cells above).",
        );
        return section;
    }
    let get = |broker: usize, scenario: usize, point: u64| {
        groups
            .iter()
            .find(|(k, _)| k.broker == broker && k.scenario == scenario && k.point == point)
            .map(|(_, g)| *g)
    };
    let payloads: BTreeSet<u64> = groups.iter().map(|(k, _)| k.point).collect();
    let brokers: BTreeSet<usize> = groups.iter().map(|(k, _)| k.broker).collect();
    let scenarios: BTreeSet<usize> = groups.iter().map(|(k, _)| k.scenario).collect();

    let mut header = vec!["Payload".to_string(), "Broker".to_string()];
    header.extend(
        scenarios
            .iter()
            .map(|&s| format!("{} median-IQR (ms)", plan.scenarios[s].name)),
    );
    let mut table = Table {
        header,
        rows: Vec::new(),
        label_columns: 2,
    };
    for &payload in &payloads {
        for &broker in &brokers {
            let mut row = vec![
                ByteSize(payload).to_string(),
                plan.brokers[broker].name.clone(),
            ];
            row.extend(scenarios.iter().map(|&scenario| {
                get(broker, scenario, payload).map_or_else(|| "n/a".to_string(), median_iqr)
            }));
            table.row(row);
        }
    }
    section.paragraph(
        "Each cell: median-IQR in ms (as in the study's Tables IV and V) of the latency \
         histogram merged over all repetitions of that payload, broker and scenario; \
         n/a where no cell was measured.",
    );
    section.blocks.push(Block::Table(table));

    let x_ticks: Vec<(f64, String)> = payloads
        .iter()
        .map(|&p| (p as f64, ByteSize(p).to_string()))
        .collect();
    let y_domain: Vec<f64> = groups
        .iter()
        .flat_map(|(_, g)| [g.p25 / 1e3, g.p75 / 1e3])
        .collect();
    let figures = scenarios
        .iter()
        .map(|&scenario| {
            let name = &plan.scenarios[scenario].name;
            let series = brokers
                .iter()
                .enumerate()
                .map(|(i, &broker)| Series {
                    label: plan.brokers[broker].name.clone(),
                    colour: svg::colour(i),
                    dash: "",
                    points: payloads
                        .iter()
                        .filter_map(|&p| {
                            let g = get(broker, scenario, p)?;
                            Some(SeriesPoint {
                                x: p as f64,
                                y: g.p50 / 1e3,
                                low: g.p25 / 1e3,
                                high: g.p75 / 1e3,
                            })
                        })
                        .collect(),
                })
                .collect();
            let chart = LineChart {
                title: format!("Median latency vs payload, {name}"),
                x_label: "payload size (bytes on the wire)".to_string(),
                y_label: "latency (ms)".to_string(),
                x_ticks: x_ticks.clone(),
                x_log: true,
                y_domain: y_domain.clone(),
                y_log_ratio: 8.0,
                series,
            };
            Figure {
                file: format!("payload-{test}-{}.svg", file_part(name)),
                svg: chart.render(460.0, 340.0),
                caption: format!(
                    "Scenario {name}: median latency (ms) against payload size (log scale), one \
                     line per broker; marker: median, error bar: 25th to 75th percentile, of the \
                     histogram merged over repetitions. Charts of all scenarios share the y scale."
                ),
            }
        })
        .collect();
    section.blocks.push(Block::Figures(figures));
    section
}

/// A name made safe for a file name: letters and digits kept, the rest `_`.
pub fn file_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_like_the_study_tables() {
        let group = LatencyGroup {
            count: 10,
            repetitions: 1,
            p25: 5_000.0,
            p50: 5_390.0,
            p75: 6_000.0,
            ..LatencyGroup::default()
        };
        assert_eq!(median_iqr(&group), "5.39-1.00");
        let narrow = LatencyGroup {
            p75: 5_999.0,
            ..group
        };
        assert_eq!(median_iqr(&narrow), "5.39-1.00");
        assert_eq!(file_part("Edge 5G/x"), "edge_5g_x");
    }
}
