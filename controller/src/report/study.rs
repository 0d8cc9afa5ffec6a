//! Beside the study: its Tables IV and V (median-IQR of latency vs payload, per broker,
//! scenario and setup) next to this run's figures for the same broker, scenario and payload,
//! with the delay each adds over local and what the path each message took should add.
//!
//! The study's figures are its published ones (../shared/PAPER.md). Its path: netem on every
//! node's egress with half the scenario's total per side, and the tests dialled the headnode's
//! NodePort, so kube-proxy forwarded each message to the worker's pod and back: four emulated
//! egresses per publish-to-delivery (edge 4 x 1.25 = 5.0 ms, cloud 4 x 3.125 = 12.5 ms).

use std::collections::BTreeSet;

use domain::Product;
use loadgen::size::ByteSize;

use super::emulation::{baseline, load_nodes, path_model};
use super::input::{GroupKey, LatencyGroup, RunData};
use super::model::{Block, Section, Table, ms, signed_ms};
use super::payload::median_iqr;
use crate::plan::TestKind;

/// The study's hardware setups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    Amd64,
    Arm64,
}

/// One figure of the study's Tables IV/V: median and IQR, ms.
#[derive(Debug, Clone, Copy)]
struct StudyFigure {
    payload_bytes: u64,
    setup: Setup,
    product: Product,
    /// local, edge, cloud: (median, IQR) in ms.
    by_scenario: [(f64, f64); 3],
}

const SCENARIOS: [&str; 3] = ["local", "edge", "cloud"];

/// What the study's path added over local one way, ms: four egresses of half the total.
const STUDY_PATH_ADDS_MS: [f64; 3] = [0.0, 5.0, 12.5];

const fn figure(
    payload_bytes: u64,
    setup: Setup,
    product: Product,
    by_scenario: [(f64, f64); 3],
) -> StudyFigure {
    StudyFigure {
        payload_bytes,
        setup,
        product,
        by_scenario,
    }
}

/// Tables IV and V of the study, as PAPER.md transcribes them.
const STUDY: [StudyFigure; 24] = {
    use Product::{Emqx, HiveMq, Mosquitto, RabbitMq, VerneMq};
    use Setup::{Amd64, Arm64};
    const KB: u64 = 1_000;
    const KB10: u64 = 10_000;
    const MB: u64 = 1_000_000;
    [
        figure(
            KB,
            Arm64,
            Mosquitto,
            [(5.39, 1.0), (10.67, 1.0), (18.60, 2.0)],
        ),
        figure(KB, Arm64, Emqx, [(6.04, 0.25), (11.54, 1.0), (18.93, 2.0)]),
        figure(
            KB,
            Arm64,
            RabbitMq,
            [(7.00, 1.0), (12.00, 1.0), (19.87, 2.25)],
        ),
        figure(
            KB,
            Amd64,
            Mosquitto,
            [(3.94, 0.0), (8.59, 2.0), (15.23, 6.0)],
        ),
        figure(KB, Amd64, Emqx, [(4.24, 0.0), (9.14, 3.0), (15.25, 7.0)]),
        figure(
            KB,
            Amd64,
            RabbitMq,
            [(4.83, 1.0), (9.65, 3.0), (15.59, 6.0)],
        ),
        figure(
            KB10,
            Arm64,
            Mosquitto,
            [(10.68, 1.0), (15.91, 1.0), (24.90, 2.0)],
        ),
        figure(
            KB10,
            Arm64,
            Emqx,
            [(11.44, 2.0), (16.56, 2.0), (24.71, 2.0)],
        ),
        figure(
            KB10,
            Arm64,
            RabbitMq,
            [(13.16, 2.0), (17.73, 1.0), (26.15, 2.0)],
        ),
        figure(
            KB10,
            Amd64,
            Mosquitto,
            [(4.33, 0.0), (8.83, 2.0), (16.85, 7.0)],
        ),
        figure(KB10, Amd64, Emqx, [(4.66, 1.0), (9.43, 2.0), (16.67, 7.0)]),
        figure(
            KB10,
            Amd64,
            RabbitMq,
            [(5.76, 1.0), (9.85, 1.0), (17.25, 6.0)],
        ),
        figure(
            MB,
            Arm64,
            Mosquitto,
            [(272.48, 32.0), (332.42, 48.0), (643.17, 181.25)],
        ),
        figure(
            MB,
            Arm64,
            Emqx,
            [(274.11, 35.0), (333.04, 49.0), (641.02, 193.75)],
        ),
        figure(
            MB,
            Arm64,
            RabbitMq,
            [(297.74, 53.0), (379.31, 55.0), (679.16, 167.0)],
        ),
        figure(
            MB,
            Amd64,
            Mosquitto,
            [(66.27, 13.0), (153.96, 75.0), (437.10, 388.25)],
        ),
        figure(
            MB,
            Amd64,
            Emqx,
            [(65.2, 14.0), (149.60, 69.25), (418.81, 356.50)],
        ),
        figure(
            MB,
            Amd64,
            RabbitMq,
            [(71.97, 13.0), (161.38, 64.25), (429.83, 379.50)],
        ),
        figure(KB, Amd64, HiveMq, [(9.70, 5.0), (13.46, 5.0), (18.40, 7.0)]),
        figure(
            KB10,
            Amd64,
            HiveMq,
            [(9.95, 4.0), (13.94, 5.0), (19.75, 8.0)],
        ),
        figure(
            MB,
            Amd64,
            HiveMq,
            [(125.00, 24.0), (194.72, 73.0), (374.80, 320.0)],
        ),
        figure(KB, Amd64, VerneMq, [(4.37, 1.0), (8.30, 3.0), (13.64, 6.0)]),
        figure(
            KB10,
            Amd64,
            VerneMq,
            [(5.18, 1.0), (9.23, 2.0), (15.23, 7.0)],
        ),
        figure(
            MB,
            Amd64,
            VerneMq,
            [(76.25, 12.0), (144.85, 71.0), (345.64, 292.50)],
        ),
    ]
};

/// Why the absolute figures differ, beyond the path.
const REASONS: [&str; 4] = [
    "Path: the study's messages crossed four emulated egresses (tester -> headnode NodePort -> \
     worker pod -> headnode -> tester, netem with half the scenario's total on every node); \
     'Path model' gives what each path should add over local, so compare the added delays \
     with their own path model, not with each other.",
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
    payload_bytes: u64,
    setup: Setup,
    product: Product,
) -> Option<&'static StudyFigure> {
    STUDY.iter().find(|f| {
        f.setup == setup
            && f.product == product
            // "1 KB" in the study; a plan may say 1KB or 1KiB.
            && (f.payload_bytes == payload_bytes
                || f.payload_bytes / 1_000 * 1_024 == payload_bytes)
    })
}

fn study_text(figure: Option<&StudyFigure>, scenario: usize) -> String {
    figure.map_or_else(
        || "-".to_string(),
        |f| {
            let (median, iqr) = f.by_scenario[scenario];
            format!("{median:.2}-{iqr}")
        },
    )
}

/// The section, when the plan has a payload test with a broker the study measured.
pub fn section(data: &RunData) -> Option<Section> {
    let plan = &data.manifest.plan;
    let test = plan
        .tests
        .iter()
        .position(|t| t.kind == TestKind::Payload)?;
    let base = baseline(plan);
    let groups: Vec<(&GroupKey, &LatencyGroup)> = data
        .latency
        .iter()
        .filter(|(key, group)| key.test == test && group.count > 0)
        .collect();
    let study_scenario = |scenario: usize| {
        SCENARIOS
            .iter()
            .position(|&s| s == plan.scenarios[scenario].name)
    };
    let rows: BTreeSet<(u64, usize, usize)> = groups
        .iter()
        .filter(|(key, _)| {
            plan.brokers[key.broker].product().is_some() && study_scenario(key.scenario).is_some()
        })
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
    let (publisher_node, subscriber_node) = load_nodes(plan, test);
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
    for &(point, broker, scenario) in &rows {
        let Some(product) = plan.brokers[broker].product() else {
            continue;
        };
        let Some(index) = study_scenario(scenario) else {
            continue;
        };
        let amd = study_figure(point, Setup::Amd64, product);
        let arm = study_figure(point, Setup::Arm64, product);
        let ours = get(broker, scenario, point);
        let study_added = amd.map_or_else(
            || "-".to_string(),
            |f| format!("{:+.2}", f.by_scenario[index].0 - f.by_scenario[0].0),
        );
        let our_added = match (ours, base.and_then(|b| get(broker, b, point))) {
            (Some(here), Some(local)) => signed_ms(here.p50 - local.p50),
            _ => "n/a".to_string(),
        };
        let our_path = plan.brokers[broker].node.as_deref().map_or_else(
            || "n/a".to_string(),
            |broker_node| {
                let nodes = (
                    publisher_node.as_str(),
                    broker_node,
                    subscriber_node.as_str(),
                );
                ms(path_model(data, broker, scenario, nodes).should_us)
            },
        );
        table.row(vec![
            ByteSize(point).to_string(),
            plan.brokers[broker].name.clone(),
            plan.scenarios[scenario].name.clone(),
            study_text(amd, index),
            study_text(arm, index),
            ours.map_or_else(|| "n/a".to_string(), median_iqr),
            study_added,
            our_added,
            format!("{:.2}", STUDY_PATH_ADDS_MS[index]),
            our_path,
        ]);
    }
    let mut section = Section::new("study", "Beside the study (Tables IV and V)");
    section.paragraph(
        "The study's published median-IQR (ms) for the same product, scenario and payload, \
         beside this run's; '-' where the study has no figure (HiveMQ and VerneMQ were measured \
         on AMD64 only). 'Added over local' is the median in the scenario minus the median in \
         local, for the same broker and payload; 'path model' is what the emulated links each \
         message crossed should add one way: the study's four egresses, and this run's path \
         from its netem (see the emulation check).",
    );
    section.blocks.push(Block::Table(table));
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
        let added = |product, scenario: usize| {
            let f = study_figure(1_000, Setup::Amd64, product).expect("in the table");
            f.by_scenario[scenario].0 - f.by_scenario[0].0
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
        assert!(study_figure(1_024, Setup::Amd64, Product::VerneMq).is_some());
        assert!(study_figure(1_000, Setup::Arm64, Product::HiveMq).is_none());
    }
}
