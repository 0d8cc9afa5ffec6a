//! rmqtt 0.24, the Rust broker: its server engine (crates.io `rmqtt`, what its `rmqttd` daemon
//! wraps) behind the command line of `brokers/rmqtt` (`continuum-rmqtt`), which opens the
//! listeners the agent asks for with the limits below. `rmqttd` itself also links every
//! plugin (Kafka's C library built with cmake, Pulsar, NATS, Redis, gRPC clustering), always
//! opens a gRPC port and by default an HTTP API on 0.0.0.0:6060, reads `/etc/rmqtt*` and
//! `RMQTT_*` besides its `-f` file, and takes longer to build than CI's whole budget. rmqtt's
//! counter (one of `rmqttd`'s default plugins) and `$SYS` plugins run, publishing the counts
//! every second; like `rmqttd`'s defaults, no shared-subscription or retainer plugin runs
//! (the capability probe says so). The pod runs the official image, which is `rmqttd`: there
//! its own config file (`rmqtt.toml`, mounted over the image's) sets the same listener and
//! limits, keeps its gRPC port on loopback and turns its HTTP API and ACL off.

use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Instance, MQTT_PORT, NativePlan, Pod, Readiness, VersionCommand, data};

/// Where `continuum-rmqtt` is looked for.
pub const PROGRAMS: &[&str] = &["/usr/local/bin/continuum-rmqtt"];

/// How to install it, from a checkout of Continuum (its lock file pins rmqtt 0.24.0 and
/// every dependency).
pub const INSTALL: &str = "cargo install --locked --root /usr/local --path brokers/rmqtt";

/// The pinned image (`rmqttd` 0.24.0 on Alpine).
pub const IMAGE: &str = "rmqtt/rmqtt:0.24.0";

/// Why [`IMAGE`].
pub const PROVENANCE: &str = "The study did not measure rmqtt. rmqtt/rmqtt is the project's \
            official image, tagged by release; 0.24.0 is the release the native build uses. \
            The image was not pulled from here: neither the tag nor its architectures were \
            checked.";

/// Where `rmqttd` in the image reads its config (its working folder's `rmqtt.toml`).
const POD_CONFIG_PATH: &str = "/app/rmqtt/rmqtt.toml";

/// The pod's config file's name.
const POD_CONFIG_FILE: &str = "rmqtt.toml";

/// How long it may take to answer MQTT (well under a second here).
pub const START_DEADLINE: Duration = Duration::from_secs(20);

/// rmqtt does not look at the WebSocket request's path; this is the one clients use.
pub const WEBSOCKET_PATH: &str = "/mqtt";

/// The broker's process.
pub const PROCESS_NAMES: &[&str] = &["continuum-rmqtt"];

/// What it prints when the port is taken ("MQTT listener on ...: Address already in use").
pub const PORT_TAKEN: &[&str] = &["Address already in use"];

/// `continuum-rmqtt --version` prints rmqtt's own ("rmqtt/0.24.0-20261205221501").
pub const VERSION_IN_OUTPUT: &str = "rmqtt/";

/// Removed from its environment: `RUST_LOG` and the like (a logger rmqtt's crates may read),
/// and `rmqtt_plugin_*`, which rmqtt's plugins read as config (in either case).
pub const ENV_PREFIXES: &[&str] = &["RUST_", "RMQTT", "rmqtt"];

/// The plan for one native instance of `program`: MQTT on the plan's address, WebSocket
/// beside it when asked, the spec's in-flight window (0, unlimited for Mosquitto, is rmqtt's
/// largest, 65535; the program's default otherwise) and queue bound (or the domain's
/// default).
pub fn native(program: &Path, instance: &Instance<'_>) -> NativePlan {
    let mut main = CommandLine::new(program);
    main.args = vec!["--listen".into(), instance.listen.to_string()];
    if let Some(websocket) = instance.websocket {
        main.args
            .extend(["--websocket".into(), websocket.address.to_string()]);
    }
    if let Some(inflight) = instance.options.max_inflight_messages {
        let inflight = if inflight == 0 { u16::MAX } else { inflight };
        main.args
            .extend(["--max-inflight".into(), inflight.to_string()]);
    }
    let queued = instance.options.max_queued_messages();
    main.args
        .extend(["--max-queued".into(), queued.to_string()]);
    main.env_remove_prefixes = ENV_PREFIXES.to_vec();
    NativePlan {
        main_process_names: PROCESS_NAMES,
        port_taken_markers: PORT_TAKEN,
        version_command: VersionCommand::flag(program, ENV_PREFIXES, VERSION_IN_OUTPUT),
        // SIGTERM: the program exits; nothing is kept.
        ..NativePlan::of(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

/// `rmqttd`'s config for the pod: one MQTT listener on every interface of the pod with the
/// native build's limits; the gRPC port `rmqttd` always opens on loopback; its default HTTP
/// API (0.0.0.0:6060) and ACL plugins off, its counter on, as natively with the `$SYS`
/// topics; the busy check off.
pub fn pod_config(options: &BrokerOptions) -> String {
    let inflight = match options.max_inflight_messages {
        None | Some(0) => u16::MAX,
        Some(n) => n,
    };
    format!(
        "# Written by {written_by}.\n\
         node.id = 1\n\
         node.busy.check_enable = false\n\
         rpc.server_addr = \"127.0.0.1:5363\"\n\
         log.to = \"console\"\n\
         log.level = \"info\"\n\
         plugins.default_startups = [\"rmqtt-sys-topic\"]\n\
         plugins.disabled_default_startups = [\"rmqtt-http-api\", \"rmqtt-acl\"]\n\
         \n\
         [listener.tcp.external]\n\
         addr = \"0.0.0.0:{MQTT_PORT}\"\n\
         allow_anonymous = true\n\
         max_packet_size = \"256M\"\n\
         max_inflight = {inflight}\n\
         max_mqueue_len = {queued}\n\
         max_connections = 1000000\n\
         max_handshaking_limit = 1000000\n\
         backlog = 4096\n\
         nodelay = true\n\
         reuseaddr = true\n",
        written_by = crate::WRITTEN_BY_AGENT,
        queued = options.max_queued_messages(),
    )
}

/// The pod: [`IMAGE`] with [`pod_config`] over its `rmqtt.toml`.
pub fn pod(options: &BrokerOptions) -> Pod {
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31890,
        config: data([(POD_CONFIG_FILE, pod_config(options))]),
        config_use: ConfigUse::Files(vec![(POD_CONFIG_FILE, POD_CONFIG_PATH)]),
        env: Vec::new(),
        secret_env: Vec::new(),
        ports: vec![("mqtt", MQTT_PORT)],
        readiness: Readiness::MqttPort,
        cpu_request: "250m",
        memory_request_mib: 128,
        memory_limit_mib: 2048,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WebSocketListen;
    use domain::BrokerOptions;

    #[test]
    fn the_listeners_and_limits_asked_for_are_on_the_command_line() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "rm",
            dir: Path::new("/state/rm"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options: &options,
            secret: "s",
            quic: None,
            websocket: None,
        };
        let program = Path::new("/usr/local/bin/continuum-rmqtt");
        let plan = native(program, &instance);
        assert_eq!(
            plan.main.args,
            ["--listen", "127.0.0.1:4242", "--max-queued", "1000000"]
        );
        assert!(plan.files.is_empty());
        assert_eq!(plan.main_process_names, ["continuum-rmqtt"]);
        assert_eq!(plan.main.env_remove_prefixes, ["RUST_", "RMQTT", "rmqtt"]);
        let version = plan.version_command.expect("the version from the program");
        assert_eq!(version.command.args, ["--version"]);
        assert_eq!(
            crate::version_after(version.marker, "rmqtt/0.24.0-20261205221501\n").as_deref(),
            Some("0.24.0-20261205221501")
        );

        let unlimited = BrokerOptions {
            max_inflight_messages: Some(0),
            ..BrokerOptions::default()
        };
        let args = native(
            program,
            &Instance {
                options: &unlimited,
                ..instance
            },
        )
        .main
        .args;
        assert_eq!(args[2..4], ["--max-inflight", "65535"]);

        let limited = BrokerOptions {
            max_inflight_messages: Some(64),
            max_queued_messages: Some(5000),
            ..BrokerOptions::default()
        };
        let with_all = Instance {
            options: &limited,
            quic: None,
            websocket: Some(WebSocketListen {
                address: "[::1]:4243".parse().unwrap(),
                interface: Some("lo"),
            }),
            ..instance
        };
        assert_eq!(
            native(program, &with_all).main.args,
            [
                "--listen",
                "127.0.0.1:4242",
                "--websocket",
                "[::1]:4243",
                "--max-inflight",
                "64",
                "--max-queued",
                "5000"
            ]
        );
    }
}
