//! A pod's QUIC listener through the driver, against the fake `k3s` (fake_k3s.rs): k3s and
//! EMQX's image cannot run on this machine, so a real mqttv5 broker stands in for the pod.
//! It serves QUIC on the UDP NodePort with the certificate and key read back from the Secret
//! kubectl was sent, so the agent's probe checks the very certificate a pod would present
//! against the CA the agent made.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;

use super::fake_k3s::{FakeK3s, broker_on_a_node_port, node_ports_to_try};
use super::*;
use crate::broker::ErrorCode;
use crate::broker::install::InstallPaths;
use crate::broker::test_support::installed_or_skip;
use domain::BrokerOptions;

/// Every test is bounded: a hung kubectl or probe fails the test instead of stalling it.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// EMQX on node `worker-1` with its MQTT NodePort at `node_port` and QUIC at `quic_port`.
fn emqx_with_quic(node_port: u16, quic_port: u16) -> BrokerSpec {
    BrokerSpec {
        name: "bench".into(),
        kind: BrokerKind::Kubernetes {
            product: Product::Emqx,
            node: "worker-1".into(),
            namespace: "continuum".into(),
            node_port: Some(node_port),
            on_every_node: false,
        },
        bind: Ipv4Addr::UNSPECIFIED.into(),
        port: 0,
        options: BrokerOptions {
            quic_port: Some(quic_port),
            ..BrokerOptions::default()
        },
    }
}

/// A UDP port in the NodePort range that is free on 127.0.0.1 (the fake node's address)
/// and is not `other`; tried from a point of the range that differs from test to test.
fn free_udp_node_port(other: u16) -> u16 {
    node_ports_to_try()
        .filter(|port| *port != other)
        .find(|port| std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, *port)).is_ok())
        .expect("a free UDP port in the NodePort range")
}

/// The Secret named `name` among what kubectl applied, once the fake has recorded it (20 s
/// at most: a start that failed before its apply applies nothing).
async fn applied_secret(fake: &FakeK3s, name: &str) -> Secret {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Secret {name} applied within 20 s; kubectl calls: {:#?}",
            fake.calls()
        );
        // The fake writes stdin while kubectl runs: a file that does not parse yet is read again.
        let applied = std::fs::read_to_string(fake.dir().join("stdin-2.json")).unwrap_or_default();
        if let Ok(list) = serde_json::from_str::<serde_json::Value>(&applied) {
            let found = list["items"].as_array().into_iter().flatten().find(|item| {
                item["kind"] == "Secret" && item["metadata"]["name"].as_str() == Some(name)
            });
            if let Some(item) = found {
                return serde_json::from_value(item.clone()).expect("a Secret");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A real mqttv5 process serving QUIC on `quic`, with the certificate and key of `secret`;
/// killed with its group on drop.
struct StandIn {
    child: Child,
    dir: tempfile::TempDir,
}

impl StandIn {
    fn start(program: &Path, secret: &Secret, quic: SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = secret.data.as_ref().expect("the Secret has data");
        let cert_file = dir.path().join(recipes::POD_QUIC_CERT);
        let key_file = dir.path().join(recipes::POD_QUIC_KEY);
        std::fs::write(&cert_file, &data[recipes::POD_QUIC_CERT].0).unwrap();
        std::fs::write(&key_file, &data[recipes::POD_QUIC_KEY].0).unwrap();
        let tcp = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .unwrap();
        let config = recipes::mqttv5::with_quic(
            recipes::mqttv5::config(&BrokerOptions::default(), tcp, None),
            &recipes::QuicListen {
                address: quic,
                cert_file: &cert_file,
                key_file: &key_file,
            },
        );
        let config_file = dir.path().join(recipes::mqttv5::CONFIG_FILE);
        std::fs::write(&config_file, config.to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join(STAND_IN_LOG)).unwrap();
        let child = Command::new(program)
            .args(["broker", "-c"])
            .arg(&config_file)
            .arg("--non-interactive")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        StandIn { child, dir }
    }

    /// What it logged (why it did not listen, when it did not).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(STAND_IN_LOG)).unwrap_or_default()
    }
}

/// The stand-in's log, in its folder.
const STAND_IN_LOG: &str = "mqttv5.log";

impl Drop for StandIn {
    fn drop(&mut self) {
        host::blocking::kill_group_and_reap(&mut self.child);
    }
}

#[tokio::test]
async fn a_pods_quic_listener_is_probed_with_the_certificate_applied_in_its_secret() {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::Mqttv5) {
        return;
    }
    let program = InstallPaths::locate(Product::Mqttv5, &install.mqttv5).unwrap();
    tokio::time::timeout(TEST_LIMIT, async {
        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let quic_port = free_udp_node_port(port);
        let quic = SocketAddr::from((Ipv4Addr::LOCALHOST, quic_port));
        let spec = emqx_with_quic(port, quic_port);
        let driver = KubernetesDriver::new(fake.kubectl());
        let stand_in = async {
            let secret = applied_secret(&fake, "bench-quic").await;
            assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
            StandIn::start(&program, &secret, quic)
        };
        let (started, stand_in) = tokio::join!(driver.start(&spec), stand_in);
        let broker = started.unwrap_or_else(|error| {
            panic!(
                "the start waits for the QUIC listener, then succeeds: {error}; the stand-in's \
                 log:\n{}",
                stand_in.log()
            )
        });

        let endpoint = broker.quic_endpoint().expect("the pod's QUIC listener");
        assert_eq!(
            endpoint.address, quic,
            "the node's InternalIP and the UDP NodePort"
        );
        crate::broker::quic_listener::probe(quic, &endpoint.ca_pem, Duration::from_secs(10))
            .await
            .expect("a client trusting the reported CA connects");
        // The certificate is checked against the deployment's CA, not just any accepted.
        let (other_ca, _) = crate::broker::quic_listener::issue_certificate(&[quic.ip()]).unwrap();
        let refused =
            crate::broker::quic_listener::probe(quic, &other_ca, Duration::from_secs(10)).await;
        assert!(refused.is_err(), "{refused:?}");

        broker.stop().await.unwrap();
        let calls = fake.calls();
        let delete = calls
            .iter()
            .position(|call| call.starts_with("delete -f -"))
            .unwrap_or_else(|| panic!("no delete: {calls:#?}"));
        let deleted: serde_json::Value = serde_json::from_str(&fake.stdin_of(delete + 1)).unwrap();
        let secret = deleted["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|item| item["kind"] == "Secret" && item["metadata"]["name"] == "bench-quic")
            .unwrap_or_else(|| panic!("the QUIC Secret is deleted: {deleted}"));
        assert!(
            secret.get("data").is_none(),
            "named without its key: {secret}"
        );
        pod.stop().await.unwrap();
    })
    .await
    .expect("the test finished within 60 s");
}

#[tokio::test]
async fn a_quic_node_port_that_does_not_answer_fails_the_start_and_deletes() {
    tokio::time::timeout(TEST_LIMIT, async {
        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let mut spec = emqx_with_quic(port, free_udp_node_port(port));
        spec.options.start_deadline = Some(Duration::from_secs(1));
        let error = KubernetesDriver::new(fake.kubectl())
            .start(&spec)
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
        assert!(
            error
                .to_string()
                .contains("its QUIC listener (UDP NodePort)"),
            "{error}"
        );
        let calls = fake.calls();
        assert!(
            calls.last().unwrap().starts_with("delete -f -"),
            "{calls:#?}"
        );
        pod.stop().await.unwrap();
    })
    .await
    .expect("the test finished within 60 s");
}
