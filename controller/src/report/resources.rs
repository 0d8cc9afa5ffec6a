//! Broker CPU and memory during each test, from the samples in `metrics.csv` of the watched
//! process (the broker) taken while the test's cells ran.

use std::collections::BTreeMap;

use super::axes::{self, LegendItem, Scale};
use super::frame::Frame;
use super::input::{CellPlace, RunData};
use super::model::{Block, Figure, Section, Table};
use super::svg;
use super::test_label;

/// Samples of one broker process during one test.
#[derive(Debug, Clone, Default, PartialEq)]
struct Usage {
    node: String,
    cpu: Vec<f64>,
    node_cpu: Vec<f64>,
    rss_max: u64,
}

impl Usage {
    fn cpu_mean(&self) -> f64 {
        self.cpu.iter().sum::<f64>() / self.cpu.len().max(1) as f64
    }

    fn cpu_max(&self) -> f64 {
        self.cpu.iter().copied().fold(0.0, f64::max)
    }
}

/// The section, or a note that no samples were recorded.
pub fn section(data: &RunData) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new("resources", "Broker CPU and memory");
    // (broker, test, process) -> samples; samples of failed cells have no entry in cell_index.
    let mut usage: BTreeMap<(usize, usize, String), Usage> = BTreeMap::new();
    for row in data.metrics.iter().filter(|r| !r.process.is_empty()) {
        let Some(&CellPlace { broker, test }) = data.cell_index.get(&row.cell) else {
            continue;
        };
        let entry = usage
            .entry((broker, test, row.process.clone()))
            .or_default();
        if entry.node.is_empty() {
            entry.node = row.node.clone();
        }
        entry.cpu.push(row.process_cpu_percent);
        entry.node_cpu.push(row.node_cpu_percent);
        entry.rss_max = entry.rss_max.max(row.process_rss_bytes);
    }
    if usage.is_empty() {
        section.paragraph(
            "No broker samples: metrics.csv is absent or holds no rows of a broker process \
             during a measured cell.",
        );
        return section;
    }
    section.paragraph(
        "From metrics.csv: samples of the broker process taken while the cells of each test ran \
         (all scenarios and repetitions; failed cells left out). CPU is in percent of one core, \
         so a broker using two cores fully shows 200 %; node CPU is in percent of all the node's \
         cores; RSS is resident memory.",
    );
    let mut table = Table::new(
        &[
            "Broker",
            "Test",
            "Process",
            "Node",
            "Samples",
            "CPU mean (%)",
            "CPU max (%)",
            "RSS max (MB)",
            "Node CPU mean (%)",
        ],
        4,
    );
    for ((broker, test, process), u) in &usage {
        table.row(vec![
            plan.brokers[*broker].name.clone(),
            test_label(plan, *test),
            process.clone(),
            u.node.clone(),
            u.cpu.len().to_string(),
            format!("{:.1}", u.cpu_mean()),
            format!("{:.1}", u.cpu_max()),
            format!("{:.1}", u.rss_max as f64 / 1e6),
            format!(
                "{:.1}",
                u.node_cpu.iter().sum::<f64>() / u.node_cpu.len().max(1) as f64
            ),
        ]);
    }
    section.blocks.push(Block::Figures(vec![Figure {
        file: "resources-cpu.svg".to_string(),
        svg: cpu_bars(data, &usage),
        caption: "Broker CPU per test, percent of one core: bar = mean over all samples taken \
                  during the test's cells, black tick = the highest sample."
            .to_string(),
    }]));
    section.blocks.push(Block::Table(table));
    section
}

/// Bars of mean CPU with a tick at the maximum: one group per test, one bar per broker.
fn cpu_bars(data: &RunData, usage: &BTreeMap<(usize, usize, String), Usage>) -> String {
    let plan = &data.manifest.plan;
    let mut tests: Vec<usize> = usage.keys().map(|(_, t, _)| *t).collect();
    tests.sort_unstable();
    tests.dedup();
    let mut bars: Vec<(usize, String)> = usage.keys().map(|(b, _, p)| (*b, p.clone())).collect();
    bars.sort();
    bars.dedup();
    let slot = 30.0;
    let group = slot * bars.len() as f64 + 30.0;
    let width = (group * tests.len() as f64 + 90.0).max(480.0);
    let height = 320.0;
    let title = "Broker CPU per test";
    let items: Vec<LegendItem> = bars
        .iter()
        .enumerate()
        .map(|(i, (broker, process))| LegendItem {
            label: if *process == plan.brokers[*broker].name {
                process.clone()
            } else {
                format!("{} ({process})", plan.brokers[*broker].name)
            },
            colour: svg::colour(i),
            dash: "",
            line: false,
            marker: None,
        })
        .collect();
    let mut frame = Frame::new(width, height, title, &items);
    let plot = frame.plot();
    let doc = &mut frame.doc;
    let top = usage.values().map(Usage::cpu_max).fold(0.0, f64::max);
    let y = Scale::linear(top, plot.bottom, plot.top);
    axes::y_axis(doc, &plot, &y, "CPU (% of one core)");
    let step = (plot.right - plot.left) / tests.len() as f64;
    let centre = |i: usize| plot.left + step * (i as f64 + 0.5);
    let ticks: Vec<(f64, String)> = tests
        .iter()
        .enumerate()
        .map(|(i, &t)| (centre(i), test_label(plan, t)))
        .collect();
    axes::x_axis(doc, &plot, &ticks, "test");
    let width_of_bar = (step * 0.8 / bars.len() as f64).min(slot) * 0.8;
    for ((broker, test, process), u) in usage {
        let (Some(column), Some(index)) = (
            tests.iter().position(|t| t == test),
            bars.iter().position(|(b, p)| b == broker && p == process),
        ) else {
            continue;
        };
        let x =
            centre(column) + (index as f64 - (bars.len() as f64 - 1.0) / 2.0) * width_of_bar / 0.8;
        let bar_top = y.map(u.cpu_mean());
        doc.rect(
            (x - width_of_bar / 2.0, bar_top),
            (width_of_bar, plot.bottom - bar_top),
            svg::colour(index),
            "",
        );
        let peak = y.map(u.cpu_max());
        doc.line(
            (x - width_of_bar / 2.0, peak),
            (x + width_of_bar / 2.0, peak),
            "#111111",
            2.0,
            "",
        );
    }
    frame.finish()
}
