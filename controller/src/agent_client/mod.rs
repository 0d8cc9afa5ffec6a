//! The run's [`NodeAgent`] over gRPC: each call converts its request from the run's types,
//! sends it on the agent's mTLS channel and converts the reply back (`convert.rs`), so no
//! generated message goes past this module.

mod convert;

use std::sync::Arc;
use std::time::Duration;

use domain::{BrokerSpec, NetemParams};
use futures_util::StreamExt;
use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use proto::client::{ConnectError, connect_agent_via};
use proto::mtls::{Credentials, TcpDial};
use tonic::transport::Channel;

use crate::clock::ClockOffset;
use crate::run::testbed::{
    Agent, AgentError, ClusterInstall, ClusterInstalled, InForce, Load, LoadResult, MetricsStream,
    NodeAgent, NodeInfo, OverlayInstall, OverlayInstalled, Reply, Started,
};

/// Connects to the agent at `address` (host:port) with the controller's `credentials`, over
/// a TCP connection opened by `dial` when given (inside a node's namespace).
pub async fn connect(
    address: &str,
    credentials: &Credentials,
    dial: Option<TcpDial>,
) -> Result<Agent, ConnectError> {
    let client = connect_agent_via(address, None, credentials, dial).await?;
    Ok(Arc::new(GrpcAgent { client }))
}

/// A node's agent reached over gRPC (the client is cheap to clone: one per call).
#[derive(Debug, Clone)]
struct GrpcAgent {
    client: AgentClient<Channel>,
}

/// The reply of a unary call, or the agent's error.
fn answer<T>(reply: Result<tonic::Response<T>, tonic::Status>) -> Result<T, AgentError> {
    reply
        .map(tonic::Response::into_inner)
        .map_err(AgentError::from)
}

impl NodeAgent for GrpcAgent {
    fn info(&self) -> Reply<'_, NodeInfo> {
        let mut client = self.client.clone();
        Box::pin(async move { Ok(answer(client.info(pb::InfoRequest {}).await)?.into()) })
    }

    fn clock(&self, exchanges: u32) -> Reply<'_, ClockOffset> {
        let mut client = self.client.clone();
        Box::pin(async move {
            crate::clock::measure(&mut client, exchanges)
                .await
                .map_err(AgentError::from)
        })
    }

    fn start_broker<'a>(&'a self, spec: &'a BrokerSpec, lease: Duration) -> Reply<'a, Started> {
        let mut client = self.client.clone();
        let request = pb::StartBrokerRequest {
            spec: Some(pb::BrokerSpec::from(spec)),
            lease: prost_types::Duration::try_from(lease).ok(),
        };
        Box::pin(async move { Started::try_from(answer(client.start_broker(request).await)?) })
    }

    fn renew_broker<'a>(&'a self, name: &'a str) -> Reply<'a, ()> {
        let mut client = self.client.clone();
        let request = pb::RenewBrokerRequest { name: name.into() };
        Box::pin(async move { answer(client.renew_broker(request).await).map(drop) })
    }

    fn stop_broker<'a>(&'a self, name: &'a str) -> Reply<'a, ()> {
        let mut client = self.client.clone();
        let request = pb::StopBrokerRequest { name: name.into() };
        Box::pin(async move { answer(client.stop_broker(request).await).map(drop) })
    }

    fn apply_netem<'a>(&'a self, params: &'a NetemParams, lease: Duration) -> Reply<'a, InForce> {
        let mut client = self.client.clone();
        // The agent's default interface: its data plane.
        let request = pb::ApplyNetemRequest {
            interface: String::new(),
            netem: Some(pb::NetemSpec::from(params)),
            lease: prost_types::Duration::try_from(lease).ok(),
        };
        Box::pin(async move { Ok(answer(client.apply_netem(request).await)?.into()) })
    }

    fn renew_netem(&self) -> Reply<'_, ()> {
        let mut client = self.client.clone();
        let request = pb::RenewNetemRequest {
            interface: String::new(),
            lease: None,
        };
        Box::pin(async move { answer(client.renew_netem(request).await).map(drop) })
    }

    fn clear_netem(&self) -> Reply<'_, ()> {
        let mut client = self.client.clone();
        let request = pb::ClearNetemRequest {
            interface: String::new(),
        };
        Box::pin(async move { answer(client.clear_netem(request).await).map(drop) })
    }

    fn run_load(&self, load: Load) -> Reply<'_, LoadResult> {
        let mut client = self.client.clone();
        let request = pb::RunLoadRequest::from(&load);
        Box::pin(async move {
            let mut events = answer(client.run_load(request).await)?;
            let result: LoadResult = Box::pin(async move {
                while let Some(event) = events.next().await {
                    match event.map_err(AgentError::from)?.event {
                        Some(pb::run_load_event::Event::Result(result)) => {
                            return loadgen::RunResult::try_from(*result)
                                .map_err(|e| AgentError::Reply(e.to_string()));
                        }
                        Some(pb::run_load_event::Event::Progress(_)) | None => {}
                    }
                }
                Err(AgentError::Reply(
                    "the load ended without a result".to_string(),
                ))
            });
            Ok(result)
        })
    }

    fn metrics<'a>(&'a self, broker: &'a str, interval: Duration) -> Reply<'a, MetricsStream> {
        let mut client = self.client.clone();
        let request = pb::MetricsRequest {
            interval: prost_types::Duration::try_from(interval).ok(),
            pids: Vec::new(),
            brokers: vec![broker.to_string()],
            samples: 0,
        };
        Box::pin(async move {
            let samples = answer(client.metrics(request).await)?;
            let stream: MetricsStream = Box::pin(samples.map(|sample| {
                sample
                    .map(crate::run::testbed::MetricsSample::from)
                    .map_err(AgentError::from)
            }));
            Ok(stream)
        })
    }

    fn install_overlay<'a>(&'a self, install: &'a OverlayInstall) -> Reply<'a, OverlayInstalled> {
        let mut client = self.client.clone();
        let request = pb::InstallOverlayRequest::from(install);
        Box::pin(async move { Ok(answer(client.install_overlay(request).await)?.into()) })
    }

    fn install_cluster<'a>(&'a self, install: &'a ClusterInstall) -> Reply<'a, ClusterInstalled> {
        let mut client = self.client.clone();
        let request = pb::InstallClusterRequest::from(install);
        Box::pin(async move { Ok(answer(client.install_cluster(request).await)?.into()) })
    }
}
