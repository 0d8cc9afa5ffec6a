//! Tests of the native driver: failures before and during a start, and (where the product is
//! installed) real Mosquitto and RabbitMQ brokers started, probed and stopped.

use super::*;
use crate::broker::ErrorCode;
use crate::broker::readiness::{PROBE_TIMEOUT, probe, probe_as};
use crate::broker::test_support::{
    installed_or_skip, loopback_spec, running_in_ci, tagged_processes,
};
use domain::{BrokerOptions, QuicDelivery};
use host::is_running;
use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn starting_a_product_that_is_not_installed_fails_before_touching_the_node() {
    let state = tempfile::tempdir().unwrap();
    let install = InstallPaths {
        hivemq: vec!["/nonexistent/hivemq/bin/run.sh".into()],
        ..InstallPaths::default()
    };
    let driver = NativeDriver::new(install, state.path().to_owned());
    let spec = BrokerSpec {
        name: "hive".into(),
        kind: BrokerKind::Native {
            product: Product::HiveMq,
        },
        bind: "127.0.0.1".parse().unwrap(),
        port: 0,
        options: BrokerOptions::default(),
    };
    let error = driver.start(&spec).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::FailedPrecondition);
    assert!(
        error.to_string().contains("/nonexistent/hivemq/bin/run.sh"),
        "{error}"
    );
    assert!(!state.path().join("hive").exists());
}

fn fake_mosquitto(program: &Path, state: &Path) -> NativeDriver {
    let install = InstallPaths {
        mosquitto: vec![program.to_owned()],
        ..InstallPaths::default()
    };
    NativeDriver::new(install, state.to_owned())
}

fn mosquitto_spec(name: &str) -> BrokerSpec {
    loopback_spec(
        name,
        BrokerKind::Native {
            product: Product::Mosquitto,
        },
    )
}

#[tokio::test]
async fn a_broker_that_exits_is_unavailable_with_its_log() {
    let state = tempfile::tempdir().unwrap();
    // `sh -c <config path>` tries to run the config file: "Permission denied", exit 126.
    let driver = fake_mosquitto(Path::new("/bin/sh"), state.path());
    let started = std::time::Instant::now();
    let error = driver.start(&mosquitto_spec("exits")).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no waiting for the deadline"
    );
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    let BrokerError::NotReady {
        reason, log_tail, ..
    } = &error
    else {
        panic!("{error}");
    };
    assert!(
        reason.starts_with("mosquitto exited (exit status: 126)"),
        "{reason}"
    );
    assert!(log_tail.contains("Permission denied"), "{log_tail}");
}

#[tokio::test]
async fn a_broker_that_never_answers_fails_at_its_deadline_and_is_cleaned_up() {
    let state = tempfile::tempdir().unwrap();
    let script = state.path().join("silent-broker");
    std::fs::write(
        &script,
        "#!/bin/sh\necho booting\nsleep 60 &\nexec sleep 60\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let driver = fake_mosquitto(&script, &state.path().join("state"));
    let mut spec = mosquitto_spec("silent");
    spec.options.start_deadline = Some(Duration::from_millis(800));
    let started = std::time::Instant::now();
    let error = driver.start(&spec).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bounded by deadline and stop"
    );
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    let text = error.to_string();
    assert!(text.contains("within 800ms"), "{text}");
    assert!(text.contains("booting"), "the log tail is quoted: {text}");
    assert_eq!(
        tagged_processes("silent"),
        Vec::<u32>::new(),
        "the script and its background child are gone"
    );
}

#[tokio::test]
async fn a_probe_answered_by_a_listener_the_broker_does_not_own_fails_the_start() {
    // The "broker" starts a real Mosquitto without its marker (as if another program held
    // the port), then only sleeps: probes are answered, but not by the broker's processes.
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::Mosquitto) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let script = state.path().join("borrowing-broker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nenv -u {} {} -c \"$2\" &\nexec sleep 60\n",
            crate::MARKER_VAR,
            recipes::mosquitto::PROGRAMS[0]
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let driver = fake_mosquitto(&script, &state.path().join("state"));
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        driver.start(&mosquitto_spec("borrowed")),
    )
    .await
    .expect("start is bounded")
    .unwrap_err();
    assert_eq!(error.code(), ErrorCode::Unavailable, "{error}");
    assert!(
        error
            .to_string()
            .contains("none of its processes listens on port"),
        "{error}"
    );
    assert_eq!(tagged_processes("borrowed"), Vec::<u32>::new());
}

#[tokio::test]
async fn each_missing_product_is_a_failed_precondition_naming_its_paths() {
    let state = tempfile::tempdir().unwrap();
    for product in [Product::Emqx, Product::VerneMq, Product::HiveMq] {
        let missing = format!("/nonexistent/{product}/bin/start");
        let install = InstallPaths {
            emqx: vec![missing.clone().into()],
            vernemq: vec![missing.clone().into()],
            hivemq: vec![missing.clone().into()],
            ..InstallPaths::default()
        };
        let driver = NativeDriver::new(install, state.path().to_owned());
        let spec = loopback_spec("other", BrokerKind::Native { product });
        let error = driver.start(&spec).await.unwrap_err();
        assert_eq!(
            error.code(),
            ErrorCode::FailedPrecondition,
            "{product}: {error}"
        );
        assert!(error.to_string().contains(&missing), "{error}");
    }
}

#[tokio::test]
async fn a_real_mosquitto_starts_answers_and_stops_without_leftovers() {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::Mosquitto) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let spec = loopback_spec(
        "mosq",
        BrokerKind::Native {
            product: Product::Mosquitto,
        },
    );
    let mut broker = tokio::time::timeout(Duration::from_secs(30), driver.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let address = broker.address();
    assert_ne!(address.port(), 0, "port 0 is resolved");
    let pid = broker.pid().unwrap();
    assert!(is_running(pid));
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "mosquitto"
    );
    assert_eq!(broker.check().await, BrokerState::Running);
    probe(address, PROBE_TIMEOUT).await.unwrap();
    let detail = broker.detail();
    assert!(
        detail.starts_with("mosquitto ")
            && detail.chars().nth(10).is_some_and(|c| c.is_ascii_digit()),
        "the version from its log: {detail}"
    );

    // The same port again is refused before anything is spawned.
    let mut again = spec.clone();
    again.name = "mosq2".into();
    again.port = address.port();
    let error = driver.start(&again).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");

    let config = std::fs::read_to_string(state.path().join("mosq/mosquitto.conf")).unwrap();
    assert!(config.contains(&format!("listener {} 127.0.0.1", address.port())));

    tokio::time::timeout(Duration::from_secs(30), broker.stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    assert!(!is_running(pid), "mosquitto {pid} still runs");
    assert!(probe(address, PROBE_TIMEOUT).await.is_err());
    assert_eq!(tagged_processes("mosq"), Vec::<u32>::new());
}

/// `product` on loopback with a WebSocket listener beside its MQTT one: both answer CONNECT
/// (the WebSocket one inside an upgrade asking for `mqtt`), on distinct ports.
async fn a_websocket_listener_answers_mqtt(product: Product, deadline: Duration) {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, product) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    // Named for the product: a test run in one process (`cargo test`) runs several at once.
    let name = format!("ws-{product}");
    let mut spec = loopback_spec(&name, BrokerKind::Native { product });
    spec.options.websocket_port = Some(0);
    let broker = tokio::time::timeout(deadline, driver.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let websocket = broker.websocket_address().expect("a WebSocket address");
    assert_ne!(websocket.port(), 0);
    assert_ne!(websocket.port(), broker.address().port());
    assert!(websocket.ip().is_loopback(), "{websocket}");
    probe(broker.address(), PROBE_TIMEOUT).await.unwrap();
    let path = recipes::websocket_path(product).unwrap();
    websocket_probe::probe(websocket, path, PROBE_TIMEOUT)
        .await
        .unwrap();
    tokio::time::timeout(deadline, broker.stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    assert!(
        websocket_probe::probe(websocket, path, PROBE_TIMEOUT)
            .await
            .is_err()
    );
    assert_eq!(tagged_processes(&name), Vec::<u32>::new());
}

#[tokio::test]
async fn a_real_mosquitto_opens_a_websocket_listener_that_answers_mqtt() {
    a_websocket_listener_answers_mqtt(Product::Mosquitto, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_real_mqttv5_opens_a_websocket_listener_that_answers_mqtt() {
    a_websocket_listener_answers_mqtt(Product::Mqttv5, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_real_rmqtt_opens_a_websocket_listener_that_answers_mqtt() {
    a_websocket_listener_answers_mqtt(Product::Rmqtt, Duration::from_secs(30)).await;
}

/// rmqtt's engine without `rmqttd`: no gRPC, HTTP API or cluster port, only MQTT.
#[tokio::test]
async fn a_real_rmqtt_listens_only_on_its_mqtt_port_says_its_version_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::Rmqtt,
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test]
async fn an_rmqtt_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::Rmqtt).await;
}

/// `product` on loopback: it answers MQTT, says its version, its processes listen on its
/// MQTT port and nothing else (no dashboard, cluster or QUIC port), and a stop leaves none.
async fn a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
    product: Product,
    deadline: Duration,
) {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, product) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let name = format!("only-{product}");
    let spec = loopback_spec(&name, BrokerKind::Native { product });
    let mut broker = tokio::time::timeout(deadline, driver.start_native(&spec, product))
        .await
        .expect("start is bounded")
        .unwrap();
    let address = broker.address();
    let login = recipes::anonymous_login(product);
    probe_as(address, PROBE_TIMEOUT, login).await.unwrap();
    assert_eq!(broker.check().await, BrokerState::Running);
    let listening = broker.listening();
    assert_eq!(
        listening,
        [sockets::Listening {
            transport: sockets::Transport::Tcp,
            address,
        }],
        "{product} listens where its recipe did not ask"
    );
    let detail = broker.detail();
    let version = detail
        .strip_prefix(&format!("{product} "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default();
    assert!(
        version.starts_with(|c: char| c.is_ascii_digit()) && version.contains('.'),
        "no version in {detail:?}"
    );
    eprintln!("{product}: {detail}; listening on {listening:?}");
    let pid = broker.pid().unwrap();
    tokio::time::timeout(deadline, Box::new(broker).stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    assert!(!is_running(pid), "{product} {pid} still runs");
    assert!(probe_as(address, PROBE_TIMEOUT, login).await.is_err());
    assert_eq!(tagged_processes(&name), Vec::<u32>::new());
}

#[tokio::test]
async fn a_real_mqttv5_listens_only_on_its_mqtt_port_says_its_version_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::Mqttv5,
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test]
async fn a_real_aedes_listens_only_on_its_mqtt_port_says_its_version_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::Aedes,
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test]
async fn a_real_amqtt_listens_only_on_its_mqtt_port_says_its_version_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::Amqtt,
        Duration::from_secs(40),
    )
    .await;
}

#[tokio::test]
async fn a_real_amqtt_opens_a_websocket_listener_that_answers_mqtt() {
    a_websocket_listener_answers_mqtt(Product::Amqtt, Duration::from_secs(40)).await;
}

#[tokio::test]
async fn a_real_aedes_opens_a_websocket_listener_that_answers_mqtt() {
    a_websocket_listener_answers_mqtt(Product::Aedes, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_real_mosquitto_listens_only_on_its_mqtt_port_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::Mosquitto,
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test]
async fn a_real_rabbitmq_opens_its_web_mqtt_listener_that_answers_mqtt() {
    a_websocket_listener_answers_mqtt(Product::RabbitMq, Duration::from_secs(90)).await;
}

/// mqttv5 with a QUIC listener beside its TCP one: the start waits for a CONNACK over
/// QUIC, and a client trusting the CA the agent reports connects to it; after the stop the
/// listener is gone.
#[tokio::test]
async fn a_real_mqttv5_opens_a_quic_listener_with_a_certificate_the_agent_made() {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::Mqttv5) {
        return;
    }
    let deadline = Duration::from_secs(30);
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let mut spec = loopback_spec(
        "quic-mqttv5",
        BrokerKind::Native {
            product: Product::Mqttv5,
        },
    );
    spec.options.quic_port = Some(0);
    let broker = tokio::time::timeout(deadline, driver.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let quic = broker.quic_endpoint().expect("a QUIC listener");
    assert_ne!(quic.address.port(), 0);
    assert!(quic.address.ip().is_loopback(), "{}", quic.address);
    super::quic_listener::probe(quic.address, &quic.ca_pem, PROBE_TIMEOUT)
        .await
        .expect("CONNACK over QUIC");
    // Another CA is not trusted: the certificate is checked, not just any accepted.
    // Its key is the broker's alone.
    let key = state.path().join("quic-mqttv5/quic/key.pem");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o400, "{}", key.display());
    let other =
        super::quic_listener::make_certificate(Path::new("/unused"), &[quic.address.ip()]).unwrap();
    let refused = super::quic_listener::probe(quic.address, &other.ca_pem, PROBE_TIMEOUT).await;
    assert!(refused.is_err(), "{refused:?}");
    tokio::time::timeout(deadline, broker.stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    let gone = super::quic_listener::probe(quic.address, &quic.ca_pem, PROBE_TIMEOUT).await;
    assert!(gone.is_err(), "{gone:?}");
    assert_eq!(tagged_processes("quic-mqttv5"), Vec::<u32>::new());
}

#[tokio::test]
async fn a_quic_listener_a_recipe_cannot_open_is_refused_before_anything_starts() {
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(InstallPaths::default(), state.path().to_owned());
    let mut spec = loopback_spec(
        "mosq",
        BrokerKind::Native {
            product: Product::Mosquitto,
        },
    );
    spec.options.quic_port = Some(0);
    let error = driver.start(&spec).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
    assert!(
        error
            .to_string()
            .starts_with("options.quic_port: \"0\" mosquitto: it serves no MQTT over QUIC"),
        "{error}"
    );
    assert!(!state.path().join("mosq").exists());
}

#[tokio::test]
async fn a_quic_delivery_on_streams_of_the_brokers_own_is_mqttv5s_alone() {
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(InstallPaths::default(), state.path().to_owned());
    let refused = |product, quic_port| {
        let mut spec = loopback_spec("quic", BrokerKind::Native { product });
        spec.options.quic_port = quic_port;
        spec.options.quic_delivery = QuicDelivery::PerTopic;
        spec
    };
    for (spec, expected) in [
        (
            refused(Product::Emqx, Some(0)),
            "options.quic_delivery: \"per_topic\" emqx: only the mqttv5 broker delivers on QUIC \
             streams it opens",
        ),
        (
            refused(Product::Mqttv5, None),
            "options.quic_delivery: \"per_topic\" mqttv5: needs a QUIC listener \
             (options.quic_port)",
        ),
    ] {
        let error = driver.start(&spec).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
        assert_eq!(error.to_string(), expected);
        assert!(!state.path().join("quic").exists());
    }
}

#[tokio::test]
async fn a_websocket_listener_a_recipe_cannot_open_is_refused_before_anything_starts() {
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(InstallPaths::default(), state.path().to_owned());
    let mut spec = loopback_spec(
        "emqx",
        BrokerKind::Native {
            product: Product::Emqx,
        },
    );
    spec.options.websocket_port = Some(0);
    let error = driver.start(&spec).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
    assert!(
        error
            .to_string()
            .starts_with("options.websocket_port: \"0\" emqx: "),
        "{error}"
    );
    assert!(!state.path().join("emqx").exists());
}

#[tokio::test]
async fn a_broker_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::Mosquitto).await;
}

#[tokio::test]
async fn an_mqttv5_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::Mqttv5).await;
}

#[tokio::test]
async fn an_activemq_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::ActiveMq).await;
}

#[tokio::test]
async fn a_real_activemq_listens_only_on_its_mqtt_port_says_its_version_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::ActiveMq,
        Duration::from_secs(90),
    )
    .await;
}

#[tokio::test]
async fn an_ejabberd_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::Ejabberd).await;
}

/// ejabberd's Erlang VM runs without distribution: no epmd, no distribution port, only MQTT.
#[tokio::test]
async fn a_real_ejabberd_listens_only_on_its_mqtt_port_says_its_version_and_stops_clean() {
    a_real_broker_listens_only_on_its_mqtt_port_and_stops_clean(
        Product::Ejabberd,
        Duration::from_secs(60),
    )
    .await;
}

#[tokio::test]
async fn an_amqtt_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::Amqtt).await;
}

#[tokio::test]
async fn an_aedes_left_by_an_agent_that_died_is_stopped_by_the_next_one() {
    a_broker_left_behind_is_stopped_by_the_next_agent(Product::Aedes).await;
}

async fn a_broker_left_behind_is_stopped_by_the_next_agent(product: Product) {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, product) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let first = NativeDriver::new(install.clone(), state.path().to_owned());
    let name = format!("orphan-{product}");
    let spec = loopback_spec(&name, BrokerKind::Native { product });
    // A JVM takes longest to start; its own deadline (60 s) is what bounds it.
    let broker = tokio::time::timeout(Duration::from_secs(90), first.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let (pid, address) = (broker.pid().unwrap(), broker.address());
    // The agent dies: nothing of it runs on the way out, neither a stop nor a drop.
    std::mem::forget(broker);
    drop(first);
    assert!(is_running(pid), "the broker outlived its agent");

    let next = NativeDriver::new(install, state.path().to_owned());
    let stopped = tokio::time::timeout(Duration::from_secs(30), next.stop_leftovers())
        .await
        .expect("the sweep is bounded");
    assert_eq!(stopped, std::slice::from_ref(&name));
    assert!(!is_running(pid), "{product} {pid} still runs");
    assert!(
        probe_as(address, PROBE_TIMEOUT, recipes::anonymous_login(product))
            .await
            .is_err()
    );
    assert_eq!(tagged_processes(&name), Vec::<u32>::new());
    // Its marker is gone: a further start of an agent finds nothing to stop.
    assert!(next.stop_leftovers().await.is_empty());
}

#[tokio::test]
async fn a_real_rabbitmq_node_starts_answers_and_stops_with_its_epmd() {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::RabbitMq) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let spec = loopback_spec(
        "rabbit",
        BrokerKind::Native {
            product: Product::RabbitMq,
        },
    );
    let mut broker = tokio::time::timeout(Duration::from_secs(90), driver.start(&spec))
        .await
        .expect("start is bounded")
        .unwrap();
    let pid = broker.pid().unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "beam.smp",
        "the watched PID is the Erlang VM"
    );
    assert_eq!(broker.check().await, BrokerState::Running);
    probe(broker.address(), PROBE_TIMEOUT).await.unwrap();
    let detail = broker.detail();
    assert!(
        !detail.contains("version not in its log"),
        "the version from its log: {detail}"
    );
    let tagged = tagged_processes("rabbit");
    assert!(
        tagged.len() >= 3,
        "script, VM and epmd are tagged: {tagged:?}"
    );

    tokio::time::timeout(Duration::from_secs(90), broker.stop())
        .await
        .expect("stop is bounded")
        .unwrap();
    assert!(!is_running(pid));
    assert_eq!(
        tagged_processes("rabbit"),
        Vec::<u32>::new(),
        "epmd and helpers are gone too"
    );
}

/// RabbitMQ logs `eaddrinuse` when its MQTT port was taken after the driver chose it, and may
/// keep its VM up (as in a CI run that waited 60 s for it). The start must give up on that line
/// rather than wait out the deadline, and call it a taken port (so a start on any port
/// retries) although the stop buries the line.
#[tokio::test]
async fn a_rabbitmq_whose_port_was_taken_meanwhile_is_a_taken_port_not_a_timeout() {
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::RabbitMq) {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let driver = NativeDriver::new(install, state.path().to_owned());
    let spec = loopback_spec(
        "rabbit-taken",
        BrokerKind::Native {
            product: Product::RabbitMq,
        },
    );
    let claim = claim_port(spec.bind, 0).unwrap();
    // Another program takes the port between the choice and the broker's bind.
    let _taker = std::net::TcpListener::bind((spec.bind, claim.port())).unwrap();
    let dir = driver.fresh_dir(&spec.name).unwrap();
    let secret = host::secret::random_hex(32).unwrap();
    let context = PlanContext {
        spec: &spec,
        dir: &dir,
        port: claim.port(),
        secret: &secret,
        websocket: None,
        quic: None,
    };
    let plan = plan(Product::RabbitMq, &driver.install, &context).unwrap();
    let deadline = plan.ready_deadline;
    let launched = tokio::time::timeout(
        deadline + Duration::from_secs(60),
        launch(&context, Product::RabbitMq, plan, new_marker(&spec.name)),
    )
    .await
    .expect("the launch is bounded");
    let error = match launched {
        Err(Launch::PortTaken(error)) => error,
        Err(Launch::Failed(error)) => panic!("not seen as a taken port: {error}"),
        Ok(_) => panic!("RabbitMQ cannot have started on a port held by the test"),
    };
    let reason = match &error {
        BrokerError::NotReady { reason, .. } => reason.clone(),
        other => panic!("expected NotReady, got {other}"),
    };
    // RabbitMQ either stays up (then the start gives up on the logged line after its grace)
    // or stops by itself meanwhile; either way the start did not wait out its deadline.
    assert!(
        reason.contains("logged \"eaddrinuse\"") || reason.contains("exited"),
        "gave up on the logged line or the exit, not at the deadline: {reason}"
    );
    assert_eq!(
        tagged_processes(&spec.name),
        Vec::<u32>::new(),
        "the failed start left nothing running"
    );
}

/// VerneMQ is not installed here, but the Erlang it runs on is (with RabbitMQ): its runner's
/// way of starting the VM is replayed with `erl`, the runner's generated `vm.args` holding the
/// stock cookie, and the plan's own arguments, environment, private files and user.
#[tokio::test]
async fn vernemq_runs_on_its_random_cookie_not_the_installed_one() {
    let erl = Path::new("/usr/bin/erl");
    if !erl.exists() {
        assert!(!running_in_ci(), "CI installs Erlang with RabbitMQ");
        eprintln!("SKIPPED: no {}", erl.display());
        return;
    }
    let state = tempfile::tempdir().unwrap();
    // Reachable by the service user, as the agent's state folder is.
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = state.path().join("v");
    std::fs::create_dir(&dir).unwrap();
    let secret = host::secret::random_hex(32).unwrap();
    let options = BrokerOptions::default();
    let instance = Instance {
        name: "v",
        dir: &dir,
        listen: "127.0.0.1:1883".parse().unwrap(),
        options: &options,
        secret: &secret,
        quic: None,
        websocket: None,
    };
    let plan = recipes::vernemq::native(Path::new("/usr/sbin/vernemq"), &instance);
    // No VerneMQ user here: `nobody` stands in for it, so the switch and the ownership are real.
    let account = Account::is_root().then(|| Account::lookup("nobody").unwrap().unwrap());
    for (path, text) in &plan.private_files {
        write_private(path, text, account).unwrap();
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o400);
        if let Some(account) = account {
            use std::os::unix::fs::MetadataExt;
            assert_eq!((meta.uid(), meta.gid()), (account.uid, account.gid));
        }
    }
    let vm_args = state.path().join("vm.args");
    std::fs::write(&vm_args, "-name VerneMQ@127.0.0.1\n-setcookie vmq\n").unwrap();
    let runner_args = &plan.main.args[plan
        .main
        .args
        .iter()
        .position(|arg| arg == "-kernel")
        .unwrap()..];
    let mut line = CommandLine::new(erl);
    line.args = ["-noshell", "-args_file", &vm_args.display().to_string()]
        .into_iter()
        .map(str::to_owned)
        .chain(runner_args.iter().cloned())
        // Distribution up without a listener or epmd, so the cookie is read but no port opens.
        .chain(
            [
                "-start_epmd",
                "false",
                "-dist_listen",
                "false",
                "-eval",
                "io:format(\"cookie=~s~n\", [erlang:get_cookie()]), halt().",
            ]
            .map(str::to_owned),
        )
        .collect();
    line.env = plan.main.env.clone();
    line.env_remove_prefixes = plan.main.env_remove_prefixes.clone();
    line.account = account;
    let marker = crate::new_marker("cookie");
    let (status, output) = run_bounded(&line, &marker, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(status.success(), "{output}");
    assert!(
        output
            .lines()
            .any(|line| line == format!("cookie={secret}")),
        "the VM did not run on the instance's cookie: {output}"
    );
}

/// Keys of `ours` missing from `theirs`, as dotted paths (objects compared key by key).
fn keys_missing(ours: &serde_json::Value, theirs: &serde_json::Value, at: &str) -> Vec<String> {
    let (Some(ours), Some(theirs)) = (ours.as_object(), theirs.as_object()) else {
        return Vec::new();
    };
    ours.iter()
        .flat_map(|(key, value)| {
            let path = format!("{at}{key}");
            match theirs.get(key) {
                None => vec![path],
                Some(known) => keys_missing(value, known, &format!("{path}.")),
            }
        })
        .collect()
}

#[tokio::test]
async fn every_key_of_the_mqttv5_config_is_one_the_installed_broker_knows() {
    // The library ignores unknown keys, so a misspelt or renamed one would silently keep
    // its default: each key is checked against the full config the program prints.
    let install = InstallPaths::default();
    if !installed_or_skip(&install, Product::Mqttv5) {
        return;
    }
    let program = InstallPaths::locate(Product::Mqttv5, &install.mqttv5).unwrap();
    let mut command = CommandLine::new(&program);
    command.args = vec!["broker".into(), "generate-config".into()];
    let marker = crate::new_marker("keys");
    let (status, output) = run_bounded(&command, &marker, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(status.success(), "{output}");
    let start = output.find('{').expect("a JSON object");
    let end = output.rfind('}').expect("a JSON object");
    let theirs: serde_json::Value = serde_json::from_str(&output[start..=end]).unwrap();
    let ours = recipes::mqttv5::config(
        &BrokerOptions::default(),
        "127.0.0.1:1883".parse().unwrap(),
        Some("127.0.0.1:8080".parse().unwrap()),
    );
    assert_eq!(keys_missing(&ours, &theirs, ""), Vec::<String>::new());
    // And the check sees a key the broker does not know, however deep.
    let misspelt =
        serde_json::json!({"storage_config": {"backend": "Memory", "enable_persistance": false}});
    assert_eq!(
        keys_missing(&misspelt, &theirs, ""),
        ["storage_config.enable_persistance"]
    );
}
