//! The plan unrolled: one cell per broker x scenario x test x point x repetition, each with
//! a stable id so a resumed run knows which are done.

use loadgen::size::ByteSize;
use serde::{Deserialize, Serialize};

use super::presets::test_preset;
use super::types::Plan;

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

    /// Every cell of the plan.
    pub fn cells(&self) -> Vec<Cell> {
        (0..self.brokers.len())
            .flat_map(|b| (0..self.scenarios.len()).flat_map(move |s| self.cells_of(b, s)))
            .collect()
    }
}
