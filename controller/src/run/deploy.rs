//! Starting a broker for a run and removing it after: native and embedded on their node,
//! kubernetes through the headnode's agent (which has the cluster's kubectl) pinned to its
//! node, external only resolved.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use domain::broker::DEFAULT_NAMESPACE;
use domain::{BrokerKind, BrokerOptions, BrokerSpec};
use proto::agent::v1 as pb;

use super::AgentHandle;
use crate::plan::{BrokerEntry, BrokerKind as PlanKind, Plan};

/// The node whose agent deploys `broker` and whose Metrics watch it: its own node, or the
/// headnode for a kubernetes broker; none for an external one.
pub(super) fn deploying_node<'a>(plan: &'a Plan, broker: &'a BrokerEntry) -> Option<&'a str> {
    match broker.kind {
        PlanKind::External => None,
        PlanKind::Kubernetes => plan.testbed.headnode.as_deref(),
        PlanKind::Native | PlanKind::Embedded => broker.node.as_deref(),
    }
}

/// A broker ready for its cells: where clients dial it, and what the agent said it runs
/// (product, process or image, node) for the manifest.
#[derive(Debug, Clone)]
pub(super) struct Deployed {
    pub address: SocketAddr,
    pub detail: String,
}

/// Starts the broker on its node (or records an external one). Err carries the reason and
/// whether its cells are skipped (an optional broker that is not installed) or failed.
pub(super) async fn deploy(
    plan: &Plan,
    broker: &BrokerEntry,
    agents: &HashMap<String, AgentHandle>,
) -> Result<Deployed, (String, bool)> {
    if broker.kind == PlanKind::External {
        let address = broker.address.as_deref().unwrap_or_default();
        return tokio::net::lookup_host(address)
            .await
            .ok()
            .and_then(|mut addresses| addresses.next())
            .map(|address| Deployed {
                address,
                detail: "external: run by someone else".to_string(),
            })
            .ok_or_else(|| {
                (
                    format!("external address {address:?} does not resolve"),
                    false,
                )
            });
    }
    let node = deploying_node(plan, broker).unwrap_or_default();
    let mut agent = agents
        .get(node)
        .cloned()
        .ok_or_else(|| (format!("node {node} has no agent"), false))?;
    let spec = broker_spec(plan, broker, agent.data_address)?;
    let started = tokio::time::timeout(
        plan.timeouts.deploy + std::time::Duration::from_secs(5),
        agent.client.start_broker(pb::StartBrokerRequest {
            spec: Some(pb::BrokerSpec::from(&spec)),
        }),
    )
    .await
    .map_err(|_| {
        (
            format!("not ready within {:?}", plan.timeouts.deploy),
            false,
        )
    })?;
    match started {
        Ok(status) => {
            let status = status.into_inner();
            let address = status
                .address
                .parse()
                .map_err(|_| ("the agent reported no address".to_string(), false))?;
            Ok(Deployed {
                address,
                detail: status.detail,
            })
        }
        Err(status) if status.code() == tonic::Code::FailedPrecondition && broker.optional => {
            Err((status.message().to_string(), true))
        }
        Err(status) => Err((status.message().to_string(), false)),
    }
}

pub(super) async fn undeploy(
    plan: &Plan,
    broker: &BrokerEntry,
    agents: &HashMap<String, AgentHandle>,
) {
    if let Some(mut agent) = deploying_node(plan, broker)
        .and_then(|n| agents.get(n))
        .cloned()
        && let Err(status) = agent
            .client
            .stop_broker(pb::StopBrokerRequest {
                name: broker.name.clone(),
            })
            .await
    {
        tracing::warn!(broker = %broker.name, %status, "stopping the broker");
    }
}

/// What the agent is asked to run for `broker`, listening on its node's `bind` address.
fn broker_spec(
    plan: &Plan,
    broker: &BrokerEntry,
    bind: IpAddr,
) -> Result<BrokerSpec, (String, bool)> {
    let product = || {
        broker
            .product()
            .ok_or_else(|| (format!("broker {}: no known product", broker.name), false))
    };
    let kind = match broker.kind {
        PlanKind::Embedded => BrokerKind::Embedded,
        // The pod is pinned to the broker's node; the headnode's agent applies it.
        PlanKind::Kubernetes => BrokerKind::Kubernetes {
            product: product()?,
            node: broker.node.clone().unwrap_or_default(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            node_port: (broker.port != 0).then_some(broker.port),
        },
        PlanKind::Native | PlanKind::External => BrokerKind::Native {
            product: product()?,
        },
    };
    Ok(BrokerSpec {
        name: broker.name.clone(),
        kind,
        bind,
        port: broker.port,
        options: BrokerOptions {
            start_deadline: Some(plan.timeouts.deploy),
            ..BrokerOptions::default()
        },
    })
}
