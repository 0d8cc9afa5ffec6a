//! Test support: a fake `k3s` executable, because k3s cannot run on this machine. The fake
//! plays the cluster's side of kubectl: it records each call's arguments (and, for `-f -`,
//! what was piped to it) and answers from files the test writes beside it. Plus a real MQTT
//! broker on a port in the NodePort range, for the part of a start that is not faked.

use std::path::{Path, PathBuf};

use crate::broker::embedded::EmbeddedDriver;
use crate::broker::test_support::loopback_spec;
use crate::broker::{BrokerDriver, RunningBroker};
use domain::BrokerKind;
use domain::broker::NODE_PORTS;

use super::Kubectl;

const SCRIPT: &str = r#"#!/bin/sh
# A fake k3s (see fake_k3s.rs): records its calls, answers from files beside it.
dir=$(dirname "$0")
n=$(($(cat "$dir/count" 2>/dev/null || echo 0) + 1))
echo "$n" > "$dir/count"
echo "$*" >> "$dir/calls"
shift 3 # kubectl --kubeconfig <file>
case " $* " in *" -f - "*) cat > "$dir/stdin-$n.json" ;; esac
answer() {
    if [ -e "$dir/$1.sleep" ]; then sleep "$(cat "$dir/$1.sleep")"; fi
    if [ -e "$dir/$1.fail" ]; then cat "$dir/$1.fail" >&2; exit 1; fi
    cat "$dir/$1" 2>/dev/null
    exit 0
}
case "$1 $2" in
    "get node") answer "node-$3.json" ;;
    "apply -f") answer apply ;;
    "rollout status") answer rollout ;;
    "get deployment") answer deployment.json ;;
    "get --raw") answer podmetrics.json ;;
    "get pods") answer pods ;;
    "delete -f") answer delete ;;
    logs*) answer logs ;;
esac
echo "fake k3s: unexpected call: $*" >&2
exit 2
"#;

/// The Node `worker-1`, whose InternalIP is loopback: its NodePorts are this machine's ports.
pub const NODE_JSON: &str = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"worker-1"},
"status":{"addresses":[{"type":"Hostname","address":"worker-1"},
{"type":"InternalIP","address":"127.0.0.1"}]}}"#;

/// A Deployment with its one replica ready.
pub const READY_DEPLOYMENT: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment",
"metadata":{"name":"bench","namespace":"continuum"},
"status":{"replicas":1,"readyReplicas":1,"availableReplicas":1}}"#;

/// The metrics API's answer for one pod: 0.25 cores, 100 MiB.
pub const POD_METRICS: &str = r#"{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1",
"metadata":{},"items":[{"metadata":{"name":"bench-5f4d8-x2x9q","namespace":"continuum"},
"timestamp":"2025-05-01T10:00:00Z","window":"10.2s",
"containers":[{"name":"mosquitto","usage":{"cpu":"250000000n","memory":"102400Ki"}}]}]}"#;

/// A fake k3s in its own temporary folder.
#[derive(Debug)]
pub struct FakeK3s {
    dir: tempfile::TempDir,
}

impl FakeK3s {
    /// A fake cluster with node `worker-1` and a Deployment that rolls out and is ready.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let fake = Self { dir };
        fake.set("k3s", SCRIPT);
        std::fs::set_permissions(
            fake.path("k3s"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        fake.set("node-worker-1.json", NODE_JSON);
        fake.set(
            "node-ghost.json.fail",
            "Error from server (NotFound): nodes \"ghost\" not found\n",
        );
        fake.set(
            "apply",
            "configmap/bench-config created\ndeployment.apps/bench created\n",
        );
        fake.set("rollout", "deployment \"bench\" successfully rolled out\n");
        fake.set("deployment.json", READY_DEPLOYMENT);
        fake.set("podmetrics.json", POD_METRICS);
        fake.set("logs", "1714557600: mosquitto version 1.6.15 running\n");
        fake
    }

    /// kubectl as the agent runs it: `<fake k3s> kubectl --kubeconfig <file>`.
    pub fn kubectl(&self) -> Kubectl {
        Kubectl::k3s(self.path("k3s"), Some(&self.path("kubeconfig.yaml")))
    }

    /// Writes the answer file `name`.
    pub fn set(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).expect("writing a fake answer");
    }

    /// Makes the calls answered from `name` fail, printing `message` on stderr.
    pub fn fail(&self, name: &str, message: &str) {
        self.set(&format!("{name}.fail"), message);
    }

    /// Every call's arguments after `kubectl --kubeconfig <file>`, in order.
    pub fn calls(&self) -> Vec<String> {
        let prefix = format!(
            "kubectl --kubeconfig {} ",
            self.path("kubeconfig.yaml").display()
        );
        std::fs::read_to_string(self.path("calls"))
            .unwrap_or_default()
            .lines()
            .map(|line| {
                line.strip_prefix(&prefix)
                    .unwrap_or_else(|| panic!("called without the kubeconfig: {line}"))
                    .to_owned()
            })
            .collect()
    }

    /// What call `n` (counted from 1) read on stdin.
    pub fn stdin_of(&self, n: usize) -> String {
        std::fs::read_to_string(self.path(&format!("stdin-{n}.json"))).expect("recorded stdin")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// An embedded broker on 127.0.0.1 at a free port inside the NodePort range, standing in
/// for the pod behind a NodePort.
pub async fn broker_on_a_node_port() -> (Box<dyn RunningBroker>, u16) {
    for port in node_ports_to_try() {
        let mut spec = loopback_spec("node-port", BrokerKind::Embedded);
        spec.port = port;
        if let Ok(broker) = EmbeddedDriver.start(&spec).await {
            return (broker, port);
        }
    }
    panic!("no free port in the NodePort range");
}

/// 50 ports of the NodePort range to try, in an order that differs from test to test (tests
/// running at once would otherwise race for the same free port).
pub fn node_ports_to_try() -> impl Iterator<Item = u16> {
    let span = u32::from(NODE_PORTS.end() - NODE_PORTS.start()) + 1;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    (0..50u32).map(move |attempt| {
        let offset = seed.wrapping_add(attempt * 977) % span;
        NODE_PORTS.start() + u16::try_from(offset).expect("in range")
    })
}
