//! amqtt, Python's asyncio broker (MQTT 3.1.1 only): `amqtt -c FILE` from its own virtual
//! environment. No pod: it has no image to pin. Settings read from amqtt 0.12's
//! `contexts.py` (`BrokerConfig`, `ListenerConfig`) and `plugins/sys/broker.py`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use host::CommandLine;
use serde_json::{Value, json};

use crate::{Instance, NativePlan, VersionCommand};

/// Where `amqtt` is looked for: the virtual environment [`INSTALL`] makes, then pip's
/// system-wide place.
pub const PROGRAMS: &[&str] = &["/opt/amqtt/bin/amqtt", "/usr/local/bin/amqtt"];

/// How to install the version the project is tested with.
pub const INSTALL: &str = "python3 -m venv /opt/amqtt && /opt/amqtt/bin/pip install amqtt==0.12.1";

/// How long the broker may take to answer MQTT; Python imports take a second or two.
pub const START_DEADLINE: Duration = Duration::from_secs(20);

/// Its WebSocket listener (`websockets`) serves every path; this is the one clients use.
pub const WEBSOCKET_PATH: &str = "/mqtt";

/// The config file's name in the instance's directory (JSON, which its YAML reader reads).
pub const CONFIG_FILE: &str = "amqtt.yaml";

/// The broker's process: the `amqtt` script, run by the environment's Python under the
/// script's name.
pub const PROCESS_NAMES: &[&str] = &["amqtt"];

/// What Python prints when the port is taken ("[Errno 98] ... address already in use").
pub const PORT_TAKEN: &[&str] = &["address already in use", "Address already in use"];

/// `amqtt --version` prints the bare version ("0.12.1").
pub const VERSION_IN_OUTPUT: &str = "";

/// Python reads `PYTHONPATH`, `PYTHONSTARTUP` and others, which can load any code into the
/// broker: removed from its environment.
pub const ENV_PREFIXES: &[&str] = &["PYTHON"];

/// The config of one instance: MQTT on `listen`, WebSocket on `websocket` when given, both
/// unbounded in connections; anonymous clients; `$SYS` every second. The plugin list
/// replaces amqtt's default one, which also logs every event and packet.
pub fn config(listen: SocketAddr, websocket: Option<SocketAddr>) -> Value {
    let mut listeners = json!({
        "default": { "type": "tcp", "bind": listen.to_string(), "max_connections": 0 },
    });
    if let Some(address) = websocket {
        listeners["ws"] =
            json!({ "type": "ws", "bind": address.to_string(), "max_connections": 0 });
    }
    json!({
        "listeners": listeners,
        "plugins": {
            "amqtt.plugins.authentication.AnonymousAuthPlugin": { "allow_anonymous": true },
            "amqtt.plugins.sys.broker.BrokerSysPlugin": { "sys_interval": 1 },
        },
    })
}

/// The plan for one native instance of `program`.
pub fn native(program: &Path, instance: &Instance<'_>) -> NativePlan {
    let config_path = instance.dir.join(CONFIG_FILE);
    let websocket = instance.websocket.map(|listen| listen.address);
    let text = serde_json::to_string_pretty(&config(instance.listen, websocket))
        .unwrap_or_default()
        + "\n";
    let mut main = CommandLine::new(program);
    main.args = vec!["-c".into(), config_path.display().to_string()];
    main.env_remove_prefixes = ENV_PREFIXES.to_vec();
    NativePlan {
        files: vec![(config_path, text)],
        main_process_names: PROCESS_NAMES,
        port_taken_markers: PORT_TAKEN,
        version_command: VersionCommand::flag(program, ENV_PREFIXES, VERSION_IN_OUTPUT),
        // SIGTERM: Python's default is to exit, and there is nothing to persist.
        ..NativePlan::of(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WebSocketListen;
    use domain::BrokerOptions;

    fn plan_with(websocket: Option<&str>) -> NativePlan {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "am",
            dir: Path::new("/state/am"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options: &options,
            secret: "s",
            quic: None,
            websocket: websocket.map(|address| WebSocketListen {
                address: address.parse().unwrap(),
                interface: Some("lo"),
            }),
        };
        native(Path::new("/opt/amqtt/bin/amqtt"), &instance)
    }

    #[test]
    fn the_config_opens_only_mqtt_where_asked_anonymous_with_sys_every_second() {
        let plan = plan_with(None);
        assert_eq!(plan.main.args, ["-c", "/state/am/amqtt.yaml"]);
        assert_eq!(plan.main.env_remove_prefixes, ["PYTHON"]);
        let config: Value = serde_json::from_str(&plan.files[0].1).unwrap();
        assert_eq!(
            config["listeners"],
            json!({"default": {"type": "tcp", "bind": "127.0.0.1:4242", "max_connections": 0}})
        );
        let plugins = config["plugins"].as_object().unwrap();
        assert_eq!(plugins.len(), 2, "no event or packet logging: {plugins:?}");
        assert_eq!(
            plugins["amqtt.plugins.authentication.AnonymousAuthPlugin"]["allow_anonymous"],
            json!(true)
        );
        assert_eq!(
            plugins["amqtt.plugins.sys.broker.BrokerSysPlugin"]["sys_interval"],
            json!(1)
        );
        let version = plan.version_command.expect("the version from the program");
        assert_eq!(version.command.args, ["--version"]);
        assert_eq!(
            crate::version_after(version.marker, "0.12.1\n").as_deref(),
            Some("0.12.1")
        );
        assert_eq!(plan.main_process_names, ["amqtt"]);
    }

    #[test]
    fn a_websocket_listener_is_a_second_listener() {
        let config: Value =
            serde_json::from_str(&plan_with(Some("127.0.0.1:4243")).files[0].1).unwrap();
        assert_eq!(
            config["listeners"]["ws"],
            json!({"type": "ws", "bind": "127.0.0.1:4243", "max_connections": 0})
        );
    }
}
