//! The golden manifests (`golden/<product>.yaml`, for instance `bench` on node `worker-1`):
//! generated output must match them byte for byte (`UPDATE_GOLDEN=1` rewrites them after a
//! deliberate change; review the diff), and every document in them must deserialize into
//! the typed Kubernetes object of its kind and carry what a benchmark needs.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Service};
use serde::Deserialize;

use super::*;
use domain::broker::NODE_PORTS;
use domain::{BrokerOptions, Product};

const NODE: &str = "worker-1";

fn golden_path(product: Product) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/broker/kubernetes/golden")
        .join(format!("{product}.yaml"))
}

fn golden_spec(product: Product) -> BrokerSpec {
    BrokerSpec {
        name: "bench".into(),
        kind: BrokerKind::Kubernetes {
            product,
            node: NODE.into(),
            namespace: "continuum".into(),
            node_port: None,
            on_every_node: false,
        },
        bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        port: 0,
        options: BrokerOptions::default(),
    }
}

#[test]
fn golden_files_match_the_generated_manifests() {
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for product in Product::ALL {
        let spec = golden_spec(product);
        spec.validate().unwrap();
        let text = Manifests::of(&spec).unwrap().apply_yaml().unwrap();
        let path = golden_path(product);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "generated manifests differ from {stale:?}; if the change is meant, rerun with \
         UPDATE_GOLDEN=1 and review the diff"
    );
}

/// The objects of one golden file, each deserialized as the type its `kind` names.
#[derive(Default)]
struct Objects {
    namespaces: Vec<Namespace>,
    configs: Vec<ConfigMap>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
}

/// Plain scalars that YAML 1.1, which kubectl speaks, reads as booleans.
const YAML_1_1_BOOLEANS: [&str; 16] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

fn read_objects(product: Product) -> Objects {
    let text = std::fs::read_to_string(golden_path(product)).unwrap();
    for line in text.lines() {
        let value = match line.rsplit_once(": ") {
            Some((_, value)) => value,
            None => line.trim_start().strip_prefix("- ").unwrap_or(""),
        };
        assert!(
            !YAML_1_1_BOOLEANS.contains(&value.trim()),
            "{product}: kubectl would read {line:?} as a boolean"
        );
    }
    let mut objects = Objects::default();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_yaml_ng::Value::deserialize(document).unwrap();
        let kind = value["kind"].as_str().unwrap().to_owned();
        // from_value checks apiVersion and kind against the type, and every field's type.
        match kind.as_str() {
            "Namespace" => objects
                .namespaces
                .push(serde_yaml_ng::from_value(value).unwrap()),
            "ConfigMap" => objects
                .configs
                .push(serde_yaml_ng::from_value(value).unwrap()),
            "Deployment" => objects
                .deployments
                .push(serde_yaml_ng::from_value(value).unwrap()),
            "Service" => objects
                .services
                .push(serde_yaml_ng::from_value(value).unwrap()),
            other => panic!("{product}: unexpected kind {other}"),
        }
    }
    objects
}

#[test]
fn every_golden_document_is_a_typed_object_with_what_a_benchmark_needs() {
    for product in Product::ALL {
        let objects = read_objects(product);
        let ([namespace], [config], [deployment], [service]) = (
            &objects.namespaces[..],
            &objects.configs[..],
            &objects.deployments[..],
            &objects.services[..],
        ) else {
            panic!("{product}: expected one Namespace, ConfigMap, Deployment and Service");
        };
        assert_eq!(namespace.metadata.name.as_deref(), Some("continuum"));
        for meta in [&config.metadata, &deployment.metadata, &service.metadata] {
            assert_eq!(meta.namespace.as_deref(), Some("continuum"), "{product}");
        }

        let spec = deployment.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1), "{product}");
        let template_labels = spec.template.metadata.as_ref().unwrap().labels.clone();
        let expected_labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), product.to_string()),
            ("app.kubernetes.io/instance".to_owned(), "bench".to_owned()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "continuum".to_owned(),
            ),
        ]);
        assert_eq!(
            template_labels.as_ref(),
            Some(&expected_labels),
            "{product}"
        );
        assert_eq!(spec.selector.match_labels, template_labels, "{product}");
        let service_spec = service.spec.as_ref().unwrap();
        assert_eq!(service_spec.selector, template_labels, "{product}");

        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(
            pod.node_selector,
            Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_owned(),
                NODE.to_owned()
            )])),
            "{product}"
        );
        let [container] = &pod.containers[..] else {
            panic!("{product}: one container");
        };
        check_container(product, container);

        assert_eq!(service_spec.type_.as_deref(), Some("NodePort"));
        let [port] = &service_spec.ports.as_ref().unwrap()[..] else {
            panic!("{product}: one service port");
        };
        let node_port = u16::try_from(port.node_port.unwrap()).unwrap();
        assert!(NODE_PORTS.contains(&node_port), "{product}: {node_port}");
        assert_eq!(port.port, 1883);
        assert_eq!(port.target_port, Some(IntOrString::String("mqtt".into())));

        // The pod reads this very ConfigMap, as files or as environment.
        let config_name = config.metadata.name.clone().unwrap();
        let by_volume = pod
            .volumes
            .iter()
            .flatten()
            .any(|volume| volume.config_map.as_ref().map(|c| &c.name) == Some(&config_name));
        let by_env =
            container.env_from.iter().flatten().any(|source| {
                source.config_map_ref.as_ref().map(|c| &c.name) == Some(&config_name)
            });
        assert!(by_volume || by_env, "{product}: the ConfigMap is not used");
        check_config(product, config.data.as_ref().unwrap(), container);
    }
}

fn check_container(product: Product, container: &Container) {
    let image = container.image.as_deref().unwrap();
    let (_, tag) = image.rsplit_once(':').unwrap();
    assert!(
        tag != "latest" && tag.starts_with(|c: char| c.is_ascii_digit()) && tag.contains('.'),
        "{product}: {image} is not pinned to a version"
    );
    let ports = container.ports.as_ref().unwrap();
    assert_eq!(ports[0].name.as_deref(), Some("mqtt"));
    assert_eq!(ports[0].container_port, 1883);
    let probe = container.readiness_probe.as_ref().unwrap();
    let probed = match (&probe.tcp_socket, &probe.http_get) {
        (Some(tcp), None) => tcp.port.clone(),
        (None, Some(http)) => http.port.clone(),
        other => panic!("{product}: one probe action, not {other:?}"),
    };
    let IntOrString::String(probed) = probed else {
        panic!("{product}: probes name their port");
    };
    assert!(
        ports
            .iter()
            .any(|p| p.name.as_deref() == Some(probed.as_str())),
        "{product}: the probe's port {probed} is not a container port"
    );
    assert!(container.liveness_probe.is_none(), "{product}");
    let resources = container.resources.as_ref().unwrap();
    assert!(resources.limits.as_ref().unwrap().contains_key("memory"));
    let requests = resources.requests.as_ref().unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
}

/// The settings a benchmark depends on: messages of 1 MB and more, anonymous clients.
fn check_config(product: Product, data: &BTreeMap<String, String>, container: &Container) {
    let value = |key: &str| data.get(key).map(String::as_str);
    match product {
        Product::Mosquitto => {
            let conf = value("mosquitto.conf").unwrap();
            assert!(conf.lines().any(|l| l == "allow_anonymous true"), "{conf}");
            // Unset means MQTT's own 256 MB limit.
            assert!(!conf.contains("message_size_limit") && !conf.contains("max_packet_size"));
        }
        Product::Emqx => {
            assert_eq!(value("EMQX_MQTT__MAX_PACKET_SIZE"), Some("2MB"));
            assert_eq!(value("EMQX_AUTHORIZATION__NO_MATCH"), Some("allow"));
        }
        Product::RabbitMq => {
            let conf = value("rabbitmq.conf").unwrap();
            assert!(conf.contains("\nmqtt.allow_anonymous = true\n"), "{conf}");
            assert!(conf.contains("\nmax_message_size = 134217728\n"), "{conf}");
            assert!(value("enabled_plugins").unwrap().contains("rabbitmq_mqtt"));
        }
        Product::VerneMq => {
            assert_eq!(value("DOCKER_VERNEMQ_ALLOW_ANONYMOUS"), Some("on"));
            assert_eq!(value("DOCKER_VERNEMQ_MAX_MESSAGE_SIZE"), Some("0"));
            assert_eq!(value("DOCKER_VERNEMQ_ACCEPT_EULA"), Some("yes"));
        }
        Product::HiveMq => {
            let conf = value("config.xml").unwrap();
            assert!(conf.contains("<max-packet-size>268435460</max-packet-size>"));
            // Anonymous access is the image's allow-all extension, kept by this variable.
            let allow_all = container
                .env
                .iter()
                .flatten()
                .find(|var| var.name == "HIVEMQ_ALLOW_ALL_CLIENTS");
            assert_eq!(allow_all.and_then(|v| v.value.as_deref()), Some("true"));
        }
    }
}

#[test]
fn the_manifests_follow_the_spec() {
    let mut spec = golden_spec(Product::Emqx);
    spec.kind = BrokerKind::Kubernetes {
        product: Product::Emqx,
        node: "rpi-2".into(),
        namespace: "lab".into(),
        node_port: Some(30001),
        on_every_node: true,
    };
    spec.options.max_inflight_messages = Some(7);
    let manifests = Manifests::of(&spec).unwrap();
    assert_eq!(manifests.node_port, 30001);
    assert_eq!(
        manifests.selector,
        "app.kubernetes.io/instance=bench,app.kubernetes.io/managed-by=continuum,\
         app.kubernetes.io/name=emqx"
    );
    let apply = manifests.apply_yaml().unwrap();
    assert!(apply.contains("nodePort: 30001\n"), "{apply}");
    assert!(apply.contains("kubernetes.io/hostname: rpi-2\n"), "{apply}");
    // Entered through any node: kube-proxy forwards from nodes without the pod.
    assert!(
        apply.contains("externalTrafficPolicy: Cluster\n"),
        "{apply}"
    );
    assert!(
        apply.contains("EMQX_MQTT__MAX_INFLIGHT: \"7\"\n"),
        "{apply}"
    );
    assert!(apply.contains("kind: Namespace\n"));
    let delete = manifests.delete_yaml().unwrap();
    assert!(
        !delete.contains("kind: Namespace"),
        "the namespace is never deleted"
    );
    assert!(apply.ends_with(&delete));

    // A different config is a different checksum, so applying it restarts the pod.
    let checksum_of = |spec: &BrokerSpec| {
        let manifests = Manifests::of(spec).unwrap();
        let template = manifests
            .deployment
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap();
        template.annotations.unwrap()["checksum/config"].clone()
    };
    let mut other = spec.clone();
    other.options.max_inflight_messages = Some(8);
    assert_ne!(checksum_of(&spec), checksum_of(&other));
    assert_eq!(checksum_of(&spec), checksum_of(&spec.clone()));

    let native = BrokerSpec {
        kind: BrokerKind::Embedded,
        ..spec
    };
    assert!(Manifests::of(&native).is_err());
}

#[test]
fn a_websocket_listener_is_a_second_container_and_service_port() {
    let mut spec = golden_spec(Product::Mosquitto);
    spec.options.websocket_port = Some(0);
    spec.validate().unwrap();
    let manifests = Manifests::of(&spec).unwrap();
    // 500 above the MQTT NodePort unless the spec names one.
    assert_eq!(manifests.websocket, Some((32383, "/mqtt")));
    let ports = manifests
        .service
        .spec
        .as_ref()
        .unwrap()
        .ports
        .clone()
        .unwrap();
    let ws = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("ws"))
        .unwrap();
    assert_eq!((ws.port, ws.node_port), (9001, Some(32383)));
    let containers = &manifests
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers;
    let container_ports = containers[0].ports.clone().unwrap();
    assert!(
        container_ports
            .iter()
            .any(|p| p.name.as_deref() == Some("ws") && p.container_port == 9001),
        "{container_ports:?}"
    );
    let config = manifests.config.data.as_ref().unwrap();
    assert!(config["mosquitto.conf"].ends_with("listener 9001\nprotocol websockets\n"));

    let mut rabbit = golden_spec(Product::RabbitMq);
    rabbit.options.websocket_port = Some(30999);
    let manifests = Manifests::of(&rabbit).unwrap();
    assert_eq!(manifests.websocket, Some((30999, "/ws")));

    let mut emqx = golden_spec(Product::Emqx);
    emqx.options.websocket_port = Some(0);
    let error = Manifests::of(&emqx).unwrap_err().to_string();
    assert!(
        error.starts_with("options.websocket_port: \"0\" emqx: "),
        "{error}"
    );

    let mut outside = golden_spec(Product::Mosquitto);
    outside.options.websocket_port = Some(1884);
    let error = outside.validate().unwrap_err().to_string();
    assert!(error.contains("30000-32767"), "{error}");
}
