//! ejabberd (Debian's 23.01), the Erlang XMPP server, as an MQTT broker through its
//! `mod_mqtt`: the Erlang VM started by `erl` on the package's applications with a config of
//! the agent's, not by `ejabberdctl`. Without `-sname` the VM starts no distribution, so there
//! is no epmd, no distribution port and no cookie to guard: the MQTT listener is the only
//! socket it opens (checked by the agent's socket listing). The pod runs ProcessOne's image
//! of the same release with the same config; there its start script names the node, so the
//! pod gets a cookie of its own and distribution on loopback only, without epmd.
//!
//! `mod_mqtt` asks every client for a password even with anonymous access (an empty one
//! means "authenticate me by my TLS certificate"), and takes any username and password with
//! `anonymous_protocol: login_anon`: [`ANONYMOUS_LOGIN`] is the pair Continuum sends.
//! It refuses `$share/` subscriptions.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use host::CommandLine;

use domain::BrokerOptions;

use crate::{
    ConfigUse, Generated, Instance, Login, MQTT_PORT, NativePlan, Pod, Readiness, WRITTEN_BY_AGENT,
    data,
};

/// Where `erl` is looked for (Debian's `erlang-base`, which `ejabberd` depends on).
pub const ERL_PROGRAMS: &[&str] = &["/usr/bin/erl"];

/// Where Debian puts ejabberd's own applications (`ejabberd-23.01/ebin`), by architecture;
/// its dependencies are in Erlang's own library folder, which `erl` always searches.
pub const LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/arm-linux-gnueabihf",
];

/// The application file that says ejabberd is installed in one of [`LIBRARY_DIRS`], inside
/// a folder named `ejabberd-VERSION`.
pub const APPLICATION_FILE: &str = "ebin/ejabberd.app";

/// How to install it (with a `policy-rc.d` that refuses, or the package starts a system
/// instance with a public epmd).
pub const INSTALL: &str = "apt-get install ejabberd";

/// The pinned image: ProcessOne's own, built for amd64 and arm64 (Docker Hub's
/// `ejabberd/ecs` is amd64 only and names its node, and so its database folder, after the
/// pod).
pub const IMAGE: &str = "ghcr.io/processone/ejabberd:23.01";

/// Why [`IMAGE`].
pub const PROVENANCE: &str = "The study did not measure ejabberd. The native recipe runs \
            Debian 12's 23.01; ghcr.io/processone/ejabberd:23.01 is ProcessOne's multi-arch \
            image of that release.";

/// Where the image's start script reads the config.
const POD_CONFIG_PATH: &str = "/opt/ejabberd/conf/ejabberd.yml";

/// The Erlang distribution port in the pod: fixed, so the start script starts no epmd
/// (`ERL_DIST_PORT`), and on loopback only.
const POD_DISTRIBUTION_PORT: u16 = 5210;

/// How long the VM may take to answer MQTT (about 4 s here).
pub const START_DEADLINE: Duration = Duration::from_secs(40);

/// The config, in the instance's folder.
pub const CONFIG_FILE: &str = "ejabberd.yml";

/// The login every client sends: any pair passes `login_anon`, none does not.
pub const ANONYMOUS_LOGIN: Login = Login {
    username: "continuum",
    password: "anonymous",
};

/// What ejabberd logs when the port is taken ("Failed to open socket at ...: address
/// already in use"); the VM then stops.
pub const PORT_TAKEN: &[&str] = &["address already in use"];

/// What precedes the version in its start line ("[info] ejabberd 23.01-1 is started in the
/// node nonode@nohost in 3.47s"), which its console logger writes to stdout.
pub const VERSION_IN_LOG: Option<&str> = Some("] ejabberd ");

/// Variables the VM or ejabberd read (`ERL_AFLAGS`, `ERL_FLAGS` and `ERL_ZFLAGS` add
/// arguments, `-eval` among them; `EJABBERD_*` redirect its config): removed from its
/// environment; `ERL_LIBS` is then set to the package's folder.
pub const ENV_PREFIXES: &[&str] = &["ERL_", "EJABBERD"];

/// The config of one instance: `mod_mqtt` alone on `listen`; anonymous clients that may
/// publish and subscribe anywhere; sessions in RAM, each queueing at most `max_queue`
/// messages; topic depth and retained matches not capped below what a test uses.
pub fn config(listen: SocketAddr, max_queue: u32) -> String {
    let mut text = String::new();
    let _ = write!(
        text,
        "# Written by {WRITTEN_BY_AGENT}.\n\
         hosts: [localhost]\n\
         loglevel: info\n\
         auth_method: [anonymous]\n\
         anonymous_protocol: login_anon\n\
         allow_multiple_connections: true\n\
         listen:\n  \
           - port: {port}\n    \
             ip: \"{ip}\"\n    \
             module: mod_mqtt\n    \
             backlog: 1024\n\
         modules:\n  \
           mod_mqtt:\n    \
             access_publish:\n      \
               \"#\": all\n    \
             access_subscribe:\n      \
               \"#\": all\n    \
             max_queue: {max_queue}\n    \
             queue_type: ram\n    \
             ram_db_type: mnesia\n    \
             max_topic_depth: 64\n    \
             match_retained_limit: infinity\n",
        port = listen.port(),
        ip = listen.ip(),
    );
    text
}

/// The plan for one native instance: `erl` on the applications under `libraries`.
pub fn native(erl: &Path, libraries: &Path, instance: &Instance<'_>) -> NativePlan {
    let dir = instance.dir;
    let config_path = dir.join(CONFIG_FILE);
    // Erlang strings on the command line are Erlang terms: quoted, backslashes and quotes
    // escaped (a state directory is the agent's, but a path is still text).
    let term = |path: &Path| {
        let text = path.display().to_string();
        format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
    };
    let mut main = CommandLine::new(erl);
    main.args = vec![
        "-noinput".into(),
        "-mnesia".into(),
        "dir".into(),
        term(&dir.join("db")),
        "-ejabberd".into(),
        "config".into(),
        term(&config_path),
        "log_path".into(),
        term(&dir.join("ejabberd.log")),
        "-s".into(),
        "ejabberd".into(),
    ];
    main.env_remove_prefixes = ENV_PREFIXES.to_vec();
    main.env = vec![
        ("ERL_LIBS".into(), libraries.display().to_string()),
        // Whatever the VM writes under HOME (a cookie, were distribution started) stays in
        // the instance's folder; its crash dump goes to ERL_CRASH_DUMP.
        ("HOME".into(), dir.display().to_string()),
        (
            "ERL_CRASH_DUMP".into(),
            dir.join("erl_crash.dump").display().to_string(),
        ),
    ];
    NativePlan {
        files: vec![(
            config_path,
            config(instance.listen, instance.options.max_queued_messages()),
        )],
        port_taken_markers: PORT_TAKEN,
        // SIGTERM: the VM stops its applications (OTP 20+); sessions are in RAM.
        ..NativePlan::erlang(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

/// The pod: [`IMAGE`] with [`config`] (MQTT on every interface of the pod) over its
/// `ejabberd.yml`, a cookie drawn for the deployment instead of the image's fixed one, and
/// the start script's Erlang distribution on a fixed loopback port with no epmd (`ejabberdctl`
/// itself talks to the node over it).
pub fn pod(options: &BrokerOptions) -> Pod {
    let listen = SocketAddr::from(([0, 0, 0, 0], MQTT_PORT));
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31889,
        config: data([(CONFIG_FILE, config(listen, options.max_queued_messages()))]),
        config_use: ConfigUse::Files(vec![(CONFIG_FILE, POD_CONFIG_PATH)]),
        env: vec![
            ("ERLANG_NODE_ARG", "ejabberd@localhost".into()),
            ("ERL_DIST_PORT", POD_DISTRIBUTION_PORT.to_string()),
            (
                "ERL_OPTIONS",
                "-kernel inet_dist_use_interface {127,0,0,1}".into(),
            ),
        ],
        secret_env: vec![("ERLANG_COOKIE", Generated::ErlangCookie)],
        ports: vec![("mqtt", MQTT_PORT)],
        // The listener opens before mod_mqtt serves; the agent's own probe, a CONNECT with
        // the login, waits for that once the pod is ready.
        readiness: Readiness::MqttPort,
        cpu_request: "250m",
        memory_request_mib: 256,
        memory_limit_mib: 2048,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::BrokerOptions;

    fn plan(options: &BrokerOptions) -> NativePlan {
        let instance = Instance {
            name: "ej",
            dir: Path::new("/state/ej"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options,
            secret: "s",
            quic: None,
            websocket: None,
        };
        native(
            Path::new("/usr/bin/erl"),
            Path::new("/usr/lib/x86_64-linux-gnu"),
            &instance,
        )
    }

    #[test]
    fn one_mqtt_listener_anonymous_in_ram_and_no_distribution() {
        let plan = plan(&BrokerOptions::default());
        let (path, config) = &plan.files[0];
        assert_eq!(path, Path::new("/state/ej/ejabberd.yml"));
        assert_eq!(config.matches("- port:").count(), 1, "{config}");
        assert!(
            config.contains("- port: 4242\n    ip: \"127.0.0.1\"\n    module: mod_mqtt\n"),
            "{config}"
        );
        for setting in [
            "auth_method: [anonymous]\n",
            "anonymous_protocol: login_anon\n",
            "max_queue: 1000000\n",
            "queue_type: ram\n",
        ] {
            assert!(config.contains(setting), "{setting} in {config}");
        }
        // No web listener (admin, API, upload) and no other module.
        for absent in ["ejabberd_http", "mod_http_api", "ejabberd_c2s", "0.0.0.0"] {
            assert!(!config.contains(absent), "{absent} in {config}");
        }
        let args = &plan.main.args;
        assert_eq!(args[0], "-noinput");
        assert!(
            args.windows(3)
                .any(|w| w == ["-ejabberd", "config", "\"/state/ej/ejabberd.yml\""]),
            "{args:?}"
        );
        // Distribution would open epmd and a port: nothing names the node.
        for flag in ["-sname", "-name", "-setcookie"] {
            assert!(!args.iter().any(|a| a == flag), "{flag}: {args:?}");
        }
        assert_eq!(&args[args.len() - 2..], ["-s", "ejabberd"]);
        assert_eq!(plan.main.env_remove_prefixes, ["ERL_", "EJABBERD"]);
        assert_eq!(
            plan.main.env[0],
            ("ERL_LIBS".into(), "/usr/lib/x86_64-linux-gnu".into())
        );
        assert_eq!(plan.main_process_names, ["beam.smp"]);
        assert_eq!(plan.port_taken_markers, ["address already in use"]);
    }

    #[test]
    fn the_spec_bounds_the_queue_and_the_start_line_gives_the_version() {
        let options = BrokerOptions {
            max_queued_messages: Some(5000),
            ..BrokerOptions::default()
        };
        assert!(plan(&options).files[0].1.contains("max_queue: 5000\n"));
        let ipv6 = config("[::1]:1883".parse().unwrap(), 10);
        assert!(ipv6.contains("ip: \"::1\"\n"), "{ipv6}");
        let start = "2026-12-05 22:01:56.666325+00:00 [info] ejabberd 23.01-1 is started in \
                     the node nonode@nohost in 3.47s";
        assert_eq!(
            crate::version_after(VERSION_IN_LOG.unwrap(), start).as_deref(),
            Some("23.01-1")
        );
    }
}
