//! VerneMQ: natively `vernemq console -noshell -noinput` plus `-vmq_server KEY VALUE`
//! application settings; in its pod the image's `DOCKER_VERNEMQ_*` variables.
//!
//! The `-vmq_server` settings override the installed `vernemq.conf` (its runner reads the
//! config from a directory fixed when the package was built, so a private config file is not
//! possible). The `listeners` setting replaces every listener with one MQTT listener on the
//! spec's address; values contain no spaces because the runner word-splits them. Data stays
//! in the installation's directory, and as root the runner switches to the `vernemq` user.
//! Both sides lift the same [`limits`], which the application reads under the names
//! `vernemq.conf` gives them.
//!
//! Natively its control plane stays on this host: Erlang distribution binds to loopback
//! (`-kernel inet_dist_use_interface`) and so does the epmd it starts (`ERL_EPMD_ADDRESS`),
//! and inherited `ERL_*` flags are dropped.
//!
//! The cookie is the instance's random secret, never the installed `vernemq.conf`'s
//! `distributed_cookie` (stock `vmq`), and never in argv where any local user reads it. The
//! runner always passes that file's cookie as `-setcookie C`; a second, bare `-setcookie`
//! makes Erlang (every OTP release: "any other combination of arity 0 and 1 options makes us
//! pretend they were not there") ignore both and read `$HOME/.erlang.cookie`, which the plan
//! writes (0400) in a home of the instance's own. The runner keeps `HOME` only if it is not
//! asked to switch users: as root it would `exec su - vernemq`, which resets `HOME` and drops
//! the environment (`ERL_EPMD_ADDRESS` with it), so the agent starts it as the package's
//! service user [`SERVICE_ACCOUNT`] itself.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Generated, Instance, MQTT_PORT, NativePlan, Pod, Readiness, data};

/// Where VerneMQ's `bin/vernemq` is looked for: its packages, its tarball, its image's layout.
pub const PROGRAMS: &[&str] = &[
    "/usr/sbin/vernemq",
    "/usr/bin/vernemq",
    "/opt/vernemq/bin/vernemq",
    "/vernemq/bin/vernemq",
];

/// The user the package's runner switches to, and the agent starts it as when root.
pub const SERVICE_ACCOUNT: &str = "vernemq";

/// The instance's home (below its state directory): only its `.erlang.cookie`.
pub const HOME_DIR: &str = "home";

/// How long the Erlang VM may take to answer MQTT.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// VerneMQ's start line is not known here: no version is read from its log.
pub const VERSION_IN_LOG: Option<&str> = None;

/// The pinned image; [`PROVENANCE`] says why this tag.
pub const IMAGE: &str = "vernemq/vernemq:2.1.1";

/// The Erlang cookie [`IMAGE`] ships (`distributed_cookie` in its `vernemq.conf`); the pod
/// never keeps it.
pub const IMAGE_COOKIE: &str = "vmq";

/// Which image the study deployed, and why [`IMAGE`].
pub const PROVENANCE: &str = "The study deployed VerneMQ with its Helm chart, whose images were amd64 \
            only. 2.1.1 is the release whose official image was also published for arm64 \
            (2.1.2's is amd64 only), so one tag serves both setups. The image is VerneMQ's \
            binary build: it starts only with its EULA accepted (DOCKER_VERNEMQ_ACCEPT_EULA=yes, \
            as the study's chart values did), and commercial use needs a VerneMQ subscription.";

/// Message size and queue limits: `(name, value)` by their `vernemq.conf` names.
pub fn limits(options: &BrokerOptions) -> [(&'static str, String); 3] {
    let queued = options.max_queued_messages().to_string();
    [
        // 0: no limit on the size of a message.
        ("max_message_size", "0".to_owned()),
        ("max_online_messages", queued.clone()),
        ("max_offline_messages", queued),
    ]
}

/// The inflight window, when the spec states one.
fn inflight(options: &BrokerOptions) -> Option<(&'static str, String)> {
    options
        .max_inflight_messages
        .map(|inflight| ("max_inflight_messages", inflight.to_string()))
}

/// The plan for one native node of `program`.
pub fn native(program: &Path, instance: &Instance<'_>) -> NativePlan {
    let options = instance.options;
    let listeners = format!(
        "[{{mqtt,[{{{{{},{}}},[{{max_connections,infinity}}]}}]}}]",
        erlang_ip(instance.listen.ip()),
        instance.listen.port()
    );
    let settings = std::iter::once(("allow_anonymous", "true".to_owned()))
        .chain(limits(options))
        .chain([("listeners", listeners)])
        .chain(inflight(options));
    let mut main = CommandLine::new(program);
    main.args = ["console", "-noshell", "-noinput"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    for (key, value) in settings {
        main.args
            .extend(["-vmq_server".to_owned(), key.to_owned(), value]);
    }
    main.args
        .extend(DISTRIBUTION_ON_LOOPBACK.split(' ').map(str::to_owned));
    // Bare: with the runner's own `-setcookie C`, Erlang falls back to $HOME/.erlang.cookie.
    main.args.push("-setcookie".to_owned());
    let home = instance.dir.join(HOME_DIR);
    main.env = vec![
        ("ERL_EPMD_ADDRESS".to_owned(), "127.0.0.1".to_owned()),
        ("HOME".to_owned(), home.display().to_string()),
    ];
    main.env_remove_prefixes = vec!["ERL_", "EPMD_", "XDG_CONFIG_HOME"];
    NativePlan {
        private_files: vec![(home.join(".erlang.cookie"), instance.secret.to_owned())],
        service_account: Some(SERVICE_ACCOUNT),
        ..NativePlan::erlang(main, options.start_deadline_or(START_DEADLINE))
    }
}

/// Erlang flags that keep the distribution listener on loopback.
pub const DISTRIBUTION_ON_LOOPBACK: &str = "-kernel inet_dist_use_interface {127,0,0,1}";

/// An IP address as an Erlang tuple: `{127,0,0,1}`, `{0,0,0,0,0,0,0,1}`.
fn erlang_ip(ip: IpAddr) -> String {
    let parts: Vec<String> = match ip {
        IpAddr::V4(ip) => ip.octets().iter().map(u8::to_string).collect(),
        IpAddr::V6(ip) => ip.segments().iter().map(u16::to_string).collect(),
    };
    format!("{{{}}}", parts.join(","))
}

/// `max_online_messages` as the image's variable: its start script writes each
/// `DOCKER_VERNEMQ_X__Y=v` into `vernemq.conf` as `x.y = v`.
fn image_variable(name: &str) -> String {
    format!("DOCKER_VERNEMQ_{}", name.to_ascii_uppercase())
}

/// The pod: [`IMAGE`] with the same limits as variables, and a cookie of its own instead of
/// the image's [`IMAGE_COOKIE`].
pub fn pod(options: &BrokerOptions) -> Pod {
    let mut config = data([
        // The binary image refuses to start until its EULA is accepted.
        ("DOCKER_VERNEMQ_ACCEPT_EULA", "yes".to_owned()),
        ("DOCKER_VERNEMQ_ALLOW_ANONYMOUS", "on".to_owned()),
        (
            "DOCKER_VERNEMQ_LISTENER__MAX_CONNECTIONS",
            "infinity".to_owned(),
        ),
    ]);
    for (name, value) in limits(options).into_iter().chain(inflight(options)) {
        config.insert(image_variable(name), value);
    }
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31886,
        config,
        config_use: ConfigUse::Env,
        env: Vec::new(),
        // The image's start script writes it into `vernemq.conf` as `distributed_cookie`,
        // after the shipped line, so it wins.
        secret_env: vec![("DOCKER_VERNEMQ_DISTRIBUTED_COOKIE", Generated::ErlangCookie)],
        // 8888: the HTTP listener the image opens, which serves /health.
        ports: vec![("mqtt", MQTT_PORT), ("http", 8888)],
        // 200 once every listener runs and the node has joined its (one-node) cluster.
        readiness: Readiness::Http {
            port: "http",
            path: "/health",
        },
        cpu_request: "500m",
        memory_request_mib: 512,
        memory_limit_mib: 4096,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vernemq_gets_its_settings_on_the_command_line() {
        let options = BrokerOptions {
            max_inflight_messages: Some(50),
            ..BrokerOptions::default()
        };
        let instance = Instance {
            name: "v",
            dir: Path::new("/state/x"),
            listen: "127.0.0.1:1883".parse().unwrap(),
            options: &options,
            secret: "cookie-1",
            quic: None,
            websocket: None,
        };
        let plan = native(Path::new("/bin/true"), &instance);
        let args = plan.main.args.join(" ");
        assert_eq!(
            args,
            "console -noshell -noinput \
             -vmq_server allow_anonymous true \
             -vmq_server max_message_size 0 \
             -vmq_server max_online_messages 1000000 \
             -vmq_server max_offline_messages 1000000 \
             -vmq_server listeners [{mqtt,[{{{127,0,0,1},1883},[{max_connections,infinity}]}]}] \
             -vmq_server max_inflight_messages 50 \
             -kernel inet_dist_use_interface {127,0,0,1} \
             -setcookie"
        );
        assert_eq!(plan.main.env_value("ERL_EPMD_ADDRESS"), Some("127.0.0.1"));
        // The instance's random cookie, in a file of its home and not on the command line.
        assert!(!args.contains("cookie-1"), "the cookie is in argv: {args}");
        assert_eq!(plan.main.env_value("HOME"), Some("/state/x/home"));
        assert_eq!(
            plan.private_files,
            [(
                Path::new("/state/x/home/.erlang.cookie").to_owned(),
                "cookie-1".to_owned()
            )]
        );
        assert_eq!(plan.service_account, Some("vernemq"));
        assert!(plan.main.env_remove_prefixes.contains(&"ERL_"));
        assert!(
            plan.main.args.iter().all(|arg| !arg.contains(' ')),
            "the runner word-splits"
        );
        assert_eq!(erlang_ip("::1".parse().unwrap()), "{0,0,0,0,0,0,0,1}");
    }

    #[test]
    fn the_pod_states_the_same_limits_as_image_variables() {
        let pod = pod(&BrokerOptions::default());
        for (key, value) in [
            ("DOCKER_VERNEMQ_MAX_MESSAGE_SIZE", "0"),
            ("DOCKER_VERNEMQ_MAX_ONLINE_MESSAGES", "1000000"),
            ("DOCKER_VERNEMQ_MAX_OFFLINE_MESSAGES", "1000000"),
        ] {
            assert_eq!(
                pod.config.get(key).map(String::as_str),
                Some(value),
                "{key}"
            );
        }
        assert!(
            !pod.config
                .contains_key("DOCKER_VERNEMQ_MAX_INFLIGHT_MESSAGES")
        );
    }
}
