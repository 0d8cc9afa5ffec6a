//! The report's head (what ran, where, with which emulation) and, near its end, what was not
//! measured.

use std::collections::BTreeMap;

use super::input::{CellNote, RunData};
use super::model::{Block, Section, Table, duration_ns, utc};

/// How many cell ids to name as examples of a reason.
const EXAMPLES: usize = 3;

/// The run section.
pub fn section(data: &RunData) -> Section {
    let manifest = &data.manifest;
    let plan = &manifest.plan;
    let mut section = Section::new("run", "Run");
    let planned = plan.cell_count();
    let recorded = data.cells.len() + data.searches.len() + data.failed.len() + data.skipped.len();
    let mut facts = Vec::new();
    for (name, value) in [
        ("Plan", plan.name.clone()),
        ("Started", utc(manifest.started_unix_ms)),
        ("Controller version", manifest.controller_version.clone()),
        (
            "Brokers",
            plan.brokers
                .iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "Scenarios",
            plan.scenarios
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("Repetitions", plan.repetitions.to_string()),
        (
            "Cells",
            format!(
                "{planned} planned: {} measured, {} failed, {} skipped, {} not recorded",
                data.cells.len() + data.searches.len(),
                data.failed.len(),
                data.skipped.len(),
                planned.saturating_sub(recorded)
            ),
        ),
    ] {
        facts.push(format!("{name}: {value}"));
    }
    section.blocks.push(Block::List(facts));

    section.heading("Nodes");
    let mut nodes = Table::new(
        &[
            "Node",
            "Agent",
            "Arch",
            "Kernel",
            "OS",
            "Agent version",
            "netem",
            "Cores",
            "Memory (GB)",
            "Clock offset ± bound",
        ],
        7,
    );
    for node in &manifest.nodes {
        nodes.row(vec![
            node.name.clone(),
            node.agent.to_string(),
            node.arch.clone(),
            node.kernel.clone(),
            node.os.clone(),
            node.agent_version.clone(),
            node.netem.clone(),
            node.cores.to_string(),
            format!("{:.1}", node.memory_bytes as f64 / 1e9),
            format!(
                "{} ± {}",
                duration_ns(node.clock_offset_ns as f64),
                duration_ns(node.clock_error_bound_ns as f64)
            ),
        ]);
    }
    section.paragraph(
        "Clock offset: the agent's clock minus the controller's, from 4-timestamp exchanges; \
         the true offset lies within the bound.",
    );
    section.blocks.push(Block::Table(nodes));
    if !manifest.brokers.is_empty() {
        section.heading("Brokers as deployed");
        section
            .paragraph("What each broker's agent reported running, and where clients dialled it.");
        let mut brokers = Table::new(&["Broker", "Deployed by", "Address", "What runs"], 4);
        for broker in &manifest.brokers {
            // Its MQTT listener, then its WebSocket and QUIC (UDP) ones when it had them.
            let mut address = broker.address.clone();
            if let Some(websocket) = &broker.websocket_address {
                address += &format!("; WebSocket {websocket}");
            }
            if let Some(quic) = &broker.quic_address {
                address += &format!("; QUIC {quic}");
            }
            brokers.row(vec![
                broker.name.clone(),
                broker.node.clone(),
                address,
                broker.detail.clone(),
            ]);
        }
        section.blocks.push(Block::Table(brokers));
        capabilities_part(&mut section, manifest);
    }
    if let Some(testbed) = &manifest.testbed {
        testbed_part(&mut section, testbed);
    }

    section.heading("Network emulation applied");
    if manifest.netem.is_empty() {
        section.paragraph("No netem was applied: every scenario that ran needed none.");
    } else {
        section.paragraph(
            "Per broker, scenario and node: the netem asked for, and what the node's kernel \
             reported back after applying it.",
        );
        let mut netem = Table::new(
            &[
                "Broker",
                "Scenario",
                "Node",
                "Interface",
                "Asked",
                "Read back",
            ],
            6,
        );
        for n in &manifest.netem {
            netem.row(vec![
                n.broker.clone(),
                n.scenario.clone(),
                n.node.clone(),
                n.interface.clone(),
                n.asked.to_string(),
                n.read_back_text(),
            ]);
        }
        section.blocks.push(Block::Table(netem));
    }

    section
}

/// Phases 2 and 3: Nebula on each node with the peers it reached through the tunnel, and
/// the k3s nodes as the server listed them.
fn testbed_part(section: &mut Section, testbed: &crate::results::TestbedRecord) {
    section.heading("Overlay and cluster");
    section.paragraph(
        "Brought up before any broker (phases 2 and 3 of the study); each node checked that \
         the overlay peers before it answer through the tunnel.",
    );
    let mut overlay = Table::new(
        &["Node", "Nebula", "Address", "Installer", "Peers reached"],
        5,
    );
    for node in &testbed.overlay {
        let peers: Vec<String> = node
            .peers
            .iter()
            .map(|peer| {
                format!(
                    "{} {}",
                    peer.address,
                    if peer.reachable {
                        peer.detail.clone()
                    } else {
                        format!("UNREACHABLE: {}", peer.detail)
                    }
                )
            })
            .collect();
        overlay.row(vec![
            node.node.clone(),
            if node.lighthouse {
                "lighthouse"
            } else {
                "member"
            }
            .to_string(),
            node.overlay_cidr.clone(),
            node.detail.clone(),
            if peers.is_empty() {
                "-".to_string()
            } else {
                peers.join("; ")
            },
        ]);
    }
    section.blocks.push(Block::Table(overlay));
    if let Some(cluster) = &testbed.cluster {
        let mut nodes = Table::new(&["k3s node", "Ready", "Internal IP", "Taints"], 4);
        for node in &cluster.nodes {
            nodes.row(vec![
                node.name.clone(),
                if node.ready { "yes" } else { "no" }.to_string(),
                node.internal_ip.clone(),
                if node.taints.is_empty() {
                    "-".to_string()
                } else {
                    node.taints.join(", ")
                },
            ]);
        }
        section.paragraph(format!(
            "The k3s cluster as its server ({}) lists it:",
            cluster.server
        ));
        section.blocks.push(Block::Table(nodes));
    }
}

/// `1 cell`, `2 cells`.
fn cells(count: usize) -> String {
    if count == 1 {
        "1 cell".to_string()
    } else {
        format!("{count} cells")
    }
}

/// What was not measured, near the end of the report: skipped cells as a compact table (by
/// broker, scenario and reason), failed ones by reason, retries and unusable files.
pub fn not_measured(data: &RunData) -> Section {
    let mut section = Section::new("not-measured", "Not measured");
    if data.skipped.is_empty() {
        section.paragraph("Nothing was skipped.");
    } else {
        if !data.manifest.skipped.is_empty() {
            section.paragraph("Said during the run:");
            section
                .blocks
                .push(Block::List(data.manifest.skipped.clone()));
        }
        let mut groups: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
        for note in &data.skipped {
            let reason = if note.reason.is_empty() {
                "no reason recorded"
            } else {
                note.reason.as_str()
            };
            *groups
                .entry((note.broker.as_str(), note.scenario.as_str(), reason))
                .or_default() += 1;
        }
        let mut table = Table::new(&["Broker", "Scenario", "Skipped because", "Cells"], 3);
        for ((broker, scenario, reason), count) in groups {
            table.row(vec![
                broker.to_string(),
                scenario.to_string(),
                reason.to_string(),
                count.to_string(),
            ]);
        }
        section.blocks.push(Block::Table(table));
    }
    if data.failed.is_empty() {
        section.paragraph("No cell failed.");
    } else {
        section.paragraph(format!(
            "{} failed and left out of every figure and table; by reason:",
            cells(data.failed.len())
        ));
        section
            .blocks
            .push(Block::List(grouped(&data.failed, false)));
    }
    if data.retried > 0 {
        section.paragraph(format!(
            "{} failed at first and measured on a later try (--resume); only the successful \
             try counts.",
            cells(data.retried)
        ));
    }
    if !data.problems.is_empty() {
        section.paragraph("Parts of the results folder that could not be used:");
        section.blocks.push(Block::List(data.problems.clone()));
    }
    section
}

/// Notes grouped by reason (and, for skipped cells, broker and scenario), with a count and
/// a few example cell ids.
fn grouped(notes: &[CellNote], by_place: bool) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for note in notes {
        let place = if by_place {
            format!("{} in {}", note.broker, note.scenario)
        } else {
            String::new()
        };
        let reason = if note.reason.is_empty() {
            "no reason recorded".to_string()
        } else {
            note.reason.clone()
        };
        groups.entry((place, reason)).or_default().push(&note.cell);
    }
    groups
        .into_iter()
        .map(|((place, reason), cells)| {
            let examples: Vec<&str> = cells.iter().take(EXAMPLES).copied().collect();
            let more = if cells.len() > EXAMPLES { ", ..." } else { "" };
            let place = if place.is_empty() {
                String::new()
            } else {
                format!("{place}: ")
            };
            format!(
                "{place}{reason}: {} ({}{more})",
                self::cells(cells.len()),
                examples.join(", ")
            )
        })
        .collect()
}

/// What each probed broker supports, and how the probe found out: a cell whose workload needs
/// what its broker lacks was skipped with that reason (listed under "not measured").
fn capabilities_part(section: &mut Section, manifest: &crate::results::Manifest) {
    let probed: Vec<_> = manifest
        .brokers
        .iter()
        .filter_map(|b| b.capabilities.as_ref().map(|caps| (b, caps)))
        .collect();
    if probed.is_empty() {
        return;
    }
    section.heading("What each broker supports");
    section.paragraph(
        "Probed by the broker's agent once it was ready: an MQTT 3.1.1 and an MQTT 5 CONNECT, \
         the MQTT 5 CONNACK's limits, and a round trip each for wildcard subscriptions, shared \
         subscriptions and retained messages. A cell whose workload needs what its broker \
         lacks is skipped with that reason rather than measured into errors.",
    );
    let mut table = Table::new(&["Broker", "Supports", "How the probe found out"], 3);
    for (broker, caps) in probed {
        table.row(vec![
            broker.name.clone(),
            caps.summary(),
            if caps.notes.is_empty() {
                "CONNECTs accepted, every round trip delivered".to_string()
            } else {
                caps.notes.join("; ")
            },
        ]);
    }
    section.blocks.push(Block::Table(table));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_counted_with_examples() {
        let note = |cell: &str, reason: &str| CellNote {
            cell: cell.to_string(),
            broker: "b".into(),
            scenario: "edge".into(),
            reason: reason.to_string(),
        };
        let notes: Vec<CellNote> = (1..=4)
            .map(|i| note(&format!("c{i}"), "agent lost"))
            .chain([note("c9", "")])
            .collect();
        assert_eq!(
            grouped(&notes, false),
            vec![
                "agent lost: 4 cells (c1, c2, c3, ...)",
                "no reason recorded: 1 cell (c9)"
            ]
        );
        assert_eq!(
            grouped(&notes[..1], true),
            vec!["b in edge: agent lost: 1 cell (c1)"]
        );
    }
}
