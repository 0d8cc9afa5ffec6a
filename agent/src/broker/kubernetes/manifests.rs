//! [`Manifests`]: one Kubernetes broker as typed API objects (Namespace, NetworkPolicy, Secret,
//! ConfigMap, Deployment, NodePort Service), written as the JSON `List` that kubectl applies
//! and deletes. What differs by product (image, config, probe, resources, which
//! variables are secrets) is its recipe's [`Pod`].
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
//!   NodePort on every node (clients entering through another node, as the study's did);
//! - a NetworkPolicy admitting ingress, from anywhere, to the ports the Service exposes (MQTT,
//!   WebSocket and QUIC (UDP) when asked) and to nothing else: other pods cannot reach an Erlang
//!   broker's epmd and distribution ports, EMQX's dashboard or gen_rpc. Traffic from the
//!   pod's own node (the kubelet's probes) is always admitted by NetworkPolicy;
//! - the variables a recipe marks [`Generated`] (Erlang cookies, EMQX's dashboard password)
//!   drawn for each deployment ([`DeploymentSecrets`]) and kept in a Secret that the
//!   container reads with `valueFrom.secretKeyRef`; products with none get no Secret;
//! - a QUIC listener, when asked (EMQX's), reads its certificate and key from a second
//!   Secret (`kubernetes.io/tls`, made by the agent for the node's address) mounted
//!   read-only, the key readable by the broker's group alone (the pod's `fsGroup`).
//!
//! Applied as Namespace, NetworkPolicy, Secret, ConfigMap, Deployment, Service: the policy and
//! the Secret exist before the pod does. The Namespace is never deleted: other brokers may
//! live in it; everything else is deleted with the broker, on a stop, a failed or abandoned
//! start and a lease that ran out alike (the delete's list names the Secret without its data).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource,
    EnvVar, EnvVarSource, HTTPGetAction, Namespace, PodSecurityContext, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, Secret, SecretKeySelector, SecretVolumeSource, Service,
    ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::broker::error::BrokerError;
use domain::{BrokerKind, BrokerSpec, Product};
use recipes::{ConfigUse, Generated, MQTT_PORT, Pod, PodQuic, Readiness};

/// The `app.kubernetes.io/managed-by` value of everything the agent applies.
pub const MANAGED_BY: &str = "continuum";

/// A WebSocket NodePort, unless the spec names one, is this far above the product's MQTT
/// NodePort (31883 gives 32383): inside the default NodePort range, clear of the study's.
const WEBSOCKET_NODE_PORT_OFFSET: u16 = 500;

/// The pod's volume of the QUIC listener's certificate and key.
const QUIC_VOLUME: &str = "quic-certificate";

/// The mode of the QUIC certificate's and key's files: readable by the broker's group
/// (the pod's fsGroup) and no one else.
const QUIC_FILE_MODE: i32 = 0o440;

/// Readiness probe period: often enough to notice readiness within seconds, rare enough to
/// cost nothing measurable during a test.
const PROBE_PERIOD_SECONDS: i32 = 5;

/// Random bytes in an Erlang cookie: 256 bits, written as 64 hex characters (an atom of
/// letters and digits, as every start script takes it).
const COOKIE_BYTES: usize = 32;

/// Random bytes in a generated password: 128 bits, 32 hex characters.
const PASSWORD_BYTES: usize = 16;

/// The values drawn for one deployment, one per [`Generated`] kind, and the QUIC listener's
/// certificate and key when it has one. `Debug` shows none of them, so neither does a log
/// line.
#[derive(Clone, PartialEq, Eq)]
pub struct DeploymentSecrets {
    erlang_cookie: String,
    dashboard_password: String,
    quic: Option<QuicPems>,
}

/// A QUIC listener's certificate and private key, PEM.
#[derive(Clone, PartialEq, Eq)]
struct QuicPems {
    cert: String,
    key: String,
}

impl DeploymentSecrets {
    /// Fresh values from the kernel's CSPRNG.
    pub fn draw() -> std::io::Result<Self> {
        Ok(Self {
            erlang_cookie: host::secret::random_hex(COOKIE_BYTES)?,
            dashboard_password: host::secret::random_hex(PASSWORD_BYTES)?,
            quic: None,
        })
    }

    /// These, with the QUIC listener's certificate and key (PEM) the agent made for the
    /// deployment.
    pub fn with_quic_certificate(self, cert_pem: &str, key_pem: &str) -> Self {
        Self {
            quic: Some(QuicPems {
                cert: cert_pem.to_owned(),
                key: key_pem.to_owned(),
            }),
            ..self
        }
    }

    /// Given values: the golden manifests are written with fixed ones.
    pub fn given(erlang_cookie: &str, dashboard_password: &str) -> Self {
        Self {
            erlang_cookie: erlang_cookie.to_owned(),
            dashboard_password: dashboard_password.to_owned(),
            quic: None,
        }
    }

    /// The value drawn for `kind`.
    pub fn value(&self, kind: Generated) -> &str {
        match kind {
            Generated::ErlangCookie => &self.erlang_cookie,
            Generated::DashboardPassword => &self.dashboard_password,
        }
    }
}

impl std::fmt::Debug for DeploymentSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeploymentSecrets(redacted)")
    }
}

/// One broker's objects.
#[derive(Clone, PartialEq)]
pub struct Manifests {
    /// The namespace (applied, never deleted).
    pub namespace: Namespace,
    /// What may reach the broker's pod: its MQTT and WebSocket ports.
    pub network_policy: NetworkPolicy,
    /// The values drawn for this deployment, when the product has any ([`Generated`]).
    pub secret: Option<Secret>,
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
    /// The QUIC listener's certificate and key, when the spec asks for one.
    pub quic_secret: Option<Secret>,
    /// The UDP NodePort of its QUIC listener, when it has one.
    pub quic_node_port: Option<u16>,
    /// The pinned image.
    pub image: &'static str,
    /// The label selector of the broker's pods, as kubectl takes it (`k=v,k=v`).
    pub selector: String,
}

impl std::fmt::Debug for Manifests {
    /// Everything but the Secret's data.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manifests")
            .field("namespace", &self.namespace)
            .field("network_policy", &self.network_policy)
            .field("secret", &self.secret.as_ref().map(|s| &s.metadata.name))
            .field(
                "quic_secret",
                &self.quic_secret.as_ref().map(|s| &s.metadata.name),
            )
            .field("config", &self.config)
            .field("deployment", &self.deployment)
            .field("service", &self.service)
            .field("node_port", &self.node_port)
            .field("websocket", &self.websocket)
            .field("quic_node_port", &self.quic_node_port)
            .field("image", &self.image)
            .field("selector", &self.selector)
            .finish()
    }
}

impl Manifests {
    /// The manifests of a Kubernetes `spec` (checked by `spec.validate()` before), with the
    /// values drawn for this deployment in `secrets`.
    pub fn of(spec: &BrokerSpec, secrets: &DeploymentSecrets) -> Result<Self, BrokerError> {
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
        let profile = recipes::pod(*product, &spec.options)
            .map_err(|reason| BrokerError::invalid("kind.kubernetes.product", product, reason))?;
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
        let quic = match spec.options.quic_port {
            None => None,
            Some(port) => {
                let listener = recipes::pod_quic(*product).map_err(|reason| {
                    BrokerError::invalid("options.quic_port", port, format!("{product}: {reason}"))
                })?;
                let delivery = spec.options.quic_delivery;
                recipes::quic_delivery(*product, Some(port), delivery).map_err(|reason| {
                    BrokerError::invalid(
                        "options.quic_delivery",
                        delivery.name(),
                        format!("{product}: {reason}"),
                    )
                })?;
                let pems = secrets.quic.as_ref().ok_or_else(|| {
                    BrokerError::invalid(
                        "options.quic_port",
                        port,
                        "no certificate was made for the QUIC listener",
                    )
                })?;
                let quic_node_port = if port == 0 {
                    profile.default_node_port + recipes::POD_QUIC_NODE_PORT_OFFSET
                } else {
                    port
                };
                let websocket_node_port = websocket.map(|(port, _)| port);
                if quic_node_port == node_port || Some(quic_node_port) == websocket_node_port {
                    return Err(BrokerError::invalid(
                        "options.quic_port",
                        port,
                        format!(
                            "its QUIC NodePort {quic_node_port} is also its MQTT or WebSocket \
                             NodePort; name another one"
                        ),
                    ));
                }
                Some((listener, pems, quic_node_port))
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
        let secret_name = format!("{name}-secrets");
        let secret = (!profile.secret_env.is_empty()).then(|| Secret {
            metadata: meta(secret_name.clone()),
            type_: Some("Opaque".into()),
            data: Some(
                profile
                    .secret_env
                    .iter()
                    .map(|(_, kind)| {
                        let value = secrets.value(*kind).as_bytes().to_vec();
                        (kind.key().to_owned(), ByteString(value))
                    })
                    .collect(),
            ),
            ..Secret::default()
        });
        let quic_secret_name = format!("{name}-quic");
        let quic_secret = quic.as_ref().map(|(_, pems, _)| Secret {
            metadata: meta(quic_secret_name.clone()),
            type_: Some("kubernetes.io/tls".into()),
            data: Some(BTreeMap::from([
                (
                    recipes::POD_QUIC_CERT.to_owned(),
                    ByteString(pems.cert.as_bytes().to_vec()),
                ),
                (
                    recipes::POD_QUIC_KEY.to_owned(),
                    ByteString(pems.key.as_bytes().to_vec()),
                ),
            ])),
            ..Secret::default()
        });
        // A changed config or certificate (each start makes a new one) restarts the pod
        // on apply: a pod left from an earlier start would keep the old certificate.
        let mut annotations =
            BTreeMap::from([("checksum/config".to_owned(), checksum(&profile.config))]);
        if let Some((_, pems, _)) = &quic {
            let certificate = BTreeMap::from([(String::new(), pems.cert.clone())]);
            annotations.insert("checksum/quic".to_owned(), checksum(&certificate));
        }
        let mut pod = pod_spec(*product, &profile, node, &config_name, &secret_name);
        if let Some((listener, _, _)) = &quic {
            add_quic_listener(&mut pod, listener, &quic_secret_name);
        }
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
                        annotations: Some(annotations),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(pod),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        };
        let exposed: Vec<(u16, &str)> = std::iter::once((MQTT_PORT, "TCP"))
            .chain(websocket.and(pod_websocket_port).map(|port| (port, "TCP")))
            .chain(quic.as_ref().map(|(listener, _, _)| (listener.port, "UDP")))
            .collect();
        let network_policy = NetworkPolicy {
            metadata: meta(name.to_owned()),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(LabelSelector {
                    match_labels: Some(pod_labels.clone()),
                    ..LabelSelector::default()
                }),
                policy_types: Some(vec!["Ingress".into()]),
                // No `from`: clients come from anywhere, kept source address and all
                // (externalTrafficPolicy Local); only the ports are limited.
                ingress: Some(vec![NetworkPolicyIngressRule {
                    from: None,
                    ports: Some(
                        exposed
                            .iter()
                            .map(|(port, protocol)| NetworkPolicyPort {
                                protocol: Some((*protocol).into()),
                                port: Some(IntOrString::Int(i32::from(*port))),
                                end_port: None,
                            })
                            .collect(),
                    ),
                }]),
                egress: None,
            }),
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
                    .chain(quic.as_ref().map(|(listener, _, node_port)| ServicePort {
                        name: Some("quic".into()),
                        protocol: Some("UDP".into()),
                        port: i32::from(listener.port),
                        target_port: Some(IntOrString::String("quic".into())),
                        node_port: Some(i32::from(*node_port)),
                        ..ServicePort::default()
                    }))
                    .collect(),
                ),
                ..ServiceSpec::default()
            }),
            status: None,
        };
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
            network_policy,
            secret,
            config,
            deployment,
            service,
            node_port,
            websocket,
            quic_node_port: quic.as_ref().map(|(_, _, node_port)| *node_port),
            quic_secret,
            image: profile.image,
            selector: pod_labels
                .iter()
                .map(|(key, value)| format!("{key}={value}"))
                .collect::<Vec<_>>()
                .join(","),
        })
    }

    /// What `kubectl apply -f -` reads: one JSON `List` of the namespace, network policy,
    /// secret, config, deployment and service, in that order (kubectl applies a List's items
    /// in order: the pod never runs unguarded or without its Secret). JSON, because kubectl
    /// reads YAML as YAML 1.1, where a plain `yes` or `on` in a ConfigMap is a boolean.
    pub fn apply_json(&self) -> Result<String, BrokerError> {
        let mut items = vec![item(&self.namespace)?, item(&self.network_policy)?];
        for secret in self.secret.iter().chain(&self.quic_secret) {
            items.push(item(secret)?);
        }
        items.extend([
            item(&self.config)?,
            item(&self.deployment)?,
            item(&self.service)?,
        ]);
        Ok(list(items))
    }

    /// What `kubectl delete -f -` reads: everything but the namespace, in the reverse order,
    /// the Secret named without its data (the delete's list is kept for the broker's life).
    pub fn delete_json(&self) -> Result<String, BrokerError> {
        let mut items = vec![
            item(&self.service)?,
            item(&self.deployment)?,
            item(&self.config)?,
        ];
        for secret in self.secret.iter().chain(&self.quic_secret) {
            items.push(item(&Secret {
                metadata: secret.metadata.clone(),
                ..Secret::default()
            })?);
        }
        items.push(item(&self.network_policy)?);
        Ok(list(items))
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

fn pod_spec(
    product: Product,
    profile: &Pod,
    node: &str,
    config_name: &str,
    secret_name: &str,
) -> PodSpec {
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
        env: env(profile, secret_name),
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

/// The pod's QUIC listener: its UDP port, its variables, and its certificate and key
/// mounted from the broker's QUIC Secret (`secret_name`), readable by the broker's group
/// alone.
fn add_quic_listener(pod: &mut PodSpec, listener: &PodQuic, secret_name: &str) {
    if let Some(container) = pod.containers.first_mut() {
        container
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                name: Some("quic".into()),
                container_port: i32::from(listener.port),
                protocol: Some("UDP".into()),
                ..ContainerPort::default()
            });
        container
            .env
            .get_or_insert_with(Vec::new)
            .extend(listener.env.iter().map(|(name, value)| EnvVar {
                name: (*name).into(),
                value: Some(value.clone()),
                ..EnvVar::default()
            }));
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: QUIC_VOLUME.into(),
                mount_path: recipes::POD_QUIC_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
    }
    pod.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: QUIC_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name.to_owned()),
            default_mode: Some(QUIC_FILE_MODE),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    });
    pod.security_context = Some(PodSecurityContext {
        fs_group: Some(listener.group),
        ..PodSecurityContext::default()
    });
}

/// The container's variables: the recipe's plain ones, then those read from the Secret.
fn env(profile: &Pod, secret_name: &str) -> Option<Vec<EnvVar>> {
    let plain = profile.env.iter().map(|(name, value)| EnvVar {
        name: (*name).into(),
        value: Some(value.clone()),
        ..EnvVar::default()
    });
    let secret = profile.secret_env.iter().map(|(name, kind)| EnvVar {
        name: (*name).into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret_name.to_owned(),
                key: kind.key().to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    });
    let env: Vec<EnvVar> = plain.chain(secret).collect();
    (!env.is_empty()).then_some(env)
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

/// One object as kubectl reads it.
fn item<T: serde::Serialize>(object: &T) -> Result<serde_json::Value, BrokerError> {
    serde_json::to_value(object)
        .map_err(|e| BrokerError::io("writing manifests as JSON", std::io::Error::other(e)))
}

/// `items` as one `v1` `List`, the JSON form of several manifests in one file.
fn list(items: Vec<serde_json::Value>) -> String {
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

#[cfg(test)]
#[path = "golden_tests.rs"]
mod golden_tests;
