//! Applying a network scenario on the nodes a broker's tests involve, holding it under
//! renewed leases while the cells run, and clearing it afterwards.

use std::collections::BTreeSet;
use std::time::Duration;

use proto::agent::v1 as pb;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::agents::AgentHandle;
use crate::plan::{DelaySplit, Plan, ScenarioEntry, scenario_preset};
use crate::results::{AppliedNetem, NetemRecord};

/// netem leases: a controller that dies leaves the links impaired at most this long.
const LEASE: Duration = Duration::from_secs(30);
/// Leases are renewed this often.
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// What became of a scenario.
#[derive(Debug)]
pub enum ScenarioOutcome {
    /// Nothing to emulate (all totals zero).
    Unimpaired,
    /// Applied and verified on these nodes; renewed until cleared.
    Applied(ActiveScenario, Vec<AppliedNetem>),
    /// Cannot be emulated on this testbed (the reason says why).
    Skipped(String),
}

/// netem in force on some nodes.
#[derive(Debug)]
pub struct ActiveScenario {
    nodes: Vec<AgentHandle>,
    stop_renewing: CancellationToken,
    renewer: JoinHandle<()>,
}

impl ActiveScenario {
    /// Stops renewing and clears netem on every node (errors logged: the leases clear it
    /// anyway within their time).
    pub async fn clear(self) {
        self.stop_renewing.cancel();
        let _ = self.renewer.await;
        for mut node in self.nodes {
            if let Err(status) = node
                .client
                .clear_netem(pb::ClearNetemRequest {
                    interface: String::new(),
                })
                .await
            {
                tracing::warn!(node = %node.name, %status, "clearing netem; its lease will");
            }
        }
    }
}

/// The scenario's totals.
pub fn totals(scenario: &ScenarioEntry) -> (Duration, Duration, f64) {
    let preset = scenario_preset(&scenario.name).unwrap_or((Duration::ZERO, Duration::ZERO, 0.0));
    (
        scenario.delay.unwrap_or(preset.0),
        scenario.jitter.unwrap_or(preset.1),
        scenario.loss_percent.unwrap_or(preset.2),
    )
}

fn netem_spec(delay: Duration, jitter: Duration, loss: f64) -> pb::NetemSpec {
    let duration = |d: Duration| prost_types::Duration::try_from(d).unwrap_or_default();
    pb::NetemSpec {
        delay: Some(duration(delay)),
        jitter: Some(duration(jitter)),
        loss_percent: loss,
        rate_bytes_per_sec: None,
        limit_packets: None,
    }
}

/// Applies `scenario` for `broker` on the nodes involved: the broker's node and the loadgen
/// nodes of the plan's tests.
pub async fn apply(
    plan: &Plan,
    scenario: &ScenarioEntry,
    broker: &str,
    broker_node: Option<&str>,
    agents: &std::collections::HashMap<String, AgentHandle>,
) -> Result<ScenarioOutcome, String> {
    let (delay, jitter, loss) = totals(scenario);
    if delay.is_zero() && jitter.is_zero() && loss == 0.0 {
        return Ok(ScenarioOutcome::Unimpaired);
    }
    let mut involved: BTreeSet<&str> = plan
        .tests
        .iter()
        .flat_map(|t| t.loadgen.iter().map(String::as_str))
        .collect();
    if let Some(node) = broker_node {
        involved.insert(node);
    }
    if involved.len() < 2 {
        let only = involved.iter().next().copied().unwrap_or("?");
        return Ok(ScenarioOutcome::Skipped(format!(
            "scenario {}: load and broker share node {only}, so there is no link to emulate",
            scenario.name
        )));
    }
    for name in &involved {
        let node = agents
            .get(*name)
            .ok_or_else(|| format!("node {name} has no agent"))?;
        if !node.netem_available() {
            return Ok(ScenarioOutcome::Skipped(format!(
                "scenario {}: node {name} cannot emulate ({})",
                scenario.name,
                node.netem_detail()
            )));
        }
    }
    let mut applied = Vec::new();
    let mut nodes = Vec::new();
    for name in involved {
        let mut node = agents
            .get(name)
            .cloned()
            .ok_or_else(|| format!("node {name} has no agent"))?;
        let spec = match scenario.split {
            DelaySplit::HalfEachEnd => netem_spec(delay / 2, jitter / 2, loss / 2.0),
            DelaySplit::BrokerSide if Some(name) == broker_node => netem_spec(delay, jitter, loss),
            DelaySplit::BrokerSide => continue,
        };
        let request = pb::ApplyNetemRequest {
            interface: String::new(),
            netem: Some(spec),
            lease: prost_types::Duration::try_from(LEASE).ok(),
        };
        let state = tokio::time::timeout(plan.timeouts.netem, node.client.apply_netem(request))
            .await
            .map_err(|_| {
                format!(
                    "node {name}: applying netem took longer than {:?}",
                    plan.timeouts.netem
                )
            })?
            .map_err(|status| format!("node {name}: {}", status.message()))?
            .into_inner();
        applied.push(AppliedNetem {
            broker: broker.to_string(),
            scenario: scenario.name.clone(),
            node: name.to_string(),
            interface: state.interface.clone(),
            asked: NetemRecord::of(&spec),
            read_back: state.netem.as_ref().map(NetemRecord::of),
        });
        nodes.push(node);
    }
    let stop_renewing = CancellationToken::new();
    let renewer = tokio::spawn(renew(nodes.clone(), stop_renewing.clone()));
    Ok(ScenarioOutcome::Applied(
        ActiveScenario {
            nodes,
            stop_renewing,
            renewer,
        },
        applied,
    ))
}

async fn renew(mut nodes: Vec<AgentHandle>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RENEW_EVERY) => {}
        }
        for node in &mut nodes {
            let request = pb::RenewNetemRequest {
                interface: String::new(),
                lease: None,
            };
            if let Err(status) = node.client.renew_netem(request).await {
                tracing::error!(node = %node.name, %status, "renewing the netem lease failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn described_netem_reads_back_in_the_report() {
        let spec = netem_spec(
            Duration::from_micros(1_250),
            Duration::from_micros(250),
            0.02,
        );
        let record = NetemRecord::of(&spec);
        assert_eq!(record.to_string(), "delay 1.25ms jitter 0.25ms loss 0.02%");
        assert_eq!(record.delay(), Duration::from_micros(1_250));
    }
}
