//! [`Manifests`]: one Kubernetes broker as typed API objects (Namespace, ConfigMap, Deployment,
//! NodePort Service), written as the multi-document YAML that kubectl applies and deletes.
//! What differs by product (image, config, probe, resources) is its recipe's [`Pod`].
//!
//! The shape, the same for every product:
//! - labels `app.kubernetes.io/{name,instance,managed-by}` = product, instance name,
//!   `continuum`; the Deployment's selector, its pod template and the Service's selector are
//!   exactly these three, so nothing else is ever selected;
//! - one replica, `Recreate` (two brokers must never share the node and the NodePort), the
//!   pod pinned with `nodeSelector: kubernetes.io/hostname: <node>`;
//! - a readiness probe and no liveness probe: a broker saturated by a benchmark answers
//!   probes late, and must not be restarted for it mid-test;
//! - CPU and memory requested, memory limited, CPU not: a CPU limit throttles the broker
//!   in CFS periods, which shows up as latency, the very thing measured;
//! - no service-account token (brokers need no API access; VerneMQ's start script would
//!   query the API for a StatefulSet and exit when refused) and no service links (a Service
//!   named `emqx` or `rabbitmq` would inject `EMQX_*`/`RABBITMQ_*` variables the images read);
//! - a `checksum/config` annotation, so a changed config restarts the pod on apply;
//! - `externalTrafficPolicy: Local`: clients reach the NodePort of the node that runs the
//!   pod, and Local spares them kube-proxy's source NAT; `Cluster` when the spec asks for the
//!   NodePort on every node (clients entering through another node, as the study's did).
//!
//! The Namespace is applied but never deleted: other brokers may live in it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource,
    EnvVar, HTTPGetAction, Namespace, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    Service, ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::broker::error::BrokerError;
use domain::{BrokerKind, BrokerSpec, Product};
use recipes::{ConfigUse, MQTT_PORT, Pod, Readiness};

/// The `app.kubernetes.io/managed-by` value of everything the agent applies.
pub const MANAGED_BY: &str = "continuum";

/// A WebSocket NodePort, unless the spec names one, is this far above the product's MQTT
/// NodePort (31883 gives 32383): inside the default NodePort range, clear of the study's.
const WEBSOCKET_NODE_PORT_OFFSET: u16 = 500;

/// Readiness probe period: often enough to notice readiness within seconds, rare enough to
/// cost nothing measurable during a test.
const PROBE_PERIOD_SECONDS: i32 = 5;

/// One broker's objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    /// The namespace (applied, never deleted).
    pub namespace: Namespace,
    /// The product's config.
    pub config: ConfigMap,
    /// The broker's pod, pinned to its node.
    pub deployment: Deployment,
    /// The NodePort clients connect to.
    pub service: Service,
    /// That NodePort.
    pub node_port: u16,
    /// The NodePort of its WebSocket listener and the path it serves, when it has one.
    pub websocket: Option<(u16, &'static str)>,
    /// The pinned image.
    pub image: &'static str,
    /// The label selector of the broker's pods, as kubectl takes it (`k=v,k=v`).
    pub selector: String,
    header: String,
}

impl Manifests {
    /// The manifests of a Kubernetes `spec` (checked by `spec.validate()` before).
    pub fn of(spec: &BrokerSpec) -> Result<Self, BrokerError> {
        let BrokerKind::Kubernetes {
            product,
            node,
            namespace,
            node_port,
            on_every_node,
        } = &spec.kind
        else {
            return Err(BrokerError::invalid(
                "kind",
                spec.summary(),
                "is not a Kubernetes broker",
            ));
        };
        let profile = recipes::pod(*product, &spec.options);
        let node_port = node_port.unwrap_or(profile.default_node_port);
        let websocket = match spec.options.websocket_port {
            None => None,
            Some(port) => {
                let path = recipes::websocket_path(*product).map_err(|reason| {
                    BrokerError::invalid(
                        "options.websocket_port",
                        port,
                        format!("{product}: {reason}"),
                    )
                })?;
                let port = if port == 0 {
                    profile.default_node_port + WEBSOCKET_NODE_PORT_OFFSET
                } else {
                    port
                };
                Some((port, path))
            }
        };
        let pod_websocket_port = profile
            .ports
            .iter()
            .find(|(name, _)| *name == "ws")
            .map(|(_, port)| *port);
        let name = spec.name.as_str();
        let pod_labels = labels(*product, name);
        let mut labels = pod_labels.clone();
        if let Some((_, version)) = profile.image.rsplit_once(':') {
            labels.insert("app.kubernetes.io/version".into(), version.into());
        }
        let meta = |object: String| ObjectMeta {
            name: Some(object),
            namespace: Some(namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        };
        let config_name = format!("{name}-config");
        let config = ConfigMap {
            metadata: meta(config_name.clone()),
            data: Some(profile.config.clone()),
            ..ConfigMap::default()
        };
        let deployment = Deployment {
            metadata: meta(name.to_owned()),
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                selector: LabelSelector {
                    match_labels: Some(pod_labels.clone()),
                    ..LabelSelector::default()
                },
                strategy: Some(DeploymentStrategy {
                    type_: Some("Recreate".into()),
                    ..DeploymentStrategy::default()
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod_labels.clone()),
                        annotations: Some(BTreeMap::from([(
                            "checksum/config".to_owned(),
                            checksum(&profile.config),
                        )])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(pod_spec(*product, &profile, node, &config_name)),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        };
        let service = Service {
            metadata: meta(name.to_owned()),
            spec: Some(ServiceSpec {
                type_: Some("NodePort".into()),
                external_traffic_policy: Some(
                    if *on_every_node { "Cluster" } else { "Local" }.into(),
                ),
                selector: Some(pod_labels.clone()),
                ports: Some(
                    std::iter::once(ServicePort {
                        name: Some("mqtt".into()),
                        protocol: Some("TCP".into()),
                        port: i32::from(MQTT_PORT),
                        target_port: Some(IntOrString::String("mqtt".into())),
                        node_port: Some(i32::from(node_port)),
                        ..ServicePort::default()
                    })
                    .chain(
                        websocket
                            .zip(pod_websocket_port)
                            .map(|((node_port, _), port)| ServicePort {
                                name: Some("ws".into()),
                                protocol: Some("TCP".into()),
                                port: i32::from(port),
                                target_port: Some(IntOrString::String("ws".into())),
                                node_port: Some(i32::from(node_port)),
                                ..ServicePort::default()
                            }),
                    )
                    .collect(),
                ),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        let header = format!(
            "# Continuum broker {name:?}: {product} in namespace {namespace}, pinned to node \
             {node}, MQTT on NodePort {node_port}.\n# Image {}. {}\n# Written by the Continuum \
             agent. `kubectl delete` of the objects below removes the broker; the namespace \
             stays.\n",
            profile.image, profile.provenance
        );
        Ok(Manifests {
            namespace: Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        MANAGED_BY.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
            config,
            deployment,
            service,
            node_port,
            websocket,
            image: profile.image,
            selector: pod_labels
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect::<Vec<_>>()
                .join(","),
            header,
        })
    }

    /// What `kubectl apply -f -` reads: a comment saying what this is, then the namespace,
    /// config, deployment and service.
    pub fn apply_yaml(&self) -> Result<String, BrokerError> {
        let mut text = wrap_comment(&self.header);
        text.push_str(&document(&self.namespace)?);
        text.push_str(&self.delete_yaml()?);
        Ok(text)
    }

    /// What `kubectl delete -f -` reads: everything but the namespace.
    pub fn delete_yaml(&self) -> Result<String, BrokerError> {
        Ok([
            document(&self.config)?,
            document(&self.deployment)?,
            document(&self.service)?,
        ]
        .concat())
    }
}

/// The labels selecting one broker's pods.
fn labels(product: Product, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), product.to_string()),
        ("app.kubernetes.io/instance".to_owned(), name.to_owned()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            MANAGED_BY.to_owned(),
        ),
    ])
}

fn pod_spec(product: Product, profile: &Pod, node: &str, config_name: &str) -> PodSpec {
    let (volumes, mounts, env_from) = match &profile.config_use {
        ConfigUse::Files(files) => (
            Some(vec![Volume {
                name: "config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_name.to_owned(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            }]),
            Some(
                files
                    .iter()
                    .map(|(key, path)| VolumeMount {
                        name: "config".into(),
                        mount_path: (*path).to_owned(),
                        sub_path: Some((*key).to_owned()),
                        read_only: Some(true),
                        ..VolumeMount::default()
                    })
                    .collect(),
            ),
            None,
        ),
        ConfigUse::Env => (
            None,
            None,
            Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: config_name.to_owned(),
                    optional: Some(false),
                }),
                ..EnvFromSource::default()
            }]),
        ),
    };
    let probe_action = match profile.readiness {
        Readiness::MqttPort => (
            None,
            Some(TCPSocketAction {
                port: IntOrString::String("mqtt".into()),
                ..TCPSocketAction::default()
            }),
        ),
        Readiness::Http { port, path } => (
            Some(HTTPGetAction {
                path: Some(path.into()),
                port: IntOrString::String(port.into()),
                ..HTTPGetAction::default()
            }),
            None,
        ),
    };
    let container = Container {
        name: product.to_string(),
        image: Some(profile.image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        ports: Some(
            profile
                .ports
                .iter()
                .map(|(name, port)| ContainerPort {
                    name: Some((*name).into()),
                    container_port: i32::from(*port),
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        env: (!profile.env.is_empty()).then(|| {
            profile
                .env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: (*name).into(),
                    value: Some(value.clone()),
                    ..EnvVar::default()
                })
                .collect()
        }),
        env_from,
        volume_mounts: mounts,
        readiness_probe: Some(Probe {
            http_get: probe_action.0,
            tcp_socket: probe_action.1,
            period_seconds: Some(PROBE_PERIOD_SECONDS),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity(profile.cpu_request.into())),
                (
                    "memory".to_owned(),
                    Quantity(mebibytes(profile.memory_request_mib)),
                ),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity(mebibytes(profile.memory_limit_mib)),
            )])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    PodSpec {
        node_selector: Some(BTreeMap::from([(
            "kubernetes.io/hostname".to_owned(),
            node.to_owned(),
        )])),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        containers: vec![container],
        volumes,
        ..PodSpec::default()
    }
}

/// `Gi` where it divides evenly, `Mi` otherwise.
fn mebibytes(mib: u64) -> String {
    if mib.is_multiple_of(1024) {
        format!("{}Gi", mib / 1024)
    } else {
        format!("{mib}Mi")
    }
}

/// FNV-1a over the config: stable across builds and Rust versions, unlike std's hasher.
fn checksum(config: &BTreeMap<String, String>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in config
        .iter()
        .flat_map(|(key, value)| [key.as_bytes(), b"\0", value.as_bytes(), b"\0"])
        .flatten()
    {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// One YAML document, starting with `---` (see yaml.rs for why not serde_yaml_ng).
fn document<T: serde::Serialize>(object: &T) -> Result<String, BrokerError> {
    let value = serde_json::to_value(object)
        .map_err(|e| BrokerError::io("writing manifests as YAML", std::io::Error::other(e)))?;
    Ok(format!("---\n{}", super::yaml::to_yaml(&value)))
}

/// `text` as YAML comment lines, wrapped near 100 columns.
fn wrap_comment(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut current = String::from("#");
        for word in line.trim_start_matches('#').split_whitespace() {
            if current.len() + word.len() + 1 > 100 && current.len() > 1 {
                out.push_str(&current);
                out.push('\n');
                current = String::from("#");
            }
            current.push(' ');
            current.push_str(word);
        }
        out.push_str(&current);
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "golden_tests.rs"]
mod golden_tests;
