//! The k3s installer (phase 3 of the study) against a fake `k3s` executable.
//!
//! k3s itself cannot run here: it cannot be downloaded (no network to get.k3s.io or GitHub),
//! and it needs root, a kernel with overlayfs and netfilter, and normally systemd as PID 1,
//! none of which these tests have. So `k3s` below is a shell script (`fixtures/k3s/fake-k3s.sh`)
//! that appends one JSON line per call (its argv and every `K3S_*` variable of its
//! environment) to `calls.jsonl`, and plays k3s's part: `server` writes the kubeconfig and
//! registers its node a moment later, `agent` joins only with the server's token, both stay up
//! until SIGTERM, and `kubectl get nodes -o json` lists the nodes registered so far (so Ready
//! appears only once a server is up). Beside it lie fake `k3s-killall.sh`,
//! `k3s-uninstall.sh` and `k3s-agent-uninstall.sh` that only record their call.
//!
//! Everything else is real: the installer code, the processes it starts and stops, the
//! files it writes, `/proc`. No root and no network are needed; every k3s runs as a child
//! (systemd's unit path is checked by the unit tests beside the code).

use std::os::unix::fs::PermissionsExt;

use agent::install::InstallError;
use agent::install::k3s::{K3s, Supervision};
use proto::agent::v1 as pb;

/// What k3s leaves behind: pods, a killed agent's k3s, host debris; and shutdown.
#[path = "fixtures/k3s/leftovers.rs"]
mod leftovers;
#[path = "fixtures/k3s/support.rs"]
mod support;
use support::{Fake, Identity, Node, ServedAgent, alive, assert_empty, node_named, path, within};

const TOKEN: &str = "K10f00d::server:Zq7vX3pL";
/// The secret part of [`TOKEN`]: it must never appear in argv, logs or errors.
const SECRET: &str = "Zq7vX3pL";
const SERVER_URL: &str = "https://127.0.0.1:6443";
const TAINT: &str = "node-role.kubernetes.io/control-plane=true:NoSchedule";

#[tokio::test(flavor = "multi_thread")]
async fn k3s_server_then_agent_join_and_uninstall_leaves_nothing() {
    let fake = Fake::new();
    let head = Node::new(&fake, "headnode");
    let worker = Node::new(&fake, "worker");

    // The server: started, and listed Ready with its labels and taint.
    let server = within(head.k3s.install(server_request()))
        .await
        .expect("server up");
    eprintln!("server install: {}", server.detail);
    assert!(server.running && server.role == "server", "{server:?}");
    assert!(
        server.detail.contains("started k3s server"),
        "{}",
        server.detail
    );
    assert!(alive(server.pid));
    let me = node_named(&server, "headnode");
    assert!(me.ready && me.internal_ip == "127.0.0.1", "{me:?}");
    assert_eq!(me.labels["continuum.io/role"], "headnode");
    assert_eq!(me.labels["topology.kubernetes.io/zone"], "edge");
    assert_eq!(me.taints, [TAINT]);
    let started = fake.daemon_calls();
    assert_eq!(started.len(), 1, "{started:?}");
    let call = &started[0];
    assert_eq!(call.argv[0], "server");
    assert_eq!(call.values("--data-dir"), [path(&head.data_dir())]);
    assert_eq!(
        call.values("--write-kubeconfig"),
        [path(&head.kubeconfig())]
    );
    assert_eq!(call.values("--write-kubeconfig-mode"), ["0600"]);
    assert_eq!(call.values("--node-name"), ["headnode"]);
    assert_eq!(call.values("--node-ip"), ["127.0.0.1"]);
    assert_eq!(call.values("--advertise-address"), ["127.0.0.1"]);
    assert_eq!(call.values("--flannel-iface"), ["lo"]);
    assert_eq!(
        call.values("--node-label"),
        [
            "continuum.io/role=headnode",
            "topology.kubernetes.io/zone=edge"
        ]
    );
    assert_eq!(call.values("--node-taint"), [TAINT]);
    assert_eq!(call.values("--disable"), ["traefik"]);
    // The token only in the environment; the world-readable command line never has it.
    assert_eq!(call.env.get("K3S_TOKEN").map(String::as_str), Some(TOKEN));
    assert!(!call.env.contains_key("K3S_URL"));
    assert!(call.argv.iter().all(|a| !a.contains(SECRET)));
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid)).expect("cmdline");
    assert!(!String::from_utf8_lossy(&cmdline).contains(SECRET));
    let remembered = head.state.path().join("cluster/request.json");
    let mode = std::fs::metadata(&remembered)
        .expect("remembered")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the remembered request holds the token"
    );

    // The agent: joins through the environment, after the server.
    let joined = within(worker.k3s.install(agent_request(TOKEN)))
        .await
        .expect("agent up");
    assert!(
        joined.running && joined.role == "agent" && alive(joined.pid),
        "{joined:?}"
    );
    // An agent's own process cannot tell whether it joined: the status says so.
    assert!(
        joined.detail.contains("started k3s agent")
            && joined
                .detail
                .ends_with("; joining is verified by the server's node list"),
        "{}",
        joined.detail
    );
    let started = fake.daemon_calls();
    assert_eq!(started.len(), 2, "{started:?}");
    let call = &started[1];
    assert_eq!(
        call.argv[0], "agent",
        "server first, then agent: {started:?}"
    );
    assert_eq!(
        call.env.get("K3S_URL").map(String::as_str),
        Some(SERVER_URL)
    );
    assert_eq!(call.env.get("K3S_TOKEN").map(String::as_str), Some(TOKEN));
    assert!(
        call.argv
            .iter()
            .all(|a| !a.contains(SECRET) && !a.contains("6443"))
    );
    assert_eq!(
        call.values("--node-label"),
        ["continuum.io/role=worker", "site=lab"]
    );
    assert_eq!(call.values("--data-dir"), [path(&worker.data_dir())]);
    for server_only in [
        "--node-taint",
        "--disable",
        "--write-kubeconfig",
        "--advertise-address",
    ] {
        assert!(
            call.values(server_only).is_empty(),
            "{server_only}: {call:?}"
        );
    }

    // The same requests again: nothing restarted, nothing invoked (the server only reads
    // the node list, which now holds the worker too).
    let calls = fake.calls().len();
    let again = within(worker.k3s.install(agent_request(TOKEN)))
        .await
        .expect("again");
    assert!(again.detail.contains("already running"), "{}", again.detail);
    assert_eq!(again.pid, joined.pid);
    assert_eq!(
        fake.calls().len(),
        calls,
        "an identical agent request invokes nothing"
    );
    let again = within(head.k3s.install(server_request()))
        .await
        .expect("again");
    assert!(
        again.detail.contains("nothing restarted"),
        "{}",
        again.detail
    );
    assert_eq!(again.pid, server.pid);
    assert_eq!(fake.daemon_calls().len(), 2, "no k3s started again");
    let worker_node = node_named(&again, "worker");
    assert!(worker_node.ready && worker_node.labels["continuum.io/role"] == "worker");
    assert!(worker_node.taints.is_empty());

    // Uninstall: the uninstall steps in order, then nothing left.
    let calls = fake.calls().len();
    let gone = within(worker.k3s.uninstall())
        .await
        .expect("agent uninstalled");
    assert!(!gone.running && gone.role == "agent", "{gone:?}");
    assert_eq!(
        fake.programs_since(calls),
        ["k3s-killall.sh", "k3s-agent-uninstall.sh"]
    );
    assert!(!alive(joined.pid));
    assert_empty(worker.state.path());
    let calls = fake.calls().len();
    let gone = within(head.k3s.uninstall())
        .await
        .expect("server uninstalled");
    eprintln!("server uninstall: {}", gone.detail);
    assert!(
        gone.detail.starts_with("uninstalled: stopped k3s server"),
        "{}",
        gone.detail
    );
    assert_eq!(
        fake.programs_since(calls),
        ["k3s-killall.sh", "k3s-uninstall.sh"]
    );
    assert!(!alive(server.pid));
    assert_empty(head.state.path());
    for node in [&head, &worker] {
        let calls = fake.calls().len();
        let twice = within(node.k3s.uninstall()).await.expect("idempotent");
        assert_eq!(twice.detail, "not installed");
        assert_eq!(fake.calls().len(), calls);
    }
    fake.assert_no_process_left(&[server.pid, joined.pid]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_request_restarts_k3s_and_says_what_changed() {
    let fake = Fake::new();
    let head = Node::new(&fake, "headnode");
    let first = within(head.k3s.install(server_request()))
        .await
        .expect("server up");
    let mut changed = server_request();
    changed.role = Some(pb::install_cluster_request::Role::Server(pb::K3sServer {
        schedule_workloads: true,
    }));
    changed.labels.insert("site".into(), "lab".into());
    let second = within(head.k3s.install(changed)).await.expect("restarted");
    eprintln!("changed request: {}", second.detail);
    assert!(
        second.detail.starts_with(
            "the request changed (role.server.schedule_workloads, labels); stopped k3s server"
        ),
        "{}",
        second.detail
    );
    assert!(second.pid != first.pid && alive(second.pid) && !alive(first.pid));
    let started = fake.daemon_calls();
    assert_eq!(started.len(), 2);
    assert!(
        started[1].values("--node-taint").is_empty(),
        "workloads allowed now"
    );
    assert!(started[1].values("--node-label").contains(&"site=lab"));
    assert!(node_named(&second, "headnode").taints.is_empty());
    within(head.k3s.uninstall()).await.expect("uninstalled");
    fake.assert_no_process_left(&[first.pid, second.pid]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_k3s_input_is_refused_naming_the_field_and_nothing_runs() {
    let fake = Fake::new();
    let head = Node::new(&fake, "headnode");
    let spoilt: Vec<(&str, pb::InstallClusterRequest)> = vec![
        (
            "token",
            pb::InstallClusterRequest {
                token: String::new(),
                ..server_request()
            },
        ),
        (
            "token",
            pb::InstallClusterRequest {
                token: "has space".into(),
                ..server_request()
            },
        ),
        (
            "node_ip",
            pb::InstallClusterRequest {
                node_ip: "headnode".into(),
                ..server_request()
            },
        ),
        (
            "flannel_interface",
            pb::InstallClusterRequest {
                flannel_interface: "x".repeat(16),
                ..server_request()
            },
        ),
        ("role.agent.server_url", {
            let mut request = agent_request(TOKEN);
            request.role = Some(pb::install_cluster_request::Role::Agent(pb::K3sAgent {
                server_url: "http://127.0.0.1:6443".into(),
            }));
            request
        }),
        ("labels[\"bad label\"]", {
            let mut request = server_request();
            request.labels.insert("bad label".into(), "x".into());
            request
        }),
        (
            "role",
            pb::InstallClusterRequest {
                role: None,
                ..server_request()
            },
        ),
    ];
    for (field, request) in spoilt {
        let token = request.token.clone();
        match within(head.k3s.install(request)).await {
            Err(InstallError::Invalid {
                field: named,
                problem,
            }) => {
                assert_eq!(named, field, "{problem}");
                assert!(
                    token.is_empty() || !problem.contains(&token),
                    "the token is never echoed: {problem}"
                );
            }
            other => panic!("{field}: expected a refusal, got {other:?}"),
        }
    }
    assert!(
        fake.calls().is_empty(),
        "nothing invoked: {:?}",
        fake.calls()
    );
    assert_empty(head.state.path());

    let missing = Node::with_binary("headnode", &fake.dir.path().join("no/k3s"));
    match within(missing.k3s.install(server_request())).await {
        Err(InstallError::Missing(message)) => {
            assert!(message.contains("no/k3s"), "{message}");
            assert!(
                message.contains("get.k3s.io") && message.contains("offline"),
                "{message}"
            );
        }
        other => panic!("expected Missing, got {other:?}"),
    }
    assert_empty(missing.state.path());
}

#[tokio::test(flavor = "multi_thread")]
async fn k3s_that_exits_at_start_is_reported_with_its_log() {
    let fake = Fake::new();
    let head = Node::new(&fake, "headnode");
    // Real k3s exits when flannel's interface does not exist; so does the fake.
    let request = pb::InstallClusterRequest {
        flannel_interface: "nosuch0".into(),
        ..server_request()
    };
    match within(head.k3s.install(request)).await {
        Err(InstallError::Failed(message)) => {
            assert!(
                message.contains("stopped before node headnode was Ready"),
                "{message}"
            );
            assert!(
                message.contains("unable to find interface nosuch0"),
                "{message}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let server = within(head.k3s.install(server_request()))
        .await
        .expect("server up");
    // An agent with the wrong token: the fake, like k3s, refuses to join.
    let worker = Node::new(&fake, "worker");
    let wrong = "K10f00d::server:wrong-token";
    match within(worker.k3s.install(agent_request(wrong))).await {
        Err(InstallError::Failed(message)) => {
            eprintln!("wrong token: {message}");
            assert!(message.contains("k3s agent did not stay up"), "{message}");
            assert!(message.contains("token does not match"), "{message}");
            assert!(
                !message.contains(wrong),
                "the token is never echoed: {message}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    for node in [&worker, &head] {
        within(node.k3s.uninstall()).await.expect("uninstalled");
        assert_empty(node.state.path());
    }
    fake.assert_no_process_left(&[server.pid]);
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_shutdown_stops_the_k3s_child_and_the_same_request_starts_it_again() {
    let fake = Fake::new();
    let head = Node::new(&fake, "headnode");
    let first = within(head.k3s.install(server_request()))
        .await
        .expect("server up");
    within(head.k3s.shutdown()).await;
    assert!(!alive(first.pid), "a child does not outlive the agent");
    // A new agent process on the same node: same configuration, same request.
    let restarted = K3s::with_supervision(&head.config, Supervision::Child);
    let second = within(restarted.install(server_request()))
        .await
        .expect("started again");
    assert!(
        second.detail.starts_with("k3s server was not running"),
        "{}",
        second.detail
    );
    assert!(alive(second.pid));
    within(restarted.uninstall()).await.expect("uninstalled");
    assert_empty(head.state.path());
    fake.assert_no_process_left(&[first.pid, second.pid]);
}

/// The same through the agent's gRPC service (in-process on loopback, real mTLS): only the
/// controller may install, and errors arrive as statuses naming the field.
#[tokio::test(flavor = "multi_thread")]
async fn k3s_install_through_the_grpc_service() {
    if agent::install::use_systemd() {
        eprintln!("skipped: systemd runs this namespace, so the service would write real units");
        return;
    }
    let fake = Fake::new();
    let head = Node::new(&fake, "headnode");
    let agent = ServedAgent::start(head.config.clone()).await;
    let mut controller = agent.client(Identity::Controller).await;
    let status = within(controller.install_cluster(server_request()))
        .await
        .expect("installed")
        .into_inner();
    assert!(node_named(&status, "headnode").ready, "{status:?}");
    let mut bad = server_request();
    bad.node_ip = "999.1.1.1".into();
    let refused = within(controller.install_cluster(bad))
        .await
        .expect_err("bad node_ip");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().starts_with("node_ip:"),
        "{}",
        refused.message()
    );
    let mut other = agent.client(Identity::Agent).await;
    let denied = within(other.uninstall_cluster(pb::UninstallClusterRequest {}))
        .await
        .expect_err("an agent identity may not uninstall");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    let gone = within(controller.uninstall_cluster(pb::UninstallClusterRequest {}))
        .await
        .expect("uninstalled")
        .into_inner();
    assert!(gone.detail.starts_with("uninstalled"), "{}", gone.detail);
    agent.stop().await;
    assert_empty(head.state.path());
    fake.assert_no_process_left(&[status.pid]);
}

pub(crate) fn server_request() -> pb::InstallClusterRequest {
    pb::InstallClusterRequest {
        role: Some(pb::install_cluster_request::Role::Server(pb::K3sServer {
            schedule_workloads: false,
        })),
        token: TOKEN.into(),
        node_ip: "127.0.0.1".into(),
        // The fake, like k3s, checks that flannel's interface exists; lo always does.
        flannel_interface: "lo".into(),
        node_name: String::new(),
        labels: [(
            "topology.kubernetes.io/zone".to_string(),
            "edge".to_string(),
        )]
        .into(),
        timeout: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
    }
}

fn agent_request(token: &str) -> pb::InstallClusterRequest {
    pb::InstallClusterRequest {
        role: Some(pb::install_cluster_request::Role::Agent(pb::K3sAgent {
            server_url: SERVER_URL.into(),
        })),
        token: token.into(),
        node_ip: "127.0.0.2".into(),
        flannel_interface: "lo".into(),
        node_name: "worker".into(),
        labels: [("site".to_string(), "lab".to_string())].into(),
        timeout: None,
    }
}
