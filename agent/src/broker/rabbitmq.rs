//! RabbitMQ with its MQTT plugin, as a node private to one instance.
//!
//! Nothing is shared with a system RabbitMQ: node name, data and log directories, config,
//! enabled-plugins file, Erlang cookie (`HOME`) and every port (AMQP, Erlang distribution,
//! epmd) belong to the instance. The agent runs the node's epmd itself, in the foreground on
//! its own port, and kills it by PID: an epmd that Erlang starts with `-daemon` would outlive
//! `rabbitmqctl stop`. The environment and config mirror the test harness's
//! `tests/src/rabbitmq.rs` and `tests/src/rabbitmq_env.rs`, with two differences: the MQTT
//! listener binds the spec's address, and the state directory is the agent's.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::error::BrokerError;
use super::install::InstallPaths;
use super::native::{Helper, LaunchPlan, PlanContext};
use super::ports::free_loopback_ports;
use domain::Product;
use host::CommandLine;

/// A cold first boot takes about 11 s on a 2-core machine.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// Largest message RabbitMQ accepts, stated so that 1 MB+ payloads are allowed on purpose
/// (3.10's MQTT plugin has no limit of its own; this is rabbit's default of 128 MiB).
pub const MAX_MESSAGE_SIZE: u32 = 134_217_728;

/// The private loopback ports of one node, besides its MQTT listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PrivatePorts {
    amqp: u16,
    dist: u16,
    epmd: u16,
}

/// The plan for one RabbitMQ node.
pub fn plan(install: &InstallPaths, context: &PlanContext<'_>) -> Result<LaunchPlan, BrokerError> {
    let server = InstallPaths::locate(Product::RabbitMq, &install.rabbitmq_server)?;
    let ctl = InstallPaths::locate(Product::RabbitMq, &install.rabbitmqctl)?;
    let epmd = InstallPaths::locate(Product::RabbitMq, &install.epmd)?;
    let [amqp, dist, epmd_port] = free_loopback_ports(3)?[..] else {
        return Err(BrokerError::io(
            "choosing RabbitMQ's private ports",
            std::io::Error::other("expected three ports"),
        ));
    };
    let ports = PrivatePorts {
        amqp,
        dist,
        epmd: epmd_port,
    };
    let node = format!("continuum-{}@localhost", context.spec.name);
    let env = instance_env(context.dir, &node, ports);

    let mut main = CommandLine::new(server);
    main.env = env.clone();
    main.env_remove_prefixes = vec!["RABBITMQ_", "ERL_"];

    let mut epmd_line = CommandLine::new(epmd);
    epmd_line.args = vec![
        "-port".into(),
        ports.epmd.to_string(),
        "-address".into(),
        Ipv4Addr::LOCALHOST.to_string(),
    ];
    epmd_line.env = env.clone();
    epmd_line.env_remove_prefixes = main.env_remove_prefixes.clone();

    let mut stop = CommandLine::new(ctl);
    stop.args = vec!["-n".into(), node, "stop".into()];
    stop.env = env;
    stop.env_remove_prefixes = main.env_remove_prefixes.clone();

    let inflight = context.spec.options.max_inflight_messages;
    Ok(LaunchPlan {
        product: Product::RabbitMq,
        listen: context.listen(),
        files: files(context.dir, context.spec.bind, context.port, inflight),
        helpers: vec![Helper {
            what: "epmd",
            command: epmd_line,
            listens_on: SocketAddr::from((Ipv4Addr::LOCALHOST, ports.epmd)),
        }],
        main,
        stop: Some(stop),
        ready_deadline: context.spec.options.start_deadline_or(START_DEADLINE),
        // The start script waits on the Erlang VM, which does the work.
        main_process_names: &["beam.smp"],
        port_taken_markers: &["eaddrinuse"],
    })
}

/// The config, the enabled-plugins file, an empty env file (so the system's
/// `/etc/rabbitmq/rabbitmq-env.conf` is not read) and an inetrc (no DNS).
fn files(
    dir: &Path,
    bind: IpAddr,
    port: u16,
    inflight: Option<u16>,
) -> Vec<(std::path::PathBuf, String)> {
    let config = settings(&format!("{bind}:{port}"), "", inflight);
    [
        ("rabbitmq.conf", config),
        ("enabled_plugins", "[rabbitmq_mqtt].\n".to_owned()),
        ("rabbitmq-env.conf", String::new()),
        (
            "inetrc",
            "{lookup, [file]}.\n{host, {127,0,0,1}, [\"localhost\"]}.\n".to_owned(),
        ),
    ]
    .into_iter()
    .map(|(name, text)| (dir.join(name), text))
    .collect()
}

/// `rabbitmq.conf` for a benchmark: the MQTT listener at `listener` (`host:port`, or a port),
/// anonymous clients as guest, messages up to [`MAX_MESSAGE_SIZE`]; `extra` lines go before
/// the logging ones. Shared by the native driver and the kubernetes manifests.
pub(super) fn settings(listener: &str, extra: &str, inflight: Option<u16>) -> String {
    let mut config = format!(
        "\
# Written by the Continuum agent.
# MQTT clients are anonymous and mapped to guest, and arrive from other nodes.
loopback_users = none
mqtt.listeners.tcp.default = {listener}
mqtt.allow_anonymous = true
mqtt.default_user = guest
mqtt.default_pass = guest
mqtt.vhost = /
mqtt.exchange = amq.topic
max_message_size = {MAX_MESSAGE_SIZE}
# A nearly full disk must not block publishers mid-benchmark.
disk_free_limit.absolute = 1MB
{extra}log.console = true
log.console.level = info
"
    );
    if let Some(inflight) = inflight {
        // The MQTT plugin's bound on unacknowledged deliveries per subscriber.
        config.push_str(&format!("mqtt.prefetch = {inflight}\n"));
    }
    config
}

/// The environment that makes every RabbitMQ and Erlang tool act on this instance only.
fn instance_env(dir: &Path, node: &str, ports: PrivatePorts) -> Vec<(String, String)> {
    let path = |name: &str| dir.join(name).display().to_string();
    [
        // The Erlang cookie is created in HOME: private to the instance.
        ("HOME", dir.display().to_string()),
        ("RABBITMQ_NODENAME", node.to_owned()),
        ("RABBITMQ_USE_LONGNAME", "false".to_owned()),
        ("RABBITMQ_MNESIA_BASE", path("mnesia")),
        ("RABBITMQ_LOG_BASE", path("log")),
        ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
        ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
        ("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf")),
        ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
        ("RABBITMQ_ENABLED_PLUGINS", "rabbitmq_mqtt".to_owned()),
        ("RABBITMQ_NODE_IP_ADDRESS", Ipv4Addr::LOCALHOST.to_string()),
        ("RABBITMQ_NODE_PORT", ports.amqp.to_string()),
        ("RABBITMQ_DIST_PORT", ports.dist.to_string()),
        // Erlang distribution listens on every interface unless told otherwise.
        (
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}".to_owned(),
        ),
        ("ERL_EPMD_PORT", ports.epmd.to_string()),
        ("ERL_EPMD_ADDRESS", Ipv4Addr::LOCALHOST.to_string()),
        ("ERL_INETRC", path("inetrc")),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::native::NativeDriver;
    use crate::broker::readiness::{PROBE_TIMEOUT, probe};
    use crate::broker::test_support::{installed_or_skip, loopback_spec, tagged_processes};
    use crate::broker::{BrokerDriver, BrokerState};
    use domain::{BrokerKind, BrokerSpec};
    use host::is_running;

    fn context_plan(spec: &BrokerSpec, dir: &Path) -> LaunchPlan {
        let install = InstallPaths {
            rabbitmq_server: vec!["/bin/sh".into()],
            rabbitmqctl: vec!["/bin/true".into()],
            epmd: vec!["/bin/cat".into()],
            ..InstallPaths::default()
        };
        let context = PlanContext {
            spec,
            dir,
            port: 1883,
            marker: "m",
        };
        plan(&install, &context).unwrap()
    }

    #[test]
    fn the_node_is_private_and_its_mqtt_listener_lifts_limits() {
        let spec = loopback_spec(
            "rabbit",
            BrokerKind::Native {
                product: Product::RabbitMq,
            },
        );
        let plan = context_plan(&spec, Path::new("/state/rabbit"));
        let env = |name: &str| plan.main.env_value(name).map(str::to_owned);
        assert_eq!(env("HOME").as_deref(), Some("/state/rabbit"));
        assert_eq!(
            env("RABBITMQ_NODENAME").as_deref(),
            Some("continuum-rabbit@localhost")
        );
        assert_eq!(
            env("RABBITMQ_ENABLED_PLUGINS").as_deref(),
            Some("rabbitmq_mqtt")
        );
        assert_eq!(
            env("RABBITMQ_MNESIA_BASE").as_deref(),
            Some("/state/rabbit/mnesia")
        );
        assert_eq!(
            env("RABBITMQ_LOG_BASE").as_deref(),
            Some("/state/rabbit/log")
        );
        assert_eq!(
            env("RABBITMQ_CONFIG_FILE").as_deref(),
            Some("/state/rabbit/rabbitmq.conf")
        );
        let epmd_port = env("ERL_EPMD_PORT").unwrap();
        assert_eq!(
            plan.helpers[0].command.args[..2],
            ["-port".to_owned(), epmd_port.clone()]
        );
        assert_eq!(plan.helpers[0].listens_on.port().to_string(), epmd_port);
        assert_eq!(
            plan.stop.as_ref().unwrap().args,
            ["-n", "continuum-rabbit@localhost", "stop"]
        );
        assert!(plan.main.env_remove_prefixes.contains(&"ERL_"));

        let (_, config) = plan
            .files
            .iter()
            .find(|(path, _)| path.ends_with("rabbitmq.conf"))
            .unwrap();
        for line in [
            "loopback_users = none",
            "mqtt.listeners.tcp.default = 127.0.0.1:1883",
            "mqtt.allow_anonymous = true",
            "max_message_size = 134217728",
        ] {
            assert!(config.lines().any(|l| l == line), "missing {line:?}");
        }
        assert!(!config.contains("mqtt.prefetch"));
        assert!(
            plan.files
                .iter()
                .any(|(path, text)| path.ends_with("enabled_plugins")
                    && text == "[rabbitmq_mqtt].\n")
        );
        assert_eq!(plan.ready_deadline, START_DEADLINE);
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
}
