//! The undo tests' testbed: real in-process agents (their brokers, their loads) seen through
//! an in-memory stand-in for netem, which this machine's kernel may not have, and through
//! failures a test injects: a netem apply or renewal that fails on a node, a results file
//! made unwritable at a chosen moment (so the run's own write fails, as a full disk would),
//! or a panic after a cell ran.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use domain::{BrokerSpec, NetemParams};

use super::{
    Agent, AgentError, Capability, ClusterInstall, ClusterInstalled, InForce, Load, LoadResult,
    MetricsStream, NodeAgent, NodeInfo, OverlayInstall, OverlayInstalled, Reply, Started, Testbed,
};
use crate::clock::ClockOffset;
use crate::run::impairment::asked_record;

/// A failure a test injects into a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The manifest cannot be written once netem is applied.
    Manifest,
    /// The cell cannot be recorded once its load ended.
    Cell,
    /// The run panics after a cell ran: at the renewal that checks its netem as it ends.
    CellPanics,
    /// The report cannot be written (its file is blocked once a cell's load ended).
    Report,
}

/// The testbed of an undo test.
#[derive(Debug)]
pub(crate) struct MemoryTestbed {
    /// The stand-in for every node's netem.
    pub(crate) netem: Arc<MemoryNetem>,
    /// The failure to inject, if any.
    pub(crate) fault: Option<Fault>,
    /// The run's results folder, where a fault blocks a file.
    pub(crate) folder: PathBuf,
    /// How often the run renews netem leases.
    pub(crate) renew_every: Duration,
}

impl Testbed for MemoryTestbed {
    fn agent(&self, node: &str, connected: Agent) -> Agent {
        Arc::new(MemoryAgent {
            node: node.to_string(),
            real: connected,
            netem: Arc::clone(&self.netem),
            fault: self.fault,
            folder: self.folder.clone(),
        })
    }

    fn netem_renewal(&self) -> Duration {
        self.renew_every
    }
}

/// Which nodes hold netem, and what was done to them.
#[derive(Debug, Default)]
pub(crate) struct MemoryNetem {
    /// The apply on this node fails.
    pub(crate) fail_on: Option<String>,
    /// Renewals on this node fail (its agent went silent).
    pub(crate) renewal_fails_on: Option<String>,
    /// Renewals on this node fail once a load ended (the netem went in the cell's last
    /// moment).
    pub(crate) renewal_fails_after_load_on: Option<String>,
    /// A load has ended.
    pub(crate) load_ended: AtomicBool,
    /// A renewal failed before any load ended: the renewal loop, not the check as a cell
    /// ends, met the failure.
    pub(crate) failed_before_load_ended: AtomicBool,
    /// The nodes that hold netem.
    pub(crate) held: Mutex<BTreeSet<String>>,
    /// What was done, in order.
    pub(crate) log: Mutex<Vec<String>>,
}

impl MemoryNetem {
    fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }

    fn apply(&self, node: &str, params: &NetemParams) -> Result<InForce, AgentError> {
        self.note(format!("apply {node}"));
        if self.fail_on.as_deref() == Some(node) {
            return Err(failed("injected netem failure"));
        }
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node.to_string());
        Ok(InForce {
            interface: "fake0".into(),
            read_back: Some(asked_record(params)),
        })
    }

    fn renew(&self, node: &str) -> Result<(), AgentError> {
        let lapsed = self.load_ended.load(Ordering::SeqCst)
            && self.renewal_fails_after_load_on.as_deref() == Some(node);
        if lapsed || self.renewal_fails_on.as_deref() == Some(node) {
            if !self.load_ended.load(Ordering::SeqCst) {
                self.failed_before_load_ended.store(true, Ordering::SeqCst);
            }
            self.note(format!("renewal failed {node}"));
            return Err(failed("injected: no answer"));
        }
        self.note(format!("renewed {node}"));
        Ok(())
    }

    fn clear(&self, node: &str) {
        self.note(format!("clear {node}"));
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }

    /// Nodes that still hold netem.
    pub(crate) fn held(&self) -> BTreeSet<String> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What was done, in order.
    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn failed(message: &str) -> AgentError {
    AgentError::Failed {
        message: message.to_string(),
        cause: None,
    }
}

/// Makes `file` in `folder` unwritable for the run: a folder in its place, which no file
/// can be renamed onto or appended to (root included).
fn block(folder: &Path, file: &str) {
    let path = folder.join(file);
    let _ = std::fs::remove_file(&path);
    std::fs::create_dir_all(path.join("blocked")).expect("a folder in the file's place");
}

/// A node's real agent, with netem in memory and the test's fault.
#[derive(Debug)]
struct MemoryAgent {
    node: String,
    real: Agent,
    netem: Arc<MemoryNetem>,
    fault: Option<Fault>,
    folder: PathBuf,
}

impl NodeAgent for MemoryAgent {
    fn info(&self) -> Reply<'_, NodeInfo> {
        Box::pin(async move {
            let mut info = self.real.info().await?;
            info.netem = Some(Capability {
                available: true,
                detail: "in memory".into(),
            });
            Ok(info)
        })
    }

    fn clock(&self, exchanges: u32) -> Reply<'_, ClockOffset> {
        self.real.clock(exchanges)
    }

    fn start_broker<'a>(&'a self, spec: &'a BrokerSpec, lease: Duration) -> Reply<'a, Started> {
        self.real.start_broker(spec, lease)
    }

    fn renew_broker<'a>(&'a self, name: &'a str) -> Reply<'a, ()> {
        self.real.renew_broker(name)
    }

    fn stop_broker<'a>(&'a self, name: &'a str) -> Reply<'a, ()> {
        self.real.stop_broker(name)
    }

    fn apply_netem<'a>(&'a self, params: &'a NetemParams, _lease: Duration) -> Reply<'a, InForce> {
        Box::pin(async move {
            if self.fault == Some(Fault::Manifest) {
                block(&self.folder, "manifest.json");
            }
            self.netem.apply(&self.node, params)
        })
    }

    fn renew_netem(&self) -> Reply<'_, ()> {
        Box::pin(async move {
            if self.fault == Some(Fault::CellPanics) && self.netem.load_ended.load(Ordering::SeqCst)
            {
                panic!("injected panic after the cell ran");
            }
            self.netem.renew(&self.node)
        })
    }

    fn clear_netem(&self) -> Reply<'_, ()> {
        Box::pin(async move {
            self.netem.clear(&self.node);
            Ok(())
        })
    }

    fn run_load(&self, load: Load) -> Reply<'_, LoadResult> {
        Box::pin(async move {
            let running = self.real.run_load(load).await?;
            let (netem, fault, folder) = (Arc::clone(&self.netem), self.fault, self.folder.clone());
            let result: LoadResult = Box::pin(async move {
                let result = running.await;
                netem.load_ended.store(true, Ordering::SeqCst);
                match fault {
                    Some(Fault::Cell) => block(&folder, "summary.csv"),
                    Some(Fault::Report) => block(&folder, "report.md"),
                    Some(Fault::Manifest | Fault::CellPanics) | None => {}
                }
                result
            });
            Ok(result)
        })
    }

    fn metrics<'a>(&'a self, broker: &'a str, interval: Duration) -> Reply<'a, MetricsStream> {
        self.real.metrics(broker, interval)
    }

    fn install_overlay<'a>(&'a self, install: &'a OverlayInstall) -> Reply<'a, OverlayInstalled> {
        self.real.install_overlay(install)
    }

    fn install_cluster<'a>(&'a self, install: &'a ClusterInstall) -> Reply<'a, ClusterInstalled> {
        self.real.install_cluster(install)
    }
}
