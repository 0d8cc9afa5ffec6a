//! Reconnect storms (`[tests.workload.connection.reconnect]`): per test, broker and scenario,
//! the connections lost and back, how long until the whole fleet was back, each client's time
//! away, what failed meanwhile and what was sent again. Whether messages were lost across it
//! is in the test's own table (lost, duplicates, QoS violations).

use loadgen::summary::ReconnectSummary;

use super::grouped::{by_kind, rows_per_group};
use super::input::RunData;
use super::model::{Block, Section, Table, ms};

/// The reconnect section, when a measured cell reconnected.
pub fn section(data: &RunData) -> Option<Section> {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Repetitions",
            "Back / lost",
            "Not back",
            "All back after (ms)",
            "Away p50 (ms)",
            "Away max (ms)",
            "Failed attempts, by kind",
            "Kept sessions",
            "QoS 1 sent again",
        ],
        3,
    );
    for row in rows_per_group(data, |s| s.reconnect.as_ref(), row) {
        table.row(row);
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("reconnects", "Reconnect storms: the fleet coming back");
    section.paragraph(
        "Connections were lost mid-run (the broker restarted, or every connection was cut at \
         once) and each client connected again: subscribers to their session (subscribing \
         again when the broker had not kept it), publishers sending their unacknowledged QoS 1 \
         messages again. Counts are summed over the repetitions; times are medians over them \
         (the longest time away is the highest of any). \"All back after\" runs from the first \
         loss to the last reconnection and is shown only when every lost connection came back.",
    );
    section.blocks.push(Block::Table(table));
    zero_rtt_part(&mut section, data);
    Some(section)
}

/// A cell's storm, when its reconnections tried 0-RTT.
fn with_zero_rtt(summary: &loadgen::Summary) -> Option<&ReconnectSummary> {
    summary
        .reconnect
        .as_ref()
        .filter(|storm| storm.zero_rtt_attempted > 0)
}

/// The reconnections over QUIC that sent their CONNECT as 0-RTT data, when a test asked
/// for it (`broker.quic_zero_rtt`).
fn zero_rtt_part(section: &mut Section, data: &RunData) {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Repetitions",
            "0-RTT accepted / rejected / tried",
        ],
        3,
    );
    for row in rows_per_group(data, with_zero_rtt, |storms| {
        let sum =
            |value: fn(&ReconnectSummary) -> u64| storms.iter().map(|s| value(s)).sum::<u64>();
        vec![
            storms.len().to_string(),
            format!(
                "{} / {} / {}",
                sum(|s| s.zero_rtt_accepted),
                sum(|s| s.zero_rtt_rejected),
                sum(|s| s.zero_rtt_attempted)
            ),
        ]
    }) {
        table.row(row);
    }
    if table.rows.is_empty() {
        return;
    }
    section.paragraph(
        "Over QUIC with 0-RTT, a client connecting again resumed TLS with a ticket of its own \
         earlier connection and sent its CONNECT in the first flight. Tried: connections \
         opened that way; accepted: those whose early data the broker took; rejected: those \
         whose early data it refused once the handshake was done (a ticket it could not use, \
         as after a restart), after which the client sent CONNECT again at once on a full \
         handshake. The others had no verdict within their attempt (the handshake failed or ran \
         out of time). The time away, with 0-RTT's part in it, is in the \
         table above.",
    );
    section.blocks.push(Block::Table(table));
}

/// The figures of one test, broker and scenario's storms (one per repetition).
fn row(storms: &[&ReconnectSummary]) -> Vec<String> {
    let median = |value: fn(&ReconnectSummary) -> Option<f64>| {
        let mut values: Vec<f64> = storms.iter().filter_map(|s| value(s)).collect();
        values.sort_by(f64::total_cmp);
        crate::stats::median(&values)
    };
    let sum = |value: fn(&ReconnectSummary) -> u64| storms.iter().map(|s| value(s)).sum::<u64>();
    let failures = by_kind(storms.iter().map(|s| &s.failures));
    let shown = |value: Option<f64>| value.map_or("-".to_string(), ms);
    let longest_away = storms
        .iter()
        .filter(|s| s.time_away.count > 0)
        .map(|s| s.time_away.max_us)
        .max_by(f64::total_cmp);
    vec![
        storms.len().to_string(),
        format!("{} / {}", sum(|s| s.reconnected), sum(|s| s.lost)),
        sum(|s| s.gave_up + s.interrupted).to_string(),
        // Shown in ms like the other columns: `ms` takes µs.
        shown(median(|s| s.full_reconnection_ms.map(|ms| ms * 1e3))),
        shown(median(|s| {
            (s.time_away.count > 0).then_some(s.time_away.p50_us)
        })),
        shown(longest_away),
        failures,
        sum(|s| s.sessions_resumed).to_string(),
        sum(|s| s.resent).to_string(),
    ]
}
