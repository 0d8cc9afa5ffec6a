//! The agents' testbed with a Mosquitto the test starts in the worker's namespace, which a
//! plan names as an external broker (so the test reads its `$SYS` counters around a run), and
//! the top of such a plan: one loadgen node, the tester, and the broker.

use std::path::Path;

use anyhow::Result;

use super::{AGENT_PORT, AgentBed};
use crate::mosquitto::{Mosquitto, MosquittoOptions};

/// The port the worker's Mosquitto listens on, on the worker's testbed address.
pub const WORKER_MQTT_PORT: u16 = 1883;

/// Agents on the testbed (prefix `prefix`) and a Mosquitto in the worker's namespace.
pub fn start(prefix: &str) -> Result<(AgentBed, Mosquitto)> {
    let bed = AgentBed::start_with(prefix, |_, _| Ok(String::new()))?;
    let worker = bed.testbed.node("worker");
    let options = MosquittoOptions {
        extra_config: vec![format!("listener {WORKER_MQTT_PORT} {}", worker.addr())],
        ..MosquittoOptions::default()
    };
    let mosquitto = worker.enter(|| Mosquitto::start(options))??;
    Ok((bed, mosquitto))
}

/// A plan named `name`, one repetition, results under `results`, the tester as its one
/// loadgen node and the worker's Mosquitto as broker `mosquitto`, in scenario `local`;
/// `tests` (its `[[tests]]` tables) follow.
pub fn plan(bed: &AgentBed, name: &str, results: &Path, tests: &str) -> String {
    format!(
        r#"name = "{name}"
repetitions = 1
pki_dir = "{pki}"
results_dir = "{results}"
[timeouts]
connect = "10s"
cell = "60s"
[[nodes]]
name = "tester"
agent = "{tester}:{AGENT_PORT}"
roles = ["loadgen"]
[[brokers]]
name = "mosquitto"
kind = "external"
address = "{broker}:{WORKER_MQTT_PORT}"
[[scenarios]]
name = "local"
{tests}"#,
        pki = bed.pki.path().display(),
        results = results.display(),
        tester = bed.testbed.node("tester").addr(),
        broker = bed.testbed.node("worker").addr(),
    )
}
