//! The plan unrolled: each test's points with their workloads (built here and nowhere
//! else), and one cell per broker x scenario x test x point x repetition, each with a stable
//! id so a resumed run knows which are done.

use loadgen::WorkloadSpec;
use loadgen::size::ByteSize;
use serde::{Deserialize, Serialize};

use super::presets::{test_preset, workload_for};
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

    /// What the point sets in a workload: its payload size or its client pairs.
    pub fn overrides(self) -> (Option<ByteSize>, Option<u32>) {
        match self {
            CellPoint::Single => (None, None),
            CellPoint::Payload(size) => (Some(size), None),
            CellPoint::Clients(pairs) => (None, Some(pairs)),
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
    /// Its stable id as text: its folder's name under `cells/`, its row in `summary.csv`.
    pub fn id(&self, plan: &Plan) -> String {
        self.cell_id(plan).to_string()
    }

    /// Its stable id.
    pub fn cell_id(&self, plan: &Plan) -> CellId {
        CellId {
            broker: plan.brokers[self.broker].name.to_lowercase(),
            scenario: plan.scenarios[self.scenario].name.to_lowercase(),
            test: self.test,
            kind: plan.tests[self.test].kind.name().to_string(),
            point: self.point.label().to_lowercase(),
            repetition: self.repetition,
        }
    }
}

/// A cell's stable id, `broker/scenario/<test index>-<kind>/<point>/<repetition>` lower-cased
/// (`mosquitto/edge/0-latency/-/1`): the name of its folder under `cells/` and of its row in
/// `summary.csv`, from which a report finds the cell's test again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CellId {
    /// The broker's name, lower-cased.
    pub broker: String,
    /// The scenario's name, lower-cased.
    pub scenario: String,
    /// Index into `plan.tests`.
    pub test: usize,
    /// The test's kind as plans write it (`latency`, `throughput`).
    pub kind: String,
    /// The point's label (`-`, `1kb`, `100`).
    pub point: String,
    /// 1-based repetition.
    pub repetition: u32,
}

impl std::fmt::Display for CellId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}-{}/{}/{}",
            self.broker, self.scenario, self.test, self.kind, self.point, self.repetition
        )
    }
}

/// Why a text is not a cell id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a cell id (broker/scenario/<test>-<kind>/<point>/<repetition>)")]
pub struct NotACellId(String);

impl std::str::FromStr for CellId {
    type Err = NotACellId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let not = || NotACellId(text.to_string());
        let parts: Vec<&str> = text.split('/').collect();
        let [broker, scenario, test, point, repetition] = parts[..] else {
            return Err(not());
        };
        let (index, kind) = test.split_once('-').ok_or_else(not)?;
        if [broker, scenario, kind, point]
            .iter()
            .any(|part| part.is_empty())
        {
            return Err(not());
        }
        Ok(CellId {
            broker: broker.to_string(),
            scenario: scenario.to_string(),
            test: index.parse().map_err(|_| not())?,
            kind: kind.to_string(),
            point: point.to_string(),
            repetition: repetition.parse().map_err(|_| not())?,
        })
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

    /// How many cells each broker and scenario has, computed without listing them.
    pub fn cells_per_scenario(&self) -> usize {
        self.point_count() * self.repetitions as usize
    }

    /// How many points all tests have together (one cell each per broker, scenario and
    /// repetition).
    pub fn point_count(&self) -> usize {
        (0..self.tests.len()).map(|t| self.points(t).len()).sum()
    }

    /// How many cells the plan has, computed without listing them.
    pub fn cell_count(&self) -> usize {
        self.brokers.len() * self.scenarios.len() * self.cells_per_scenario()
    }

    /// Every cell of the plan.
    pub fn cells(&self) -> Vec<Cell> {
        (0..self.brokers.len())
            .flat_map(|b| (0..self.scenarios.len()).flat_map(move |s| self.cells_of(b, s)))
            .collect()
    }
}

impl Plan {
    /// Test `test`'s workload at each of its points, in the order of [`Plan::points`]: the
    /// preset, the plan's fields and its workload table laid over each other once. An error
    /// (a QoS that is not one, a table loadgen's spec refuses) is the same at every point.
    pub fn workloads_of(&self, test: usize) -> Result<Vec<(CellPoint, WorkloadSpec)>, String> {
        self.points(test)
            .into_iter()
            .map(|point| self.workload_at(test, point).map(|spec| (point, spec)))
            .collect()
    }

    /// The workload of test `test` as its first point has it: what every point shares (its
    /// transport, pacing, QoS and table), for readers that do not sweep.
    pub fn first_workload(&self, test: usize) -> Result<WorkloadSpec, String> {
        let first = self
            .points(test)
            .into_iter()
            .next()
            .unwrap_or(CellPoint::Single);
        self.workload_at(test, first)
    }

    /// Test `test`'s workload at `point`.
    fn workload_at(&self, test: usize, point: CellPoint) -> Result<WorkloadSpec, String> {
        let (payload, clients) = point.overrides();
        workload_for(&self.tests[test], payload, clients)
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

    #[test]
    fn a_cell_id_reads_back_as_written_and_counts_match_the_list() {
        let plan = plan("grouped");
        let cells = plan.cells();
        assert_eq!(plan.cell_count(), cells.len());
        assert_eq!(plan.cells_per_scenario(), plan.cells_of(0, 1).len());
        let id = cells[3].cell_id(&plan);
        assert_eq!(cells[3].id(&plan), "b/edge/0-latency/-/2");
        assert_eq!("b/edge/0-latency/-/2".parse::<CellId>(), Ok(id));
        for bad in [
            "b/edge/latency/-/2",
            "b/edge/0-latency/-",
            "b/edge/x-latency/-/2",
            "b//0-latency/-/1",
            "b/edge/0-latency/-/1/x",
        ] {
            assert!(bad.parse::<CellId>().is_err(), "{bad}");
        }
    }
}
