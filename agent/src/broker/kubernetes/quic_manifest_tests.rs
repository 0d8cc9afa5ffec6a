//! EMQX's pod with a QUIC listener (`options.quic_port`): its golden file
//! (`golden/emqx-quic.yaml`, with fixed PEM text standing for the certificate and key), the
//! Secret, UDP ports and mount it adds, and what is refused.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

/// The QUIC listener's certificate and key in the golden file (fixed, as the cookie is).
const GOLDEN_QUIC_CERT: &str = "golden QUIC listener certificate";
const GOLDEN_QUIC_KEY: &str = "golden QUIC listener key";

#[test]
fn an_emqx_pod_with_quic_opens_a_udp_node_port_with_its_certificate_from_a_secret() {
    let mut spec = golden_spec(Product::Emqx);
    spec.options.quic_port = Some(0);
    spec.validate().unwrap();
    let secrets = golden_secrets().with_quic_certificate(GOLDEN_QUIC_CERT, GOLDEN_QUIC_KEY);
    let manifests = Manifests::of(&spec, &secrets).unwrap();
    let text = golden_yaml(&spec, &manifests);
    let path = golden_file("emqx-quic.yaml");
    if updating_golden() {
        std::fs::write(&path, &text).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&path).ok().as_deref(),
        Some(text.as_str()),
        "{} differs from the generated manifests; if the change is meant, rerun with \
         UPDATE_GOLDEN=1 and review the diff",
        path.display()
    );
    assert_eq!(manifests.quic_node_port, Some(32484), "EMQX's 31884 + 600");

    let objects = sent_objects(Product::Emqx, &manifests.apply_json().unwrap());
    assert_eq!(
        objects.kinds,
        [
            "Namespace",
            "NetworkPolicy",
            "Secret",
            "Secret",
            "ConfigMap",
            "Deployment",
            "Service"
        ],
        "the certificate's Secret exists before the pod"
    );
    let secret = objects
        .secrets
        .iter()
        .find(|secret| secret.metadata.name.as_deref() == Some("bench-quic"))
        .expect("the QUIC Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data["tls.crt"].0, GOLDEN_QUIC_CERT.as_bytes());
    assert_eq!(data["tls.key"].0, GOLDEN_QUIC_KEY.as_bytes());

    let service = objects.services[0].spec.as_ref().unwrap();
    let quic_port = service
        .ports
        .iter()
        .flatten()
        .find(|port| port.name.as_deref() == Some("quic"))
        .expect("a QUIC Service port");
    assert_eq!(
        (
            quic_port.protocol.as_deref(),
            quic_port.port,
            quic_port.node_port
        ),
        (Some("UDP"), 14567, Some(32484))
    );
    assert_eq!(
        quic_port.target_port,
        Some(IntOrString::String("quic".into()))
    );
    let policy = objects.policies[0].spec.as_ref().unwrap();
    let admitted: Vec<(Option<&str>, Option<&IntOrString>)> = policy.ingress.as_ref().unwrap()[0]
        .ports
        .iter()
        .flatten()
        .map(|port| (port.protocol.as_deref(), port.port.as_ref()))
        .collect();
    assert_eq!(
        admitted,
        [
            (Some("TCP"), Some(&IntOrString::Int(1883))),
            (Some("UDP"), Some(&IntOrString::Int(14567)))
        ],
        "MQTT and QUIC, nothing else"
    );

    let pod = objects.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let container = &pod.containers[0];
    let port = container
        .ports
        .iter()
        .flatten()
        .find(|port| port.name.as_deref() == Some("quic"))
        .expect("the container's QUIC port");
    assert_eq!(
        (port.protocol.as_deref(), port.container_port),
        (Some("UDP"), 14567)
    );
    for (name, value) in recipes::pod_quic(Product::Emqx).unwrap().env {
        let set = container.env.iter().flatten().find(|var| var.name == name);
        assert_eq!(
            set.and_then(|var| var.value.as_deref()),
            Some(value.as_str()),
            "{name}"
        );
    }
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|mount| mount.mount_path == recipes::POD_QUIC_DIR)
        .expect("the certificate mounted where the listener reads it");
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|volume| volume.name == mount.name)
        .expect("the mount's volume");
    let source = volume.secret.as_ref().expect("from a Secret");
    assert_eq!(source.secret_name.as_deref(), Some("bench-quic"));
    assert_eq!(
        source.default_mode,
        Some(0o440),
        "the key readable by the broker's group"
    );
    assert_eq!(
        pod.security_context.as_ref().and_then(|c| c.fs_group),
        Some(recipes::emqx::IMAGE_GROUP)
    );
    // A new certificate restarts a pod left from an earlier start.
    let annotations = |manifests: &Manifests| {
        let template = &manifests.deployment.spec.as_ref().unwrap().template;
        template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
            .unwrap()
    };
    let renewed = golden_secrets().with_quic_certificate("another certificate", GOLDEN_QUIC_KEY);
    let (before, after) = (
        annotations(&manifests),
        annotations(&Manifests::of(&spec, &renewed).unwrap()),
    );
    assert_eq!(before["checksum/config"], after["checksum/config"]);
    assert_ne!(before["checksum/quic"], after["checksum/quic"]);

    // The delete names the Secret without its data; Debug shows neither PEM.
    let delete = manifests.delete_json().unwrap();
    assert!(delete.contains("bench-quic"), "{delete}");
    let debug = format!("{manifests:?} {secrets:?}");
    for text in [&delete, &debug] {
        for pem in [GOLDEN_QUIC_CERT, GOLDEN_QUIC_KEY] {
            let encoded = serde_json::to_string(&k8s_openapi::ByteString(pem.into())).unwrap();
            assert!(
                !text.contains(pem) && !text.contains(encoded.trim_matches('"')),
                "{text}"
            );
        }
    }

    // A pod without a QUIC listener, and a listener without a certificate, are refused.
    let mut mosquitto = golden_spec(Product::Mosquitto);
    mosquitto.options.quic_port = Some(0);
    let error = Manifests::of(&mosquitto, &secrets).unwrap_err().to_string();
    assert!(
        error.contains("options.quic_port")
            && error.contains("mosquitto: its pod opens no QUIC listener; EMQX's does"),
        "{error}"
    );
    let error = Manifests::of(&spec, &golden_secrets())
        .unwrap_err()
        .to_string();
    assert!(error.contains("no certificate was made"), "{error}");
    // The default QUIC NodePort taken by the MQTT one is refused, naming the field.
    let mut taken = spec.clone();
    if let BrokerKind::Kubernetes { node_port, .. } = &mut taken.kind {
        *node_port = Some(32484);
    }
    let error = Manifests::of(&taken, &secrets).unwrap_err().to_string();
    assert!(
        error.contains("options.quic_port")
            && error.contains("its QUIC NodePort 32484 is also its MQTT or WebSocket NodePort"),
        "{error}"
    );
}
