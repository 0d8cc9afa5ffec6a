//! Real Nebula (Debian's 1.6) between agents in namespace nodes, installed through the
//! InstallOverlay RPC: a lighthouse on the headnode, members on the tester and the worker,
//! certificates made by the real `nebula-cert`. Then MQTT over the overlay (a broker bound to
//! the worker's overlay address, load from the tester), proven to cross the tunnel by the tun
//! device's byte counters, and uninstall leaving no device, process or file behind.
//!
//! Overlay addresses come from 198.18.0.0/15 like every testbed address, and only travel
//! between the testbed's own namespaces.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use tests::agent_bed::nebula::{
    NEBULA, NEBULA_CERT, TUN, in_node, nebula_section, overlay_ip, overlay_network,
    processes_mentioning, tun_addresses, tun_bytes,
};
use tests::agent_bed::{AGENTS, AgentBed, connect_when_ready, duration, run_load, workload};
use tests::{isolated_netns_test, skip_unless_installed};
use tonic::Code;
use tonic::transport::Channel;

const NEBULA_PORT: u32 = 4242;
/// Bounds one RPC, install included (tun deadline 20 s + reachability timeout).
const RPC_LIMIT: Duration = Duration::from_secs(90);
/// The agents' reachability timeout: handshakes through the lighthouse take a few seconds.
const REACH_TIMEOUT: Duration = Duration::from_secs(45);

fn install_request(
    net: [u8; 3],
    agent: &str,
    headnode_underlay: Ipv4Addr,
    check: &[&str],
) -> pb::InstallOverlayRequest {
    let lighthouse = agent == "headnode";
    pb::InstallOverlayRequest {
        lighthouse,
        overlay_cidr: format!("{}/24", overlay_ip(net, agent)),
        lighthouses: if lighthouse {
            Vec::new()
        } else {
            vec![pb::OverlayLighthouse {
                overlay_ip: overlay_ip(net, "headnode").to_string(),
                underlay_address: format!("{headnode_underlay}:{NEBULA_PORT}"),
            }]
        },
        listen_port: NEBULA_PORT,
        interface: String::new(),
        check_reachable: check
            .iter()
            .map(|peer| overlay_ip(net, peer).to_string())
            .collect(),
        timeout: Some(duration(REACH_TIMEOUT)),
    }
}

async fn install(
    client: &mut AgentClient<Channel>,
    request: pb::InstallOverlayRequest,
) -> Result<pb::OverlayStatus, tonic::Status> {
    match tokio::time::timeout(RPC_LIMIT, client.install_overlay(request)).await {
        Ok(result) => result.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded(
            "InstallOverlay took too long",
        )),
    }
}

async fn uninstall(client: &mut AgentClient<Channel>) -> Result<pb::OverlayStatus> {
    let call = client.uninstall_overlay(pb::UninstallOverlayRequest {});
    Ok(tokio::time::timeout(RPC_LIMIT, call)
        .await
        .context("UninstallOverlay took too long")??
        .into_inner())
}

fn assert_all_reachable(agent: &str, status: &pb::OverlayStatus, expected: usize) {
    assert_eq!(status.peers.len(), expected, "{agent}: {status:?}");
    for peer in &status.peers {
        eprintln!("{agent} -> {}: {}", peer.overlay_ip, peer.detail);
        assert!(peer.reachable, "{agent}: {peer:?}");
        assert!(peer.detail.contains("round trip"), "{peer:?}");
    }
}

#[test]
fn nebula_overlay_carries_mqtt_between_agents_and_leaves_nothing_behind() {
    isolated_netns_test!();
    skip_unless_installed!(NEBULA, NEBULA_CERT);
    let nebula_pki = tempfile::tempdir().expect("temp dir");
    let bed = AgentBed::start_with("nebula", |testbed, agent| {
        nebula_section(nebula_pki.path(), overlay_network(testbed), agent)
    })
    .expect("testbed with agents");
    let net = overlay_network(&bed.testbed);
    let controller = bed.credentials("controller").expect("controller identity");
    let headnode_underlay = bed.testbed.node("headnode").addr();
    let (bed, nebula_pki) = (&bed, &nebula_pki);
    let node = |agent: &str| bed.testbed.node(agent);
    let state = |agent: &str| bed.state_dir(agent).join("nebula");
    let pki_path = bed.pki.path().display().to_string();

    bed.on_controller_node(|| async move {
        let mut clients = Vec::new();
        for agent in AGENTS {
            clients.push(connect_when_ready(&bed.address(agent), &controller).await?);
        }
        let [tester, headnode, worker] = &mut clients[..] else {
            bail!("three agents");
        };

        // Bad input: refused naming the field, before anything starts.
        let mut bad = install_request(net, "worker", headnode_underlay, &["headnode"]);
        bad.lighthouses.push(pb::OverlayLighthouse {
            overlay_ip: overlay_ip(net, "tester").to_string(),
            underlay_address: "198.18.0.9".into(),
        });
        let refused = install(worker, bad).await.expect_err("no port");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused
                .message()
                .starts_with("lighthouses[1].underlay_address"),
            "{}",
            refused.message()
        );
        let mut bad = install_request(net, "worker", headnode_underlay, &["headnode"]);
        bad.check_reachable = vec!["198.19.0.x".into()];
        let refused = install(worker, bad).await.expect_err("bad peer");
        assert!(
            refused.message().starts_with("check_reachable[0]"),
            "{}",
            refused.message()
        );
        let mut bad = install_request(net, "worker", headnode_underlay, &[]);
        bad.lighthouses.clear();
        let refused = install(worker, bad)
            .await
            .expect_err("member without lighthouse");
        assert!(
            refused.message().starts_with("lighthouses:"),
            "{}",
            refused.message()
        );
        let mut bad = install_request(net, "headnode", headnode_underlay, &[]);
        bad.interface = "far-too-long-a-name".into();
        let refused = install(headnode, bad).await.expect_err("bad interface");
        assert!(
            refused.message().starts_with("interface"),
            "{}",
            refused.message()
        );
        for agent in AGENTS {
            assert!(!state(agent).exists(), "{agent}: nothing written");
            assert_eq!(tun_addresses(node(agent)), None, "{agent}: no tun");
        }
        assert!(
            processes_mentioning(&pki_path)
                .iter()
                .all(|pid| { bed.agents.iter().any(|(_, agent)| agent.id() == *pid) }),
            "only the agents run"
        );

        // The lighthouse, then both members at once, each checking the two others.
        let lighthouse = install(
            headnode,
            install_request(net, "headnode", headnode_underlay, &[]),
        )
        .await?;
        eprintln!("headnode: {lighthouse:?}");
        assert!(lighthouse.running && lighthouse.pid > 0, "{lighthouse:?}");
        assert_eq!(lighthouse.detail, "started");
        assert_eq!(lighthouse.interface, TUN);
        assert_eq!(
            lighthouse.overlay_cidr,
            format!("{}/24", overlay_ip(net, "headnode"))
        );
        let started = std::time::Instant::now();
        let (on_tester, on_worker) = tokio::join!(
            install(
                tester,
                install_request(net, "tester", headnode_underlay, &["headnode", "worker"])
            ),
            install(
                worker,
                install_request(net, "worker", headnode_underlay, &["headnode", "tester"])
            ),
        );
        let (on_tester, on_worker) = (on_tester?, on_worker?);
        eprintln!("members up and checked in {:?}", started.elapsed());
        assert_all_reachable("tester", &on_tester, 2);
        assert_all_reachable("worker", &on_worker, 2);
        for agent in AGENTS {
            let shown = tun_addresses(node(agent)).context("tun device")?;
            assert!(
                shown.contains(&format!("{}/24", overlay_ip(net, agent))),
                "{agent}: {shown}"
            );
            let config = state(agent).join("config.yml");
            let mode =
                std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&config)?.permissions());
            assert_eq!(mode & 0o777, 0o600, "{agent}: the config names the key");
        }

        // The same request again restarts nothing; the lighthouse reaches both members too.
        let again = install(
            headnode,
            install_request(net, "headnode", headnode_underlay, &[]),
        )
        .await?;
        assert_eq!(
            (again.detail.as_str(), again.pid),
            ("already running", lighthouse.pid)
        );
        let checked = install(
            headnode,
            install_request(net, "headnode", headnode_underlay, &["tester", "worker"]),
        )
        .await?;
        assert_eq!(
            (checked.detail.as_str(), checked.pid),
            ("already running", lighthouse.pid)
        );
        assert_all_reachable("headnode", &checked, 2);

        // A peer that is not there: an error naming it, Nebula left running as it was.
        let mut ghost = install_request(net, "tester", headnode_underlay, &[]);
        let ghost_ip = Ipv4Addr::new(net[0], net[1], net[2], 99).to_string();
        ghost.check_reachable = vec![ghost_ip.clone()];
        ghost.timeout = Some(duration(Duration::from_secs(3)));
        let failed = install(tester, ghost).await.expect_err("nobody at .99");
        eprintln!(
            "unreachable peer: {}",
            failed.message().lines().next().unwrap_or_default()
        );
        assert!(failed.message().contains(&ghost_ip), "{}", failed.message());
        assert_eq!(
            failed.code(),
            Code::Unavailable,
            "worth retrying, not an internal fault"
        );
        let same = install(
            tester,
            install_request(net, "tester", headnode_underlay, &[]),
        )
        .await?;
        assert_eq!(
            (same.detail.as_str(), same.pid),
            ("already running", on_tester.pid)
        );

        // Another configuration (a new UDP port) restarts the member, which reaches its
        // peers again through fresh handshakes.
        let mut moved = install_request(net, "tester", headnode_underlay, &["headnode", "worker"]);
        moved.listen_port = NEBULA_PORT + 1;
        let restarted = install(tester, moved).await?;
        eprintln!("tester: {}", restarted.detail);
        assert!(restarted.detail.starts_with("restarted"), "{restarted:?}");
        assert_ne!(restarted.pid, on_tester.pid);
        assert!(!host::is_running(on_tester.pid), "the old nebula is gone");
        assert_all_reachable("tester", &restarted, 2);

        // MQTT over the overlay: the broker listens on the worker's overlay address only.
        let worker_overlay = overlay_ip(net, "worker").to_string();
        let broker = worker
            .start_broker(pb::StartBrokerRequest {
                spec: Some(pb::BrokerSpec {
                    name: "overlay".into(),
                    kind: Some(pb::broker_spec::Kind::Embedded(pb::EmbeddedBroker {})),
                    bind: worker_overlay.clone(),
                    port: 1883,
                    options: Default::default(),
                }),
                lease: None,
            })
            .await?
            .into_inner();
        assert_eq!(broker.state(), pb::BrokerState::Running, "{broker:?}");
        assert_eq!(broker.address, format!("{worker_overlay}:1883"));
        let before = tun_bytes(node("worker"))?;
        let mut spec = workload(&broker.address, 10, 500)?;
        spec.payload = loadgen::size::ByteSize(1024);
        let result = tokio::time::timeout(
            RPC_LIMIT,
            run_load(
                tester,
                pb::RunLoadRequest {
                    spec: Some((&spec).into()),
                    ..Default::default()
                },
            ),
        )
        .await
        .context("RunLoad took too long")??;
        let after = tun_bytes(node("worker"))?;
        let summary = loadgen::Summary::of(&result);
        eprintln!("{}", loadgen::output::render_table(&summary));
        assert_eq!(
            (summary.published, summary.delivered_unique, summary.lost),
            (5_000, 5_000, Some(0))
        );
        let payload_bytes = 5_000 * 1024;
        let (rx, tx) = (
            after.0.saturating_sub(before.0),
            after.1.saturating_sub(before.1),
        );
        eprintln!("worker {TUN}: rx +{rx} B, tx +{tx} B for {payload_bytes} B of payload each way");
        assert!(
            rx >= payload_bytes && tx >= payload_bytes,
            "rx {rx}, tx {tx}"
        );
        worker
            .stop_broker(pb::StopBrokerRequest {
                name: "overlay".into(),
            })
            .await?;

        // Uninstall: no device, no process, no file; then "not installed".
        let pids = [restarted.pid, lighthouse.pid, on_worker.pid];
        for ((agent, client), pid) in AGENTS
            .iter()
            .zip([&mut *tester, &mut *headnode, &mut *worker])
            .zip(pids)
        {
            let removed = uninstall(client).await?;
            eprintln!("{agent}: {}", removed.detail);
            assert!(!removed.running);
            assert!(
                removed
                    .detail
                    .contains(&format!("stopped nebula (pid {pid})")),
                "{removed:?}"
            );
            assert!(!host::is_running(pid), "{agent}: nebula {pid} is gone");
            assert_eq!(tun_addresses(node(agent)), None, "{agent}: tun gone");
            assert!(!state(agent).exists(), "{agent}: state removed");
            assert!(
                nebula_pki.path().join(format!("{agent}.key")).exists(),
                "bootstrap's files stay"
            );
            assert_eq!(uninstall(client).await?.detail, "not installed");
        }
        let left: Vec<u32> = processes_mentioning(&pki_path)
            .into_iter()
            .filter(|pid| !bed.agents.iter().any(|(_, agent)| agent.id() == *pid))
            .collect();
        assert!(left.is_empty(), "processes left: {left:?}");
        Ok(())
    })
    .expect("controller session");
}

/// Also: the same request restarts Nebula when what it runs on is not what was asked for
/// although its config text is unchanged (the tun lost its address; a re-issued certificate).
#[test]
fn a_certificate_for_another_address_leaves_nothing_and_sigterm_stops_nebula() {
    isolated_netns_test!();
    skip_unless_installed!(NEBULA, NEBULA_CERT);
    let nebula_pki = tempfile::tempdir().expect("temp dir");
    let mut bed = AgentBed::start_with("nebula-stop", |testbed, agent| {
        nebula_section(nebula_pki.path(), overlay_network(testbed), agent)
    })
    .expect("testbed with agents");
    let net = overlay_network(&bed.testbed);
    let controller = bed.credentials("controller").expect("controller identity");
    let headnode_underlay = bed.testbed.node("headnode").addr();
    let state = bed.state_dir("headnode").join("nebula");
    let pid = {
        let bed = &bed;
        let state = &state;
        let nebula_pki = &nebula_pki;
        bed.on_controller_node(|| async move {
            let mut headnode = connect_when_ready(&bed.address("headnode"), &controller).await?;
            // The request says .5, the certificate was made for .1: refused once the tun
            // shows the certificate's address, and nothing is left.
            let mut wrong = install_request(net, "headnode", headnode_underlay, &[]);
            wrong.overlay_cidr = format!("{}.{}.{}.5/24", net[0], net[1], net[2]);
            let refused = install(&mut headnode, wrong)
                .await
                .expect_err("wrong address");
            eprintln!("{}", refused.message().lines().next().unwrap_or_default());
            let actual = format!("{}/24", overlay_ip(net, "headnode"));
            assert!(refused.message().contains(&actual), "{}", refused.message());
            assert!(!state.exists(), "nothing half-installed");
            assert_eq!(tun_addresses(bed.testbed.node("headnode")), None);

            let request = || install_request(net, "headnode", headnode_underlay, &[]);
            let status = install(&mut headnode, request()).await?;
            assert_eq!(status.detail, "started");

            // The tun lost its address behind Nebula's back: "already running" would be a
            // lie, so the same request restarts it and says why.
            let node = bed.testbed.node("headnode");
            in_node(
                node,
                tests::netns::IP_BINARY,
                &["addr", "del", &actual, "dev", TUN],
            )?;
            let again = install(&mut headnode, request()).await?;
            eprintln!("tun without its address: {}", again.detail);
            assert!(
                again.detail.starts_with(&format!(
                    "restarted: nebula (pid {}) ran this configuration but {TUN} did not \
                     carry {actual}",
                    status.pid
                )),
                "{}",
                again.detail
            );
            assert_ne!(again.pid, status.pid);
            assert!(!host::is_running(status.pid));
            let shown = tun_addresses(node).context("tun device")?;
            assert!(shown.contains(&actual), "{shown}");

            // A re-issued certificate and key at the same paths: the YAML is unchanged, the
            // Nebula running it is not what bootstrap now provides.
            for old in ["headnode.crt", "headnode.key"] {
                std::fs::remove_file(nebula_pki.path().join(old))?;
            }
            nebula_section(nebula_pki.path(), net, "headnode")?;
            let reissued = install(&mut headnode, request()).await?;
            eprintln!("re-issued certificate: {}", reissued.detail);
            assert!(
                reissued
                    .detail
                    .starts_with("restarted with a new configuration"),
                "{}",
                reissued.detail
            );
            assert_ne!(reissued.pid, again.pid);
            let same = install(&mut headnode, request()).await?;
            assert_eq!(
                (same.detail.as_str(), same.pid),
                ("already running", reissued.pid)
            );
            Ok(reissued.pid)
        })
        .expect("controller session")
    };
    assert!(host::is_running(pid));
    bed.terminate_agents(Duration::from_secs(30))
        .expect("agents stop cleanly on SIGTERM");
    assert!(
        !host::is_running(pid),
        "the agent stopped its nebula child on SIGTERM"
    );
    assert_eq!(tun_addresses(bed.testbed.node("headnode")), None);
}
