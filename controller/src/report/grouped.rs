//! Sections with one row per test, broker and scenario over its repetitions (churn fleets,
//! reconnect storms): the grouping, and failures by kind summed into one cell.

use std::collections::BTreeMap;

use loadgen::Summary;

use super::input::RunData;
use super::test_label;

/// For each test, broker and scenario in plan order whose measured cells have what `pick`
/// finds: its labels, then the cells `row` makes of the repetitions' values.
pub fn rows_per_group<T>(
    data: &RunData,
    pick: impl Fn(&Summary) -> Option<&T>,
    row: impl Fn(&[&T]) -> Vec<String>,
) -> Vec<Vec<String>> {
    let plan = &data.manifest.plan;
    let mut rows = Vec::new();
    for test in 0..plan.tests.len() {
        for (b, broker) in plan.brokers.iter().enumerate() {
            for (s, scenario) in plan.scenarios.iter().enumerate() {
                let values: Vec<&T> = data
                    .cells
                    .iter()
                    .filter(|c| c.test == test && c.broker == b && c.scenario == s)
                    .filter_map(|c| pick(&c.summary))
                    .collect();
                if values.is_empty() {
                    continue;
                }
                let mut cells = vec![
                    test_label(plan, test),
                    broker.name.clone(),
                    scenario.name.clone(),
                ];
                cells.extend(row(&values));
                rows.push(cells);
            }
        }
    }
    rows
}

/// Counts by kind summed over `counts`, as `kind: n; kind: n`, or `none`.
pub fn by_kind<'a>(counts: impl IntoIterator<Item = &'a BTreeMap<String, u64>>) -> String {
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    for map in counts {
        for (kind, count) in map {
            *sums.entry(kind.as_str()).or_insert(0) += count;
        }
    }
    if sums.is_empty() {
        return "none".to_string();
    }
    sums.iter()
        .map(|(kind, count)| format!("{kind}: {count}"))
        .collect::<Vec<_>>()
        .join("; ")
}
