//! Beside the study: its Tables IV and V (median-IQR of latency vs payload, per broker,
//! scenario and setup) next to this run's figures for the same broker, scenario and payload,
//! with the delay each adds over local and what the path each message took should add.
//!
//! The study's figures are its published ones (../shared/PAPER.md). Its path: netem on every
//! node's egress with half the scenario's total per side, and the tests dialled the headnode's
//! NodePort, so kube-proxy forwarded each message to the worker's pod and back: four emulated
//! egresses per publish-to-delivery (edge 4 x 1.25 = 5.0 ms, cloud 4 x 3.125 = 12.5 ms).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use domain::Product;
use loadgen::size::ByteSize;
use serde::Deserialize;

use super::emulation::{baseline, message_path, path_model};
use super::input::{GroupKey, LatencyGroup, RunData};
use super::model::{Block, Section, Table, ms, signed_ms};
use super::payload::median_iqr;
use crate::plan::{MessagePath, TestKind, scenario_preset};

/// The study's tables: `controller/data/study-tables.toml`, with their source.
const STUDY_TABLES: &str = include_str!("../../data/study-tables.toml");

/// The study's hardware setups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Setup {
    Amd64,
    Arm64,
}

/// `STUDY_TABLES`, read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyTables {
    /// Where the figures come from.
    source: String,
    /// The nodes its messages visited.
    path: Vec<String>,
    figure: Vec<StudyFigure>,
}

/// One figure of the study's Tables IV/V: median and IQR per scenario, ms.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyFigure {
    payload: ByteSize,
    setup: Setup,
    product: String,
    local: (f64, f64),
    edge: (f64, f64),
    cloud: (f64, f64),
}

impl StudyFigure {
    fn product(&self) -> Option<Product> {
        self.product.parse().ok()
    }

    /// (median, IQR) in scenario `index` of [`SCENARIOS`].
    fn in_scenario(&self, index: usize) -> (f64, f64) {
        [self.local, self.edge, self.cloud][index]
    }
}

/// The scenarios of the study's Table II, in its tables' order.
const SCENARIOS: [&str; 3] = ["local", "edge", "cloud"];

fn study_tables() -> Result<&'static StudyTables, String> {
    static TABLES: OnceLock<Result<StudyTables, String>> = OnceLock::new();
    TABLES
        .get_or_init(|| {
            toml::from_str(STUDY_TABLES).map_err(|e| format!("data/study-tables.toml: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// What the study's path added over local one way in scenario `index`, ms: its hops, each
/// delayed by half of Table II's total (netem on every node's egress).
fn study_path_adds_ms(tables: &StudyTables, index: usize) -> f64 {
    let path = MessagePath {
        nodes: tables.path.clone(),
    };
    let total = scenario_preset(SCENARIOS[index]).map_or(std::time::Duration::ZERO, |p| p.0);
    path.added_delay(|_| total / 2).as_secs_f64() * 1e3
}

/// Why the absolute figures differ, beyond the path.
const REASONS: [&str; 4] = [
    "Path: the study's messages crossed four emulated egresses (tester -> headnode NodePort -> \
     worker pod -> headnode -> tester, netem with half the scenario's total on every node); \
     Continuum dials the broker's own node unless the plan sets an entry (entry = \"headnode\" \
     reproduces the study's path, see examples/study.toml). 'Path model' gives what each path \
     should add over local, so compare the added delays with their own path model, not with \
     each other.",
    "Clock and stamp: the study's JMeter plugin stamped messages with an ASCII epoch in \
     milliseconds (24 extra bytes, 1 ms resolution, window averages at the subscriber); \
     Continuum stamps nanoseconds in binary and maps clocks through measured offsets.",
    "Hardware and placement: the study ran a tester PC and Raspberry Pi 4 or AMD64 nodes over \
     a real LAN; this run's nodes are what its manifest lists (on one machine, loopback or \
     veth links add microseconds where a LAN adds a few hundred).",
    "Repetitions and merging: the study's median-IQR are over its repetitions' samples; \
     Continuum's are of the latency histogram merged over this run's repetitions.",
];

fn study_figure(
    tables: &StudyTables,
    payload_bytes: u64,
    setup: Setup,
    product: Product,
) -> Option<&StudyFigure> {
    tables.figure.iter().find(|f| {
        f.setup == setup
            && f.product() == Some(product)
            // "1 KB" in the study; a plan may say 1KB or 1KiB.
            && (f.payload.0 == payload_bytes || f.payload.0 / 1_000 * 1_024 == payload_bytes)
    })
}

fn study_text(figure: Option<&StudyFigure>, scenario: usize) -> String {
    figure.map_or_else(
        || "-".to_string(),
        |f| {
            let (median, iqr) = f.in_scenario(scenario);
            format!("{median:.2}-{iqr}")
        },
    )
}

/// Why a cell of this run has no counterpart in the study's tables, if it has none.
fn no_counterpart(
    tables: &StudyTables,
    product: Option<Product>,
    scenario: Option<usize>,
    scenario_name: &str,
    payload_bytes: u64,
) -> Option<String> {
    let Some(product) = product else {
        return Some(
            "the study measured Mosquitto, EMQX, RabbitMQ, VerneMQ and HiveMQ; a broker of \
             another kind (embedded, external) has no counterpart"
                .into(),
        );
    };
    if scenario.is_none() {
        return Some(format!(
            "the study had no scenario {scenario_name:?} (only local, edge, cloud)"
        ));
    }
    let any_setup = [Setup::Amd64, Setup::Arm64]
        .into_iter()
        .any(|setup| study_figure(tables, payload_bytes, setup, product).is_some());
    (!any_setup).then(|| {
        format!(
            "the study measured {product} at 1 KB, 10 KB and 1 MB, not {}",
            ByteSize(payload_bytes)
        )
    })
}

/// The section, when the plan has a payload test: every broker, scenario and payload it
/// measured, beside the study's figure where the study has one and saying why not where not.
pub fn section(data: &RunData) -> Option<Section> {
    let plan = &data.manifest.plan;
    let test = plan
        .tests
        .iter()
        .position(|t| t.kind == TestKind::Payload)?;
    let mut section = Section::new("study", "Beside the study (Tables IV and V)");
    let tables = match study_tables() {
        Ok(tables) => tables,
        Err(error) => {
            section.paragraph(format!("The study's tables could not be read: {error}."));
            return Some(section);
        }
    };
    let base = baseline(plan);
    let groups: Vec<(&GroupKey, &LatencyGroup)> = data
        .latency
        .iter()
        .filter(|(key, group)| key.test == test && group.count > 0)
        .collect();
    // The study lost packets at random: a scenario losing them in bursts has no counterpart.
    let study_scenario = |scenario: usize| {
        let entry = &plan.scenarios[scenario];
        if entry.gilbert_elliott.is_some() {
            return None;
        }
        SCENARIOS.iter().position(|&s| s == entry.name)
    };
    let rows: BTreeSet<(u64, usize, usize)> = groups
        .iter()
        .map(|(key, _)| (key.point, key.broker, key.scenario))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let get = |broker: usize, scenario: usize, point: u64| {
        groups
            .iter()
            .find(|(k, _)| k.broker == broker && k.scenario == scenario && k.point == point)
            .map(|(_, g)| *g)
    };
    let mut table = Table::new(
        &[
            "Payload",
            "Broker",
            "Scenario",
            "Study AMD64 median-IQR (ms)",
            "Study ARM64 median-IQR (ms)",
            "Continuum median-IQR (ms)",
            "Study AMD64 added over local (ms)",
            "Continuum added over local (ms)",
            "Path model: study (ms)",
            "Path model: Continuum (ms)",
        ],
        3,
    );
    let mut without: Vec<String> = Vec::new();
    for &(point, broker, scenario) in &rows {
        let product = plan.brokers[broker].product();
        let index = study_scenario(scenario);
        let scenario_name = &plan.scenarios[scenario].name;
        let ours = get(broker, scenario, point);
        let our_added = match (ours, base.and_then(|b| get(broker, b, point))) {
            (Some(here), Some(local)) => signed_ms(here.p50 - local.p50),
            _ => "n/a".to_string(),
        };
        let our_path = message_path(data, broker, test).map_or_else(
            || "n/a".to_string(),
            |path| ms(path_model(data, broker, scenario, &path).should_us),
        );
        let mut row = vec![
            ByteSize(point).to_string(),
            plan.brokers[broker].name.clone(),
            scenario_name.clone(),
        ];
        match (
            no_counterpart(tables, product, index, scenario_name, point),
            product,
            index,
        ) {
            (None, Some(product), Some(index)) => {
                let amd = study_figure(tables, point, Setup::Amd64, product);
                let arm = study_figure(tables, point, Setup::Arm64, product);
                let study_added = amd.map_or_else(
                    || "-".to_string(),
                    |f| format!("{:+.2}", f.in_scenario(index).0 - f.in_scenario(0).0),
                );
                row.extend([
                    study_text(amd, index),
                    study_text(arm, index),
                    ours.map_or_else(|| "n/a".to_string(), median_iqr),
                    study_added,
                    our_added,
                    format!("{:.2}", study_path_adds_ms(tables, index)),
                    our_path,
                ]);
            }
            (reason, _, _) => {
                let reason = reason.unwrap_or_default();
                let line = format!("{}: {reason}", plan.brokers[broker].name);
                if !without.contains(&line) {
                    without.push(line);
                }
                row.extend([
                    "no counterpart".to_string(),
                    "no counterpart".to_string(),
                    ours.map_or_else(|| "n/a".to_string(), median_iqr),
                    "-".to_string(),
                    our_added,
                    "-".to_string(),
                    our_path,
                ]);
            }
        }
        table.row(row);
    }
    section.paragraph(format!(
        "From {}: the study's median-IQR (ms) for the same product, scenario and payload, \
         beside this run's; '-' where the study has no figure (HiveMQ and VerneMQ were measured \
         on AMD64 only). 'Added over local' is the median in the scenario minus the median in \
         local, for the same broker and payload; 'path model' is what the emulated links each \
         message crossed should add one way: the study's path ({}, half of Table II's total on \
         every egress) and this run's path from the netem its nodes read back (see the \
         emulation check).",
        tables.source,
        tables.path.join(" -> ")
    ));
    section.blocks.push(Block::Table(table));
    if !without.is_empty() {
        section.paragraph("Rows without a counterpart in the study, and why:");
        section.blocks.push(Block::List(without));
    }
    section.paragraph("Why the absolute figures differ:");
    section
        .blocks
        .push(Block::List(REASONS.iter().map(|r| r.to_string()).collect()));
    Some(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transcription agrees with the added delays PAPER.md quotes from Table IV (AMD64,
    /// 1 KB, edge and cloud minus local), which the four-egress path explains.
    #[test]
    fn the_study_table_gives_the_added_delays_the_paper_quotes() {
        let tables = study_tables().expect("the data file parses");
        let added = |product, scenario: usize| {
            let f = study_figure(tables, 1_000, Setup::Amd64, product).expect("in the table");
            f.in_scenario(scenario).0 - f.in_scenario(0).0
        };
        for (product, edge, cloud) in [
            (Product::Mosquitto, 4.65, 11.29),
            (Product::Emqx, 4.90, 11.01),
            (Product::RabbitMq, 4.82, 10.76),
        ] {
            assert!((added(product, 1) - edge).abs() < 0.005, "{product:?} edge");
            assert!(
                (added(product, 2) - cloud).abs() < 0.005,
                "{product:?} cloud"
            );
        }
        assert!(study_figure(tables, 1_024, Setup::Amd64, Product::VerneMq).is_some());
        assert!(study_figure(tables, 1_000, Setup::Arm64, Product::HiveMq).is_none());
        assert_eq!(tables.figure.len(), 24, "Tables IV and V hold 24 rows");
        // Its path: four egresses of half the total, 5.0 ms in edge and 12.5 ms in cloud.
        assert!((study_path_adds_ms(tables, 1) - 5.0).abs() < 1e-9);
        assert!((study_path_adds_ms(tables, 2) - 12.5).abs() < 1e-9);
        assert_eq!(study_path_adds_ms(tables, 0), 0.0);
    }

    #[test]
    fn cells_without_a_counterpart_say_why() {
        let tables = study_tables().expect("the data file parses");
        assert!(
            no_counterpart(tables, None, Some(0), "local", 1_000)
                .is_some_and(|r| r.contains("has no counterpart"))
        );
        assert!(
            no_counterpart(tables, Some(Product::Mosquitto), None, "far", 1_000)
                .is_some_and(|r| r.contains("\"far\""))
        );
        assert!(
            no_counterpart(tables, Some(Product::Mosquitto), Some(1), "edge", 50_000)
                .is_some_and(|r| r.contains("50KB"))
        );
        assert_eq!(
            no_counterpart(tables, Some(Product::HiveMq), Some(2), "cloud", 1_000_000),
            None
        );
    }
}
