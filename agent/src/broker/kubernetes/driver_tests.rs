//! The driver against a fake `k3s` (fake_k3s.rs). k3s cannot run on this machine, so the
//! cluster's side (apply, rollout, node lookup, metrics API, delete) is faked and only its
//! calls are checked; the MQTT side is real: the fake node's InternalIP is 127.0.0.1, and a
//! real broker listens on the NodePort, so the whole start path runs, probe included.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::fake_k3s::{FakeK3s, broker_on_a_node_port};
use super::*;
use crate::broker::ErrorCode;
use crate::broker::registry::{Brokers, BrokersConfig};
use domain::BrokerOptions;

/// Every test is bounded: a hung kubectl or probe fails the test instead of stalling it.
async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test finished within 60 s")
}

fn spec(node: &str, node_port: u16) -> BrokerSpec {
    BrokerSpec {
        name: "bench".into(),
        kind: BrokerKind::Kubernetes {
            product: Product::Mosquitto,
            node: node.into(),
            namespace: "continuum".into(),
            node_port: Some(node_port),
            on_every_node: false,
        },
        bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        port: 0,
        options: BrokerOptions::default(),
    }
}

const SELECTOR: &str = "app.kubernetes.io/instance=bench,app.kubernetes.io/managed-by=continuum,app.kubernetes.io/name=mosquitto";

#[tokio::test]
async fn a_broker_is_applied_rolled_out_probed_sampled_and_deleted() {
    bounded(async {
        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let spec = spec("worker-1", port);
        let driver = KubernetesDriver::new(fake.kubectl());

        let mut broker = driver.start(&spec).await.unwrap();
        assert_eq!(broker.address(), SocketAddr::from(([127, 0, 0, 1], port)));
        assert_eq!(broker.pid(), None);
        assert!(broker.detail().contains("eclipse-mosquitto:1.6.15-openssl"));
        assert_eq!(broker.check().await, BrokerState::Running);
        let usage = broker.usage_sampler().unwrap().sample().await.unwrap().unwrap();
        assert_eq!(usage.cpu_percent, 25.0);
        assert_eq!(usage.memory_bytes, 100 * 1024 * 1024);
        broker.stop().await.unwrap();

        let calls = fake.calls();
        assert_eq!(calls.len(), 7, "{calls:#?}");
        assert_eq!(calls[0], "get node worker-1 -o json");
        assert_eq!(calls[1], "apply -f -");
        assert!(
            calls[2].starts_with("rollout status deployment/bench -n continuum --timeout=")
                && (calls[2].ends_with("=300s") || calls[2].ends_with("=299s")),
            "{}",
            calls[2]
        );
        assert_eq!(calls[3], "get deployment bench -n continuum -o json");
        assert!(calls[4].starts_with("get --raw /apis/metrics.k8s.io/v1beta1/namespaces/continuum/pods?labelSelector=app.kubernetes.io%2Finstance%3Dbench"));
        assert_eq!(
            calls[5],
            "delete -f - --cascade=foreground --wait=true --ignore-not-found --timeout=120s"
        );
        assert_eq!(calls[6], format!("get pods -n continuum -l {SELECTOR} -o name"));

        // kubectl read exactly the manifests: all of them to apply, all but the namespace
        // to delete. Mosquitto has no Secret, so no drawn value is in them.
        let manifests = Manifests::of(&spec, &DeploymentSecrets::given("-", "-")).unwrap();
        assert_eq!(fake.stdin_of(2), manifests.apply_json().unwrap());
        assert_eq!(fake.stdin_of(6), manifests.delete_json().unwrap());
        pod.stop().await.unwrap();
    })
    .await;
}

/// The `kind`s of the items of a JSON `List`, in order, and the Secret among them if any.
fn kinds_and_secret(text: &str) -> (Vec<String>, Option<k8s_openapi::api::core::v1::Secret>) {
    let list: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(list["kind"], "List", "{text}");
    let mut kinds = Vec::new();
    let mut secret = None;
    for value in list["items"].as_array().unwrap() {
        let kind = value["kind"].as_str().unwrap().to_owned();
        if kind == "Secret" {
            secret = Some(serde_json::from_value(value.clone()).unwrap());
        }
        kinds.push(kind);
    }
    (kinds, secret)
}

/// The Erlang cookie in a Secret.
fn cookie_in(secret: &k8s_openapi::api::core::v1::Secret) -> String {
    let data = secret.data.as_ref().expect("the Secret has data");
    String::from_utf8(data["erlang-cookie"].0.clone()).unwrap()
}

#[tokio::test]
async fn an_erlang_broker_gets_its_own_cookie_applied_first_and_deleted_with_it() {
    bounded(async {
        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let mut spec = spec("worker-1", port);
        spec.kind = BrokerKind::Kubernetes {
            product: Product::Emqx,
            node: "worker-1".into(),
            namespace: "continuum".into(),
            node_port: Some(port),
            on_every_node: false,
        };
        let driver = KubernetesDriver::new(fake.kubectl());
        let mut cookies = Vec::new();
        for round in 0..2 {
            let broker = driver.start(&spec).await.unwrap();
            broker.stop().await.unwrap();
            // This round's apply and delete, as `stdin_of` counts calls (from 1).
            let calls = fake.calls();
            let nth = |verb: &str| {
                let found: Vec<usize> = (1..=calls.len())
                    .filter(|n| calls[n - 1].starts_with(verb))
                    .collect();
                assert_eq!(found.len(), round + 1, "{calls:#?}");
                found[round]
            };
            let (apply, delete) = (nth("apply -f -"), nth("delete -f -"));
            // The policy and the Secret go to the cluster before the Deployment.
            let (kinds, secret) = kinds_and_secret(&fake.stdin_of(apply));
            assert_eq!(
                kinds,
                [
                    "Namespace",
                    "NetworkPolicy",
                    "Secret",
                    "ConfigMap",
                    "Deployment",
                    "Service"
                ]
            );
            let cookie = cookie_in(&secret.unwrap());
            assert_ne!(cookie, recipes::emqx::IMAGE_COOKIE);
            assert_eq!(cookie.len(), 64);
            // Stopped, the Secret and the policy are deleted with the broker; the delete's
            // text holds no secret value.
            let delete = fake.stdin_of(delete);
            let (kinds, secret) = kinds_and_secret(&delete);
            assert_eq!(
                kinds,
                [
                    "Service",
                    "Deployment",
                    "ConfigMap",
                    "Secret",
                    "NetworkPolicy"
                ]
            );
            assert_eq!(
                secret.unwrap().metadata.name.as_deref(),
                Some("bench-secrets")
            );
            assert!(!delete.contains(&cookie), "{delete}");
            cookies.push(cookie);
        }
        assert_ne!(cookies[0], cookies[1], "two deployments share a cookie");
        pod.stop().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_failed_rollout_deletes_what_was_applied_and_says_why() {
    bounded(async {
        let fake = FakeK3s::new();
        fake.fail(
            "rollout",
            "error: deployment \"bench\" exceeded its progress deadline\n",
        );
        fake.fail(
            "logs",
            "Error from server (BadRequest): container \"mosquitto\" in pod \"bench-5f4d8\" is \
             waiting to start: image can't be pulled\n",
        );
        let error = KubernetesDriver::new(fake.kubectl())
            .start(&spec("worker-1", 31883))
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
        let text = error.to_string();
        assert!(text.contains("exceeded its progress deadline"), "{text}");
        assert!(text.contains("image can't be pulled"), "{text}");
        let calls = fake.calls();
        assert_eq!(calls[1], "apply -f -");
        assert!(calls[2].starts_with("rollout status"));
        assert!(calls[3].starts_with("logs deployment/bench -n continuum"));
        assert!(
            calls[4].starts_with("delete -f - --cascade=foreground"),
            "{calls:#?}"
        );
        assert_eq!(calls.len(), 5, "{calls:#?}");
    })
    .await;
}

#[tokio::test]
async fn a_refused_apply_is_deleted_and_reported_with_kubectls_words() {
    bounded(async {
        let fake = FakeK3s::new();
        let refusal = "The Service \"bench\" is invalid: spec.ports[0].nodePort: Invalid value: \
                       31883: provided port is already allocated";
        fake.fail("apply", refusal);
        let error = KubernetesDriver::new(fake.kubectl())
            .start(&spec("worker-1", 31883))
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
        assert!(error.to_string().contains(refusal), "{error}");
        let calls = fake.calls();
        assert_eq!(calls.len(), 3, "{calls:#?}");
        assert!(calls[2].starts_with("delete -f -"));
    })
    .await;
}

#[tokio::test]
async fn a_start_whose_cleanup_fails_says_the_broker_may_be_left() {
    bounded(async {
        let fake = FakeK3s::new();
        fake.fail(
            "apply",
            "Unable to connect to the server: dial tcp 198.18.0.1:6443: i/o timeout",
        );
        fake.fail("delete", "Unable to connect to the server");
        let error = KubernetesDriver::new(fake.kubectl())
            .start(&spec("worker-1", 31883))
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("may be left in the cluster"), "{text}");
        assert!(text.contains("i/o timeout"), "{text}");
    })
    .await;
}

#[tokio::test]
async fn an_unknown_node_is_refused_before_anything_is_applied() {
    bounded(async {
        let fake = FakeK3s::new();
        let error = KubernetesDriver::new(fake.kubectl())
            .start(&spec("ghost", 31883))
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument);
        assert!(
            error
                .to_string()
                .starts_with("kind.kubernetes.node: \"ghost\""),
            "{error}"
        );
        assert_eq!(fake.calls(), ["get node ghost -o json"]);
    })
    .await;
}

#[tokio::test]
async fn a_node_port_that_does_not_answer_mqtt_fails_the_start_and_deletes() {
    bounded(async {
        let fake = FakeK3s::new();
        // A port in the range with nothing behind it.
        let (pod, port) = broker_on_a_node_port().await;
        pod.stop().await.unwrap();
        let mut spec = spec("worker-1", port);
        spec.options.start_deadline = Some(Duration::from_secs(1));
        let error = KubernetesDriver::new(fake.kubectl())
            .start(&spec)
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::Unavailable);
        assert!(
            error.to_string().contains("does not answer MQTT"),
            "{error}"
        );
        let calls = fake.calls();
        assert!(
            calls.last().unwrap().starts_with("delete -f -"),
            "{calls:#?}"
        );
    })
    .await;
}

#[tokio::test]
async fn an_abandoned_start_deletes_what_it_applied() {
    bounded(async {
        let fake = FakeK3s::new();
        fake.set("rollout.sleep", "30");
        let driver = KubernetesDriver::new(fake.kubectl());
        let spec = spec("worker-1", 31883);
        // The caller goes away mid-rollout (a cancelled RPC drops the start future).
        let abandoned = tokio::time::timeout(Duration::from_secs(1), driver.start(&spec)).await;
        assert!(
            abandoned.is_err(),
            "the start was still waiting for the rollout"
        );
        let deleted = host::poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
            let calls = fake.calls();
            std::future::ready(
                if calls.iter().any(|call| call.starts_with("delete -f -")) {
                    host::Attempt::Done(())
                } else {
                    host::Attempt::Retry(calls)
                },
            )
        })
        .await;
        if let Err(calls) = deleted {
            panic!("{calls:#?}");
        }
        let calls = fake.calls();
        let delete = calls
            .iter()
            .position(|call| call.starts_with("delete -f -"))
            .unwrap();
        let (kinds, _) = kinds_and_secret(&fake.stdin_of(delete + 1));
        assert!(kinds.contains(&"NetworkPolicy".to_owned()), "{kinds:?}");
    })
    .await;
}

#[tokio::test]
async fn kubectl_missing_is_a_failed_precondition() {
    bounded(async {
        let driver = KubernetesDriver::new(Kubectl::k3s("/nonexistent/k3s", None));
        let error = driver.start(&spec("worker-1", 31883)).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::FailedPrecondition, "{error}");
        assert!(
            error
                .to_string()
                .contains("/nonexistent/k3s kubectl get node")
        );
    })
    .await;
}

#[test]
fn the_state_follows_the_deployments_ready_replicas() {
    let parse = |json: &str| serde_json::from_str::<Deployment>(json).unwrap();
    assert_eq!(
        state_of(&parse(super::fake_k3s::READY_DEPLOYMENT)),
        BrokerState::Running
    );
    let unready = parse(
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"bench"},
        "status":{"replicas":1,"unavailableReplicas":1,"conditions":[
          {"type":"Available","status":"False","reason":"MinimumReplicasUnavailable",
           "message":"Deployment does not have minimum availability."},
          {"type":"Progressing","status":"True","reason":"ReplicaSetUpdated"}]}}"#,
    );
    assert_eq!(
        state_of(&unready),
        BrokerState::Failed(
            "no ready replica: Available (MinimumReplicasUnavailable): Deployment does not \
             have minimum availability."
                .into()
        )
    );
}

#[tokio::test]
async fn the_registry_runs_kubernetes_brokers_and_offers_their_sampler() {
    bounded(async {
        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let brokers = Brokers::new(BrokersConfig {
            state_dir: fake.dir().join("state"),
            kubectl: fake.kubectl(),
            ..BrokersConfig::default()
        });
        let status = brokers.start(spec("worker-1", port)).await.unwrap();
        assert_eq!(status.state, BrokerState::Running);
        assert_eq!(status.pid, None);
        assert!(
            brokers.watched_pids().is_empty(),
            "no process to watch here"
        );
        let sampler = brokers.usage_sampler("bench").unwrap();
        assert!(sampler.sample().await.unwrap().is_some());

        // Its Deployment vanishes behind the agent's back: the status says so.
        fake.fail(
            "deployment.json",
            "Error from server (NotFound): deployments.apps \"bench\" not found",
        );
        let status = brokers.status("bench").await.unwrap();
        assert_eq!(
            status.state,
            BrokerState::Failed("its Deployment continuum/bench no longer exists".into())
        );
        assert!(brokers.stop_all().await.is_empty());
        assert!(brokers.usage_sampler("bench").is_none());
        pod.stop().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_registry_stop_deletes_the_secret_and_the_policy() {
    bounded(async {
        // Brokers::stop is what a broker lease that ran out calls (service/broker_leases.rs).
        let fake = FakeK3s::new();
        let (pod, port) = broker_on_a_node_port().await;
        let brokers = Brokers::new(BrokersConfig {
            state_dir: fake.dir().join("state"),
            kubectl: fake.kubectl(),
            ..BrokersConfig::default()
        });
        let mut spec = spec("worker-1", port);
        spec.kind = BrokerKind::Kubernetes {
            product: Product::VerneMq,
            node: "worker-1".into(),
            namespace: "continuum".into(),
            node_port: Some(port),
            on_every_node: false,
        };
        brokers.start(spec).await.unwrap();
        brokers.stop("bench").await.unwrap();
        let calls = fake.calls();
        let delete = calls
            .iter()
            .position(|call| call.starts_with("delete -f -"))
            .unwrap_or_else(|| panic!("no delete: {calls:#?}"));
        let (kinds, secret) = kinds_and_secret(&fake.stdin_of(delete + 1));
        assert!(kinds.contains(&"NetworkPolicy".to_owned()), "{kinds:?}");
        assert_eq!(
            secret.unwrap().metadata.name.as_deref(),
            Some("bench-secrets")
        );
        pod.stop().await.unwrap();
    })
    .await;
}
