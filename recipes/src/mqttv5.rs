//! The mqttv5 broker (crate `mqttv5-cli`, library `mqtt5`): `mqttv5 broker -c FILE` with a
//! generated JSON config. It has no official image, so no pod. Settings read from mqtt5
//! 0.49's `BrokerConfig` (what `mqttv5 broker generate-config` prints); fields the file
//! leaves out keep the library's defaults.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;
use serde_json::{Value, json};

use crate::{Instance, NativePlan, QuicListen, VersionCommand};

/// Where `mqttv5` is looked for: `cargo install --root /usr/local`, then a distribution's.
pub const PROGRAMS: &[&str] = &["/usr/local/bin/mqttv5", "/usr/bin/mqttv5"];

/// How to install the version the project is tested with.
pub const INSTALL: &str = "cargo install --root /usr/local mqttv5-cli --version 0.29.10";

/// How long the broker may take to answer MQTT; it is usually ready within milliseconds.
pub const START_DEADLINE: Duration = Duration::from_secs(10);

/// The library's own default for unacknowledged QoS 1/2 deliveries per client
/// (`max_outbound_inflight`), written explicitly so the config states what ran.
pub const DEFAULT_MAX_INFLIGHT: u16 = 64;

/// The path its WebSocket listener serves MQTT on (its default, written explicitly).
pub const WEBSOCKET_PATH: &str = "/mqtt";

/// The config file's name in the instance's directory.
pub const CONFIG_FILE: &str = "mqttv5.json";

/// The broker's command name: the binary is the broker, no start script.
pub const PROCESS_NAMES: &[&str] = &["mqttv5"];

/// What it prints when its port is taken ("Address already in use (os error 98)").
pub const PORT_TAKEN: &[&str] = &["Address already in use"];

/// What precedes the version in `mqttv5 --version` ("mqttv5 0.29.10"); its log has none.
pub const VERSION_IN_OUTPUT: &str = "mqttv5 ";

/// Variables the program reads as settings (`MQTT5_BIND`, `MQTT5_ALLOW_ANONYMOUS`, ...):
/// removed, so the agent's own environment cannot open another listener or change a limit.
pub const ENV_PREFIXES: &[&str] = &["MQTT5_"];

/// Bytes queued for one offline or slow client, beside the message count: 1 GiB, so a 1 MB
/// test's backlog is dropped after a thousand messages rather than after the library's
/// 64 MiB (64 messages), while a node with many slow subscribers is not run out of memory.
const MAX_QUEUED_BYTES_PER_CLIENT: u64 = 1024 * 1024 * 1024;

/// Clients at once, raised from the library's 10,000. mqtt5 0.49 also caps connections per
/// client IP at 10,000 and connects at 10,000 per second in code no config reaches, so a
/// loadgen node still opens at most 10,000 connections to it (docs/brokers.md).
const MAX_CLIENTS: u64 = 1_000_000;

/// The JSON config of one instance: MQTT on `listen` only, anonymous, in memory, the spec's
/// limits, `$SYS` every second, WebSocket on `websocket` when given, nothing else open.
pub fn config(options: &BrokerOptions, listen: SocketAddr, websocket: Option<SocketAddr>) -> Value {
    let queued = options.max_queued_messages();
    let inflight = options
        .max_inflight_messages
        .unwrap_or(DEFAULT_MAX_INFLIGHT);
    let websocket_config = match websocket {
        Some(address) => json!({
            "bind_addresses": [address.to_string()],
            "path": WEBSOCKET_PATH,
            "subprotocol": "mqtt",
            "use_tls": false,
        }),
        None => Value::Null,
    };
    json!({
        "bind_addresses": [listen.to_string()],
        "max_clients": MAX_CLIENTS,
        "max_outbound_inflight": inflight,
        // QoS 0 deliveries to an online client wait in this channel and are dropped when it
        // is full: the same bound as Mosquitto's max_queued_messages for online clients.
        "client_channel_capacity": queued,
        "auth_config": {
            "allow_anonymous": true,
            "rate_limit": { "enabled": false },
        },
        "storage_config": {
            "backend": "Memory",
            "enable_persistence": false,
            "max_queued_messages_per_client": queued,
            "max_queued_bytes_per_client": MAX_QUEUED_BYTES_PER_CLIENT,
        },
        "sys_topics_enabled": true,
        "sys_topics_interval": "1s",
        "tls_config": Value::Null,
        "websocket_config": websocket_config,
        "websocket_tls_config": Value::Null,
        "quic_config": Value::Null,
        // Where a QUIC listener delivers: each connection's own stream unless the spec asks
        // for streams the broker opens (the library's default is one per topic).
        "server_delivery_strategy": options.quic_delivery.name(),
        "cluster_listener_config": Value::Null,
    })
}

/// `config` with a QUIC listener at `quic`: MQTT on a bidirectional stream per connection
/// (deliveries on it too unless the options' `quic_delivery` asks for streams the broker
/// opens, which a single-stream client does not read), no client certificates, and 0-RTT
/// data accepted from clients resuming with a ticket (a client that sends none is not
/// affected).
pub fn with_quic(mut config: Value, quic: &QuicListen<'_>) -> Value {
    config["quic_config"] = json!({
        "cert_file": quic.cert_file,
        "key_file": quic.key_file,
        "ca_file": Value::Null,
        "require_client_cert": false,
        "bind_addresses": [quic.address.to_string()],
        "enable_early_data": true,
    });
    config
}

/// The plan for one native instance of `program`.
pub fn native(program: &Path, instance: &Instance<'_>) -> NativePlan {
    let config_path = instance.dir.join(CONFIG_FILE);
    let websocket = instance.websocket.map(|listen| listen.address);
    let mut settings = config(instance.options, instance.listen, websocket);
    if let Some(quic) = &instance.quic {
        settings = with_quic(settings, quic);
    }
    let text = serde_json::to_string_pretty(&settings).unwrap_or_default();
    let mut main = CommandLine::new(program);
    main.args = vec![
        "broker".into(),
        "-c".into(),
        config_path.display().to_string(),
        // Never wait for an answer on a terminal it does not have.
        "--non-interactive".into(),
    ];
    main.env_remove_prefixes = ENV_PREFIXES.to_vec();
    NativePlan {
        files: vec![(config_path, text + "\n")],
        main_process_names: PROCESS_NAMES,
        port_taken_markers: PORT_TAKEN,
        version_command: VersionCommand::flag(program, ENV_PREFIXES, VERSION_IN_OUTPUT),
        // SIGTERM: it exits at once, and there is nothing to persist.
        ..NativePlan::of(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WebSocketListen;
    use domain::QuicDelivery;

    fn instance<'a>(options: &'a BrokerOptions, websocket: Option<&str>) -> Instance<'a> {
        Instance {
            name: "m5",
            dir: Path::new("/state/m5"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options,
            secret: "s",
            quic: None,
            websocket: websocket.map(|address| WebSocketListen {
                address: address.parse().unwrap(),
                interface: Some("lo"),
            }),
        }
    }

    #[test]
    fn a_quic_listener_serves_one_stream_per_connection_with_the_given_certificate() {
        let options = BrokerOptions::default();
        let tcp = "127.0.0.1:4242".parse().unwrap();
        let config = with_quic(
            config(&options, tcp, None),
            &QuicListen {
                address: "127.0.0.1:14567".parse().unwrap(),
                cert_file: Path::new("/t/broker.pem"),
                key_file: Path::new("/t/broker.key"),
            },
        );
        assert_eq!(
            config["quic_config"],
            json!({
                "cert_file": "/t/broker.pem",
                "key_file": "/t/broker.key",
                "ca_file": null,
                "require_client_cert": false,
                "bind_addresses": ["127.0.0.1:14567"],
                "enable_early_data": true,
            })
        );
        assert_eq!(config["server_delivery_strategy"], json!("control_only"));
        // The TCP listener and the rest stay as they were.
        assert_eq!(config["bind_addresses"], json!(["127.0.0.1:4242"]));
        assert_eq!(config["websocket_config"], Value::Null);
    }

    #[test]
    fn an_instance_asking_for_quic_gets_the_listener_in_its_file() {
        let options = BrokerOptions::default();
        let quic = QuicListen {
            address: "127.0.0.1:14567".parse().unwrap(),
            cert_file: Path::new("/state/m5/quic.pem"),
            key_file: Path::new("/state/m5/quic.key"),
        };
        let plan = native(
            Path::new("/usr/local/bin/mqttv5"),
            &Instance {
                quic: Some(quic),
                ..instance(&options, None)
            },
        );
        let config: Value = serde_json::from_str(&plan.files[0].1).unwrap();
        assert_eq!(
            config["quic_config"]["bind_addresses"],
            json!(["127.0.0.1:14567"])
        );
        assert_eq!(
            config["quic_config"]["cert_file"],
            json!("/state/m5/quic.pem")
        );
        assert_eq!(config["server_delivery_strategy"], json!("control_only"));
        let per_topic = BrokerOptions {
            quic_delivery: QuicDelivery::PerTopic,
            ..BrokerOptions::default()
        };
        let plan = native(
            Path::new("/usr/local/bin/mqttv5"),
            &Instance {
                quic: Some(quic),
                ..instance(&per_topic, None)
            },
        );
        let config: Value = serde_json::from_str(&plan.files[0].1).unwrap();
        assert_eq!(config["server_delivery_strategy"], json!("per_topic"));
    }

    #[test]
    fn the_config_opens_only_mqtt_where_asked_and_lifts_the_limits() {
        let options = BrokerOptions::default();
        let plan = native(
            Path::new("/usr/local/bin/mqttv5"),
            &instance(&options, None),
        );
        assert_eq!(
            plan.main.args,
            ["broker", "-c", "/state/m5/mqttv5.json", "--non-interactive"]
        );
        assert_eq!(plan.main.env_remove_prefixes, ["MQTT5_"]);
        let (path, text) = &plan.files[0];
        assert_eq!(path, Path::new("/state/m5/mqttv5.json"));
        let config: Value = serde_json::from_str(text).unwrap();
        assert_eq!(config["bind_addresses"], json!(["127.0.0.1:4242"]));
        assert_eq!(config["auth_config"]["allow_anonymous"], json!(true));
        assert_eq!(config["storage_config"]["backend"], json!("Memory"));
        assert_eq!(config["storage_config"]["enable_persistence"], json!(false));
        assert_eq!(
            config["storage_config"]["max_queued_messages_per_client"],
            json!(1_000_000)
        );
        assert_eq!(config["client_channel_capacity"], json!(1_000_000));
        assert_eq!(config["max_outbound_inflight"], json!(64));
        assert_eq!(config["sys_topics_interval"], json!("1s"));
        // Every other listener the library has is closed explicitly, not left to defaults.
        for listener in [
            "tls_config",
            "websocket_config",
            "websocket_tls_config",
            "quic_config",
            "cluster_listener_config",
        ] {
            assert_eq!(config[listener], Value::Null, "{listener}");
        }
        let version = plan
            .version_command
            .expect("the version comes from the binary");
        assert_eq!(version.command.args, ["--version"]);
        assert_eq!(plan.main_process_names, ["mqttv5"]);
        assert_eq!(plan.stop, None);
    }

    #[test]
    fn the_spec_limits_and_a_websocket_listener_reach_the_config() {
        let options = BrokerOptions {
            max_inflight_messages: Some(5),
            max_queued_messages: Some(10),
            start_deadline: Some(Duration::from_secs(3)),
            websocket_port: Some(0),
            quic_port: None,
            quic_delivery: Default::default(),
        };
        let plan = native(
            Path::new("/usr/local/bin/mqttv5"),
            &instance(&options, Some("127.0.0.1:4243")),
        );
        let config: Value = serde_json::from_str(&plan.files[0].1).unwrap();
        assert_eq!(config["max_outbound_inflight"], json!(5));
        assert_eq!(config["client_channel_capacity"], json!(10));
        assert_eq!(
            config["storage_config"]["max_queued_messages_per_client"],
            json!(10)
        );
        assert_eq!(
            config["websocket_config"],
            json!({"bind_addresses": ["127.0.0.1:4243"], "path": "/mqtt",
                   "subprotocol": "mqtt", "use_tls": false})
        );
        assert_eq!(plan.ready_deadline, Duration::from_secs(3));
    }
}
