//! Agents on a namespace testbed, driven by a client holding the controller's identity from
//! a node of its own: Info, Clock, Metrics, brokers (real Mosquitto and RabbitMQ on the
//! worker), RunLoad across nodes, security and bad input. Every test runs isolated in its own
//! network namespace (see `tests::netns`); traffic stays between the testbed's nodes.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use proto::client::connect_agent;
use proto::clock;
use proto::mtls::Credentials;
use proto::pki::{CertificateAuthority, IdentitySpec, Role};
use tests::agent_bed::{AGENTS, AgentBed, connect_when_ready, duration, run_load, workload};
use tests::pki::TestPki;
use tests::{isolated_netns_test, skip_unless_installed};
use tokio_stream::StreamExt;
use tonic::Code;

fn mosquitto_spec(name: &str, bind: &str, port: u32) -> pb::BrokerSpec {
    pb::BrokerSpec {
        name: name.to_string(),
        kind: Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
            product: pb::Product::Mosquitto.into(),
        })),
        bind: bind.to_string(),
        port,
        options: Default::default(),
    }
}

#[test]
fn agents_answer_info_and_clock_across_namespaces() {
    isolated_netns_test!();
    let bed = AgentBed::start().expect("testbed with agents");
    let controller = bed.credentials("controller").expect("controller identity");
    let addresses: Vec<(String, String)> = AGENTS
        .iter()
        .map(|a| ((*a).to_string(), bed.address(a)))
        .collect();
    bed.on_controller_node(|| async move {
        for (name, address) in &addresses {
            let mut client = connect_when_ready(address, &controller).await?;
            let info = client.info(pb::InfoRequest {}).await?.into_inner();
            assert_eq!(&info.name, name);
            assert_eq!(info.data_plane_interface, "eth0");
            assert!(info.cores > 0 && info.memory_bytes > 0, "{info:?}");
            assert!(
                !info.kernel.is_empty() && !info.agent_version.is_empty(),
                "{info:?}"
            );
            let netem = info
                .capabilities
                .as_ref()
                .and_then(|c| c.netem.clone())
                .context("netem capability")?;
            eprintln!(
                "{name}: {} {} kernel {}, netem: {netem:?}",
                info.arch, info.os, info.kernel
            );
            let offset = clock::measure(&mut client, 20).await?;
            eprintln!(
                "{name}: clock offset {} ns ± {} ns",
                offset.offset_ns, offset.error_bound_ns
            );
            // Namespaces share one clock: the true offset is 0 and must lie within the bound.
            assert!(
                offset.offset_ns.unsigned_abs() <= offset.error_bound_ns,
                "{offset:?}"
            );
            assert!(
                offset.error_bound_ns < 1_000_000,
                "bound under 1 ms: {offset:?}"
            );
        }
        Ok(())
    })
    .expect("controller session");
}

/// Mean CPU of the labelled process over the samples taken within `[from, to)` (Unix ns).
fn mean_cpu(samples: &[pb::MetricsSample], label: &str, from: u64, to: u64) -> Option<f64> {
    let values: Vec<f64> = samples
        .iter()
        .filter(|s| s.unix_ns >= from && s.unix_ns < to)
        .flat_map(|s| {
            s.processes
                .iter()
                .filter(|p| p.label == label && p.alive)
                .map(|p| p.cpu_percent)
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[test]
fn brokers_on_the_worker_carry_load_from_the_tester_and_show_in_metrics() {
    isolated_netns_test!();
    skip_unless_installed!(
        tests::mosquitto::MOSQUITTO_BINARY,
        tests::rabbitmq::RABBITMQ_SERVER
    );
    let bed = AgentBed::start().expect("testbed with agents");
    let controller = bed.credentials("controller").expect("controller identity");
    let (tester, headnode, worker) = (
        bed.address("tester"),
        bed.address("headnode"),
        bed.address("worker"),
    );
    let worker_ip = bed.testbed.node("worker").addr().to_string();
    bed.on_controller_node(|| async move {
        let mut tester = connect_when_ready(&tester, &controller).await?;
        let mut headnode = connect_when_ready(&headnode, &controller).await?;
        let mut worker = connect_when_ready(&worker, &controller).await?;

        // Mosquitto on the worker; starting it twice is a no-op.
        let spec = mosquitto_spec("mosquitto", &worker_ip, 1883);
        let started = worker
            .start_broker(pb::StartBrokerRequest {
                spec: Some(spec.clone()),
                lease: None,
            })
            .await?
            .into_inner();
        assert_eq!(started.state(), pb::BrokerState::Running, "{started:?}");
        assert_eq!(started.address, format!("{worker_ip}:1883"));
        assert!(started.pid > 0);
        let again = worker
            .start_broker(pb::StartBrokerRequest {
                spec: Some(spec),
                lease: None,
            })
            .await?
            .into_inner();
        assert_eq!(again.pid, started.pid, "an identical start is idempotent");

        // Watch the broker's CPU while the tester loads it, and for a while after.
        let mut metrics = worker
            .metrics(pb::MetricsRequest {
                interval: Some(duration(Duration::from_millis(250))),
                brokers: vec!["mosquitto".to_string()],
                samples: 0,
                ..Default::default()
            })
            .await?
            .into_inner();
        let (stop_collecting, mut stop) = tokio::sync::oneshot::channel::<()>();
        let collector = tokio::spawn(async move {
            let mut samples = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    sample = tokio::time::timeout_at(deadline, metrics.next()) => match sample {
                        Ok(Some(sample)) => samples.push(sample?),
                        _ => break,
                    },
                }
            }
            anyhow::Ok(samples)
        });
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let load_started = loadgen::clock::unix_now_ns();
        let spec = workload(&started.address, 20, 20_000)?;
        let result = run_load(
            &mut tester,
            pb::RunLoadRequest {
                spec: Some((&spec).into()),
                ..Default::default()
            },
        )
        .await?;
        let load_ended = loadgen::clock::unix_now_ns();
        let summary = loadgen::Summary::of(&result);
        eprintln!("{}", loadgen::output::render_table(&summary));
        assert_eq!(summary.published, 400_000);
        assert_eq!(
            summary.lost,
            Some(0),
            "QoS 0 on an uncongested broker loses nothing"
        );
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let after = loadgen::clock::unix_now_ns();
        let _ = stop_collecting.send(());
        let samples = collector.await??;
        let during = mean_cpu(&samples, "mosquitto", load_started, load_ended)
            .context("samples during the load")?;
        let idle = mean_cpu(&samples, "mosquitto", load_ended + 500_000_000, after)
            .context("samples after the load")?;
        eprintln!("mosquitto CPU: {during:.1} % during the load, {idle:.1} % after");
        assert!(
            during > 20.0 && during > idle * 4.0,
            "broker CPU rises during the load ({during:.1} %) and falls after ({idle:.1} %)"
        );

        // Publishers on the tester, subscribers on the headnode: one run across two agents,
        // started together at a barrier on each agent's own clock.
        let mut split = workload(&started.address, 10, 1_000)?;
        split.run_id = Some("split".to_string());
        split.pacing = loadgen::spec::Pacing::OpenLoop {
            interval: Duration::from_millis(20),
        };
        split.messages_per_publisher = 50;
        split.qos = loadgen::spec::Qos::AtLeastOnce;
        let offsets = (
            clock::measure(&mut tester, 10).await?,
            clock::measure(&mut headnode, 10).await?,
        );
        let origin = loadgen::clock::unix_now_ns();
        let part = |publishers: std::ops::Range<u32>,
                    subscribers: std::ops::Range<u32>,
                    offset: clock::ClockOffset| {
            let mut spec = split.clone();
            spec.shard = Some(loadgen::spec::Shard {
                publishers,
                subscribers,
            });
            pb::RunLoadRequest {
                spec: Some((&spec).into()),
                origin_unix_ns: offset.to_agent_clock(origin),
                start_at_ns: 3_000_000_000,
                labels: Default::default(),
            }
        };
        let (published, received) = tokio::join!(
            run_load(&mut tester, part(0..10, 0..0, offsets.0)),
            run_load(&mut headnode, part(0..0, 0..10, offsets.1)),
        );
        let mut merged = published?;
        merged.merge(&received?)?;
        let summary = loadgen::Summary::of(&merged);
        eprintln!("{}", loadgen::output::render_table(&summary));
        assert_eq!(
            (summary.published, summary.delivered_unique, summary.lost),
            (500, 500, Some(0))
        );
        assert!(
            summary.latency.min_us > 0.0 && summary.latency.p50_us < 20_000.0,
            "{:?}",
            summary.latency
        );
        assert!(
            summary.qos_violations.is_empty(),
            "{:?}",
            summary.qos_violations
        );

        let stopped = worker
            .stop_broker(pb::StopBrokerRequest {
                name: "mosquitto".into(),
            })
            .await?
            .into_inner();
        assert_eq!(stopped.state(), pb::BrokerState::Stopped);
        assert!(!host::is_running(started.pid), "mosquitto is gone");

        // RabbitMQ (MQTT plugin) on the worker carries the same load.
        let mut rabbit = mosquitto_spec("rabbitmq", &worker_ip, 1884);
        rabbit.kind = Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
            product: pb::Product::Rabbitmq.into(),
        }));
        let started = worker
            .start_broker(pb::StartBrokerRequest {
                spec: Some(rabbit),
                lease: None,
            })
            .await?
            .into_inner();
        assert_eq!(started.state(), pb::BrokerState::Running, "{started:?}");
        let mut spec = workload(&started.address, 5, 1_000)?;
        spec.qos = loadgen::spec::Qos::AtLeastOnce;
        let result = run_load(
            &mut tester,
            pb::RunLoadRequest {
                spec: Some((&spec).into()),
                ..Default::default()
            },
        )
        .await?;
        let summary = loadgen::Summary::of(&result);
        assert_eq!(
            (summary.published, summary.received, summary.lost),
            (5_000, 5_000, Some(0))
        );
        worker
            .stop_broker(pb::StopBrokerRequest {
                name: "rabbitmq".into(),
            })
            .await?;
        assert!(!host::is_running(started.pid), "rabbitmq is gone");
        Ok(())
    })
    .expect("controller session");
}

/// A client TLS config from the project's CA and an identity in `dir` (or none).
fn client_tls(ca_pem: &str, identity: Option<(&str, &str)>) -> tonic::transport::ClientTlsConfig {
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem));
    if let Some((cert, key)) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
    }
    tls
}

/// Calls Info with a hand-made TLS config; Err when the TLS layer refuses.
async fn info_with(address: &str, tls: tonic::transport::ClientTlsConfig) -> Result<pb::NodeInfo> {
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{address}"))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(AgentClient::new(channel)
        .info(pb::InfoRequest {})
        .await?
        .into_inner())
}

#[test]
fn only_the_controller_may_change_a_node_and_strangers_are_refused() {
    isolated_netns_test!();
    let bed = AgentBed::start().expect("testbed with agents");
    let pki = bed.pki.path().to_path_buf();
    let worker = bed.address("worker");
    bed.on_controller_node(|| async move {
        let controller = Credentials::load(&pki, "controller")?;
        connect_when_ready(&worker, &controller).await?;
        let ca_pem = std::fs::read_to_string(pki.join("ca.pem"))?;
        let read = |name: &str| std::fs::read_to_string(pki.join(name));

        // An agent identity may neither read nor change another node.
        let tester = Credentials::load(&pki, "tester")?;
        let mut as_agent = connect_agent(&worker, None, &tester).await?;
        let refused_read = as_agent
            .info(pb::InfoRequest {})
            .await
            .expect_err("an agent may not read another node");
        assert_eq!(
            refused_read.code(),
            Code::PermissionDenied,
            "{refused_read:?}"
        );
        let denied = as_agent
            .apply_netem(pb::ApplyNetemRequest {
                interface: "eth0".into(),
                netem: Some(pb::NetemSpec {
                    delay: Some(duration(Duration::from_millis(5))),
                    jitter: Some(duration(Duration::ZERO)),
                    ..Default::default()
                }),
                lease: Some(duration(Duration::from_secs(10))),
            })
            .await
            .expect_err("an agent may not apply netem");
        assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
        assert!(denied.message().contains("tester"), "{}", denied.message());

        // No client certificate: refused by TLS, no RPC runs.
        assert!(
            info_with(&worker, client_tls(&ca_pem, None)).await.is_err(),
            "no client cert"
        );
        // A certificate from another CA (even with the controller's name).
        let stranger_ca = TestPki::in_memory()?;
        let stranger = stranger_ca
            .ca()
            .issue(&IdentitySpec::new(Role::Controller, "controller"))?;
        assert!(
            info_with(
                &worker,
                client_tls(&ca_pem, Some((&stranger.cert_pem, &stranger.key_pem)))
            )
            .await
            .is_err(),
            "another CA"
        );
        // An expired certificate from the right CA.
        let ca = CertificateAuthority::load(&pki)?;
        let day = Duration::from_secs(86_400);
        let now = std::time::SystemTime::now();
        let expired = ca.issue(
            &IdentitySpec::new(Role::Controller, "controller")
                .valid_between(now - 10 * day, now - day),
        )?;
        assert!(
            info_with(
                &worker,
                client_tls(&ca_pem, Some((&expired.cert_pem, &expired.key_pem)))
            )
            .await
            .is_err(),
            "expired"
        );
        // The real controller identity, through the same hand-made path, is let in.
        let info = info_with(
            &worker,
            client_tls(
                &ca_pem,
                Some((&read("controller.pem")?, &read("controller.key")?)),
            ),
        )
        .await?;
        assert_eq!(info.name, "worker");
        Ok(())
    })
    .expect("controller session");
}

#[test]
fn bad_requests_are_invalid_arguments_and_change_nothing() {
    isolated_netns_test!();
    let bed = AgentBed::start().expect("testbed with agents");
    let controller = bed.credentials("controller").expect("controller identity");
    let worker = bed.address("worker");
    let worker_ip = bed.testbed.node("worker").addr().to_string();
    bed.on_controller_node(|| async move {
        let mut client = connect_when_ready(&worker, &controller).await?;
        let netem = |delay: prost_types::Duration, loss: f64| pb::NetemSpec {
            delay: Some(delay),
            jitter: Some(duration(Duration::ZERO)),
            loss_percent: loss,
            ..Default::default()
        };
        let apply = |interface: &str, spec: pb::NetemSpec| pb::ApplyNetemRequest {
            interface: interface.to_string(),
            netem: Some(spec),
            lease: Some(duration(Duration::from_secs(10))),
        };
        let refused = client
            .apply_netem(apply(
                "eth0",
                netem(duration(Duration::from_millis(5)), 150.0),
            ))
            .await
            .expect_err("loss 150 %");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused.message().starts_with("netem.loss"),
            "{}",
            refused.message()
        );
        let negative = prost_types::Duration {
            seconds: 0,
            nanos: -5_000_000,
        };
        let refused = client
            .apply_netem(apply("eth0", netem(negative, 0.0)))
            .await
            .expect_err("negative delay");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused.message().starts_with("netem.delay"),
            "{}",
            refused.message()
        );
        let refused = client
            .apply_netem(apply(
                "nope0",
                netem(duration(Duration::from_millis(5)), 0.0),
            ))
            .await
            .expect_err("no such interface");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(refused.message().contains("nope0"), "{}", refused.message());
        let mut unknown = mosquitto_spec("mystery", &worker_ip, 1883);
        unknown.kind = Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
            product: 42,
        }));
        let refused = client
            .start_broker(pb::StartBrokerRequest {
                spec: Some(unknown),
                lease: None,
            })
            .await
            .expect_err("unknown product");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused.message().starts_with("spec.kind.native.product"),
            "{}",
            refused.message()
        );

        // Nothing changed: no qdisc, no broker.
        let state = client
            .read_netem(pb::ReadNetemRequest {
                interface: "eth0".into(),
            })
            .await?
            .into_inner();
        assert!(!state.present, "{state:?}");
        let missing = client
            .get_broker(pb::GetBrokerRequest {
                name: "mystery".into(),
            })
            .await
            .expect_err("never started");
        assert_eq!(missing.code(), Code::NotFound);

        // A valid request on a node whose kernel has no netem: a clear FailedPrecondition,
        // never a silent success.
        let info = client.info(pb::InfoRequest {}).await?.into_inner();
        let available = info
            .capabilities
            .and_then(|c| c.netem)
            .is_some_and(|c| c.available);
        let outcome = client
            .apply_netem(apply(
                "eth0",
                netem(duration(Duration::from_millis(5)), 0.0),
            ))
            .await;
        match (available, outcome) {
            (false, Err(status)) => {
                assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
                assert!(status.message().contains("netem"), "{}", status.message());
            }
            (true, Ok(state)) => assert!(state.into_inner().present),
            (available, outcome) => bail!("netem available: {available}, apply gave {outcome:?}"),
        }
        Ok(())
    })
    .expect("controller session");
}

#[test]
fn sigterm_stops_the_brokers_an_agent_started() {
    isolated_netns_test!();
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let mut bed = AgentBed::start().expect("testbed with agents");
    let controller = bed.credentials("controller").expect("controller identity");
    let worker = bed.address("worker");
    let worker_ip = bed.testbed.node("worker").addr().to_string();
    let broker_pid = bed
        .on_controller_node(|| async move {
            let mut client = connect_when_ready(&worker, &controller).await?;
            let status = client
                .start_broker(pb::StartBrokerRequest {
                    spec: Some(mosquitto_spec("m", &worker_ip, 1883)),
                    lease: None,
                })
                .await?
                .into_inner();
            assert_eq!(status.state(), pb::BrokerState::Running);
            Ok(status.pid)
        })
        .expect("controller session");
    assert!(host::is_running(broker_pid));
    bed.terminate_agents(Duration::from_secs(30))
        .expect("agents stop cleanly on SIGTERM");
    assert!(
        !host::is_running(broker_pid),
        "the agent stopped its broker on SIGTERM"
    );
}
