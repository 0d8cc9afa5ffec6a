//! RabbitMQ with its MQTT plugin: natively a node private to one instance, on Kubernetes the
//! official image with the same config under `conf.d`.
//!
//! A private node shares nothing with a system RabbitMQ: node name, data and log directories,
//! config, enabled-plugins file, Erlang cookie (`HOME`) and every port (AMQP, Erlang
//! distribution, epmd) belong to the instance, and every RabbitMQ and Erlang tool started for
//! it (server, epmd, `rabbitmqctl`) gets [`Node::env`] with inherited `RABBITMQ_*`/`ERL_*`
//! variables removed. The node's epmd runs in the foreground on its own port, as a helper
//! killed by PID: an epmd that Erlang starts with `-daemon` would outlive `rabbitmqctl stop`.
//! Erlang resolves names from files only (`ERL_INETRC`), so the node sends no DNS query. The
//! agent and the test harness both run nodes from [`Node`]; they differ in the node's name,
//! the MQTT listener's address and who tags the processes.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Helper, Instance, MQTT_PORT, NativePlan, Pod, Readiness, WRITTEN_BY_AGENT};

/// RabbitMQ's own `rabbitmq-server` start script (not Debian's `/usr/sbin` wrapper, which
/// switches to the `rabbitmq` user and the system node).
pub const SERVER_PROGRAMS: &[&str] = &["/usr/lib/rabbitmq/bin/rabbitmq-server"];
/// The control tool from the same package, used for a graceful stop.
pub const CTL_PROGRAMS: &[&str] = &["/usr/lib/rabbitmq/bin/rabbitmqctl"];
/// Erlang's port mapper daemon, run privately for each node.
pub const EPMD_PROGRAMS: &[&str] = &["/usr/bin/epmd", "/usr/lib/erlang/bin/epmd"];

/// A cold first boot takes about 11 s on a 2-core machine.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// Largest message RabbitMQ accepts, stated so that 1 MB+ payloads are allowed on purpose
/// (3.10's MQTT plugin has no limit of its own; this is rabbit's default of 128 MiB).
pub const MAX_MESSAGE_SIZE: u32 = 134_217_728;

/// Inherited variables removed before any tool of a node starts, so the caller's own
/// environment cannot redirect it to a system instance.
pub const ENV_REMOVE_PREFIXES: &[&str] = &["RABBITMQ_", "ERL_"];

/// What precedes the version in RabbitMQ's start line ("Starting RabbitMQ 3.10.8 on Erlang").
pub const VERSION_IN_LOG: Option<&str> = Some("Starting RabbitMQ ");

/// The pinned image; [`PROVENANCE`] says why this tag.
pub const IMAGE: &str = "rabbitmq:3.11.28";

/// Which image the study deployed, and why [`IMAGE`].
pub const PROVENANCE: &str = "The study deployed rabbitmq:3.11 (a moving tag) with the \
            rabbitmq_prometheus and rabbitmq_mqtt plugins; 3.11.28 is the last 3.11 release \
            (official, amd64 and arm64v8 among others), pinned so reruns get the same broker. \
            Its MQTT plugin speaks MQTT 3.1.1 only, as in the study.";

/// The pod's memory limit, MiB; RabbitMQ is told it (it does not see the cgroup's).
const POD_MEMORY_LIMIT_MIB: u64 = 4096;

/// The path on which the web-mqtt plugin serves MQTT over WebSocket.
pub const WEBSOCKET_PATH: &str = "/ws";

/// The web-mqtt plugin's port inside the pod (its default).
pub const POD_WEBSOCKET_PORT: u16 = 15675;

/// The plugins of a node that also serves MQTT over WebSocket.
const PLUGINS_WITH_WEBSOCKET: &str = "rabbitmq_mqtt,rabbitmq_web_mqtt";

/// The web-mqtt listener's lines of `rabbitmq.conf`: at `listen`, or on every interface at
/// `port` when `ip` is `None` (a pod).
fn web_mqtt_config(ip: Option<std::net::IpAddr>, port: u16) -> String {
    let ip = ip.map_or_else(String::new, |ip| format!("web_mqtt.tcp.ip = {ip}\n"));
    format!("# MQTT over WebSocket (path {WEBSOCKET_PATH}).\n{ip}web_mqtt.tcp.port = {port}\n")
}

/// The private loopback ports of one node, besides its MQTT listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivatePorts {
    /// AMQP 0-9-1 (unused, but it must not clash).
    pub amqp: u16,
    /// Erlang distribution, which `rabbitmqctl` talks to.
    pub dist: u16,
    /// The node's own epmd.
    pub epmd: u16,
}

/// The executables a native node needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programs {
    /// `rabbitmq-server`.
    pub server: PathBuf,
    /// `rabbitmqctl`.
    pub ctl: PathBuf,
    /// `epmd`.
    pub epmd: PathBuf,
}

/// One private node: its directory, Erlang node name and ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node<'a> {
    /// Config, data, logs and the Erlang cookie (`HOME`).
    pub dir: &'a Path,
    /// The Erlang node name, `name@localhost`.
    pub name: String,
    /// Its private ports.
    pub ports: PrivatePorts,
}

impl Node<'_> {
    /// The files of a node whose MQTT listener binds `mqtt`: the config, the
    /// enabled-plugins file, an empty env file (so the system's
    /// `/etc/rabbitmq/rabbitmq-env.conf` is not read) and an inetrc (no DNS). Names are
    /// relative to [`Node::dir`].
    pub fn files(
        &self,
        written_by: &str,
        mqtt: SocketAddr,
        prefetch: Option<u16>,
    ) -> Vec<(&'static str, String)> {
        vec![
            // `ip:port` also for IPv6 (`::1:1883`), as RabbitMQ's listener syntax has it.
            (
                "rabbitmq.conf",
                config(
                    written_by,
                    &format!("{}:{}", mqtt.ip(), mqtt.port()),
                    "",
                    prefetch,
                ),
            ),
            ("enabled_plugins", "[rabbitmq_mqtt].\n".to_owned()),
            ("rabbitmq-env.conf", String::new()),
            (
                "inetrc",
                "{lookup, [file]}.\n{host, {127,0,0,1}, [\"localhost\"]}.\n".to_owned(),
            ),
        ]
    }

    /// The environment that makes every RabbitMQ and Erlang tool act on this node only.
    pub fn env(&self) -> Vec<(String, String)> {
        let path = |name: &str| self.dir.join(name).display().to_string();
        [
            // The Erlang cookie is created in HOME: private to the instance.
            ("HOME", self.dir.display().to_string()),
            ("RABBITMQ_NODENAME", self.name.clone()),
            ("RABBITMQ_USE_LONGNAME", "false".to_owned()),
            ("RABBITMQ_MNESIA_BASE", path("mnesia")),
            ("RABBITMQ_LOG_BASE", path("log")),
            ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
            ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
            ("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
            ("RABBITMQ_ENABLED_PLUGINS", "rabbitmq_mqtt".to_owned()),
            ("RABBITMQ_NODE_IP_ADDRESS", Ipv4Addr::LOCALHOST.to_string()),
            ("RABBITMQ_NODE_PORT", self.ports.amqp.to_string()),
            ("RABBITMQ_DIST_PORT", self.ports.dist.to_string()),
            // Erlang distribution listens on every interface unless told otherwise.
            (
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}".to_owned(),
            ),
            ("ERL_EPMD_PORT", self.ports.epmd.to_string()),
            ("ERL_EPMD_ADDRESS", Ipv4Addr::LOCALHOST.to_string()),
            ("ERL_INETRC", path("inetrc")),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
    }

    /// `program` with this node's environment and nothing inherited that could redirect it.
    fn tool(&self, program: &Path, args: Vec<String>) -> CommandLine {
        let mut line = CommandLine::new(program);
        line.args = args;
        line.env = self.env();
        line.env_remove_prefixes = ENV_REMOVE_PREFIXES.to_vec();
        line
    }

    /// The broker: `rabbitmq-server`, configured by the environment alone.
    pub fn server(&self, program: &Path) -> CommandLine {
        self.tool(program, Vec::new())
    }

    /// The node's epmd, in the foreground on its own loopback port.
    pub fn epmd(&self, program: &Path) -> CommandLine {
        let args = [
            "-port".to_owned(),
            self.ports.epmd.to_string(),
            "-address".to_owned(),
            Ipv4Addr::LOCALHOST.to_string(),
        ];
        self.tool(program, args.into())
    }

    /// Where the node's epmd listens.
    pub fn epmd_address(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.epmd))
    }

    /// `rabbitmqctl -n NODE ARGS...` against this node (`["stop"]` stops it gracefully).
    pub fn ctl(&self, program: &Path, args: &[&str]) -> CommandLine {
        let args = ["-n", self.name.as_str()]
            .iter()
            .chain(args)
            .map(|arg| (*arg).to_owned())
            .collect();
        self.tool(program, args)
    }
}

/// The agent's name for the node of instance `name`.
pub fn node_name(name: &str) -> String {
    format!("continuum-{name}@localhost")
}

/// `rabbitmq.conf` for a benchmark: the MQTT listener at `listener` (`host:port`, or a port),
/// anonymous clients as guest, messages up to [`MAX_MESSAGE_SIZE`]; `extra` lines go before
/// the logging ones; `prefetch` bounds unacknowledged deliveries per subscriber.
fn config(written_by: &str, listener: &str, extra: &str, prefetch: Option<u16>) -> String {
    let mut config = format!(
        "\
# Written by {written_by}.
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
    if let Some(prefetch) = prefetch {
        // The MQTT plugin's bound on unacknowledged deliveries per subscriber.
        config.push_str(&format!("mqtt.prefetch = {prefetch}\n"));
    }
    config
}

/// The plan for one native node of the agent's.
pub fn native(programs: &Programs, instance: &Instance<'_>, ports: PrivatePorts) -> NativePlan {
    let node = Node {
        dir: instance.dir,
        name: node_name(instance.name),
        ports,
    };
    let files = node
        .files(
            WRITTEN_BY_AGENT,
            instance.listen,
            instance.options.max_inflight_messages,
        )
        .into_iter()
        .map(|(name, text)| match (name, instance.websocket) {
            ("rabbitmq.conf", Some(ws)) => {
                let web = web_mqtt_config(Some(ws.address.ip()), ws.address.port());
                (name, format!("{text}{web}"))
            }
            ("enabled_plugins", Some(_)) => (name, format!("[{PLUGINS_WITH_WEBSOCKET}].\n")),
            _ => (name, text),
        })
        .map(|(name, text)| (instance.dir.join(name), text))
        .collect();
    let mut main = node.server(&programs.server);
    if instance.websocket.is_some() {
        // The variable overrides the plugins file.
        main.env
            .retain(|(name, _)| name != "RABBITMQ_ENABLED_PLUGINS");
        main.env.push((
            "RABBITMQ_ENABLED_PLUGINS".to_owned(),
            PLUGINS_WITH_WEBSOCKET.to_owned(),
        ));
    }
    NativePlan {
        files,
        private_files: Vec::new(),
        service_account: None,
        helpers: vec![Helper {
            what: "epmd",
            command: node.epmd(&programs.epmd),
            listens_on: node.epmd_address(),
        }],
        main,
        stop: Some(node.ctl(&programs.ctl, &["stop"])),
        ready_deadline: instance.options.start_deadline_or(START_DEADLINE),
        // The start script waits on the Erlang VM, which does the work.
        main_process_names: crate::ERLANG_VM,
        port_taken_markers: crate::ERLANG_PORT_TAKEN,
        version_command: None,
    }
}

/// The pod: [`IMAGE`] with the native config (listening on every interface) read after the
/// image's own `conf.d` files, and the Prometheus plugin as in the study.
pub fn pod(options: &BrokerOptions) -> Pod {
    let extra = format!(
        "# RabbitMQ does not see the pod's memory limit; its memory alarm is relative to this\n\
         # (80% of the limit, as the RabbitMQ operator sets it).\n\
         total_memory_available_override_value = {}\n",
        POD_MEMORY_LIMIT_MIB * 1024 * 1024 / 5 * 4
    );
    let websocket = options.websocket_port.is_some();
    let mut config = config(
        WRITTEN_BY_AGENT,
        &MQTT_PORT.to_string(),
        &extra,
        options.max_inflight_messages,
    );
    let mut plugins = "[rabbitmq_prometheus,rabbitmq_mqtt].\n".to_owned();
    let mut ports = vec![("mqtt", MQTT_PORT)];
    if websocket {
        config.push_str(&web_mqtt_config(None, POD_WEBSOCKET_PORT));
        plugins = "[rabbitmq_prometheus,rabbitmq_mqtt,rabbitmq_web_mqtt].\n".to_owned();
        ports.push(("ws", POD_WEBSOCKET_PORT));
    }
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31885,
        config: crate::data([("rabbitmq.conf", config), ("enabled_plugins", plugins)]),
        config_use: ConfigUse::Files(vec![
            ("rabbitmq.conf", "/etc/rabbitmq/conf.d/90-continuum.conf"),
            ("enabled_plugins", "/etc/rabbitmq/enabled_plugins"),
        ]),
        env: Vec::new(),
        // One node, never clustered: the image ships no cookie (Erlang makes one at first
        // boot), and the broker's NetworkPolicy admits MQTT only, so no other pod reaches
        // its epmd or distribution port.
        secret_env: Vec::new(),
        ports,
        // The MQTT listener opens once the plugin runs. rabbitmq-diagnostics, the product's
        // check, boots an Erlang VM per probe: too costly during a benchmark.
        readiness: Readiness::MqttPort,
        cpu_request: "500m",
        memory_request_mib: 512,
        memory_limit_mib: POD_MEMORY_LIMIT_MIB,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context_plan(options: &BrokerOptions, dir: &Path) -> NativePlan {
        let programs = Programs {
            server: "/bin/sh".into(),
            ctl: "/bin/true".into(),
            epmd: "/bin/cat".into(),
        };
        let instance = Instance {
            name: "rabbit",
            dir,
            listen: "127.0.0.1:1883".parse().unwrap(),
            options,
            secret: "m",
            quic: None,
            websocket: None,
        };
        let ports = PrivatePorts {
            amqp: 40001,
            dist: 40002,
            epmd: 40003,
        };
        native(&programs, &instance, ports)
    }

    #[test]
    fn a_websocket_listener_is_the_web_mqtt_plugin_on_its_own_port() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "rabbit",
            dir: Path::new("/state/rabbit"),
            listen: "127.0.0.1:1883".parse().unwrap(),
            options: &options,
            secret: "m",
            quic: None,
            websocket: Some(crate::WebSocketListen {
                address: "127.0.0.1:1884".parse().unwrap(),
                interface: Some("lo"),
            }),
        };
        let programs = Programs {
            server: "/bin/sh".into(),
            ctl: "/bin/true".into(),
            epmd: "/bin/cat".into(),
        };
        let ports = PrivatePorts {
            amqp: 40001,
            dist: 40002,
            epmd: 40003,
        };
        let plan = native(&programs, &instance, ports);
        let file = |name: &str| {
            plan.files
                .iter()
                .find(|(path, _)| path.ends_with(name))
                .map(|(_, text)| text.clone())
                .unwrap_or_default()
        };
        let config = file("rabbitmq.conf");
        assert!(config.contains("\nweb_mqtt.tcp.ip = 127.0.0.1\nweb_mqtt.tcp.port = 1884\n"));
        assert!(config.contains("\nmqtt.listeners.tcp.default = 127.0.0.1:1883\n"));
        assert_eq!(
            file("enabled_plugins"),
            "[rabbitmq_mqtt,rabbitmq_web_mqtt].\n"
        );
        assert_eq!(
            plan.main.env_value("RABBITMQ_ENABLED_PLUGINS"),
            Some("rabbitmq_mqtt,rabbitmq_web_mqtt")
        );
        let without = context_plan(&options, Path::new("/state/rabbit"));
        assert!(
            !without
                .files
                .iter()
                .any(|(_, text)| text.contains("web_mqtt"))
        );

        let pod = pod(&BrokerOptions {
            websocket_port: Some(0),
            quic_port: None,
            ..BrokerOptions::default()
        });
        assert_eq!(pod.ports, [("mqtt", MQTT_PORT), ("ws", POD_WEBSOCKET_PORT)]);
        assert!(pod.config["rabbitmq.conf"].contains("\nweb_mqtt.tcp.port = 15675\n"));
        assert!(!pod.config["rabbitmq.conf"].contains("web_mqtt.tcp.ip"));
        assert!(pod.config["enabled_plugins"].contains("rabbitmq_web_mqtt"));
    }

    #[test]
    fn the_node_is_private_and_its_mqtt_listener_lifts_limits() {
        let plan = context_plan(&BrokerOptions::default(), Path::new("/state/rabbit"));
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

    #[test]
    fn every_tool_of_a_node_gets_its_environment() {
        let node = Node {
            dir: Path::new("/tmp/x"),
            name: "ct-1-1@localhost".into(),
            ports: PrivatePorts {
                amqp: 2,
                dist: 3,
                epmd: 4,
            },
        };
        for line in [
            node.server(Path::new("/s")),
            node.epmd(Path::new("/e")),
            node.ctl(Path::new("/c"), &["status"]),
        ] {
            assert_eq!(line.env, node.env(), "{line:?}");
            assert_eq!(line.env_remove_prefixes, ENV_REMOVE_PREFIXES);
        }
        assert_eq!(
            node.ctl(Path::new("/c"), &["eval", "1."]).args,
            ["-n", "ct-1-1@localhost", "eval", "1."]
        );
    }
}
