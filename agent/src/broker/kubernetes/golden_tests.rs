//! The golden manifests (`golden/<product>.yaml`, for instance `bench` on node `worker-1`,
//! with the fixed secrets of [`golden_secrets`]): the JSON list kubectl is sent, written as
//! YAML documents for review under a comment saying what they are, must match them byte for
//! byte (`UPDATE_GOLDEN=1` rewrites them after a deliberate change; review the diff), and
//! every document in them must deserialize into the typed Kubernetes object of its kind and
//! carry what a benchmark needs, and no more: cookies from a Secret, no dashboard in reach,
//! a NetworkPolicy admitting MQTT and WebSocket only. The YAML is read here only, as YAML
//! 1.2; kubectl, which reads YAML as 1.1, gets JSON.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Deserialize;

use super::*;
use domain::broker::NODE_PORTS;
use domain::{BrokerOptions, Product};

const NODE: &str = "worker-1";

/// The cookie in the golden files: fixed, so they stay byte for byte the same.
const GOLDEN_COOKIE: &str = "golden-erlang-cookie";
/// The dashboard password in the golden files.
const GOLDEN_PASSWORD: &str = "golden-dashboard-password";

fn golden_secrets() -> DeploymentSecrets {
    DeploymentSecrets::given(GOLDEN_COOKIE, GOLDEN_PASSWORD)
}

/// The manifests of `spec` with the golden secrets.
fn manifests_of(spec: &BrokerSpec) -> Result<Manifests, BrokerError> {
    Manifests::of(spec, &golden_secrets())
}

fn golden_path(product: Product) -> PathBuf {
    golden_file(&format!("{product}.yaml"))
}

fn golden_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/broker/kubernetes/golden")
        .join(name)
}

/// Whether this run rewrites the golden files (`UPDATE_GOLDEN=1`).
fn updating_golden() -> bool {
    std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1")
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
    let update = updating_golden();
    let mut stale = Vec::new();
    for product in recipes::products_with_pods() {
        let spec = golden_spec(product);
        spec.validate().unwrap();
        let text = golden_yaml(&spec, &manifests_of(&spec).unwrap());
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

/// What a golden file holds for `spec`: a comment saying what it is, then each object kubectl
/// is sent as one YAML document.
fn golden_yaml(spec: &BrokerSpec, manifests: &Manifests) -> String {
    let BrokerKind::Kubernetes {
        product,
        node,
        namespace,
        ..
    } = &spec.kind
    else {
        panic!("not a Kubernetes broker: {spec:?}");
    };
    let pod = recipes::pod(*product, &spec.options).unwrap();
    let quic = manifests
        .quic_node_port
        .map(|port| format!(", MQTT over QUIC on UDP NodePort {port}"))
        .unwrap_or_default();
    let header = format!(
        "Continuum broker {:?}: {product} in namespace {namespace}, pinned to node {node}, MQTT \
         on NodePort {}{quic}.\nImage {}. {}\nThe Continuum agent sends these objects to `kubectl apply \
         -f -` as one JSON List (this YAML is for reading: kubectl reads YAML as 1.1, where a \
         plain yes or on is a boolean). `kubectl delete` of the objects below removes the \
         broker; the namespace stays.\n",
        spec.name, manifests.node_port, pod.image, pod.provenance
    );
    let mut text = wrap_comment(&header);
    for item in list_items(&manifests.apply_json().unwrap()) {
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(&item).unwrap());
    }
    text
}

/// `text` as YAML comment lines, wrapped near 100 columns.
fn wrap_comment(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut current = String::from("#");
        for word in line.split_whitespace() {
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

/// The items of a JSON `List` as kubectl is sent it.
fn list_items(text: &str) -> Vec<serde_json::Value> {
    let mut list: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        (&list["apiVersion"], &list["kind"]),
        (&"v1".into(), &"List".into()),
        "{text}"
    );
    match list["items"].take() {
        serde_json::Value::Array(items) => items,
        other => panic!("a List's items are an array, not {other}"),
    }
}

/// The objects of one golden file, each deserialized as the type its `kind` names.
#[derive(Default)]
struct Objects {
    namespaces: Vec<Namespace>,
    policies: Vec<NetworkPolicy>,
    secrets: Vec<Secret>,
    configs: Vec<ConfigMap>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    /// Each document's `kind`, in order.
    kinds: Vec<String>,
}

fn read_objects(product: Product) -> Objects {
    let text = std::fs::read_to_string(golden_path(product)).unwrap();
    let documents = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| serde_json::Value::deserialize(document).unwrap())
        .collect();
    typed_objects(product, documents)
}

/// The objects of a JSON `List` as kubectl is sent it.
fn sent_objects(product: Product, text: &str) -> Objects {
    typed_objects(product, list_items(text))
}

fn typed_objects(product: Product, documents: Vec<serde_json::Value>) -> Objects {
    let mut objects = Objects::default();
    for value in documents {
        let kind = value["kind"].as_str().unwrap().to_owned();
        objects.kinds.push(kind.clone());
        // from_value checks apiVersion and kind against the type, and every field's type.
        match kind.as_str() {
            "Namespace" => objects
                .namespaces
                .push(serde_json::from_value(value).unwrap()),
            "NetworkPolicy" => objects
                .policies
                .push(serde_json::from_value(value).unwrap()),
            "Secret" => objects.secrets.push(serde_json::from_value(value).unwrap()),
            "ConfigMap" => objects.configs.push(serde_json::from_value(value).unwrap()),
            "Deployment" => objects
                .deployments
                .push(serde_json::from_value(value).unwrap()),
            "Service" => objects
                .services
                .push(serde_json::from_value(value).unwrap()),
            other => panic!("{product}: unexpected kind {other}"),
        }
    }
    objects
}

/// Values that YAML 1.1, which kubectl speaks, reads as booleans where written plain.
const YAML_1_1_BOOLEANS: [&str; 16] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

#[test]
fn kubectl_reads_every_config_value_and_variable_as_a_string() {
    let mut ambiguous = 0;
    for product in recipes::products_with_pods() {
        let manifests = manifests_of(&golden_spec(product)).unwrap();
        for item in list_items(&manifests.apply_json().unwrap()) {
            let mut values: Vec<(String, &serde_json::Value)> = Vec::new();
            if let Some(data) = item["data"].as_object() {
                values.extend(data.iter().map(|(key, value)| (key.clone(), value)));
            }
            let containers = item["spec"]["template"]["spec"]["containers"].as_array();
            for container in containers.into_iter().flatten() {
                for variable in container["env"].as_array().into_iter().flatten() {
                    if let Some(value) = variable.get("value") {
                        values.push((variable["name"].to_string(), value));
                    }
                }
            }
            for (key, value) in values {
                assert!(value.is_string(), "{product}: {key} = {value}");
                let text = value.as_str().unwrap_or_default();
                ambiguous += usize::from(YAML_1_1_BOOLEANS.contains(&text));
            }
        }
    }
    // VerneMQ's `yes` and `on` among them: YAML would have needed them quoted.
    assert!(ambiguous >= 2, "{ambiguous}");
}

#[test]
fn every_golden_document_is_a_typed_object_with_what_a_benchmark_needs() {
    for product in recipes::products_with_pods() {
        let objects = read_objects(product);
        let ([namespace], [policy], [config], [deployment], [service]) = (
            &objects.namespaces[..],
            &objects.policies[..],
            &objects.configs[..],
            &objects.deployments[..],
            &objects.services[..],
        ) else {
            panic!(
                "{product}: expected one Namespace, NetworkPolicy, ConfigMap, Deployment and \
                 Service"
            );
        };
        assert_eq!(namespace.metadata.name.as_deref(), Some("continuum"));
        let metas = [
            &policy.metadata,
            &config.metadata,
            &deployment.metadata,
            &service.metadata,
        ];
        let secret_metas = objects.secrets.iter().map(|s| &s.metadata);
        for meta in metas.into_iter().chain(secret_metas) {
            assert_eq!(meta.namespace.as_deref(), Some("continuum"), "{product}");
        }
        // The policy and the Secret exist before the pod does.
        let erlang = matches!(
            product,
            Product::Emqx | Product::VerneMq | Product::Ejabberd
        );
        let expected: &[&str] = if erlang {
            &[
                "Namespace",
                "NetworkPolicy",
                "Secret",
                "ConfigMap",
                "Deployment",
                "Service",
            ]
        } else {
            &[
                "Namespace",
                "NetworkPolicy",
                "ConfigMap",
                "Deployment",
                "Service",
            ]
        };
        assert_eq!(objects.kinds, expected, "{product}");

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
        let policy_spec = policy.spec.as_ref().unwrap();
        assert_eq!(
            policy_spec.pod_selector.as_ref().unwrap().match_labels,
            template_labels,
            "{product}"
        );

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
        // MQTT only: no dashboard, console or management port of any product.
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
        assert_eq!(
            admitted_ports(policy),
            [1883],
            "{product}: the policy admits MQTT only"
        );
    }
}

/// The TCP ports a broker's NetworkPolicy admits, from anywhere; panics on anything else
/// (an egress rule, a `from`, another protocol).
fn admitted_ports(policy: &NetworkPolicy) -> Vec<i32> {
    let spec = policy.spec.as_ref().unwrap();
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    assert!(spec.egress.is_none());
    let [rule] = &spec.ingress.as_ref().unwrap()[..] else {
        panic!("one ingress rule: {spec:?}");
    };
    assert!(rule.from.is_none(), "clients come from anywhere: {rule:?}");
    rule.ports
        .iter()
        .flatten()
        .map(|port| {
            assert_eq!(port.protocol.as_deref(), Some("TCP"));
            assert!(port.end_port.is_none());
            match port.port {
                Some(IntOrString::Int(number)) => number,
                ref other => panic!("ports by number: {other:?}"),
            }
        })
        .collect()
}

/// The Secret `variable` of `container` is read from, and the key, checked against `secret`;
/// the value it holds there.
fn value_from_secret(container: &Container, variable: &str, secret: &Secret) -> String {
    let var = container
        .env
        .iter()
        .flatten()
        .find(|var| var.name == variable)
        .unwrap_or_else(|| panic!("{variable} is not set: {:?}", container.env));
    assert!(var.value.is_none(), "{variable} is set in plain text");
    let from = var.value_from.as_ref().unwrap();
    let selector = from.secret_key_ref.as_ref().unwrap();
    assert_eq!(Some(&selector.name), secret.metadata.name.as_ref());
    assert_eq!(selector.optional, Some(false));
    let bytes = &secret.data.as_ref().unwrap()[&selector.key].0;
    String::from_utf8(bytes.clone()).unwrap()
}

fn only_container(deployment: &Deployment) -> &Container {
    let spec = deployment.spec.as_ref().unwrap();
    &spec.template.spec.as_ref().unwrap().containers[0]
}

#[test]
fn erlang_cookies_come_from_a_secret_and_never_are_the_images() {
    // ejabberd's image keeps its fixed cookie in a file (releases/COOKIE) that its start
    // script passes as -setcookie only when ERLANG_COOKIE is empty; its value is not known
    // here, so what is checked is that nothing else sets one.
    for (product, variable, image_cookie) in [
        (
            Product::Emqx,
            "EMQX_NODE__COOKIE",
            Some(recipes::emqx::IMAGE_COOKIE),
        ),
        (
            Product::VerneMq,
            "DOCKER_VERNEMQ_DISTRIBUTED_COOKIE",
            Some(recipes::vernemq::IMAGE_COOKIE),
        ),
        (Product::Ejabberd, "ERLANG_COOKIE", None),
    ] {
        let objects = read_objects(product);
        let [secret] = &objects.secrets[..] else {
            panic!("{product}: one Secret");
        };
        assert_eq!(secret.metadata.name.as_deref(), Some("bench-secrets"));
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        let cookie = value_from_secret(only_container(&objects.deployments[0]), variable, secret);
        assert_eq!(cookie, GOLDEN_COOKIE, "{product}");
        // Nowhere else: not in the ConfigMap the container reads as environment.
        let config = objects.configs[0].data.as_ref().unwrap();
        assert!(!config.contains_key(variable), "{product}");
        let container = only_container(&objects.deployments[0]);
        let plain = container
            .env
            .iter()
            .flatten()
            .filter_map(|var| var.value.as_deref());
        for value in config.values().map(String::as_str).chain(plain) {
            assert!(!value.contains("setcookie"), "{product}: {value}");
            if let Some(image_cookie) = image_cookie {
                assert_ne!(value, image_cookie, "{product}");
            }
        }
    }
    for product in [
        Product::Mosquitto,
        Product::RabbitMq,
        Product::HiveMq,
        Product::ActiveMq,
    ] {
        assert!(read_objects(product).secrets.is_empty(), "{product}");
    }
}

#[test]
fn each_deployment_draws_its_own_cookie() {
    let cookie_of = |product: Product, name: &str, secrets: &DeploymentSecrets| {
        let mut spec = golden_spec(product);
        spec.name = name.into();
        let manifests = Manifests::of(&spec, secrets).unwrap();
        let secret = manifests.secret.as_ref().unwrap();
        let variable = match product {
            Product::Emqx => "EMQX_NODE__COOKIE",
            Product::VerneMq => "DOCKER_VERNEMQ_DISTRIBUTED_COOKIE",
            Product::Ejabberd => "ERLANG_COOKIE",
            other => panic!("{other} has no cookie"),
        };
        value_from_secret(only_container(&manifests.deployment), variable, secret)
    };
    for (product, image_cookie) in [
        (Product::Emqx, Some(recipes::emqx::IMAGE_COOKIE)),
        (Product::VerneMq, Some(recipes::vernemq::IMAGE_COOKIE)),
        // Its image's cookie is not known here: a drawn one per deployment is what counts.
        (Product::Ejabberd, None),
    ] {
        let first = cookie_of(product, "bench-a", &DeploymentSecrets::draw().unwrap());
        let second = cookie_of(product, "bench-b", &DeploymentSecrets::draw().unwrap());
        assert_ne!(first, second, "{product}: two deployments share a cookie");
        for cookie in [&first, &second] {
            assert_ne!(Some(cookie.as_str()), image_cookie);
            assert_eq!(cookie.len(), 64, "{product}: 256 bits as hex");
            assert!(cookie.chars().all(|c| c.is_ascii_hexdigit()));
        }
    }
    // Neither the drawn values nor the Secret's data show in Debug output (a log line).
    let secrets = DeploymentSecrets::draw().unwrap();
    let cookie = secrets.value(Generated::ErlangCookie).to_owned();
    let manifests = Manifests::of(&golden_spec(Product::Emqx), &secrets).unwrap();
    for debug in [format!("{secrets:?}"), format!("{manifests:?}")] {
        assert!(!debug.contains(&cookie), "{debug}");
    }
}

#[test]
fn the_emqx_dashboard_is_out_of_reach_and_has_no_default_password() {
    let objects = read_objects(Product::Emqx);
    let container = only_container(&objects.deployments[0]);
    let dashboard = container
        .ports
        .iter()
        .flatten()
        .find(|port| port.name.as_deref() == Some("dashboard"))
        .expect("the dashboard stays for the readiness probe");
    // Not in the Service, not admitted by the policy: only the pod's node (its kubelet)
    // reaches it.
    let service_ports = objects.services[0].spec.as_ref().unwrap().ports.clone();
    assert!(
        service_ports
            .iter()
            .flatten()
            .all(|port| port.port != dashboard.container_port
                && port.target_port != Some(IntOrString::String("dashboard".into()))),
        "{service_ports:?}"
    );
    let admitted = admitted_ports(&objects.policies[0]);
    assert!(
        !admitted.contains(&dashboard.container_port),
        "{admitted:?}"
    );
    // And its admin's password is drawn, not the image's.
    let password = value_from_secret(
        container,
        "EMQX_DASHBOARD__DEFAULT_PASSWORD",
        &objects.secrets[0],
    );
    assert_eq!(password, GOLDEN_PASSWORD);
    assert_ne!(password, recipes::emqx::IMAGE_DASHBOARD_PASSWORD);
    let drawn = DeploymentSecrets::draw().unwrap();
    assert_eq!(drawn.value(Generated::DashboardPassword).len(), 32);
    assert_ne!(
        drawn.value(Generated::DashboardPassword),
        drawn.value(Generated::ErlangCookie)
    );
}

#[test]
fn network_policies_admit_the_websocket_port_when_there_is_one() {
    for (product, ws) in [(Product::Mosquitto, 9001), (Product::RabbitMq, 15675)] {
        let mut spec = golden_spec(product);
        spec.options.websocket_port = Some(0);
        let manifests = manifests_of(&spec).unwrap();
        assert_eq!(
            admitted_ports(&manifests.network_policy),
            [1883, ws],
            "{product}"
        );
    }
    // Every product's extra ports (EMQX's dashboard, VerneMQ's HTTP listener) stay shut.
    for product in recipes::products_with_pods() {
        let manifests = manifests_of(&golden_spec(product)).unwrap();
        let admitted = admitted_ports(&manifests.network_policy);
        for port in only_container(&manifests.deployment).ports.iter().flatten() {
            let open = admitted.contains(&port.container_port);
            assert_eq!(
                open,
                port.name.as_deref() == Some("mqtt"),
                "{product}: {port:?}"
            );
        }
    }
}

#[test]
fn the_delete_names_every_object_but_the_namespace_and_no_secret_value() {
    for product in recipes::products_with_pods() {
        let manifests = manifests_of(&golden_spec(product)).unwrap();
        let applied = sent_objects(product, &manifests.apply_json().unwrap());
        let deleted = sent_objects(product, &manifests.delete_json().unwrap());
        let mut expected: Vec<String> = applied.kinds[1..].to_vec();
        expected.reverse();
        assert_eq!(deleted.kinds, expected, "{product}");
        let secret_names = |objects: &Objects| -> Vec<Option<String>> {
            objects
                .secrets
                .iter()
                .map(|s| s.metadata.name.clone())
                .collect()
        };
        let policy_names = |objects: &Objects| -> Vec<Option<String>> {
            objects
                .policies
                .iter()
                .map(|p| p.metadata.name.clone())
                .collect()
        };
        assert_eq!(secret_names(&deleted), secret_names(&applied), "{product}");
        assert_eq!(policy_names(&deleted), policy_names(&applied), "{product}");
        assert!(
            deleted.secrets.iter().all(|secret| secret.data.is_none()),
            "{product}: the delete carries the Secret's data"
        );
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
        Product::ActiveMq => {
            let xml = value("activemq.xml").unwrap();
            assert!(xml.contains("uri=\"mqtt://0.0.0.0:1883?"), "{xml}");
            assert!(xml.contains("wireFormat.maxFrameSize=268435456"), "{xml}");
            // No console: the image's jetty.xml is never imported; no JMX connector.
            assert!(
                !xml.contains("jetty") && xml.contains("useJmx=\"false\""),
                "{xml}"
            );
        }
        Product::Ejabberd => {
            let yml = value("ejabberd.yml").unwrap();
            assert!(
                yml.contains("ip: \"0.0.0.0\"\n    module: mod_mqtt\n"),
                "{yml}"
            );
            assert!(yml.contains("anonymous_protocol: login_anon\n"), "{yml}");
            let env = |name: &str| {
                container
                    .env
                    .iter()
                    .flatten()
                    .find(|var| var.name == name)
                    .and_then(|var| var.value.clone())
            };
            // Distribution on loopback at a fixed port, so no epmd.
            assert_eq!(env("ERL_DIST_PORT").as_deref(), Some("5210"));
            assert_eq!(
                env("ERL_OPTIONS").as_deref(),
                Some("-kernel inet_dist_use_interface {127,0,0,1}")
            );
        }
        Product::Rmqtt => {
            let toml = value("rmqtt.toml").unwrap();
            for setting in [
                "addr = \"0.0.0.0:1883\"\n",
                "allow_anonymous = true\n",
                "max_packet_size = \"256M\"\n",
                "node.busy.check_enable = false\n",
                // rmqttd always opens it: on loopback, out of the Service's reach.
                "rpc.server_addr = \"127.0.0.1:5363\"\n",
                "plugins.disabled_default_startups = [\"rmqtt-http-api\", \"rmqtt-acl\"]\n",
            ] {
                assert!(toml.contains(setting), "{setting} in {toml}");
            }
            assert_eq!(toml.matches("[listener.").count(), 1, "{toml}");
        }
        Product::Mqttv5 | Product::Aedes | Product::Amqtt => panic!("{product} has no pod"),
    }
}

#[test]
fn a_product_without_an_official_image_is_refused_naming_the_field() {
    let mut spec = golden_spec(Product::Mosquitto);
    if let BrokerKind::Kubernetes { product, .. } = &mut spec.kind {
        *product = Product::Mqttv5;
    }
    let error = manifests_of(&spec).unwrap_err().to_string();
    assert!(
        error.contains("kind.kubernetes.product") && error.contains("no official container image"),
        "{error}"
    );
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
    let manifests = manifests_of(&spec).unwrap();
    assert_eq!(manifests.node_port, 30001);
    assert_eq!(
        manifests.selector,
        "app.kubernetes.io/instance=bench,app.kubernetes.io/managed-by=continuum,\
         app.kubernetes.io/name=emqx"
    );
    let apply = manifests.apply_json().unwrap();
    assert!(apply.contains("\"nodePort\":30001"), "{apply}");
    assert!(
        apply.contains("\"kubernetes.io/hostname\":\"rpi-2\""),
        "{apply}"
    );
    // Entered through any node: kube-proxy forwards from nodes without the pod.
    assert!(
        apply.contains("\"externalTrafficPolicy\":\"Cluster\""),
        "{apply}"
    );
    assert!(
        apply.contains("\"EMQX_MQTT__MAX_INFLIGHT\":\"7\""),
        "{apply}"
    );
    assert!(apply.contains("\"kind\":\"Namespace\""));
    let delete = manifests.delete_json().unwrap();
    assert!(
        !delete.contains("\"kind\":\"Namespace\""),
        "the namespace is never deleted"
    );

    // A different config is a different checksum, so applying it restarts the pod.
    let checksum_of = |spec: &BrokerSpec| {
        let manifests = manifests_of(spec).unwrap();
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
    assert!(manifests_of(&native).is_err());
}

#[test]
fn a_websocket_listener_is_a_second_container_and_service_port() {
    let mut spec = golden_spec(Product::Mosquitto);
    spec.options.websocket_port = Some(0);
    spec.validate().unwrap();
    let manifests = manifests_of(&spec).unwrap();
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
    let manifests = manifests_of(&rabbit).unwrap();
    assert_eq!(manifests.websocket, Some((30999, "/ws")));

    let mut emqx = golden_spec(Product::Emqx);
    emqx.options.websocket_port = Some(0);
    let error = manifests_of(&emqx).unwrap_err().to_string();
    assert!(
        error.starts_with("options.websocket_port: \"0\" emqx: "),
        "{error}"
    );

    let mut outside = golden_spec(Product::Mosquitto);
    outside.options.websocket_port = Some(1884);
    let error = outside.validate().unwrap_err().to_string();
    assert!(error.contains("30000-32767"), "{error}");
}

#[path = "quic_manifest_tests.rs"]
mod quic_manifest_tests;
