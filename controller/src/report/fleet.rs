//! Fleet-shaped traffic: shared subscriptions (each group judged once, the members' shares),
//! retained messages (what late subscribers found, and what the clean-up left) and wills (each
//! dropped client's once, none of a clean one's), per test, broker and scenario over the
//! repetitions.

use loadgen::groups::GroupSummary;
use loadgen::retained::RetainedOutcome;
use loadgen::wills::WillOutcome;

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

/// The wills section, when a measured cell had will clients.
pub fn wills_section(data: &RunData) -> Option<Section> {
    let mut table = Table::new(
        &[
            "Test",
            "Broker",
            "Scenario",
            "Repetitions",
            "Connected (failed)",
            "Dropped",
            "Delivered once",
            "Missing",
            "Duplicates",
            "Unexpected",
            "From the drop p50 / p99 / earliest (ms, n wills)",
            "Will delay sent (s)",
            "Before the delay",
        ],
        3,
    );
    for row in rows_per_group(data, |s| s.wills.as_ref(), wills_row) {
        table.row(row);
    }
    if table.rows.is_empty() {
        return None;
    }
    let mut section = Section::new("wills", "Wills: clients that vanished");
    section.paragraph(
        "Clients beside the workload connected with a will; at a set time some closed their \
         socket without DISCONNECT, as a dying device does, and a watcher subscribed to the \
         will topics had to receive each of their wills once. The others then disconnected \
         cleanly, and a will of theirs is unexpected. Counts are summed over the \
         repetitions; times run from each client's drop (its socket closed) to its will's \
         arrival at the watcher, on one host's clock, pooled over the repetitions (with fewer \
         than 100 wills the p99 is the slowest). With an MQTT 5 will delay (sent in whole \
         seconds), a will before it had passed is counted in the last column. A will of a \
         client that could not connect is neither owed nor counted; \"not watched\" means \
         the watcher's connection ended, so missing wills may not be the broker's.",
    );
    section.blocks.push(Block::Table(table));
    Some(section)
}

fn wills_row(runs: &[&WillOutcome]) -> Vec<String> {
    let sum = |value: fn(&WillOutcome) -> u64| runs.iter().map(|w| value(w)).sum::<u64>();
    let mut pooled = WillOutcome {
        from_drop_ns: runs.iter().flat_map(|w| w.from_drop_ns.clone()).collect(),
        ..WillOutcome::default()
    };
    pooled.from_drop_ns.sort_unstable();
    let times = match (
        pooled.from_drop_ms(0.5),
        pooled.from_drop_ms(0.99),
        pooled.earliest_ms(),
    ) {
        (Some(median), Some(p99), Some(earliest)) => format!(
            "{} / {} / {} (n = {})",
            ms(median * 1e3),
            ms(p99 * 1e3),
            ms(earliest * 1e3),
            pooled.from_drop_ns.len()
        ),
        _ => "-".to_string(),
    };
    let delay = runs.first().map_or(0, |w| w.delay_ns);
    let watched = runs.iter().all(|w| w.watched);
    vec![
        runs.len().to_string(),
        format!(
            "{} ({})",
            sum(|w| u64::from(w.connected)),
            sum(|w| u64::from(w.failed))
        ),
        sum(|w| u64::from(w.dropped)).to_string(),
        sum(|w| u64::from(w.delivered)).to_string(),
        if watched {
            sum(|w| u64::from(w.missing())).to_string()
        } else {
            "not watched".to_string()
        },
        sum(|w| w.duplicates).to_string(),
        sum(|w| w.unexpected).to_string(),
        times,
        if delay > 0 {
            format!("{:.0}", delay as f64 / 1e9)
        } else {
            "none".to_string()
        },
        if delay > 0 {
            sum(|w| w.before_delay() as u64).to_string()
        } else {
            "-".to_string()
        },
    ]
}
