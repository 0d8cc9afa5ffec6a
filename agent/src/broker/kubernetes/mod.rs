//! The kubernetes driver: a product's pinned official image on the k3s cluster, applied with
//! kubectl as NetworkPolicy + Secret + ConfigMap + Deployment + NodePort Service and deleted
//! after.
//!
//! A start looks up the node's InternalIP (an unknown node is refused before anything is
//! applied), draws the deployment's secrets (an Erlang cookie of its own, never the image's;
//! for a QUIC listener, a CA of the deployment's own and a certificate it signs for the
//! InternalIP), applies the manifests, waits for the rollout, then for an MQTT CONNACK at
//! `InternalIP:NodePort`, and over QUIC at the UDP NodePort when the spec asks for QUIC.
//! Whatever fails after the apply, what was applied is deleted again before the error
//! returns, and a start that is abandoned half-way (its RPC cancelled)
//! deletes it from a guard. A stop deletes with foreground cascading and waits until no pod
//! of the broker is left, so the next broker finds the node free. The broker's CPU and memory
//! come from the metrics API ([`PodUsage`]): there is no process on this node to watch.
//!
//! # Layout
//! - this file: [`KubernetesDriver`], the running broker, the apply/delete guard.
//! - (in `recipes`): per product the image and why that tag, config, probe, resources.
//! - `manifests.rs`: [`Manifests`], the typed objects and the JSON kubectl reads;
//!   [`DeploymentSecrets`].
//! - `kubectl.rs`: [`Kubectl`], bounded kubectl calls; [`KubectlError`].
//! - `metrics.rs`: [`PodUsage`], pod CPU/memory from the metrics API, quantity parsing.
//! - `golden/`: the manifests of each product for instance `bench` on node `worker-1`, in YAML,
//!   checked by `golden_tests.rs` (EMQX's with QUIC by `quic_manifest_tests.rs`);
//!   `driver_tests.rs`: the driver against the fake `k3s` of `fake_k3s.rs` (tests only);
//!   `quic_driver_tests.rs`: a pod's QUIC listener the same way, a real QUIC broker standing
//!   in for the pod.

pub(super) mod kubectl;
mod manifests;
mod metrics;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use host::poll::{Attempt, poll_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use tokio::time::Instant;

pub use kubectl::{Kubectl, KubectlError, Output};
pub use manifests::{DeploymentSecrets, MANAGED_BY, Manifests};
pub use metrics::{PodUsage, parse_quantity};

use super::error::BrokerError;
use super::readiness::wait_ready;
use super::{BoxFuture, BrokerDriver, BrokerState, QuicEndpoint, RunningBroker, UsageSampler};
use domain::{BrokerKind, BrokerSpec, Product};

/// How long a start may take unless the spec says otherwise: pulling an image onto a
/// Raspberry Pi takes minutes.
pub const START_DEADLINE: Duration = Duration::from_secs(300);
/// How long `kubectl apply` may take.
const APPLY_LIMIT: Duration = Duration::from_secs(60);
/// How long a `kubectl get` may take.
const GET_LIMIT: Duration = Duration::from_secs(30);
/// kubectl's own bound on a delete (`--timeout`); the call gets a little more.
const DELETE_TIMEOUT: Duration = Duration::from_secs(120);
/// Added to kubectl's own timeouts to bound the call itself.
const CALL_MARGIN: Duration = Duration::from_secs(30);
/// The least time given to the MQTT probe after the rollout, however late that was.
const MIN_MQTT_WAIT: Duration = Duration::from_secs(5);
/// How long a stop waits for the broker's pods to be gone after the delete.
const GONE_DEADLINE: Duration = Duration::from_secs(30);
/// Log lines of the pod quoted in errors.
const LOG_LINES: usize = 30;

/// The driver for brokers on Kubernetes.
#[derive(Debug, Clone, Default)]
pub struct KubernetesDriver {
    kubectl: Kubectl,
}

impl KubernetesDriver {
    /// A driver reaching the cluster with `kubectl`.
    pub fn new(kubectl: Kubectl) -> Self {
        Self { kubectl }
    }

    async fn deploy(&self, spec: &BrokerSpec) -> Result<KubernetesBroker, BrokerError> {
        let BrokerKind::Kubernetes {
            product,
            node,
            namespace,
            ..
        } = &spec.kind
        else {
            return Err(BrokerError::invalid(
                "kind",
                spec.summary(),
                "is not a Kubernetes broker",
            ));
        };
        let end = Instant::now() + spec.options.start_deadline_or(START_DEADLINE);
        let mut secrets = DeploymentSecrets::draw()
            .map_err(|e| BrokerError::io("drawing the deployment's secrets", e))?;
        let node_ip = self.node_ip(&spec.name, node).await?;
        // The QUIC certificate names the node's address, where clients reach the NodePort.
        let quic_ca = match spec.options.quic_port {
            Some(_) => {
                let (ca_pem, issued) = super::quic_listener::issue_certificate(&[node_ip])?;
                secrets = secrets.with_quic_certificate(&issued.cert_pem, &issued.key_pem);
                Some(ca_pem)
            }
            None => None,
        };
        let manifests = Manifests::of(spec, &secrets)?;
        let address = SocketAddr::new(node_ip, manifests.node_port);
        let applied = Applied {
            name: spec.name.clone(),
            kubectl: self.kubectl.clone(),
            delete_json: manifests.delete_json()?,
            armed: true,
        };
        let target = Target {
            name: &spec.name,
            namespace,
            kubectl: &self.kubectl,
            login: recipes::anonymous_login(*product),
        };
        if let Err(error) = target.roll_out(&manifests, address, end).await {
            return Err(applied.undo_after(error).await);
        }
        let websocket = manifests
            .websocket
            .map(|(port, path)| (SocketAddr::new(address.ip(), port), path));
        if let Some((websocket, path)) = websocket {
            let remaining = end.saturating_duration_since(Instant::now());
            let ready =
                super::websocket_probe::wait_ready(websocket, path, remaining, || None).await;
            if let Err(reason) = ready {
                let error = BrokerError::NotReady {
                    name: spec.name.clone(),
                    address: websocket,
                    deadline: spec.options.start_deadline_or(START_DEADLINE),
                    reason: format!("its WebSocket listener (path {path}): {reason}"),
                    log_tail: String::new(),
                };
                return Err(applied.undo_after(error).await);
            }
        }
        let quic = manifests
            .quic_node_port
            .zip(quic_ca)
            .map(|(port, ca_pem)| QuicEndpoint {
                address: SocketAddr::new(node_ip, port),
                ca_pem,
            });
        if let Some(quic) = &quic {
            let remaining = end
                .saturating_duration_since(Instant::now())
                .max(MIN_MQTT_WAIT);
            let ready =
                super::quic_listener::wait_ready(quic.address, &quic.ca_pem, remaining, || None)
                    .await;
            if let Err(reason) = ready {
                let error = BrokerError::NotReady {
                    name: spec.name.clone(),
                    address: quic.address,
                    deadline: remaining,
                    reason: format!("its QUIC listener (UDP NodePort): {reason}"),
                    log_tail: target.pod_log().await,
                };
                return Err(applied.undo_after(error).await);
            }
        }
        tracing::info!(broker = %spec.name, %product, %node, %address, "broker ready on Kubernetes");
        Ok(KubernetesBroker {
            name: spec.name.clone(),
            product: *product,
            node: node.clone(),
            namespace: namespace.clone(),
            image: manifests.image,
            address,
            websocket: websocket.map(|(address, _)| address),
            quic,
            kubectl: self.kubectl.clone(),
            usage: PodUsage::new(
                &spec.name,
                self.kubectl.clone(),
                namespace,
                &manifests.selector,
            ),
            selector: manifests.selector,
            applied,
        })
    }

    /// The InternalIP of `node`: where its NodePorts are reached.
    async fn node_ip(&self, name: &str, node: &str) -> Result<IpAddr, BrokerError> {
        let args = ["get", "node", node, "-o", "json"];
        let found: Node = match self.kubectl.json(&args, GET_LIMIT).await {
            Ok(found) => found,
            Err(error) if error.is_not_found() => {
                return Err(BrokerError::invalid(
                    "kind.kubernetes.node",
                    node,
                    "is not a node of the cluster",
                ));
            }
            Err(source) => {
                return Err(BrokerError::Kubernetes {
                    name: name.to_owned(),
                    context: format!("looking up node {node}"),
                    source,
                });
            }
        };
        let addresses = found.status.and_then(|s| s.addresses).unwrap_or_default();
        addresses
            .iter()
            .filter(|a| a.type_ == "InternalIP")
            .find_map(|a| a.address.parse().ok())
            .ok_or_else(|| BrokerError::Kubernetes {
                name: name.to_owned(),
                context: format!("looking up node {node}"),
                source: KubectlError::BadAnswer {
                    command: format!("kubectl {}", args.join(" ")),
                    reason: format!("the node reports no InternalIP among {addresses:?}"),
                },
            })
    }
}

impl BrokerDriver for KubernetesDriver {
    fn start<'a>(
        &'a self,
        spec: &'a BrokerSpec,
    ) -> BoxFuture<'a, Result<Box<dyn RunningBroker>, BrokerError>> {
        Box::pin(async move {
            let broker = self.deploy(spec).await?;
            Ok(Box::new(broker) as Box<dyn RunningBroker>)
        })
    }
}

/// One broker's place in the cluster, for the steps of a start.
struct Target<'a> {
    name: &'a str,
    namespace: &'a str,
    kubectl: &'a Kubectl,
    /// What the product's anonymous access asks the MQTT probe for (ejabberd's login).
    login: Option<recipes::Login>,
}

impl Target<'_> {
    /// Applies, waits for the rollout, then for MQTT at `address`, all before `end`.
    async fn roll_out(
        &self,
        manifests: &Manifests,
        address: SocketAddr,
        end: Instant,
    ) -> Result<(), BrokerError> {
        let name = self.name;
        self.kubectl
            .run(
                &["apply", "-f", "-"],
                Some(&manifests.apply_json()?),
                APPLY_LIMIT,
            )
            .await
            .map_err(|source| BrokerError::Kubernetes {
                name: name.to_owned(),
                context: format!("applying its manifests in namespace {}", self.namespace),
                source,
            })?;
        let left = end.saturating_duration_since(Instant::now());
        let deployment = format!("deployment/{name}");
        let timeout = format!("--timeout={}s", left.as_secs().max(1));
        let rollout = [
            "rollout",
            "status",
            &deployment,
            "-n",
            self.namespace,
            &timeout,
        ];
        if let Err(error) = self.kubectl.run(&rollout, None, left + CALL_MARGIN).await {
            return Err(BrokerError::NotReady {
                name: name.to_owned(),
                address,
                deadline: left,
                reason: format!("its Deployment did not roll out: {}", error.output()),
                log_tail: self.pod_log().await,
            });
        }
        let left = end
            .saturating_duration_since(Instant::now())
            .max(MIN_MQTT_WAIT);
        if let Err(reason) = wait_ready(address, left, self.login, || None).await {
            return Err(BrokerError::NotReady {
                name: name.to_owned(),
                address,
                deadline: left,
                reason: format!(
                    "its pod is ready, but its NodePort does not answer MQTT: {reason}"
                ),
                log_tail: self.pod_log().await,
            });
        }
        Ok(())
    }

    /// The end of the pod's log, or why there is none (kubectl's answer says it well:
    /// "waiting to start: image can't be pulled").
    async fn pod_log(&self) -> String {
        let deployment = format!("deployment/{}", self.name);
        let tail = format!("--tail={LOG_LINES}");
        let args = [
            "logs",
            &deployment,
            "-n",
            self.namespace,
            "--all-containers",
            &tail,
        ];
        match self.kubectl.run(&args, None, GET_LIMIT).await {
            Ok(output) => output.stdout,
            Err(error) => error.output(),
        }
    }
}

/// What was applied for one broker: deleted by [`Applied::delete`], or, should it be
/// dropped undeleted (a start abandoned half-way), by a task the drop spawns.
#[derive(Debug)]
struct Applied {
    name: String,
    kubectl: Kubectl,
    /// Everything applied but the namespace, as `kubectl delete -f -` reads it.
    delete_json: String,
    armed: bool,
}

impl Applied {
    async fn delete(&mut self) -> Result<(), KubectlError> {
        delete(&self.kubectl, &self.delete_json).await?;
        self.armed = false;
        Ok(())
    }

    /// Deletes after a failed start; returns the start's error, or one saying that the
    /// delete failed too and the broker may be left.
    async fn undo_after(mut self, error: BrokerError) -> BrokerError {
        match self.delete().await {
            Ok(()) => error,
            Err(undo) => BrokerError::StopFailed {
                name: self.name.clone(),
                reason: format!(
                    "the start failed ({error}), and deleting what it applied failed too, so \
                     it may be left in the cluster: {undo}"
                ),
            },
        }
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(broker = %self.name, "dropped while applied, with no runtime to delete it");
            return;
        };
        tracing::warn!(broker = %self.name, "dropped while applied; deleting it");
        let (kubectl, delete_json, name) = (
            self.kubectl.clone(),
            std::mem::take(&mut self.delete_json),
            self.name.clone(),
        );
        runtime.spawn(async move {
            if let Err(error) = delete(&kubectl, &delete_json).await {
                tracing::warn!(broker = %name, %error, "deleting a dropped broker");
            }
        });
    }
}

/// `kubectl delete` of `delete_json`, waiting until the objects and (foreground cascading) their
/// pods are gone; objects already gone are fine.
async fn delete(kubectl: &Kubectl, delete_json: &str) -> Result<(), KubectlError> {
    let timeout = format!("--timeout={}s", DELETE_TIMEOUT.as_secs());
    let args = [
        "delete",
        "-f",
        "-",
        "--cascade=foreground",
        "--wait=true",
        "--ignore-not-found",
        &timeout,
    ];
    kubectl
        .run(&args, Some(delete_json), DELETE_TIMEOUT + CALL_MARGIN)
        .await
        .map(drop)
}

/// A broker running on Kubernetes.
#[derive(Debug)]
pub struct KubernetesBroker {
    name: String,
    product: Product,
    node: String,
    namespace: String,
    image: &'static str,
    address: SocketAddr,
    websocket: Option<SocketAddr>,
    quic: Option<QuicEndpoint>,
    kubectl: Kubectl,
    selector: String,
    usage: Arc<PodUsage>,
    applied: Applied,
}

impl KubernetesBroker {
    /// Polls until no pod of this broker is listed, or [`GONE_DEADLINE`] passes.
    async fn wait_pods_gone(&self) -> Result<(), BrokerError> {
        let args = [
            "get",
            "pods",
            "-n",
            &self.namespace,
            "-l",
            &self.selector,
            "-o",
            "name",
        ];
        let left = poll_until(GONE_DEADLINE, Duration::from_secs(1), || async {
            match self.kubectl.run(&args, None, GET_LIMIT).await {
                Ok(output) if output.stdout.trim().is_empty() => Attempt::Done(()),
                Ok(output) => Attempt::Retry(
                    output
                        .stdout
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                Err(error) => Attempt::Retry(error.to_string()),
            }
        })
        .await;
        left.map_err(|left| BrokerError::StopFailed {
            name: self.name.clone(),
            reason: format!("its objects were deleted, but after {GONE_DEADLINE:?} still: {left}"),
        })
    }
}

impl RunningBroker for KubernetesBroker {
    fn address(&self) -> SocketAddr {
        self.address
    }

    fn websocket_address(&self) -> Option<SocketAddr> {
        self.websocket
    }

    fn quic_endpoint(&self) -> Option<QuicEndpoint> {
        self.quic.clone()
    }

    /// No process of it runs on this node; see [`RunningBroker::usage_sampler`].
    fn pid(&self) -> Option<u32> {
        None
    }

    fn detail(&self) -> String {
        format!(
            "{} ({}) as Deployment {}/{} on node {}, NodePort {}",
            self.product,
            self.image,
            self.namespace,
            self.name,
            self.node,
            self.address.port()
        )
    }

    /// Running while its Deployment has a ready replica.
    fn check(&mut self) -> BoxFuture<'_, BrokerState> {
        Box::pin(async move {
            let args = [
                "get",
                "deployment",
                &self.name,
                "-n",
                &self.namespace,
                "-o",
                "json",
            ];
            match self.kubectl.json::<Deployment>(&args, GET_LIMIT).await {
                Ok(deployment) => state_of(&deployment),
                Err(error) if error.is_not_found() => BrokerState::Failed(format!(
                    "its Deployment {}/{} no longer exists",
                    self.namespace, self.name
                )),
                Err(error) => BrokerState::Failed(format!("cannot read its Deployment: {error}")),
            }
        })
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), BrokerError>> {
        Box::pin(async move {
            let mut broker = *self;
            broker
                .applied
                .delete()
                .await
                .map_err(|error| BrokerError::StopFailed {
                    name: broker.name.clone(),
                    reason: format!("deleting its objects: {error}"),
                })?;
            broker.wait_pods_gone().await
        })
    }

    fn usage_sampler(&self) -> Option<Arc<dyn UsageSampler>> {
        Some(Arc::clone(&self.usage) as Arc<dyn UsageSampler>)
    }
}

/// Running with a ready replica; otherwise failed, with the conditions that say why.
fn state_of(deployment: &Deployment) -> BrokerState {
    let status = deployment.status.as_ref();
    if status.and_then(|s| s.ready_replicas).unwrap_or(0) >= 1 {
        return BrokerState::Running;
    }
    let reasons: Vec<String> = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status != "True")
        .map(|c| {
            format!(
                "{} ({}): {}",
                c.type_,
                c.reason.as_deref().unwrap_or("no reason"),
                c.message.as_deref().unwrap_or("")
            )
        })
        .collect();
    BrokerState::Failed(format!(
        "no ready replica{}{}",
        if reasons.is_empty() { "" } else { ": " },
        reasons.join("; ")
    ))
}

#[cfg(test)]
mod driver_tests;
#[cfg(test)]
pub(crate) mod fake_k3s;
#[cfg(test)]
mod quic_driver_tests;
