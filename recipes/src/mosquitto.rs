//! Mosquitto: `mosquitto -c FILE` with a generated config that lifts every limit a benchmark
//! could trip over; on Kubernetes the official image with the same file mounted. 1.6 and 2.x
//! read the config alike. [`Config`]'s fields are also those the test harness's own Mosquitto
//! config (`tests/src/mosquitto.rs`) sets, its listener on loopback, so it can move here.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Instance, MQTT_PORT, NativePlan, Pod, Readiness, WRITTEN_BY_AGENT, data};

/// Where Mosquitto is looked for: Debian's package, then a local build.
pub const PROGRAMS: &[&str] = &["/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"];

/// How long Mosquitto may take to answer MQTT; it is usually ready within milliseconds.
pub const START_DEADLINE: Duration = Duration::from_secs(10);

/// Mosquitto's own default for unacknowledged QoS 1/2 messages per client, written
/// explicitly in the agent's configs so they state what the benchmark ran with.
pub const DEFAULT_MAX_INFLIGHT: u16 = 20;

/// Mosquitto's websockets listener serves every request path; this is the one clients use.
pub const WEBSOCKET_PATH: &str = "/mqtt";

/// The WebSocket port inside the pod (the image's documented one).
pub const POD_WEBSOCKET_PORT: u16 = 9001;

/// The config file's name in the instance's directory.
pub const CONFIG_FILE: &str = "mosquitto.conf";

/// The broker's command name: `mosquitto` is the process itself, no start script.
pub const PROCESS_NAMES: &[&str] = &["mosquitto"];

/// What Mosquitto logs when its port is taken.
pub const PORT_TAKEN: &[&str] = &["Address already in use"];

/// What precedes the version in Mosquitto's start line ("mosquitto version 2.0.11 starting").
pub const VERSION_IN_LOG: Option<&str> = Some("mosquitto version ");

/// The pinned image; [`PROVENANCE`] says why this tag.
pub const IMAGE: &str = "eclipse-mosquitto:1.6.15-openssl";

/// Which image the study deployed, and why [`IMAGE`].
pub const PROVENANCE: &str = "The study deployed eclipse-mosquitto:1.6.15. This is the same Mosquitto \
            release: the official library now rebuilds the 1.6 line only as its -openssl \
            variant (amd64, arm64v8, arm32v6 and more), which differs in the TLS library alone, \
            and no TLS is used here.";

/// One Mosquitto config. [`Config::benchmark`] is the agent's; other users fill the fields
/// from their own options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Who the header comment says wrote the file.
    pub written_by: String,
    /// The MQTT listener's port.
    pub port: u16,
    /// The address it binds; every interface when `None` (a pod).
    pub bind: Option<IpAddr>,
    /// `max_queued_messages`: messages queued per client beyond those in flight; also the
    /// bound on QoS 0 messages waiting for a slow online subscriber.
    pub max_queued_messages: u32,
    /// `max_inflight_messages`, when stated; Mosquitto's default (20) otherwise.
    pub max_inflight_messages: Option<u32>,
    /// `max_packet_size` in bytes, when stated; otherwise no limit beyond MQTT's 256 MB.
    pub max_packet_size: Option<u32>,
    /// Raw lines appended at the end (after the listener, so listener options apply to it).
    pub extra: Vec<String>,
    /// A second listener, after `extra`, speaking MQTT over WebSocket: its port and the
    /// interface it binds (every interface when `None`; 2.0.11 takes no IP address here).
    pub websocket: Option<(u16, Option<String>)>,
}

impl Config {
    /// The agent's config for a broker on `port` (bound to `bind`, or every interface): the
    /// spec's limits, the inflight window stated even when it is Mosquitto's default.
    pub fn benchmark(options: &BrokerOptions, port: u16, bind: Option<IpAddr>) -> Self {
        let inflight = options
            .max_inflight_messages
            .unwrap_or(DEFAULT_MAX_INFLIGHT);
        Self {
            written_by: WRITTEN_BY_AGENT.to_owned(),
            port,
            bind,
            max_queued_messages: options.max_queued_messages(),
            max_inflight_messages: Some(u32::from(inflight)),
            max_packet_size: None,
            extra: Vec::new(),
            websocket: None,
        }
    }

    /// The config file's text.
    pub fn render(&self) -> String {
        let listener = match self.bind {
            Some(bind) => format!("listener {} {bind}", self.port),
            None => format!("listener {}", self.port),
        };
        let mut lines = vec![
            format!("# Written by {}.", self.written_by),
            listener,
            "allow_anonymous true".to_owned(),
            "persistence false".to_owned(),
            // message_size_limit is left unset: its default 0 already means no limit, it is
            // deprecated, and a release that drops it would refuse to start with it.
            format!("max_queued_messages {}", self.max_queued_messages),
        ];
        if let Some(inflight) = self.max_inflight_messages {
            lines.push(format!("max_inflight_messages {inflight}"));
        }
        if let Some(size) = self.max_packet_size {
            lines.push(format!("max_packet_size {size}"));
        }
        lines.extend(
            [
                // $SYS counters (the harness's oracle), refreshed as often as Mosquitto allows.
                "sys_interval 1",
                // The agent, the harness or the container runtime captures it; stderr is
                // unbuffered, so the start line (with the version) is there at once.
                "log_dest stderr",
                // One type per line: Mosquitto reads only the first word of a log_type line
                // (with "error warning notice information" on one line it logged errors alone).
                "log_type error",
                "log_type warning",
                "log_type notice",
                "log_type information",
            ]
            .map(str::to_owned),
        );
        lines.extend(self.extra.iter().cloned());
        if let Some((port, interface)) = &self.websocket {
            lines.push(match interface {
                Some(interface) => format!("listener {port} {interface}"),
                None => format!("listener {port}"),
            });
            lines.push("protocol websockets".to_owned());
        }
        lines.push(String::new());
        lines.join("\n")
    }
}

/// `program -c config`.
pub fn command(program: &Path, config: &Path) -> CommandLine {
    let mut line = CommandLine::new(program);
    line.args = vec!["-c".into(), config.display().to_string()];
    line
}

/// The plan for one native instance of `program`.
pub fn native(program: &Path, instance: &Instance<'_>) -> NativePlan {
    let config_path = instance.dir.join(CONFIG_FILE);
    let mut config = Config::benchmark(
        instance.options,
        instance.listen.port(),
        Some(instance.listen.ip()),
    );
    config.websocket = instance
        .websocket
        .map(|listen| (listen.address.port(), listen.interface.map(str::to_owned)));
    NativePlan {
        files: vec![(config_path.clone(), config.render())],
        main_process_names: PROCESS_NAMES,
        port_taken_markers: PORT_TAKEN,
        // SIGTERM: Mosquitto exits at once, and there is nothing to persist.
        ..NativePlan::of(
            command(program, &config_path),
            instance.options.start_deadline_or(START_DEADLINE),
        )
    }
}

/// The pod: [`IMAGE`] with the same config, listening on every interface of the pod.
pub fn pod(options: &BrokerOptions) -> Pod {
    let mut config = Config::benchmark(options, MQTT_PORT, None);
    let mut ports = vec![("mqtt", MQTT_PORT)];
    if options.websocket_port.is_some() {
        config.websocket = Some((POD_WEBSOCKET_PORT, None));
        ports.push(("ws", POD_WEBSOCKET_PORT));
    }
    let config = config.render();
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31883,
        config: data([(CONFIG_FILE, config)]),
        config_use: ConfigUse::Files(vec![(CONFIG_FILE, "/mosquitto/config/mosquitto.conf")]),
        env: Vec::new(),
        secret_env: Vec::new(),
        ports,
        // Mosquitto has no health endpoint; an exec probe would cost CPU mid-benchmark.
        readiness: Readiness::MqttPort,
        cpu_request: "100m",
        memory_request_mib: 64,
        memory_limit_mib: 2048,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WebSocketListen;

    fn render_config(options: &BrokerOptions, bind: IpAddr, port: u16) -> String {
        Config::benchmark(options, port, Some(bind)).render()
    }

    #[test]
    fn the_config_lifts_limits_and_listens_where_asked() {
        let config = render_config(
            &BrokerOptions::default(),
            "127.0.0.1".parse().unwrap(),
            4242,
        );
        for line in [
            "listener 4242 127.0.0.1",
            "allow_anonymous true",
            "persistence false",
            "max_queued_messages 1000000",
            "max_inflight_messages 20",
            "sys_interval 1",
        ] {
            assert!(
                config.lines().any(|l| l == line),
                "missing {line:?} in\n{config}"
            );
        }
        assert!(!config.contains("max_packet_size"));
        assert!(!config.contains("message_size_limit"));

        let options = BrokerOptions {
            max_inflight_messages: Some(5),
            max_queued_messages: Some(10),
            start_deadline: None,
            websocket_port: None,
            quic_port: None,
            quic_delivery: Default::default(),
        };
        let config = render_config(&options, "::".parse().unwrap(), 1883);
        assert!(config.contains("\nlistener 1883 ::\n"));
        assert!(config.contains("\nmax_inflight_messages 5\n"));
        assert!(config.contains("\nmax_queued_messages 10\n"));
    }

    #[test]
    fn the_native_plan_runs_the_config_it_writes() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "mosq",
            dir: Path::new("/state/mosq"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options: &options,
            secret: "m",
            quic: None,
            websocket: None,
        };
        let plan = native(Path::new("/usr/sbin/mosquitto"), &instance);
        assert_eq!(plan.main.args, ["-c", "/state/mosq/mosquitto.conf"]);
        let (path, config) = &plan.files[0];
        assert_eq!(path, Path::new("/state/mosq/mosquitto.conf"));
        assert!(config.contains("\nlistener 4242 127.0.0.1\n"), "{config}");
        assert_eq!(plan.stop, None);
        assert_eq!(plan.ready_deadline, START_DEADLINE);
        assert_eq!(plan.main_process_names, ["mosquitto"]);
    }

    #[test]
    fn a_websocket_listener_follows_the_mqtt_one_bound_by_interface() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "mosq",
            dir: Path::new("/state/mosq"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options: &options,
            secret: "m",
            quic: None,
            websocket: Some(WebSocketListen {
                address: "127.0.0.1:4243".parse().unwrap(),
                interface: Some("lo"),
            }),
        };
        let plan = native(Path::new("/usr/sbin/mosquitto"), &instance);
        let config = &plan.files[0].1;
        assert!(
            config.ends_with("\nlistener 4243 lo\nprotocol websockets\n"),
            "{config}"
        );
        assert!(config.contains("\nlistener 4242 127.0.0.1\n"), "{config}");

        let without = pod(&options);
        assert_eq!(without.ports, [("mqtt", MQTT_PORT)]);
        assert!(!without.config[CONFIG_FILE].contains("websockets"));
        let with = pod(&BrokerOptions {
            websocket_port: Some(0),
            quic_port: None,
            ..BrokerOptions::default()
        });
        assert_eq!(
            with.ports,
            [("mqtt", MQTT_PORT), ("ws", POD_WEBSOCKET_PORT)]
        );
        assert!(
            with.config[CONFIG_FILE].ends_with("\nlistener 9001\nprotocol websockets\n"),
            "{}",
            with.config[CONFIG_FILE]
        );
    }
}
