//! Fleet-shaped traffic: shared subscriptions (each group judged once, the members' shares)
//! and retained messages (what late subscribers found, and what the clean-up left), per test,
//! broker and scenario over the repetitions.

use loadgen::groups::GroupSummary;
use loadgen::retained::RetainedOutcome;

use super::grouped::rows_per_group;
use super::input::RunData;
use super::model::{Block, Section, Table, ms};

/// The shared-subscription section, when a measured cell had groups.
pub fn shared_section(data: &RunData) -> Option<Section> {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Subscription",
            "Repetitions",
            "Members",
            "Reached a member / owed",
            "Lost",
            "Duplicates",
            "Per member min / median / max",
            "Busiest member",
        ],
        4,
    );
    for row in rows_per_group(
        data,
        |s| Some(&s.shared_groups).filter(|g| !g.is_empty()),
        group_rows,
    ) {
        // One row per subscription: the labels repeat for each.
        let (labels, rest) = row.split_at(3);
        for subscription in rest.chunks(8) {
            let mut cells = labels.to_vec();
            cells.extend_from_slice(subscription);
            table.row(cells);
        }
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("shared-subscriptions", "Shared subscriptions");
    section.paragraph(
        "Each message is owed to a shared subscription's group once: it is lost when no member \
         got it and a duplicate when a second member did (the members' deliveries are joined \
         per message, over every loadgen node that held members). Counts are summed over the \
         repetitions; a member's share is the distinct messages it received, in one \
         repetition (the median repetition's figures), and the busiest member's share says how \
         evenly the broker spread the group's messages (100 % / members is even).",
    );
    section.blocks.push(Block::Table(table));
    Some(section)
}

/// The cells of one test, broker and scenario's groups: 8 per subscription, side by side.
fn group_rows(runs: &[&Vec<GroupSummary>]) -> Vec<String> {
    let mut cells = Vec::new();
    let Some(first) = runs.first() else {
        return cells;
    };
    for group in first.iter() {
        let same: Vec<&GroupSummary> = runs
            .iter()
            .filter_map(|groups| groups.iter().find(|g| g.subscription == group.subscription))
            .collect();
        let sum = |value: fn(&GroupSummary) -> u64| same.iter().map(|g| value(g)).sum::<u64>();
        let lost = same
            .iter()
            .map(|g| g.lost)
            .sum::<Option<u64>>()
            .map_or("-".to_string(), |lost| lost.to_string());
        let mut by_busiest = same.clone();
        by_busiest.sort_by(|a, b| a.busiest_percent.total_cmp(&b.busiest_percent));
        let median = by_busiest[by_busiest.len() / 2];
        cells.extend([
            group.subscription.clone(),
            same.len().to_string(),
            group.members.to_string(),
            format!("{} / {}", sum(|g| g.delivered), sum(|g| g.expected)),
            lost,
            sum(|g| g.duplicates).to_string(),
            format!(
                "{} / {} / {}",
                median.share_min, median.share_median, median.share_max
            ),
            format!("{:.1} %", median.busiest_percent),
        ]);
    }
    cells
}

/// The retained-messages section, when a measured cell retained.
pub fn retained_section(data: &RunData) -> Option<Section> {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Repetitions",
            "Late subscribers (failed)",
            "Topics owed each",
            "Current",
            "Stale",
            "Missing",
            "Extra",
            "All received p50 / max (ms)",
            "Left after clean-up",
        ],
        3,
    );
    for row in rows_per_group(data, |s| s.retained.as_ref(), retained_row) {
        table.row(row);
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("retained", "Retained messages: late subscribers");
    section.paragraph(
        "Publishers retained every message; once publishing had ended, late subscribers \
         connected and each had to receive exactly the last value of every topic its filter \
         matches. A retained message is current (its topic's last value), stale (an older \
         one) or extra (a second copy, or a topic not owed); a topic without one is missing. \
         Counts are summed over late subscribers and repetitions; the time runs from a late \
         subscriber's connecting to its last owed message (median over them, and the slowest). \
         Afterwards the run cleared every topic and a fresh subscriber to the same filter \
         counted what was still retained (\"not checked\" when that filter had carried no \
         retained message at all).",
    );
    section.blocks.push(Block::Table(table));
    Some(section)
}

fn retained_row(runs: &[&RetainedOutcome]) -> Vec<String> {
    let sum = |value: fn(&RetainedOutcome) -> u64| runs.iter().map(|r| value(r)).sum::<u64>();
    let mut times: Vec<u64> = runs
        .iter()
        .flat_map(|r| r.all_received_ns.clone())
        .collect();
    times.sort_unstable();
    let times = match (times.get(times.len() / 2), times.last()) {
        (Some(median), Some(max)) => {
            format!("{} / {}", ms(*median as f64 / 1e3), ms(*max as f64 / 1e3))
        }
        _ => "-".to_string(),
    };
    let left = runs
        .iter()
        .map(|r| r.left_after_clear)
        .sum::<Option<u64>>()
        .map_or("not checked".to_string(), |left| left.to_string());
    vec![
        runs.len().to_string(),
        format!(
            "{} ({})",
            sum(|r| u64::from(r.late_subscribers)),
            sum(|r| u64::from(r.failed))
        ),
        runs.first().map_or(0, |r| r.expected_each).to_string(),
        sum(|r| r.current).to_string(),
        sum(|r| r.stale).to_string(),
        sum(|r| r.missing).to_string(),
        sum(|r| r.extra).to_string(),
        times,
        left,
    ]
}
