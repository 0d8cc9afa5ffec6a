//! What each product needs on Kubernetes: its pinned image and why that tag, its config (the
//! same limits the native drivers set: 1 MB+ messages, anonymous clients, deep queues), how
//! the container reads that config, its readiness probe and its resources.
//!
//! Images are the products' official multi-arch images, pinned to exact version tags so a
//! rerun gets the same broker. Where the study's version had an image for both of its setups
//! (AMD64 and ARM64) that version is kept; where it had not (VerneMQ, HiveMQ CE), the nearest
//! release whose image has both is used. [`Profile::provenance`] says which, per product.

use std::collections::BTreeMap;

use crate::broker::others::{EMQX_MAX_PACKET_SIZE, HIVEMQ_MAX_PACKET_SIZE};
use domain::{BrokerOptions, Product};

/// The MQTT port inside every broker's container.
pub const MQTT_PORT: u16 = 1883;

/// How the container reads the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigUse {
    /// Each `(key, path)`: the key's text mounted as the file at `path` (one file each, so
    /// the rest of the image's config folder stays as shipped).
    Files(Vec<(&'static str, &'static str)>),
    /// Every key is an environment variable (`envFrom`): the images configured by env.
    Env,
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

/// Everything product-specific in one broker's manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The pinned image.
    pub image: &'static str,
    /// Which image the study deployed, and why this tag.
    pub provenance: &'static str,
    /// The NodePort used when the spec names none (the study exposed 31883, 31884, ...).
    pub default_node_port: u16,
    /// The ConfigMap's data.
    pub config: BTreeMap<String, String>,
    /// How the container reads it.
    pub config_use: ConfigUse,
    /// Plain environment variables of the container, besides the config.
    pub env: Vec<(&'static str, String)>,
    /// Named container ports; the first is MQTT.
    pub ports: Vec<(&'static str, u16)>,
    /// The readiness probe.
    pub readiness: Readiness,
    /// CPU requested (a share reserved on the node; no CPU limit is set, see manifests.rs).
    pub cpu_request: &'static str,
    /// Memory requested, in MiB.
    pub memory_request_mib: u64,
    /// Memory limit, in MiB: a broker that queues without bound is killed before the node is.
    pub memory_limit_mib: u64,
}

/// The profile of `product` with the limits in `options`.
pub fn profile(product: Product, options: &BrokerOptions) -> Profile {
    match product {
        Product::Mosquitto => mosquitto(options),
        Product::Emqx => emqx(options),
        Product::RabbitMq => rabbitmq(options),
        Product::VerneMq => vernemq(options),
        Product::HiveMq => hivemq(options),
    }
}

fn data<const N: usize>(entries: [(&str, String); N]) -> BTreeMap<String, String> {
    entries
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
}

fn mosquitto(options: &BrokerOptions) -> Profile {
    // The native driver's settings; 1.6 and 2.x read them alike.
    let config = super::super::mosquitto::settings(options, &format!("listener {MQTT_PORT}"));
    Profile {
        image: "eclipse-mosquitto:1.6.15-openssl",
        provenance: "The study deployed eclipse-mosquitto:1.6.15. This is the same Mosquitto \
            release: the official library now rebuilds the 1.6 line only as its -openssl \
            variant (amd64, arm64v8, arm32v6 and more), which differs in the TLS library alone, \
            and no TLS is used here.",
        default_node_port: 31883,
        config: data([("mosquitto.conf", config)]),
        config_use: ConfigUse::Files(vec![("mosquitto.conf", "/mosquitto/config/mosquitto.conf")]),
        env: Vec::new(),
        ports: vec![("mqtt", MQTT_PORT)],
        // Mosquitto has no health endpoint; an exec probe would cost CPU mid-benchmark.
        readiness: Readiness::MqttPort,
        cpu_request: "100m",
        memory_request_mib: 64,
        memory_limit_mib: 2048,
    }
}

fn emqx(options: &BrokerOptions) -> Profile {
    let mut config = data([
        (
            "EMQX_MQTT__MAX_PACKET_SIZE",
            EMQX_MAX_PACKET_SIZE.to_owned(),
        ),
        (
            "EMQX_MQTT__MAX_MQUEUE_LEN",
            options.max_queued_messages().to_string(),
        ),
        // No authenticator is configured, so EMQX admits anonymous clients; this lets them
        // publish and subscribe to any topic. (The other listeners stay as shipped: inside
        // the pod they collide with nothing, and the Service exposes MQTT only.)
        ("EMQX_AUTHORIZATION__NO_MATCH", "allow".to_owned()),
    ]);
    if let Some(inflight) = options.max_inflight_messages {
        config.insert("EMQX_MQTT__MAX_INFLIGHT".to_owned(), inflight.to_string());
    }
    Profile {
        image: "emqx:5.0.22",
        provenance: "The study deployed emqx:5.0.22 with EMQX_MQTT__MAX_PACKET_SIZE=2MB; the \
            same official image (amd64, arm64v8) and packet size are used.",
        default_node_port: 31884,
        config,
        config_use: ConfigUse::Env,
        env: Vec::new(),
        ports: vec![("mqtt", MQTT_PORT), ("dashboard", 18083)],
        // EMQX's status API answers 200 once the node runs (its Helm chart's probe).
        readiness: Readiness::Http {
            port: "dashboard",
            path: "/api/v5/status",
        },
        cpu_request: "500m",
        memory_request_mib: 512,
        memory_limit_mib: 4096,
    }
}

fn rabbitmq(options: &BrokerOptions) -> Profile {
    let limit_mib = 4096;
    // Read after the image's own conf.d files.
    let extra = format!(
        "# RabbitMQ does not see the pod's memory limit; its memory alarm is relative to this\n\
         # (80% of the limit, as the RabbitMQ operator sets it).\n\
         total_memory_available_override_value = {}\n",
        limit_mib * 1024 * 1024 / 5 * 4
    );
    let config = super::super::rabbitmq::settings(
        &MQTT_PORT.to_string(),
        &extra,
        options.max_inflight_messages,
    );
    Profile {
        image: "rabbitmq:3.11.28",
        provenance: "The study deployed rabbitmq:3.11 (a moving tag) with the \
            rabbitmq_prometheus and rabbitmq_mqtt plugins; 3.11.28 is the last 3.11 release \
            (official, amd64 and arm64v8 among others), pinned so reruns get the same broker. \
            Its MQTT plugin speaks MQTT 3.1.1 only, as in the study.",
        default_node_port: 31885,
        config: data([
            ("rabbitmq.conf", config),
            (
                "enabled_plugins",
                "[rabbitmq_prometheus,rabbitmq_mqtt].\n".to_owned(),
            ),
        ]),
        config_use: ConfigUse::Files(vec![
            ("rabbitmq.conf", "/etc/rabbitmq/conf.d/90-continuum.conf"),
            ("enabled_plugins", "/etc/rabbitmq/enabled_plugins"),
        ]),
        env: Vec::new(),
        ports: vec![("mqtt", MQTT_PORT)],
        // The MQTT listener opens once the plugin runs. rabbitmq-diagnostics, the product's
        // check, boots an Erlang VM per probe: too costly during a benchmark.
        readiness: Readiness::MqttPort,
        cpu_request: "500m",
        memory_request_mib: 512,
        memory_limit_mib: limit_mib,
    }
}

fn vernemq(options: &BrokerOptions) -> Profile {
    let queued = options.max_queued_messages().to_string();
    // The image's start script writes each DOCKER_VERNEMQ_X__Y=v into vernemq.conf as x.y = v.
    let mut config = data([
        // The binary image refuses to start until its EULA is accepted.
        ("DOCKER_VERNEMQ_ACCEPT_EULA", "yes".to_owned()),
        ("DOCKER_VERNEMQ_ALLOW_ANONYMOUS", "on".to_owned()),
        // 0: no limit on the size of a message.
        ("DOCKER_VERNEMQ_MAX_MESSAGE_SIZE", "0".to_owned()),
        ("DOCKER_VERNEMQ_MAX_ONLINE_MESSAGES", queued.clone()),
        ("DOCKER_VERNEMQ_MAX_OFFLINE_MESSAGES", queued),
        (
            "DOCKER_VERNEMQ_LISTENER__MAX_CONNECTIONS",
            "infinity".to_owned(),
        ),
    ]);
    if let Some(inflight) = options.max_inflight_messages {
        config.insert(
            "DOCKER_VERNEMQ_MAX_INFLIGHT_MESSAGES".to_owned(),
            inflight.to_string(),
        );
    }
    Profile {
        image: "vernemq/vernemq:2.1.1",
        provenance: "The study deployed VerneMQ with its Helm chart, whose images were amd64 \
            only. 2.1.1 is the release whose official image was also published for arm64 \
            (2.1.2's is amd64 only), so one tag serves both setups. The image is VerneMQ's \
            binary build: it starts only with its EULA accepted (DOCKER_VERNEMQ_ACCEPT_EULA=yes, \
            as the study's chart values did), and commercial use needs a VerneMQ subscription.",
        default_node_port: 31886,
        config,
        config_use: ConfigUse::Env,
        env: Vec::new(),
        // 8888: the HTTP listener the image opens, which serves /health.
        ports: vec![("mqtt", MQTT_PORT), ("http", 8888)],
        // 200 once every listener runs and the node has joined its (one-node) cluster.
        readiness: Readiness::Http {
            port: "http",
            path: "/health",
        },
        cpu_request: "500m",
        memory_request_mib: 512,
        memory_limit_mib: 4096,
    }
}

fn hivemq(options: &BrokerOptions) -> Profile {
    let config = format!(
        r#"<?xml version="1.0"?>
<!-- Written by the Continuum agent. -->
<hivemq>
    <listeners>
        <tcp-listener>
            <port>{MQTT_PORT}</port>
            <bind-address>0.0.0.0</bind-address>
        </tcp-listener>
    </listeners>
    <mqtt>
        <packets>
            <max-packet-size>{HIVEMQ_MAX_PACKET_SIZE}</max-packet-size>
        </packets>
        <queued-messages>
            <max-queue-size>{}</max-queue-size>
        </queued-messages>
    </mqtt>
    <anonymous-usage-statistics>
        <enabled>false</enabled>
    </anonymous-usage-statistics>
</hivemq>
"#,
        options.max_queued_messages()
    );
    Profile {
        image: "hivemq/hivemq-ce:2024.3",
        provenance: "The study deployed hivemq/hivemq-ce:2023.3, published for amd64 only; \
            2024.3 is the first HiveMQ CE release with an official multi-arch image (amd64, \
            arm64), the nearest to the study's that both setups can run.",
        default_node_port: 31887,
        config: data([("config.xml", config)]),
        config_use: ConfigUse::Files(vec![("config.xml", "/opt/hivemq/conf/config.xml")]),
        env: vec![
            // Anonymous clients: the image keeps its allow-all extension only when this is true.
            ("HIVEMQ_ALLOW_ALL_CLIENTS", "true".to_owned()),
            // The JVM sizes its heap from the pod's limit: half of it, rather than the default
            // quarter, leaves HiveMQ room to queue what a benchmark sends.
            (
                "JAVA_OPTS",
                "-XX:+UseNUMA -XX:MaxRAMPercentage=50".to_owned(),
            ),
        ],
        ports: vec![("mqtt", MQTT_PORT)],
        // HiveMQ CE has no HTTP health endpoint (the enterprise edition has).
        readiness: Readiness::MqttPort,
        cpu_request: "500m",
        memory_request_mib: 1024,
        memory_limit_mib: 4096,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_limits_reach_every_product() {
        let options = BrokerOptions {
            max_inflight_messages: Some(64),
            max_queued_messages: Some(5000),
            start_deadline: None,
        };
        let text = |product| {
            let profile = profile(product, &options);
            profile
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
    fn every_product_has_its_own_default_node_port_and_mqtt_first() {
        let mut ports: Vec<u16> = Product::ALL
            .iter()
            .map(|p| profile(*p, &BrokerOptions::default()).default_node_port)
            .collect();
        ports.dedup();
        assert_eq!(ports, [31883, 31884, 31885, 31886, 31887]);
        for product in Product::ALL {
            let profile = profile(product, &BrokerOptions::default());
            assert_eq!(profile.ports[0], ("mqtt", MQTT_PORT), "{product}");
            assert!(profile.memory_request_mib < profile.memory_limit_mib);
        }
    }
}
