//! ejabberd (Debian's 23.01), the Erlang XMPP server, as an MQTT broker through its
//! `mod_mqtt`: the Erlang VM started by `erl` on the package's applications with a config of
//! the agent's, not by `ejabberdctl`. Without `-sname` the VM starts no distribution, so there
//! is no epmd, no distribution port and no cookie to guard: the MQTT listener is the only
//! socket it opens (checked by the agent's socket listing). No pod: no image is pinned here.
//!
//! `mod_mqtt` asks every client for a username and a password even with anonymous access
//! (an empty password means "authenticate me by my TLS certificate"), and takes any pair
//! with `anonymous_protocol: login_anon`: [`ANONYMOUS_LOGIN`] is the pair Continuum sends.
//! It refuses `$share/` subscriptions.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use host::CommandLine;

use crate::{Instance, Login, NativePlan, WRITTEN_BY_AGENT};

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
/// publish and subscribe anywhere; sessions in RAM, with the spec's queue bound (none by
/// default); topic depth and retained matches not capped below what a test uses.
pub fn config(listen: SocketAddr, max_queued_messages: Option<u32>) -> String {
    let max_queue = max_queued_messages.map_or("unlimited".to_string(), |n| n.to_string());
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
        // The VM writes its crash dump and any cookie under HOME: the instance's folder.
        ("HOME".into(), dir.display().to_string()),
        (
            "ERL_CRASH_DUMP".into(),
            dir.join("erl_crash.dump").display().to_string(),
        ),
    ];
    NativePlan {
        files: vec![(
            config_path,
            config(instance.listen, instance.options.max_queued_messages),
        )],
        port_taken_markers: PORT_TAKEN,
        // SIGTERM: the VM stops its applications (OTP 20+); sessions are in RAM.
        ..NativePlan::erlang(main, instance.options.start_deadline_or(START_DEADLINE))
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
            "max_queue: unlimited\n",
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
        let ipv6 = config("[::1]:1883".parse().unwrap(), None);
        assert!(ipv6.contains("ip: \"::1\"\n"), "{ipv6}");
        let start = "2026-12-05 22:01:56.666325+00:00 [info] ejabberd 23.01-1 is started in \
                     the node nonode@nohost in 3.47s";
        assert_eq!(
            crate::version_after(VERSION_IN_LOG.unwrap(), start).as_deref(),
            Some("23.01-1")
        );
    }
}
