//! The broker's answers by reason code (CONNACK, SUBACK, PUBACK/PUBREC refusals, QoS granted
//! below the asked, the broker's own DISCONNECTs), per test, broker and scenario summed over
//! the repetitions: what the broker said, beside the losses it explains.

use loadgen::Summary;

use super::grouped::{by_kind, rows_per_group};
use super::input::RunData;
use super::model::{Block, Section, Table};

/// The section, when some measured cell got an answer by reason code.
pub fn section(data: &RunData) -> Option<Section> {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Repetitions",
            "Answers by reason code (summed)",
            "Lost deliveries",
        ],
        3,
    );
    let rows = rows_per_group(
        data,
        |s: &Summary| Some(s),
        |summaries: &[&Summary]| {
            let answers: Vec<_> = summaries.iter().map(|s| s.broker_answers()).collect();
            let lost = summaries
                .iter()
                .map(|s| s.lost)
                .sum::<Option<u64>>()
                .map_or_else(|| "not judged".to_string(), |lost| lost.to_string());
            vec![summaries.len().to_string(), by_kind(&answers), lost]
        },
    );
    for row in rows.into_iter().filter(|row| row[4] != "none") {
        table.row(row);
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("answers", "The broker's answers by reason code");
    section.paragraph(
        "What the broker answered by reason code instead of doing what was asked, one count \
         per code, summed over the repetitions: CONNECTs and SUBSCRIBEs of churn and \
         reconnecting clients it refused (`connack_refused_*`, `suback_refused_*`; a refusal \
         of the workload's own clients fails the cell, with the reason under \"not \
         measured\"), subscriptions it granted below the QoS asked (`suback_granted_*`, each \
         once per subscriber), MQTT 5 publishes it refused by PUBACK or PUBREC \
         (`puback_refused_*`, `pubrec_refused_*`: the deliveries they owed count as lost, and \
         are the broker's answer, not a silent loss) and connections it ended with a \
         DISCONNECT of its own (`broker_disconnect_*`). A PUBACK 0x10 (no matching \
         subscribers) accepts the message and is not counted.",
    );
    section.blocks.push(Block::Table(table));
    Some(section)
}
