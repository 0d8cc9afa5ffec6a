//! One load of a cell: the workload run by one loadgen agent, or spread over several (the
//! test's `spread`) with a start barrier on a shared timeline, their results merged.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use loadgen::{RunResult, WorkloadSpec};

use super::agents::AgentHandle;
use super::testbed::Load;
use crate::plan::{Cell, Plan};

/// Time from the barrier's announcement to the first message: enough for agents to connect.
const START_AFTER: Duration = Duration::from_secs(3);
/// An agent takes this long at most to accept a RunLoad (connecting included).
const RUN_LOAD_ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// Runs `spec` on the loadgen nodes of `cell`'s test: the merged result, or why not.
pub(super) async fn run_load(
    plan: &Plan,
    cell: &Cell,
    spec: WorkloadSpec,
    agents: &HashMap<String, AgentHandle>,
) -> Result<RunResult, String> {
    let labels = labels(plan, cell);
    let test = &plan.tests[cell.test];
    let agent = |name: &str| {
        agents
            .get(name)
            .cloned()
            .ok_or_else(|| format!("node {name} has no agent"))
    };
    let placements = test.placements(spec.publishers, spec.subscribers);
    if let [only] = placements.as_slice()
        && only.shard == spec.effective_shard()
    {
        let load = Load {
            spec,
            origin_unix_ns: 0,
            start_at_ns: 0,
            labels: labels.clone(),
        };
        return run_on(agent(&only.node)?, load).await;
    }
    // One timeline: the origin is now on our clock, mapped onto each agent's, and every
    // shard starts at the same barrier on it.
    let origin = loadgen::clock::unix_now_ns();
    let mut parts = Vec::with_capacity(placements.len());
    for placement in placements {
        let node = agent(&placement.node)?;
        let mut spec = spec.clone();
        spec.shard = Some(placement.shard);
        let load = Load {
            spec,
            origin_unix_ns: node.clock.to_agent_clock(origin),
            start_at_ns: START_AFTER.as_nanos() as u64,
            labels: labels.clone(),
        };
        parts.push(run_on(node, load));
    }
    // The first part to fail ends the cell, naming its node: dropping the others' loads
    // cancels them.
    let mut results = futures_util::future::try_join_all(parts).await?.into_iter();
    let mut merged = results
        .next()
        .ok_or_else(|| "no loadgen node has a client to run".to_string())?;
    for part in results {
        merged.merge(&part).map_err(|e| e.to_string())?;
    }
    Ok(merged)
}

/// What `cell` is, for the agents' metrics: the labels the controller's own metrics give it
/// (`crate::metrics`), so that one query joins both.
fn labels(plan: &Plan, cell: &Cell) -> BTreeMap<String, String> {
    [
        ("run", plan.name.clone()),
        ("cell", cell.id(plan)),
        ("broker", plan.brokers[cell.broker].name.clone()),
        ("scenario", plan.scenarios[cell.scenario].name.clone()),
        ("test", plan.tests[cell.test].kind.name().to_string()),
        ("point", cell.point.label()),
        ("repetition", cell.repetition.to_string()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect()
}

/// `load` on `agent`: its result, each instance marked as run on that node.
async fn run_on(agent: AgentHandle, load: Load) -> Result<RunResult, String> {
    let name = &agent.name;
    // The agent answers at once (the load itself waits for the barrier): an agent that does
    // not is frozen or gone, and the cell fails naming it rather than at the cell's deadline.
    let running = tokio::time::timeout(RUN_LOAD_ANSWER_WITHIN, agent.agent.run_load(load))
        .await
        .map_err(|_| format!("{name}: no answer to RunLoad within {RUN_LOAD_ANSWER_WITHIN:?}"))?
        .map_err(|error| format!("{name}: {error}"))?;
    let mut result = running.await.map_err(|error| format!("{name}: {error}"))?;
    for instance in &mut result.instances {
        instance.node = Some(name.clone());
    }
    Ok(result)
}
