//! The plan unrolled: one cell per broker x scenario x test x point x repetition, each with
//! a stable id so a resumed run knows which are done.

use loadgen::size::ByteSize;
use serde::{Deserialize, Serialize};

use super::presets::test_preset;
use super::types::{CellOrder, Plan};

/// The point of a test's sweep a cell measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellPoint {
    /// A test without a sweep (latency offset).
    Single,
    /// One payload size (latency vs payload).
    Payload(ByteSize),
    /// One number of client pairs (throughput).
    Clients(u32),
}

impl CellPoint {
    /// As shown in ids, CSV and figures: `-`, `1KB`, `100`.
    pub fn label(&self) -> String {
        match self {
            CellPoint::Single => "-".to_string(),
            CellPoint::Payload(size) => size.to_string(),
            CellPoint::Clients(pairs) => pairs.to_string(),
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Index into `plan.brokers`.
    pub broker: usize,
    /// Index into `plan.scenarios`.
    pub scenario: usize,
    /// Index into `plan.tests`.
    pub test: usize,
    /// The sweep point.
    pub point: CellPoint,
    /// 1-based repetition.
    pub repetition: u32,
}

impl Cell {
    /// A stable id: `broker/scenario/test-index-kind/point/rep`.
    pub fn id(&self, plan: &Plan) -> String {
        let test = &plan.tests[self.test];
        format!(
            "{}/{}/{}-{:?}/{}/{}",
            plan.brokers[self.broker].name,
            plan.scenarios[self.scenario].name,
            self.test,
            test.kind,
            self.point.label(),
            self.repetition
        )
        .to_lowercase()
    }
}

impl Plan {
    /// The points of test `index`: its payloads, its client counts, or a single point.
    pub fn points(&self, index: usize) -> Vec<CellPoint> {
        let test = &self.tests[index];
        let (_, payloads, clients) = test_preset(test.kind);
        let payloads = test.payloads.clone().unwrap_or(payloads);
        let clients = test.clients.clone().unwrap_or(clients);
        if !payloads.is_empty() {
            payloads.into_iter().map(CellPoint::Payload).collect()
        } else if !clients.is_empty() {
            clients.into_iter().map(CellPoint::Clients).collect()
        } else {
            vec![CellPoint::Single]
        }
    }

    /// Every cell of a broker and scenario, in run order.
    pub fn cells_of(&self, broker: usize, scenario: usize) -> Vec<Cell> {
        let mut cells = Vec::new();
        for test in 0..self.tests.len() {
            for point in self.points(test) {
                for repetition in 1..=self.repetitions {
                    cells.push(Cell {
                        broker,
                        scenario,
                        test,
                        point,
                        repetition,
                    });
                }
            }
        }
        cells
    }

    /// `cells` (of one broker) as they run: per scenario in plan order, all of its cells at
    /// once, or with `order = "interleaved"` one round per repetition, each round visiting
    /// every scenario. Scenarios without a cell in a round are left out.
    pub fn scenario_rounds<'a>(&self, cells: &'a [Cell]) -> Vec<(usize, Vec<&'a Cell>)> {
        let rounds: Vec<Option<u32>> = match self.order {
            CellOrder::Grouped => vec![None],
            CellOrder::Interleaved => (1..=self.repetitions).map(Some).collect(),
        };
        let mut groups = Vec::new();
        for round in rounds {
            for scenario in 0..self.scenarios.len() {
                let group: Vec<&Cell> = cells
                    .iter()
                    .filter(|c| c.scenario == scenario && round.is_none_or(|r| c.repetition == r))
                    .collect();
                if !group.is_empty() {
                    groups.push((scenario, group));
                }
            }
        }
        groups
    }

    /// Every cell of the plan.
    pub fn cells(&self) -> Vec<Cell> {
        (0..self.brokers.len())
            .flat_map(|b| (0..self.scenarios.len()).flat_map(move |s| self.cells_of(b, s)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(order: &str) -> Plan {
        let text = format!(
            "name = \"o\"\nrepetitions = 2\norder = \"{order}\"\n\
             [[nodes]]\nname = \"n\"\nagent = \"local\"\nroles = [\"loadgen\", \"broker\", \"netem\"]\n\
             [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n\
             [[scenarios]]\nname = \"local\"\n[[scenarios]]\nname = \"edge\"\n\
             [[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\n"
        );
        Plan::parse(&text, "plan.toml").expect("plan")
    }

    /// (scenario, repetitions) of each group, in run order.
    fn order_of(plan: &Plan, cells: &[Cell]) -> Vec<(usize, Vec<u32>)> {
        plan.scenario_rounds(cells)
            .into_iter()
            .map(|(s, group)| (s, group.iter().map(|c| c.repetition).collect()))
            .collect()
    }

    #[test]
    fn interleaved_runs_every_scenario_once_per_repetition() {
        let grouped = plan("grouped");
        let cells = grouped
            .cells_of(0, 0)
            .into_iter()
            .chain(grouped.cells_of(0, 1))
            .collect::<Vec<_>>();
        assert_eq!(
            order_of(&grouped, &cells),
            vec![(0, vec![1, 2]), (1, vec![1, 2])]
        );
        let interleaved = plan("interleaved");
        assert_eq!(
            order_of(&interleaved, &cells),
            vec![(0, vec![1]), (1, vec![1]), (0, vec![2]), (1, vec![2])]
        );
        // Resumed with local's first repetition done: that round visits edge alone.
        assert_eq!(
            order_of(&interleaved, &cells[1..]),
            vec![(1, vec![1]), (0, vec![2]), (1, vec![2])]
        );
    }
}
