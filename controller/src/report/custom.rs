//! Custom tests (`kind = "custom"`): the workload as run, field by field as loadgen's spec
//! has it, and per broker and scenario what each repetition measured (medians over the
//! repetitions, with their range, and every message accounted for).

use loadgen::Summary;

use super::input::RunData;
use super::model::{Section, Table, ms};
use super::test_label;
use crate::plan::Measures;

/// One section per custom test of the plan.
pub fn sections(data: &RunData) -> Vec<Section> {
    let plan = &data.manifest.plan;
    (0..plan.tests.len())
        .filter(|&test| plan.tests[test].kind.measures() == Measures::AsWritten)
        .map(|test| section(data, test))
        .collect()
}

/// Fields of the spec the run sets for every cell, not the plan: left out of "as run".
const RUN_OWNED: [&str; 4] = ["broker.host", "broker.port", "run_id", "shard"];

fn section(data: &RunData, test: usize) -> Section {
    let plan = &data.manifest.plan;
    let mut section = Section::new(
        &format!("custom-{test}"),
        &format!("Custom: {}", test_label(plan, test)),
    );
    // As its first measured cell ran it; as the plan builds it when none was measured.
    let measured = data.cells.iter().find(|cell| cell.test == test);
    let spec = measured.map_or_else(|| plan.first_workload(test), |cell| Ok(cell.spec.clone()));
    match spec {
        Ok(spec) => match toml::Table::try_from(&spec) {
            Ok(table) => {
                section.paragraph(
                    "The workload as run, every field of loadgen's spec (SPEC.toml names; \
                     the broker's address, the run id and each node's shard are the run's):",
                );
                let mut fields = Table::new(&["Field", "Value"], 2);
                for (field, value) in flatten("", &table) {
                    if !RUN_OWNED.iter().any(|owned| field.starts_with(owned)) {
                        fields.row(vec![field, value]);
                    }
                }
                section.blocks.push(super::model::Block::Table(fields));
            }
            Err(error) => section.paragraph(format!("The workload could not be shown: {error}.")),
        },
        Err(error) => section.paragraph(format!("The workload could not be built: {error}.")),
    }
    let mut results = Table::new(
        &[
            "Broker",
            "Scenario",
            "Repetitions",
            "Latency p50 (ms)",
            "Latency p99 (ms)",
            "Receive rate (msg/s, aggregate)",
            "Rate kind",
            "Delivered / expected",
            "Lost",
            "Duplicates",
            "QoS violations",
        ],
        2,
    );

    for (b, broker) in plan.brokers.iter().enumerate() {
        for (s, scenario) in plan.scenarios.iter().enumerate() {
            let cells: Vec<&Summary> = data
                .cells
                .iter()
                .filter(|c| c.test == test && c.broker == b && c.scenario == s)
                .map(|c| &c.summary)
                .collect();
            if cells.is_empty() {
                continue;
            }
            let spread = |value: fn(&Summary) -> f64, text: fn(f64) -> String| {
                let mut values: Vec<f64> = cells.iter().map(|c| value(c)).collect();
                values.sort_by(f64::total_cmp);
                let median = crate::stats::median(&values).unwrap_or(f64::NAN);
                if values.len() > 1 {
                    format!(
                        "{} ({}-{})",
                        text(median),
                        text(values[0]),
                        text(values[values.len() - 1])
                    )
                } else {
                    text(median)
                }
            };
            let sum = |value: fn(&Summary) -> u64| cells.iter().map(|c| value(c)).sum::<u64>();
            let kinds: Vec<&str> = cells.iter().map(|c| c.rate_kind.as_str()).collect();
            let mut kind = kinds[0].to_string();
            if kinds.iter().any(|k| *k != kinds[0]) {
                kind = kinds.join(", ");
            }
            let mut lost = cells
                .iter()
                .map(|c| c.lost)
                .sum::<Option<u64>>()
                .map_or_else(|| "not judged".to_string(), |l| l.to_string());
            let expired = sum(|c| c.expired);
            if expired > 0 {
                // Dropped by the broker as MQTT 5 message expiry asks: not a loss.
                lost.push_str(&format!(" ({expired} expired)"));
            }
            let violations: Vec<&String> =
                cells.iter().flat_map(|c| c.qos_violations.iter()).collect();
            results.row(vec![
                broker.name.clone(),
                scenario.name.clone(),
                cells.len().to_string(),
                spread(|c| c.latency.p50_us, ms),
                spread(|c| c.latency.p99_us, ms),
                spread(|c| c.receive_rate.msgs_per_s, |r| format!("{r:.0}")),
                kind,
                format!(
                    "{} / {}",
                    sum(|c| c.delivered_unique),
                    sum(|c| c.expected_deliveries)
                ),
                lost,
                sum(|c| c.duplicates).to_string(),
                if violations.is_empty() {
                    "none".to_string()
                } else {
                    violations
                        .iter()
                        .map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            ]);
        }
    }
    if results.rows.is_empty() {
        section.paragraph("No cell of this test was measured.");
    } else {
        section.paragraph(
            "Per broker and scenario: medians over the repetitions (their range in brackets); \
             counts summed over the repetitions. The rate is every subscriber's together over \
             the measured window, of the kind each cell was judged (burst, sustained, ...).",
        );
        section.blocks.push(super::model::Block::Table(results));
    }
    section
}

/// `table` as dotted paths and their values, by path.
fn flatten(prefix: &str, table: &toml::Table) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => fields.extend(flatten(&path, inner)),
            toml::Value::String(text) => fields.push((path, text.clone())),
            other => fields.push((path, other.to_string())),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_fields_become_dotted_paths() {
        let table: toml::Table =
            toml::from_str("qos = 2\n[broker]\nprotocol = \"5\"\n[connection]\ninflight = 50\n")
                .unwrap();
        assert_eq!(
            flatten("", &table),
            vec![
                ("broker.protocol".to_string(), "5".to_string()),
                ("connection.inflight".to_string(), "50".to_string()),
                ("qos".to_string(), "2".to_string()),
            ]
        );
    }
}
