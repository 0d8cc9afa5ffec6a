//! Broker recipes: everything Continuum knows about running each product of the study for a
//! benchmark, one file per product, whatever runs it.
//!
//! A recipe states the settings that lift a product's limits (packet size, queues, inflight
//! window, anonymous access), the files, environment and command line of a native instance,
//! and the image, ports, config and readiness probe of its pod. It only describes: the agent's
//! native driver turns a [`NativePlan`] into processes, its kubernetes driver turns a [`Pod`]
//! into manifests, and the test harness runs the RabbitMQ recipe's [`rabbitmq::Node`] for
//! the private nodes of its tests. Nothing here spawns, binds or reads anything, so the command
//! lines of products that are not installed are still checked by unit tests.
//!
//! # Layout
//! - this file: what a native plan is given ([`Instance`]) and returns ([`NativePlan`],
//!   [`Helper`]); what a pod is made of ([`Pod`], [`ConfigUse`], [`Readiness`], [`Generated`]);
//!   the choice by [`Product`] ([`pod`], [`version_in_log`]).
//! - [`mosquitto`]: `mosquitto -c FILE`; the image with the same file mounted.
//! - [`rabbitmq`]: a private node with its MQTT plugin and its own epmd; the image with the
//!   same config under `conf.d`.
//! - [`emqx`]: `emqx foreground` configured by `EMQX_*` variables, on both sides.
//! - [`vernemq`]: `-vmq_server` settings on the command line; `DOCKER_VERNEMQ_*` in the pod.
//! - [`hivemq`]: `run.sh` with a private config folder; the image with that `config.xml`.
//! - [`mqttv5`]: `mqttv5 broker -c FILE` with a JSON config; no official image, so no pod.
//! - [`aedes`]: `aedes --config FILE` (npm's aedes-cli) with a CommonJS config; no pod.
//! - [`amqtt`]: `amqtt -c FILE` from its virtual environment; no pod.
//! - [`activemq`]: the JVM on Debian's launcher jar with an instance folder and a broker
//!   XML holding one MQTT connector; Apache's image with the same XML.
//! - [`ejabberd`]: `erl` on the package's applications with a config holding `mod_mqtt`
//!   alone, no Erlang distribution; ProcessOne's image with the same config, its
//!   distribution on loopback. Its clients log in ([`anonymous_login`]).
//! - [`rmqtt`]: `continuum-rmqtt --listen ADDR` (rmqtt's engine, built from `brokers/rmqtt`);
//!   the official image (`rmqttd`) with a config of the same listener and limits.
//!
//! The EMQX, VerneMQ and HiveMQ settings are the study's; each product file keeps them
//! together near its top, so a change to one product is a change to one file.

pub mod activemq;
pub mod aedes;
pub mod amqtt;
pub mod ejabberd;
pub mod emqx;
pub mod hivemq;
pub mod mosquitto;
pub mod mqttv5;
pub mod rabbitmq;
pub mod rmqtt;
pub mod vernemq;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::{BrokerOptions, Product, QuicDelivery};
use host::CommandLine;

/// Who the agent's generated configs say wrote them (`# Written by the Continuum agent.`).
pub const WRITTEN_BY_AGENT: &str = "the Continuum agent";

/// The MQTT port inside every broker's container.
pub const MQTT_PORT: u16 = 1883;

/// Process names of the Erlang VM, the process that is the broker under an Erlang start
/// script (RabbitMQ, EMQX, VerneMQ).
const ERLANG_VM: &[&str] = &["beam.smp"];

/// What an Erlang broker logs when its MQTT port is taken.
const ERLANG_PORT_TAKEN: &[&str] = &["eaddrinuse"];

/// One native instance to plan, as its driver prepared it.
#[derive(Debug, Clone, Copy)]
pub struct Instance<'a> {
    /// The instance name (validated by `domain::check_name`), part of node names.
    pub name: &'a str,
    /// Its state directory (config, data, logs), empty at this point.
    pub dir: &'a Path,
    /// Where its MQTT listener binds, port resolved.
    pub listen: SocketAddr,
    /// The limits the spec asks for.
    pub options: &'a BrokerOptions,
    /// A per-instance secret (the agent passes its process marker), e.g. an Erlang cookie.
    pub secret: &'a str,
    /// Its MQTT-over-WebSocket listener, when the spec asks for one (products whose
    /// [`websocket_path`] is known only).
    pub websocket: Option<WebSocketListen<'a>>,
    /// Its MQTT-over-QUIC listener, when the spec asks for one (products [`quic_listener`]
    /// accepts only).
    pub quic: Option<QuicListen<'a>>,
}

/// A native instance's QUIC listener: where it binds, and the certificate and key (PEM
/// files the agent made for the instance) it presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicListen<'a> {
    /// The UDP address, port resolved.
    pub address: SocketAddr,
    /// The certificate chain.
    pub cert_file: &'a Path,
    /// Its private key.
    pub key_file: &'a Path,
}

/// Where a pod's QUIC listener finds its certificate and key: a Secret of the broker's own
/// (type `kubernetes.io/tls`), mounted read-only.
pub const POD_QUIC_DIR: &str = "/etc/continuum/quic";
/// The certificate's file there (the Secret's key `tls.crt`).
pub const POD_QUIC_CERT: &str = "tls.crt";
/// The private key's file there (the Secret's key `tls.key`).
pub const POD_QUIC_KEY: &str = "tls.key";

/// How a product's pod opens MQTT over QUIC, with the certificate and key the agent puts at
/// [`POD_QUIC_DIR`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodQuic {
    /// The container's UDP port.
    pub port: u16,
    /// The container's variables that open the listener on `port`.
    pub env: Vec<(&'static str, String)>,
    /// The group the image runs its broker as: the pod's `fsGroup`, so the key's file can
    /// be readable by that group and no one else.
    pub group: i64,
}

/// A pod's QUIC NodePort (UDP), unless the spec names one, is this far above the product's
/// default MQTT NodePort (EMQX's 31884 gives 32484), clear of its WebSocket one (+500).
pub const POD_QUIC_NODE_PORT_OFFSET: u16 = 600;

/// The UDP NodePort of `product`'s pod's QUIC listener unless the spec names one.
pub fn default_quic_node_port(product: Product) -> Result<u16, &'static str> {
    pod_quic(product)?;
    let pod = pod(product, &BrokerOptions::default())?;
    Ok(pod.default_node_port + POD_QUIC_NODE_PORT_OFFSET)
}

/// How `product`'s pod opens a QUIC listener, or why it does not.
pub fn pod_quic(product: Product) -> Result<PodQuic, &'static str> {
    match product {
        Product::Emqx => Ok(emqx::pod_quic()),
        _ => Err("its pod opens no QUIC listener; EMQX's does"),
    }
}

/// Whether `product`'s recipe opens a QUIC listener, or why not.
pub fn quic_listener(product: Product) -> Result<(), &'static str> {
    match product {
        Product::Mqttv5 | Product::Emqx => Ok(()),
        _ => Err("it serves no MQTT over QUIC; the mqttv5 broker and EMQX do"),
    }
}

/// Whether `product`'s QUIC listener (at `quic_port`) can deliver as `delivery` asks, or why
/// not: on streams the broker opens only the mqttv5 broker does, and only with a listener.
pub fn quic_delivery(
    product: Product,
    quic_port: Option<u16>,
    delivery: QuicDelivery,
) -> Result<(), &'static str> {
    if delivery == QuicDelivery::ControlOnly {
        return Ok(());
    }
    if product != Product::Mqttv5 {
        return Err("only the mqttv5 broker delivers on QUIC streams it opens");
    }
    if quic_port.is_none() {
        return Err("needs a QUIC listener (options.quic_port)");
    }
    Ok(())
}

/// Where a native instance's WebSocket listener binds, as its driver resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebSocketListen<'a> {
    /// The address, port resolved.
    pub address: SocketAddr,
    /// The network interface holding that address; `None` when it is every interface
    /// (Mosquitto 2.0.11 binds a websockets listener by interface name only: given an IP
    /// address it refuses to start).
    pub interface: Option<&'a str>,
}

/// The request path on which `product`'s recipe serves MQTT over WebSocket, or why it
/// opens no WebSocket listener.
pub fn websocket_path(product: Product) -> Result<&'static str, &'static str> {
    match product {
        Product::Mosquitto => Ok(mosquitto::WEBSOCKET_PATH),
        Product::RabbitMq => Ok(rabbitmq::WEBSOCKET_PATH),
        Product::Mqttv5 => Ok(mqttv5::WEBSOCKET_PATH),
        Product::Aedes => Ok(aedes::WEBSOCKET_PATH),
        Product::Amqtt => Ok(amqtt::WEBSOCKET_PATH),
        Product::Rmqtt => Ok(rmqtt::WEBSOCKET_PATH),
        Product::ActiveMq => {
            Err("Debian's ActiveMQ package ships no Jetty, which its ws:// connector needs")
        }
        Product::Ejabberd => Err(
            "its recipe opens no WebSocket listener yet (ejabberd serves \
             MQTT over WebSocket through its HTTP listener, which would also be a web server)",
        ),
        Product::Emqx | Product::VerneMq | Product::HiveMq => Err(
            "its recipe opens no WebSocket listener yet (the product serves one; \
             Mosquitto, RabbitMQ, mqttv5, aedes, amqtt and rmqtt do here)",
        ),
    }
}

/// How to install `product` on a Debian node, as a skip reason quotes it.
pub fn install_hint(product: Product) -> &'static str {
    match product {
        Product::Mosquitto => "apt-get install mosquitto",
        Product::RabbitMq => "apt-get install rabbitmq-server",
        Product::Emqx => "unpack EMQX's tarball in /opt/emqx",
        Product::VerneMq => "unpack VerneMQ's tarball in /opt/vernemq",
        Product::HiveMq => "unpack HiveMQ CE's zip in /opt/hivemq",
        Product::Mqttv5 => mqttv5::INSTALL,
        Product::Aedes => aedes::INSTALL,
        Product::Amqtt => amqtt::INSTALL,
        Product::ActiveMq => activemq::INSTALL,
        Product::Ejabberd => ejabberd::INSTALL,
        Product::Rmqtt => rmqtt::INSTALL,
    }
}

/// A username and password for CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Login {
    /// The username.
    pub username: &'static str,
    /// The password: not a secret, the broker takes any.
    pub password: &'static str,
}

/// The login a product's anonymous access still asks every client for (ejabberd refuses a
/// CONNECT without a username and password, and takes any pair), or `None` where a client
/// connects without one. The agent's probes and the controller's workloads send it.
pub fn anonymous_login(product: Product) -> Option<Login> {
    match product {
        Product::Ejabberd => Some(ejabberd::ANONYMOUS_LOGIN),
        _ => None,
    }
}

/// A command that prints the broker's version, for products whose log does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionCommand {
    /// The command (the broker's program with `--version`).
    pub command: CommandLine,
    /// What precedes the version in its output.
    pub marker: &'static str,
}

impl VersionCommand {
    /// `program --version`, with the environment cleaned as the broker's is.
    fn flag(
        program: &Path,
        env_remove_prefixes: &[&'static str],
        marker: &'static str,
    ) -> Option<Self> {
        let mut command = CommandLine::new(program);
        command.args = vec!["--version".into()];
        command.env_remove_prefixes = env_remove_prefixes.to_vec();
        Some(Self { command, marker })
    }
}

/// A process started before the broker, which must listen before the broker starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helper {
    /// Short name, also its log file's stem.
    pub what: &'static str,
    /// Its command line.
    pub command: CommandLine,
    /// The TCP address it must accept connections on.
    pub listens_on: SocketAddr,
}

/// Everything needed to start one native broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativePlan {
    /// Files to write before anything starts (absolute paths inside the state directory).
    pub files: Vec<(PathBuf, String)>,
    /// Secrets to write before anything starts (an Erlang cookie): readable by their owner
    /// only (0400), owned by [`NativePlan::service_account`] when the broker runs as it.
    pub private_files: Vec<(PathBuf, String)>,
    /// The package's service user the broker runs as when the agent is root (its start
    /// script would otherwise `su -` to it and lose the environment the plan sets).
    pub service_account: Option<&'static str>,
    /// Processes to start, in order, before the broker.
    pub helpers: Vec<Helper>,
    /// The broker itself.
    pub main: CommandLine,
    /// A command that stops the broker gracefully; without one, the broker gets SIGTERM.
    pub stop: Option<CommandLine>,
    /// How long the broker may take to answer MQTT (the spec's, or the product's default).
    pub ready_deadline: Duration,
    /// Command names (`/proc/PID/comm`) of the process that is the broker, when the
    /// command line starts a script (`beam.smp`, `java`); its PID is what Metrics watches.
    pub main_process_names: &'static [&'static str],
    /// Log texts meaning the MQTT port was taken, so a start on any port is retried.
    pub port_taken_markers: &'static [&'static str],
    /// How to learn the version when the broker's log does not say it.
    pub version_command: Option<VersionCommand>,
}

impl NativePlan {
    /// A plan with no files, helpers or stop command: the broker is `main`, stopped by SIGTERM.
    fn of(main: CommandLine, ready_deadline: Duration) -> Self {
        Self {
            files: Vec::new(),
            private_files: Vec::new(),
            service_account: None,
            helpers: Vec::new(),
            main,
            stop: None,
            ready_deadline,
            main_process_names: &[],
            port_taken_markers: &[],
            version_command: None,
        }
    }

    /// The plan of an Erlang broker that stops cleanly on SIGTERM (OTP 20+).
    fn erlang(main: CommandLine, ready_deadline: Duration) -> Self {
        Self {
            main_process_names: ERLANG_VM,
            port_taken_markers: ERLANG_PORT_TAKEN,
            ..Self::of(main, ready_deadline)
        }
    }
}

/// How the container reads the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigUse {
    /// Each `(key, path)`: the key's text mounted as the file at `path` (one file each, so
    /// the rest of the image's config folder stays as shipped).
    Files(Vec<(&'static str, &'static str)>),
    /// Every key is an environment variable (`envFrom`): the images configured by env.
    Env,
}

/// A value the agent draws at random for each deployment of a pod, keeps in the broker's
/// Secret and hands to the container as an environment variable: never the image's default,
/// never the same for two deployments, never in the ConfigMap or the pod's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Generated {
    /// The Erlang distribution cookie: whoever knows it and reaches the node's distribution
    /// port runs code in the broker. The images ship fixed ones (`emqxsecretcookie`, `vmq`).
    ErlangCookie,
    /// The initial password of the product's web console admin (EMQX's dashboard ships
    /// `admin`/`public`).
    DashboardPassword,
}

impl Generated {
    /// Its key in the broker's Secret.
    pub fn key(self) -> &'static str {
        match self {
            Generated::ErlangCookie => "erlang-cookie",
            Generated::DashboardPassword => "dashboard-password",
        }
    }
}

/// How Kubernetes decides the broker is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// A TCP connect to the MQTT port (products without a health endpoint).
    MqttPort,
    /// An HTTP GET answered 2xx: the product's own health check.
    Http {
        /// The named container port.
        port: &'static str,
        /// The path.
        path: &'static str,
    },
}

/// Everything product-specific in one broker's Kubernetes objects. Images are the products'
/// official multi-arch images, pinned to exact version tags so a rerun gets the same broker.
/// Where the study's version had an image for both of its setups (AMD64 and ARM64) that
/// version is kept; where it had not (VerneMQ, HiveMQ CE), the nearest release whose image
/// has both is used; each product's `PROVENANCE` says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// The pinned image.
    pub image: &'static str,
    /// Which image the study deployed, and why this tag (quoted in the manifests' header).
    pub provenance: &'static str,
    /// The NodePort used when the spec names none (the study exposed 31883, 31884, ...).
    pub default_node_port: u16,
    /// The ConfigMap's data.
    pub config: BTreeMap<String, String>,
    /// How the container reads it.
    pub config_use: ConfigUse,
    /// Plain environment variables of the container, besides the config.
    pub env: Vec<(&'static str, String)>,
    /// Environment variables whose values are drawn for each deployment and read from the
    /// broker's Secret (`valueFrom.secretKeyRef`).
    pub secret_env: Vec<(&'static str, Generated)>,
    /// Named container ports; the first is MQTT.
    pub ports: Vec<(&'static str, u16)>,
    /// The readiness probe.
    pub readiness: Readiness,
    /// CPU requested (a share reserved on the node; no CPU limit is set: it would throttle
    /// the broker in CFS periods, which shows up as latency).
    pub cpu_request: &'static str,
    /// Memory requested, in MiB.
    pub memory_request_mib: u64,
    /// Memory limit, in MiB: a broker that queues without bound is killed before the node is.
    pub memory_limit_mib: u64,
}

/// The pod of `product` with the limits in `options`, or why it has none (no official image).
pub fn pod(product: Product, options: &BrokerOptions) -> Result<Pod, &'static str> {
    match product {
        Product::Mosquitto => Ok(mosquitto::pod(options)),
        Product::RabbitMq => Ok(rabbitmq::pod(options)),
        Product::Emqx => Ok(emqx::pod(options)),
        Product::VerneMq => Ok(vernemq::pod(options)),
        Product::HiveMq => Ok(hivemq::pod(options)),
        Product::ActiveMq => Ok(activemq::pod(options)),
        Product::Ejabberd => Ok(ejabberd::pod(options)),
        Product::Rmqtt => Ok(rmqtt::pod(options)),
        Product::Mqttv5 | Product::Aedes | Product::Amqtt => Err(NO_OFFICIAL_IMAGE),
    }
}

/// Why a product without a pinned image has no pod.
const NO_OFFICIAL_IMAGE: &str = "has no official container image pinned here, so it runs \
     natively only (kind = \"native\")";

/// The products with a pod, in [`Product::ALL`]'s order.
pub fn products_with_pods() -> impl Iterator<Item = Product> {
    Product::ALL
        .into_iter()
        .filter(|product| pod(*product, &BrokerOptions::default()).is_ok())
}

/// The version a broker announces in its log as it starts, for the products whose start
/// line is known (each product's `VERSION_IN_LOG`); the others say nothing rather than guess.
pub fn version_in_log(product: Product, log: &str) -> Option<String> {
    let marker = match product {
        Product::Mosquitto => mosquitto::VERSION_IN_LOG,
        Product::RabbitMq => rabbitmq::VERSION_IN_LOG,
        Product::Emqx => emqx::VERSION_IN_LOG,
        Product::VerneMq => vernemq::VERSION_IN_LOG,
        Product::HiveMq => hivemq::VERSION_IN_LOG,
        Product::ActiveMq => activemq::VERSION_IN_LOG,
        Product::Ejabberd => ejabberd::VERSION_IN_LOG,
        Product::Mqttv5 | Product::Aedes | Product::Amqtt | Product::Rmqtt => None,
    }?;
    version_after(marker, log)
}

/// The version that follows `marker` in `text` ("2.0.11" after "mosquitto version "), if it
/// starts with a digit.
pub fn version_after(marker: &str, text: &str) -> Option<String> {
    let start = text.find(marker)? + marker.len();
    let version: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
        .collect();
    version
        .starts_with(|c: char| c.is_ascii_digit())
        .then_some(version)
}

/// `(key, value)` pairs as ConfigMap data.
fn data<const N: usize>(entries: [(&str, String); N]) -> BTreeMap<String, String> {
    entries
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_start_lines_only_where_known() {
        let mosquitto =
            "1796013085: mosquitto version 2.0.11 starting\n1796013085: Using default config.";
        assert_eq!(
            version_in_log(Product::Mosquitto, mosquitto).as_deref(),
            Some("2.0.11")
        );
        let rabbit = "2026-11-30 [info] <0.229.0>  Starting RabbitMQ 3.10.8 on Erlang 25.2.3 [jit]";
        assert_eq!(
            version_in_log(Product::RabbitMq, rabbit).as_deref(),
            Some("3.10.8")
        );
        assert_eq!(version_in_log(Product::Mosquitto, "no start line"), None);
        assert_eq!(
            version_in_log(Product::Mosquitto, "mosquitto version starting"),
            None
        );
        assert_eq!(
            version_in_log(Product::Emqx, "EMQX 5.0.22 is running now!"),
            None
        );
    }

    #[test]
    fn the_spec_limits_reach_every_product() {
        let options = BrokerOptions {
            max_inflight_messages: Some(64),
            max_queued_messages: Some(5000),
            start_deadline: None,
            websocket_port: None,
            quic_port: None,
            quic_delivery: Default::default(),
        };
        let text = |product| {
            pod(product, &options)
                .unwrap()
                .config
                .iter()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect::<String>()
        };
        let mosquitto = text(Product::Mosquitto);
        assert!(
            mosquitto.contains("\nmax_inflight_messages 64\n"),
            "{mosquitto}"
        );
        assert!(
            mosquitto.contains("\nmax_queued_messages 5000\n"),
            "{mosquitto}"
        );
        let emqx = text(Product::Emqx);
        assert!(emqx.contains("EMQX_MQTT__MAX_INFLIGHT=64\n"), "{emqx}");
        assert!(emqx.contains("EMQX_MQTT__MAX_MQUEUE_LEN=5000\n"), "{emqx}");
        assert!(text(Product::RabbitMq).contains("\nmqtt.prefetch = 64\n"));
        let vernemq = text(Product::VerneMq);
        assert!(vernemq.contains("DOCKER_VERNEMQ_MAX_INFLIGHT_MESSAGES=64\n"));
        assert!(vernemq.contains("DOCKER_VERNEMQ_MAX_ONLINE_MESSAGES=5000\n"));
        assert!(text(Product::HiveMq).contains("<max-queue-size>5000</max-queue-size>"));
    }

    #[test]
    fn erlang_pods_take_their_cookie_from_the_secret_and_nothing_else_sets_it() {
        let cookie_variable = |product| {
            pod(product, &BrokerOptions::default())
                .unwrap()
                .secret_env
                .iter()
                .find(|(_, generated)| *generated == Generated::ErlangCookie)
                .map(|(name, _)| *name)
        };
        assert_eq!(cookie_variable(Product::Emqx), Some("EMQX_NODE__COOKIE"));
        assert_eq!(
            cookie_variable(Product::VerneMq),
            Some("DOCKER_VERNEMQ_DISTRIBUTED_COOKIE")
        );
        assert_eq!(cookie_variable(Product::Ejabberd), Some("ERLANG_COOKIE"));
        let emqx = pod(Product::Emqx, &BrokerOptions::default()).unwrap();
        assert!(
            emqx.secret_env.contains(&(
                "EMQX_DASHBOARD__DEFAULT_PASSWORD",
                Generated::DashboardPassword
            )),
            "{:?}",
            emqx.secret_env
        );
        for product in products_with_pods() {
            let pod = pod(product, &BrokerOptions::default()).unwrap();
            for (name, _) in &pod.secret_env {
                // A second, plain setting of the same variable would override or leak it.
                assert!(!pod.config.contains_key(*name), "{product}: {name}");
                assert!(pod.env.iter().all(|(plain, _)| plain != name), "{product}");
            }
            let plain = pod.config.values().chain(pod.env.iter().map(|(_, v)| v));
            for value in plain {
                for default in [emqx::IMAGE_COOKIE, vernemq::IMAGE_COOKIE] {
                    assert_ne!(value, default, "{product}: an image's stock cookie");
                }
            }
        }
    }

    #[test]
    fn only_ejabberd_asks_anonymous_clients_for_a_login() {
        let asking: Vec<Product> = Product::ALL
            .into_iter()
            .filter(|product| anonymous_login(*product).is_some())
            .collect();
        assert_eq!(asking, [Product::Ejabberd]);
    }

    #[test]
    fn every_product_has_its_own_default_node_port_and_mqtt_first() {
        let mut ports: Vec<u16> = products_with_pods()
            .map(|p| pod(p, &BrokerOptions::default()).unwrap().default_node_port)
            .collect();
        ports.dedup();
        assert_eq!(
            ports,
            [31883, 31884, 31885, 31886, 31887, 31888, 31889, 31890]
        );
        for product in products_with_pods() {
            let pod = pod(product, &BrokerOptions::default()).unwrap();
            assert_eq!(pod.ports[0], ("mqtt", MQTT_PORT), "{product}");
            assert!(pod.memory_request_mib < pod.memory_limit_mib);
        }
    }
}
