//! The run as a value: its agents, its results folder and manifest, its counts, and the
//! phases that walk brokers x scenarios x cells. Each change a phase makes on a machine is
//! held by a guard around the phases inside it (a deployed broker around its scenarios,
//! netem around its cells), so an error, a panic or a stop inside undoes it on the way out;
//! each phase answers a [`Flow`] so the one around it knows whether to go on.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use loadgen::WorkloadSpec;
use tokio_util::sync::CancellationToken;

use super::agents::AgentHandle;
use super::deploy::{self, DeployError, Deployment, Endpoints};
use super::error::RunError;
use super::events::{Events, RunCounts, RunEvent};
use super::guard::{Guard, catching};
use super::record::{Ended, Progress};
use super::scenario::{self, Lapse, Netem, ScenarioOutcome};
use super::{cell, phases};
use crate::plan::{BrokerEntry, BrokerSetup, Cell, CellOrder, CellPoint, OnFailure, Plan};
use crate::results::{BrokerRecord, CellStatus, Manifest, NodeRecord, PathRecord, ResultsDir};

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The results folder.
    pub dir: PathBuf,
    /// Cells measured, failed and skipped in this invocation.
    pub measured: usize,
    /// Cells that failed.
    pub failed: usize,
    /// Cells skipped (not emulable, broker not installed, already done).
    pub skipped: usize,
    /// The run stopped early (signal or on_failure = "stop").
    pub interrupted: bool,
}

/// What a phase tells the phase around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Go on with the next broker, scenario or cell.
    Continue,
    /// Stop the run (a signal, or a failure under `on_failure = "stop"`), after the undo of
    /// every phase it is in.
    Stop,
}

/// A run in progress.
#[derive(Debug)]
pub(super) struct Run<'p> {
    plan: &'p Plan,
    /// Each test's workload at each of its points, built once for all of its cells.
    workloads: Vec<Vec<(CellPoint, WorkloadSpec)>>,
    dir: PathBuf,
    agents: HashMap<String, AgentHandle>,
    results: ResultsDir,
    finished: HashSet<String>,
    manifest: Manifest,
    progress: Progress,
    cancel: CancellationToken,
    netem_renewal: Duration,
}

/// What opening a run needs besides the plan and its agents.
#[derive(Debug)]
pub(super) struct Setting<'a> {
    pub(super) plan_text: &'a str,
    pub(super) dir: PathBuf,
    pub(super) cancel: CancellationToken,
    pub(super) events: Events,
    /// How often netem leases are renewed.
    pub(super) netem_renewal: Duration,
}

impl<'p> Run<'p> {
    /// Opens the results folder, reports the start and writes the first manifest (carrying
    /// over what a resumed folder already recorded).
    pub(super) async fn open(
        plan: &'p Plan,
        agents: HashMap<String, AgentHandle>,
        setting: Setting<'_>,
    ) -> Result<Self, RunError> {
        // A valid plan's workloads build; were one not to, nothing is written yet.
        let workloads = (0..plan.tests.len())
            .map(|test| plan.workloads_of(test))
            .collect::<Result<Vec<_>, String>>()
            .map_err(RunError::Plan)?;
        let results = ResultsDir::open(&setting.dir)?;
        let finished = results.finished_cells()?;
        let total = plan.cell_count();
        let dir = setting.dir;
        let events = setting.events;
        events
            .emit(RunEvent::Started {
                dir: dir.clone(),
                total,
            })
            .await;
        let mut manifest = Manifest {
            plan: plan.clone(),
            plan_text: setting.plan_text.to_string(),
            controller_version: env!("CARGO_PKG_VERSION").to_string(),
            started_unix_ms: loadgen::clock::unix_now_ns() / 1_000_000,
            nodes: plan
                .nodes
                .iter()
                .filter_map(|n| agents.get(&n.name))
                .map(|a| node_record(plan, a))
                .collect(),
            netem: Vec::new(),
            skipped: Vec::new(),
            testbed: None,
            brokers: Vec::new(),
            paths: PathRecord::of_plan(plan),
            // A folder that already holds cells keeps its kind: an older one's cells have
            // no records.
            cell_records: !results.summary_path().exists(),
        };
        if let Ok(previous) = results.read_manifest() {
            manifest.netem = previous.netem;
            manifest.skipped = previous.skipped;
            manifest.brokers = previous.brokers;
            manifest.cell_records = previous.cell_records;
        }
        results.write_manifest(&manifest)?;
        let counts = RunCounts {
            total,
            ..RunCounts::default()
        };
        Ok(Run {
            plan,
            workloads,
            dir,
            agents,
            results,
            finished,
            manifest,
            progress: Progress { counts, events },
            cancel: setting.cancel,
            netem_renewal: setting.netem_renewal,
        })
    }

    fn events(&self) -> Events {
        self.progress.events.clone()
    }

    /// Phases 2 and 3 (overlay, cluster): a failure here stops the run before any broker.
    pub(super) async fn prepare(&mut self) -> Result<(), RunError> {
        self.manifest.testbed = phases::prepare(self.plan, &self.agents, &self.events()).await?;
        self.results.write_manifest(&self.manifest)?;
        for node in &self.manifest.nodes {
            self.progress
                .events
                .emit(RunEvent::Node(node.clone()))
                .await;
        }
        Ok(())
    }

    /// Every broker in turn, until one says stop; first, how many cells this testbed can run.
    pub(super) async fn brokers(&mut self) -> Result<Flow, RunError> {
        let runnable = self.runnable();
        self.progress.events.emit(runnable).await;
        for b in 0..self.plan.brokers.len() {
            if Box::pin(self.broker(b)).await? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    /// The cells this testbed can run, and why not the others: native brokers whose product
    /// the node's agent did not find, scenarios it cannot emulate; from the agents'
    /// capabilities.
    fn runnable(&self) -> RunEvent {
        let plan = self.plan;
        let total = plan.cell_count();
        let mut not_runnable: Vec<(String, usize)> = Vec::new();
        for broker in &plan.brokers {
            if let Some(reason) = self.not_installed(broker) {
                not_runnable.push((reason, plan.scenarios.len() * plan.cells_per_scenario()));
                continue;
            }
            for scenario in &plan.scenarios {
                let Some(reason) = scenario::cannot_emulate(plan, scenario, broker, &self.agents)
                else {
                    continue;
                };
                let cells = plan.cells_per_scenario();
                match not_runnable.iter_mut().find(|(known, _)| *known == reason) {
                    Some((_, count)) => *count += cells,
                    None => not_runnable.push((reason, cells)),
                }
            }
        }
        let skipped: usize = not_runnable.iter().map(|(_, n)| n).sum();
        RunEvent::Runnable {
            runnable: total - skipped,
            total,
            not_runnable,
        }
    }

    /// Why native `broker` cannot run: its node's agent said which products it has, and its
    /// product is not among them. (Deploying it says so again, with the paths looked at.)
    fn not_installed(&self, broker: &BrokerEntry) -> Option<String> {
        let Some(BrokerSetup::Native { node, product }) = broker.setup() else {
            return None;
        };
        let installed = self.agents.get(node)?.info.installed_brokers.as_ref()?;
        (!installed.contains(&product)).then(|| {
            format!(
                "broker {}: {product} is not installed on node {node} (install: {})",
                broker.name,
                recipes::install_hint(product)
            )
        })
    }

    /// Broker `b`: deployed, its scenarios run under its deploy guard, removed.
    async fn broker(&mut self, b: usize) -> Result<Flow, RunError> {
        let plan = self.plan;
        let broker = &plan.brokers[b];
        let pending: Vec<Cell> = (0..plan.scenarios.len())
            .flat_map(|s| plan.cells_of(b, s))
            .filter(|c| !self.finished.contains(&c.id(plan)))
            .collect();
        let of_broker = plan.scenarios.len() * plan.cells_per_scenario();
        self.progress.counts.done += of_broker - pending.len();
        if pending.is_empty() {
            return Ok(Flow::Continue);
        }
        let deployed = match deploy::deploy(plan, broker, &self.agents).await {
            Ok(deployed) => deployed,
            Err(error) => return self.unavailable(broker, &pending, &error).await,
        };
        let deployment = Deployment::new(plan, broker, &self.agents, self.events());
        let flow = Guard::new(deployment)
            .around(async {
                self.record_broker(broker, &deployed).await?;
                let runnable = self
                    .skip_what_it_lacks(broker, &pending, deployed.capabilities.as_ref())
                    .await?;
                self.scenarios(b, &runnable, deployed.endpoints()).await
            })
            .await?;
        if flow == Flow::Stop || self.cancel.is_cancelled() {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    /// A broker that could not be deployed: its cells skipped (an optional broker that is
    /// not installed) or failed.
    async fn unavailable(
        &mut self,
        broker: &BrokerEntry,
        pending: &[Cell],
        error: &DeployError,
    ) -> Result<Flow, RunError> {
        let reason = error.reason();
        let skip = matches!(error, DeployError::NotInstalled(_));
        let unavailable = RunEvent::BrokerUnavailable {
            broker: broker.name.clone(),
            reason: reason.to_string(),
        };
        self.progress.events.emit(unavailable).await;
        let status = if skip {
            let why = format!("broker {}: {reason}", broker.name);
            self.manifest.skipped.push(why);
            CellStatus::Skipped
        } else {
            CellStatus::Failed
        };
        let (results, plan) = (&self.results, self.plan);
        let cells: Vec<&Cell> = pending.iter().collect();
        self.progress
            .record_unmeasured(results, plan, &cells, status, reason)
            .await?;
        if !skip && plan.on_failure == OnFailure::Stop {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    /// The pending cells the broker can run: those whose workload needs what its probe
    /// found missing are recorded as skipped, with that reason, and left out.
    async fn skip_what_it_lacks(
        &mut self,
        broker: &BrokerEntry,
        pending: &[Cell],
        capabilities: Option<&loadgen::capabilities::Capabilities>,
    ) -> Result<Vec<Cell>, RunError> {
        let Some(capabilities) = capabilities else {
            return Ok(pending.to_vec());
        };
        let mut runnable = Vec::new();
        for cell in pending {
            let lacks = self.workloads[cell.test]
                .iter()
                .find(|(point, _)| *point == cell.point)
                .and_then(|(_, spec)| capabilities.lacks(spec));
            match lacks {
                Some(reason) => {
                    let reason = format!("broker {}: {reason}", broker.name);
                    let (results, plan) = (&self.results, self.plan);
                    self.progress
                        .record_unmeasured(results, plan, &[cell], CellStatus::Skipped, &reason)
                        .await?;
                }
                None => runnable.push(cell.clone()),
            }
        }
        Ok(runnable)
    }

    async fn record_broker(
        &mut self,
        broker: &BrokerEntry,
        deployed: &deploy::Deployed,
    ) -> Result<(), RunError> {
        let record = BrokerRecord {
            name: broker.name.clone(),
            node: deploy::deploying_node(self.plan, broker)
                .unwrap_or("-")
                .to_string(),
            address: deployed.address.to_string(),
            websocket_address: deployed.websocket.map(|ws| ws.to_string()),
            quic_address: deployed.quic.map(|quic| quic.to_string()),
            detail: deployed.detail.clone(),
            capabilities: deployed.capabilities.clone(),
        };
        self.manifest.brokers.retain(|b| b.name != record.name);
        self.manifest.brokers.push(record);
        self.results.write_manifest(&self.manifest)?;
        let ready = RunEvent::BrokerReady {
            broker: broker.name.clone(),
            address: deployed.address,
        };
        self.progress.events.emit(ready).await;
        Ok(())
    }

    /// The scenarios of broker `b` in turn, each with its pending cells: all of them at
    /// once, or (`order = "interleaved"`) one repetition of each per round.
    async fn scenarios(
        &mut self,
        b: usize,
        pending: &[Cell],
        endpoints: Endpoints<'_>,
    ) -> Result<Flow, RunError> {
        for (s, cells) in self.plan.scenario_rounds(pending) {
            if self.cancel.is_cancelled() {
                return Ok(Flow::Stop);
            }
            if Box::pin(self.scenario(b, s, &cells, endpoints)).await? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    /// Scenario `s` of broker `b`: netem applied and verified, the cells run under the netem
    /// guard, netem cleared.
    async fn scenario(
        &mut self,
        b: usize,
        s: usize,
        cells: &[&Cell],
        endpoints: Endpoints<'_>,
    ) -> Result<Flow, RunError> {
        let entry = &self.plan.scenarios[s];
        let mut netem = Guard::new(Netem::new(&entry.name, self.events(), self.netem_renewal));
        let lapse = netem.get_mut().lapse();
        let outcome = catching(async {
            if self.emulate(b, s, cells, netem.get_mut()).await? {
                self.cells(b, cells, endpoints, &lapse).await
            } else {
                Ok(Flow::Continue)
            }
        })
        .await;
        netem.finish(outcome).await
    }

    /// Applies scenario `s` for broker `b` into `netem`; false when its cells were recorded
    /// as skipped or failed instead.
    async fn emulate(
        &mut self,
        b: usize,
        s: usize,
        cells: &[&Cell],
        netem: &mut Netem,
    ) -> Result<bool, RunError> {
        let (plan, broker) = (self.plan, &self.plan.brokers[b]);
        let entry = &plan.scenarios[s];
        let outcome = scenario::apply(plan, entry, broker, &self.agents, netem).await;
        let (status, reason) = match outcome {
            Ok(ScenarioOutcome::Unimpaired) => return Ok(true),
            Ok(ScenarioOutcome::Applied(applied)) => {
                for netem in &applied {
                    let event = RunEvent::Netem {
                        scenario: netem.scenario.clone(),
                        node: netem.node.clone(),
                        asked: netem.asked.to_string(),
                        read_back: netem.read_back_text(),
                    };
                    self.progress.events.emit(event).await;
                }
                // Interleaved, a scenario is applied once per repetition: recorded once
                // unless a node's kernel read back something else another time.
                for netem in applied {
                    if !self.manifest.netem.contains(&netem) {
                        self.manifest.netem.push(netem);
                    }
                }
                self.results.write_manifest(&self.manifest)?;
                return Ok(true);
            }
            Ok(ScenarioOutcome::Skipped(reason)) => {
                let skipped = RunEvent::ScenarioSkipped {
                    reason: reason.clone(),
                };
                // Interleaved, the same scenario comes back each repetition: said once.
                let known = self.manifest.skipped.contains(&reason);
                if !(known && plan.order == CellOrder::Interleaved) {
                    self.progress.events.emit(skipped).await;
                }
                if !known {
                    self.manifest.skipped.push(reason.clone());
                }
                (CellStatus::Skipped, reason)
            }
            Err(reason) => (CellStatus::Failed, reason),
        };
        self.progress
            .record_unmeasured(&self.results, plan, cells, status, &reason)
            .await?;
        Ok(false)
    }

    /// The cells of one broker and scenario in turn, until one says stop. Once the
    /// scenario's emulation lapsed (a failed renewal), the cell that ran meanwhile fails and
    /// the rest are not run: none is recorded as emulated without its link.
    async fn cells(
        &mut self,
        b: usize,
        cells: &[&Cell],
        endpoints: Endpoints<'_>,
        lapse: &Lapse,
    ) -> Result<Flow, RunError> {
        for (n, cell) in cells.iter().enumerate() {
            if self.cancel.is_cancelled() {
                return Ok(Flow::Stop);
            }
            if let Some(reason) = lapse.reason() {
                self.progress
                    .record_unmeasured(
                        &self.results,
                        self.plan,
                        &cells[n..],
                        CellStatus::Failed,
                        &reason,
                    )
                    .await?;
                return Ok(Flow::Continue);
            }
            if Box::pin(self.cell(b, cell, endpoints, lapse)).await? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    /// One cell: its workload run while the broker's node reports metrics, then recorded.
    async fn cell(
        &mut self,
        b: usize,
        cell: &Cell,
        endpoints: Endpoints<'_>,
        lapse: &Lapse,
    ) -> Result<Flow, RunError> {
        let plan = self.plan;
        let broker = &plan.brokers[b];
        let id = cell.id(plan);
        let run_id = format!("c{:016x}", fingerprint(&id, self.manifest.started_unix_ms));
        let workload = self.workloads[cell.test]
            .iter()
            .find(|(point, _)| *point == cell.point)
            .map(|(_, spec)| spec)
            .ok_or_else(|| format!("test {} has no point {}", cell.test, cell.point.label()))
            .and_then(|base| cell::workload(base, plan, cell, endpoints, &run_id));
        let spec = match workload {
            Ok(spec) => spec,
            Err(reason) => {
                let failed = Ended::unmeasured(CellStatus::Failed, &reason);
                self.progress
                    .record(&self.results, plan, cell, failed)
                    .await?;
                return Ok(Flow::Continue);
            }
        };
        let watch = deploy::deploying_node(plan, broker).map(|node| (node, broker.name.as_str()));
        // Boxed, as are the phases: nested inline, their futures overflow a worker's stack in
        // debug builds.
        let measuring = cell::run(plan, cell, spec, &self.agents, watch, &id, &self.cancel);
        let (outcome, metrics) = Box::pin(measuring).await;
        self.results.record_metrics(&metrics)?;
        let watched = watch.map(|(node, name)| (name, self.clock_shift(node, cell)));
        let mut ended = Ended::ran(outcome, &metrics, watched);
        // Checked once more now, before the cell is recorded: a lapse in its last second
        // fails it too.
        if let Some(reason) = lapse.confirm().await {
            ended = ended.failed_because(&reason);
        }
        let failed = ended.status == CellStatus::Failed;
        self.progress
            .record(&self.results, plan, cell, ended)
            .await?;
        if failed && plan.on_failure == OnFailure::Stop {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    /// How far the clock of the broker's `node` is ahead of the cell's first loadgen node.
    fn clock_shift(&self, node: &str, cell: &Cell) -> i64 {
        let loadgen = &self.plan.tests[cell.test].loadgen[0];
        match (self.agents.get(node), self.agents.get(loadgen)) {
            (Some(broker_node), Some(loadgen_node)) => {
                broker_node.clock.offset_ns - loadgen_node.clock.offset_ns
            }
            _ => 0,
        }
    }

    /// Writes the last manifest; what the run did.
    pub(super) fn close(self, flow: Flow) -> Result<RunSummary, RunError> {
        self.results.write_manifest(&self.manifest)?;
        let counts = self.progress.counts;
        Ok(RunSummary {
            dir: self.dir,
            measured: counts.measured,
            failed: counts.failed,
            skipped: counts.skipped,
            interrupted: flow == Flow::Stop,
        })
    }
}

fn node_record(plan: &Plan, agent: &AgentHandle) -> NodeRecord {
    let entry = plan.nodes.iter().find(|n| n.name == agent.name);
    NodeRecord {
        name: agent.name.clone(),
        agent: entry.map(|n| n.agent.to_string()).unwrap_or_default(),
        arch: agent.info.arch.clone(),
        cores: agent.info.cores,
        memory_bytes: agent.info.memory_bytes,
        kernel: agent.info.kernel.clone(),
        os: agent.info.os.clone(),
        agent_version: agent.info.agent_version.clone(),
        netem: if agent.netem_available() {
            "available".to_string()
        } else {
            format!("unavailable: {}", agent.netem_detail())
        },
        clock_offset_ns: agent.clock.offset_ns,
        clock_error_bound_ns: agent.clock.error_bound_ns,
    }
}

/// A short, stable-per-run fingerprint of a cell id: loadgen run ids are [A-Za-z0-9-].
fn fingerprint(id: &str, salt: u64) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325 ^ salt, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
