//! aedes, the Node.js broker, run by its command line (npm's `aedes-cli`, which brings aedes
//! itself, `aedes-stats` and `ws`): `aedes --config FILE`, the file a CommonJS module the CLI
//! `require`s. No pod: aedes-cli's project publishes an image, but none of its tags could be
//! checked from here to pin. Settings read from aedes-cli 1.0.2's
//! `config.js` and `lib/cli.js`; the config file replaces every command-line option.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;
use serde_json::{Value, json};

use crate::{Instance, NativePlan, VersionCommand, WRITTEN_BY_AGENT};

/// Where `aedes` is looked for: `npm install -g` with Debian's npm (`/usr/local`), then with
/// NodeSource's (`/usr`).
pub const PROGRAMS: &[&str] = &["/usr/local/bin/aedes", "/usr/bin/aedes"];

/// How to install the version the project is tested with (aedes-cli 1.0.2 brings aedes 1.x,
/// 1.2.0 here; it pins aedes only to `^1.0.1`, so the version a run reports is the one that
/// ran). Node must load ES modules with `require`: 20.19 or later, 22.12 or later.
pub const INSTALL: &str = "npm install -g aedes-cli@1.0.2 (Node.js 20.19 or later)";

/// How long the broker may take to answer MQTT; Node starts it within a second.
pub const START_DEADLINE: Duration = Duration::from_secs(15);

/// Its WebSocket server (`ws`) serves every path; this is the one clients use.
pub const WEBSOCKET_PATH: &str = "/mqtt";

/// The config file's name in the instance's directory.
pub const CONFIG_FILE: &str = "aedes-config.js";

/// The broker's process: `aedes` is a script run by `node`.
pub const PROCESS_NAMES: &[&str] = &["node"];

/// What Node prints when the port is taken.
pub const PORT_TAKEN: &[&str] = &["EADDRINUSE"];

/// What precedes the version in the version command's output.
pub const VERSION_IN_OUTPUT: &str = "aedes ";

/// Node reads `NODE_OPTIONS` (which can load any module into the broker) and other
/// `NODE_*` variables, and the `debug` module `DEBUG` (`mqtt-packet:*` logs every packet):
/// removed from the broker's environment.
pub const ENV_PREFIXES: &[&str] = &["NODE_", "DEBUG"];

/// The version of the aedes library the CLI at `argv[1]` loads (the CLI's own version,
/// `aedes --version`, is not the broker's): resolved from the CLI's real folder, as Node
/// resolves it when the broker starts. aedes exports no `package.json`, so its path is cut
/// from where its main file resolves.
const VERSION_SCRIPT: &str = "const p=require('path'),f=require('fs');\
     const r=require.resolve('aedes',{paths:[p.dirname(f.realpathSync(process.argv[1]))]});\
     const m=r.slice(0,r.lastIndexOf('node_modules/aedes/')+18);\
     console.log('aedes '+JSON.parse(f.readFileSync(p.join(m,'package.json'))).version)";

/// The CLI's default for messages mqemitter delivers at once; written so the config states
/// it (a parallelism bound: messages beyond it wait, none is dropped).
const CONCURRENCY: u32 = 100;

/// The config of one instance: MQTT on `listen` only, WebSocket on `websocket`'s port (the
/// CLI binds every protocol to one host, which is the MQTT listener's), anonymous, in memory,
/// `aedes-stats` publishing `$SYS/<broker id>/...` every second.
pub fn config(
    name: &str,
    options: &BrokerOptions,
    listen: SocketAddr,
    websocket: Option<SocketAddr>,
) -> Value {
    let mut protos = vec!["tcp"];
    if websocket.is_some() {
        protos.push("ws");
    }
    json!({
        "protos": protos,
        "host": listen.ip().to_string(),
        "port": listen.port(),
        // Unused unless "ws" is among protos; never the CLI's default 3000.
        "wsPort": websocket.map_or(0, |address| address.port()),
        "brokerId": broker_id(name),
        "concurrency": CONCURRENCY,
        // Messages queued for a client whose session is not yet set up (the CLI's 42 would
        // fail a reconnecting subscriber's backlog).
        "queueLimit": options.max_queued_messages(),
        "stats": true,
        "statsInterval": 1000,
        "persistence": Value::Null,
        "mq": Value::Null,
        "credentials": Value::Null,
        "verbose": false,
        "veryVerbose": false,
    })
}

/// The broker id, the second level of its `$SYS` topics.
pub fn broker_id(name: &str) -> String {
    format!("continuum-{name}")
}

/// The plan for one native instance of `program`.
pub fn native(program: &Path, instance: &Instance<'_>) -> NativePlan {
    let config_path = instance.dir.join(CONFIG_FILE);
    let websocket = instance.websocket.map(|listen| listen.address);
    let config = config(instance.name, instance.options, instance.listen, websocket);
    let text = format!(
        "// Written by {WRITTEN_BY_AGENT}.\nmodule.exports = {};\n",
        serde_json::to_string_pretty(&config).unwrap_or_default()
    );
    let mut main = CommandLine::new(program);
    main.args = vec!["--config".into(), config_path.display().to_string()];
    main.env_remove_prefixes = ENV_PREFIXES.to_vec();
    let mut version = CommandLine::new("/usr/bin/env");
    version.args = vec![
        "node".into(),
        "-e".into(),
        VERSION_SCRIPT.into(),
        program.display().to_string(),
    ];
    version.env_remove_prefixes = ENV_PREFIXES.to_vec();
    NativePlan {
        files: vec![(config_path, text)],
        main_process_names: PROCESS_NAMES,
        port_taken_markers: PORT_TAKEN,
        version_command: Some(VersionCommand {
            command: version,
            marker: VERSION_IN_OUTPUT,
        }),
        // SIGTERM: Node's default is to exit, and there is nothing to persist.
        ..NativePlan::of(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WebSocketListen;

    fn plan_with(options: &BrokerOptions, websocket: Option<&str>) -> NativePlan {
        let instance = Instance {
            name: "ae",
            dir: Path::new("/state/ae"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options,
            secret: "s",
            quic: None,
            websocket: websocket.map(|address| WebSocketListen {
                address: address.parse().unwrap(),
                interface: Some("lo"),
            }),
        };
        native(Path::new("/usr/bin/aedes"), &instance)
    }

    fn config_of(plan: &NativePlan) -> Value {
        let text = &plan.files[0].1;
        let json = text
            .split_once("module.exports = ")
            .and_then(|(_, rest)| rest.strip_suffix(";\n"))
            .expect("a module exporting one object");
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_config_opens_only_mqtt_where_asked_anonymous_in_memory_with_stats() {
        let plan = plan_with(&BrokerOptions::default(), None);
        assert_eq!(plan.main.args, ["--config", "/state/ae/aedes-config.js"]);
        assert_eq!(plan.main.env_remove_prefixes, ["NODE_", "DEBUG"]);
        assert!(
            plan.files[0]
                .1
                .starts_with("// Written by the Continuum agent.\n")
        );
        let config = config_of(&plan);
        assert_eq!(config["protos"], json!(["tcp"]));
        assert_eq!(config["host"], json!("127.0.0.1"));
        assert_eq!(config["port"], json!(4242));
        assert_eq!(config["wsPort"], json!(0));
        assert_eq!(config["brokerId"], json!("continuum-ae"));
        assert_eq!(config["queueLimit"], json!(1_000_000));
        assert_eq!(config["stats"], json!(true));
        assert_eq!(config["statsInterval"], json!(1000));
        for unset in ["persistence", "mq", "credentials"] {
            assert_eq!(config[unset], Value::Null, "{unset}");
        }
        let version = plan.version_command.expect("the library's version");
        assert_eq!(version.command.args.last().unwrap(), "/usr/bin/aedes");
        assert_eq!(plan.main_process_names, ["node"]);
        assert_eq!(plan.stop, None);
        assert_eq!(plan.ready_deadline, START_DEADLINE);
    }

    #[test]
    fn a_websocket_listener_and_the_spec_limits_reach_the_config() {
        let options = BrokerOptions {
            max_queued_messages: Some(10),
            ..BrokerOptions::default()
        };
        let config = config_of(&plan_with(&options, Some("127.0.0.1:4243")));
        assert_eq!(config["protos"], json!(["tcp", "ws"]));
        assert_eq!(config["wsPort"], json!(4243));
        assert_eq!(config["queueLimit"], json!(10));
    }
}
