//! EMQX 5: configured through `EMQX_*` variables (`__` separates levels) natively and in its
//! pod alike.
//!
//! Natively `emqx foreground` runs with a node name and a random cookie of its own, data and
//! logs in the instance's directory, the TCP listener on the spec's address, the other
//! listeners off and the dashboard on a free loopback port. Its control plane stays on this
//! host: Erlang distribution binds to loopback (`inet_dist_use_interface`), gen_rpc listens on
//! a chosen port instead of the well-known 5369, and inherited `ERL_*` flags cannot reopen
//! either. Both sides set [`benchmark_settings`]:
//! `EMQX_MQTT__MAX_PACKET_SIZE=2MB` as in the study, deep queues, and with no authenticator
//! configured EMQX admits anonymous clients, which `AUTHORIZATION__NO_MATCH=allow` lets
//! publish and subscribe to any topic.
//!
//! Natively, an instance asking for QUIC gets EMQX 5's `listeners.quic.default` (off unless
//! enabled): on its address, with the certificate and key the agent made; in the pod, on UDP
//! 14567 with the certificate and key from a Secret ([`pod_quic`]). EMQX serves MQTT on
//! the connection's one stream unless the client opens more (its single-stream mode, which
//! loadgen speaks). EMQX is not installed on the machine that builds this, so the listener
//! is checked here by its settings only, and by the agent's readiness probe over QUIC on a
//! node that has EMQX.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Generated, Instance, MQTT_PORT, NativePlan, Pod, Readiness};

/// Where EMQX's `bin/emqx` is looked for: its package, its tarball in `/opt`, a local install.
pub const PROGRAMS: &[&str] = &["/usr/bin/emqx", "/opt/emqx/bin/emqx", "/usr/local/bin/emqx"];

/// How long the Erlang VM may take to answer MQTT.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// EMQX's largest MQTT packet, as the study configured it.
pub const MAX_PACKET_SIZE: &str = "2MB";

/// EMQX's start line is not known here: no version is read from its log.
pub const VERSION_IN_LOG: Option<&str> = None;

/// The pinned image; [`PROVENANCE`] says why this tag.
pub const IMAGE: &str = "emqx:5.0.22";

/// The Erlang cookie [`IMAGE`] ships (`node.cookie` in its `emqx.conf`); the pod never
/// keeps it.
pub const IMAGE_COOKIE: &str = "emqxsecretcookie";

/// The dashboard admin's password [`IMAGE`] ships (`dashboard.default_password`); the pod
/// never keeps it.
pub const IMAGE_DASHBOARD_PASSWORD: &str = "public";

/// Which image the study deployed, and why [`IMAGE`].
pub const PROVENANCE: &str = "The study deployed emqx:5.0.22 with EMQX_MQTT__MAX_PACKET_SIZE=2MB; the \
            same official image (amd64, arm64v8) and packet size are used.";

/// The settings a benchmark needs, as `EMQX_*` variables, natively and in the pod.
pub fn benchmark_settings(options: &BrokerOptions) -> Vec<(&'static str, String)> {
    let mut settings = vec![
        ("EMQX_MQTT__MAX_PACKET_SIZE", MAX_PACKET_SIZE.to_owned()),
        (
            "EMQX_MQTT__MAX_MQUEUE_LEN",
            options.max_queued_messages().to_string(),
        ),
        ("EMQX_AUTHORIZATION__NO_MATCH", "allow".to_owned()),
    ];
    if let Some(inflight) = options.max_inflight_messages {
        settings.push(("EMQX_MQTT__MAX_INFLIGHT", inflight.to_string()));
    }
    settings
}

/// Free ports for EMQX's private listeners, chosen by the agent.
#[derive(Debug, Clone, Copy)]
pub struct PrivatePorts {
    /// The dashboard's HTTP listener, on loopback.
    pub dashboard: u16,
    /// gen_rpc's TCP server (node-to-node calls, authenticated by the cookie).
    pub rpc: u16,
}

/// Erlang flags that keep the distribution listener on loopback.
pub const DISTRIBUTION_ON_LOOPBACK: &str = "-kernel inet_dist_use_interface {127,0,0,1}";

/// The plan for one native node of `program`, its private listeners on `ports`.
pub fn native(program: &Path, instance: &Instance<'_>, ports: PrivatePorts) -> NativePlan {
    let dir = |name: &str| instance.dir.join(name).display().to_string();
    let own = [
        (
            "EMQX_NODE__NAME",
            format!("continuum-{}@127.0.0.1", instance.name),
        ),
        ("EMQX_NODE__COOKIE", instance.secret.to_owned()),
        ("EMQX_NODE__DATA_DIR", dir("data")),
        ("EMQX_LOG_DIR", dir("log")),
        (
            "EMQX_LISTENERS__TCP__DEFAULT__BIND",
            instance.listen.to_string(),
        ),
        ("EMQX_LISTENERS__SSL__DEFAULT__ENABLED", "false".to_owned()),
        ("EMQX_LISTENERS__WS__DEFAULT__ENABLED", "false".to_owned()),
        ("EMQX_LISTENERS__WSS__DEFAULT__ENABLED", "false".to_owned()),
        (
            "EMQX_DASHBOARD__LISTENERS__HTTP__BIND",
            SocketAddr::from((Ipv4Addr::LOCALHOST, ports.dashboard)).to_string(),
        ),
        ("EMQX_RPC__PORT_DISCOVERY", "manual".to_owned()),
        ("EMQX_RPC__TCP_SERVER_PORT", ports.rpc.to_string()),
        ("ERL_ZFLAGS", DISTRIBUTION_ON_LOOPBACK.to_owned()),
    ];
    let quic = instance.quic.map(|quic| {
        quic_listener(
            quic.address.to_string(),
            quic.cert_file.display().to_string(),
            quic.key_file.display().to_string(),
        )
    });
    let mut main = CommandLine::new(program);
    main.args = vec!["foreground".into()];
    main.env = own
        .into_iter()
        .chain(quic.into_iter().flatten())
        .chain(benchmark_settings(instance.options))
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
    main.env_remove_prefixes = vec!["EMQX_", "ERL_", "EPMD_", "WITH_EPMD"];
    NativePlan::erlang(main, instance.options.start_deadline_or(START_DEADLINE))
}

/// `listeners.quic.default` on `bind`, with `cert` and `key`. EMQX 5.0 reads the listener's
/// certfile and keyfile; 5.1 and later drop those as deprecated and read ssl_options: both
/// are set.
fn quic_listener(bind: String, cert: String, key: String) -> [(&'static str, String); 6] {
    [
        ("EMQX_LISTENERS__QUIC__DEFAULT__ENABLED", "true".to_owned()),
        ("EMQX_LISTENERS__QUIC__DEFAULT__BIND", bind),
        ("EMQX_LISTENERS__QUIC__DEFAULT__CERTFILE", cert.clone()),
        ("EMQX_LISTENERS__QUIC__DEFAULT__KEYFILE", key.clone()),
        ("EMQX_LISTENERS__QUIC__DEFAULT__SSL_OPTIONS__CERTFILE", cert),
        ("EMQX_LISTENERS__QUIC__DEFAULT__SSL_OPTIONS__KEYFILE", key),
    ]
}

/// The UDP port of the pod's QUIC listener: EMQX's documented 14567.
pub const POD_QUIC_PORT: u16 = 14567;

/// The group [`IMAGE`] runs EMQX as (its Dockerfile's `emqx`, gid 1000).
pub const IMAGE_GROUP: i64 = 1000;

/// The pod's QUIC listener: on every address of the pod at [`POD_QUIC_PORT`], with the
/// certificate and key the agent mounts. Whether the pinned image was built with QUIC
/// cannot be checked on the machine that builds this (no image is pulled here); the agent's
/// readiness probe over QUIC finds out on the node.
pub fn pod_quic() -> crate::PodQuic {
    let file = |name: &str| format!("{}/{name}", crate::POD_QUIC_DIR);
    crate::PodQuic {
        port: POD_QUIC_PORT,
        env: quic_listener(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, POD_QUIC_PORT)).to_string(),
            file(crate::POD_QUIC_CERT),
            file(crate::POD_QUIC_KEY),
        )
        .into(),
        group: IMAGE_GROUP,
    }
}

/// The pod: [`IMAGE`] with [`benchmark_settings`] as its environment, and a cookie and a
/// dashboard password of its own instead of the image's [`IMAGE_COOKIE`] and
/// [`IMAGE_DASHBOARD_PASSWORD`]. The other listeners stay as shipped: inside the pod they
/// collide with nothing, the Service exposes MQTT only, and the broker's NetworkPolicy keeps
/// other pods off them. The dashboard listener stays for the readiness probe (the kubelet
/// probes from the pod's node, which a NetworkPolicy always admits); its admin password is
/// drawn per deployment, for an operator who reads it from the Secret.
pub fn pod(options: &BrokerOptions) -> Pod {
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31884,
        config: benchmark_settings(options)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
        config_use: ConfigUse::Env,
        env: Vec::new(),
        secret_env: vec![
            ("EMQX_NODE__COOKIE", Generated::ErlangCookie),
            // Read once, when the first boot creates the admin user: every pod boots first,
            // since it keeps no data across restarts.
            (
                "EMQX_DASHBOARD__DEFAULT_PASSWORD",
                Generated::DashboardPassword,
            ),
        ],
        ports: vec![("mqtt", MQTT_PORT), ("dashboard", 18083)],
        // EMQX's status API answers 200 once the node runs (its Helm chart's probe).
        readiness: Readiness::Http {
            port: "dashboard",
            path: "/api/v5/status",
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
    fn emqx_runs_in_the_foreground_with_the_studys_packet_size() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "x",
            dir: Path::new("/state/x"),
            listen: "127.0.0.1:1883".parse().unwrap(),
            options: &options,
            secret: "cookie-1",
            quic: None,
            websocket: None,
        };
        let ports = PrivatePorts {
            dashboard: 40001,
            rpc: 40002,
        };
        let plan = native(Path::new("/bin/true"), &instance, ports);
        assert_eq!(plan.main.args, ["foreground"]);
        for (name, value) in [
            ("EMQX_NODE__NAME", "continuum-x@127.0.0.1"),
            ("EMQX_NODE__COOKIE", "cookie-1"),
            ("EMQX_NODE__DATA_DIR", "/state/x/data"),
            ("EMQX_LOG_DIR", "/state/x/log"),
            ("EMQX_LISTENERS__TCP__DEFAULT__BIND", "127.0.0.1:1883"),
            ("EMQX_LISTENERS__SSL__DEFAULT__ENABLED", "false"),
            ("EMQX_MQTT__MAX_PACKET_SIZE", "2MB"),
            ("EMQX_MQTT__MAX_MQUEUE_LEN", "1000000"),
            ("EMQX_AUTHORIZATION__NO_MATCH", "allow"),
            ("EMQX_DASHBOARD__LISTENERS__HTTP__BIND", "127.0.0.1:40001"),
            ("EMQX_RPC__PORT_DISCOVERY", "manual"),
            ("EMQX_RPC__TCP_SERVER_PORT", "40002"),
            ("ERL_ZFLAGS", "-kernel inet_dist_use_interface {127,0,0,1}"),
        ] {
            assert_eq!(plan.main.env_value(name), Some(value), "{name}");
        }
        // Inherited Erlang flags could reopen the distribution; the environment drops them.
        assert!(plan.main.env_remove_prefixes.contains(&"ERL_"));
        assert_eq!(plan.main.env_value("EMQX_MQTT__MAX_INFLIGHT"), None);
        assert_eq!(plan.main_process_names, ["beam.smp"]);
        assert_eq!(plan.ready_deadline, START_DEADLINE);
    }

    #[test]
    fn the_pods_quic_listener_reads_the_mounted_certificate_on_every_address() {
        let quic = crate::pod_quic(domain::Product::Emqx).expect("EMQX's pod speaks QUIC");
        assert_eq!((quic.port, quic.group), (14567, 1000));
        let env: std::collections::BTreeMap<_, _> = quic.env.into_iter().collect();
        assert_eq!(env["EMQX_LISTENERS__QUIC__DEFAULT__ENABLED"], "true");
        assert_eq!(env["EMQX_LISTENERS__QUIC__DEFAULT__BIND"], "0.0.0.0:14567");
        for name in ["CERTFILE", "SSL_OPTIONS__CERTFILE"] {
            let name = format!("EMQX_LISTENERS__QUIC__DEFAULT__{name}");
            assert_eq!(env[name.as_str()], "/etc/continuum/quic/tls.crt");
        }
        for name in ["KEYFILE", "SSL_OPTIONS__KEYFILE"] {
            let name = format!("EMQX_LISTENERS__QUIC__DEFAULT__{name}");
            assert_eq!(env[name.as_str()], "/etc/continuum/quic/tls.key");
        }
        assert_eq!(
            crate::pod_quic(domain::Product::Mosquitto),
            Err("its pod opens no QUIC listener; EMQX's does")
        );
    }

    #[test]
    fn an_instance_asking_for_quic_gets_emqxs_quic_listener_with_the_agents_certificate() {
        let options = BrokerOptions::default();
        let quic = crate::QuicListen {
            address: "198.18.0.2:14567".parse().unwrap(),
            cert_file: Path::new("/state/x/quic/cert.pem"),
            key_file: Path::new("/state/x/quic/key.pem"),
        };
        let instance = Instance {
            name: "x",
            dir: Path::new("/state/x"),
            listen: "198.18.0.2:1883".parse().unwrap(),
            options: &options,
            secret: "cookie-1",
            quic: Some(quic),
            websocket: None,
        };
        let ports = PrivatePorts {
            dashboard: 40001,
            rpc: 40002,
        };
        let plan = native(Path::new("/bin/true"), &instance, ports);
        for (name, value) in [
            ("EMQX_LISTENERS__QUIC__DEFAULT__ENABLED", "true"),
            ("EMQX_LISTENERS__QUIC__DEFAULT__BIND", "198.18.0.2:14567"),
            (
                "EMQX_LISTENERS__QUIC__DEFAULT__CERTFILE",
                "/state/x/quic/cert.pem",
            ),
            (
                "EMQX_LISTENERS__QUIC__DEFAULT__KEYFILE",
                "/state/x/quic/key.pem",
            ),
            (
                "EMQX_LISTENERS__QUIC__DEFAULT__SSL_OPTIONS__CERTFILE",
                "/state/x/quic/cert.pem",
            ),
            (
                "EMQX_LISTENERS__QUIC__DEFAULT__SSL_OPTIONS__KEYFILE",
                "/state/x/quic/key.pem",
            ),
        ] {
            assert_eq!(plan.main.env_value(name), Some(value), "{name}");
        }
        let without = native(
            Path::new("/bin/true"),
            &Instance {
                quic: None,
                ..instance
            },
            ports,
        );
        assert_eq!(
            without
                .main
                .env_value("EMQX_LISTENERS__QUIC__DEFAULT__ENABLED"),
            None
        );
    }
}
