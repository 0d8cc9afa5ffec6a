//! EMQX, VerneMQ and HiveMQ CE: the study's other brokers, run where their binaries exist.
//!
//! None is installed on the development machines, so their command lines are checked by
//! unit tests against what is documented here, and a start without the binary is a
//! `FailedPrecondition` naming the paths looked at. Every plan keeps data, logs and config
//! in the instance's state directory where the product allows it, listens for MQTT on the
//! spec's address, accepts anonymous clients and packets of at least 2 MB.
//!
//! - EMQX 5: `emqx foreground`, configured through `EMQX_*` variables (`__` separates
//!   levels): node name and cookie of its own, data and logs in the state directory, the TCP
//!   listener on bind:port, the other listeners off, the dashboard on a free loopback port,
//!   `EMQX_MQTT__MAX_PACKET_SIZE=2MB` as in the study; with no authenticator configured
//!   EMQX admits anonymous clients, and `AUTHORIZATION__NO_MATCH=allow` lets them publish.
//! - VerneMQ: `vernemq console -noshell -noinput` plus `-vmq_server KEY VALUE` application
//!   settings, which override the installed `vernemq.conf` (its runner reads the config from
//!   a directory fixed when the package was built, so a private config file is not
//!   possible). The `listeners` setting replaces every listener with one MQTT listener on
//!   bind:port; values contain no spaces because the runner word-splits them. Data stays in
//!   the installation's directory, and as root the runner switches to the `vernemq` user.
//! - HiveMQ CE: `bin/run.sh` with `HIVEMQ_CONFIG_FOLDER`, `HIVEMQ_DATA_FOLDER` and
//!   `HIVEMQ_LOG_FOLDER` in the state directory and a generated `config.xml`. Anonymous access
//!   comes from the allow-all extension that HiveMQ CE ships in its `extensions/` folder,
//!   which is left as installed. `run.sh` always opens JMX (on every interface, without
//!   authentication); its port is a free one, set through `HIVEMQ_JMX_PORT`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::error::BrokerError;
use super::install::InstallPaths;
use super::native::{LaunchPlan, PlanContext};
use super::ports::free_loopback_ports;
use domain::Product;
use host::CommandLine;

/// How long the JVM and Erlang brokers may take to answer MQTT.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// EMQX's largest MQTT packet, as the study configured it.
pub const EMQX_MAX_PACKET_SIZE: &str = "2MB";

/// HiveMQ's largest MQTT packet: the MQTT maximum (and HiveMQ's default), stated.
pub const HIVEMQ_MAX_PACKET_SIZE: u32 = 268_435_460;

/// The plan for one EMQX 5 node.
pub fn emqx_plan(
    install: &InstallPaths,
    context: &PlanContext<'_>,
) -> Result<LaunchPlan, BrokerError> {
    let program = InstallPaths::locate(Product::Emqx, &install.emqx)?;
    let [dashboard] = free_loopback_ports(1)?[..] else {
        return Err(BrokerError::io(
            "choosing EMQX's dashboard port",
            std::io::Error::other("expected one port"),
        ));
    };
    let options = &context.spec.options;
    let dir = |name: &str| context.dir.join(name).display().to_string();
    let mut env = vec![
        (
            "EMQX_NODE__NAME",
            format!("continuum-{}@127.0.0.1", context.spec.name),
        ),
        ("EMQX_NODE__COOKIE", context.marker.to_owned()),
        ("EMQX_NODE__DATA_DIR", dir("data")),
        ("EMQX_LOG_DIR", dir("log")),
        (
            "EMQX_LISTENERS__TCP__DEFAULT__BIND",
            context.listen().to_string(),
        ),
        ("EMQX_LISTENERS__SSL__DEFAULT__ENABLED", "false".to_owned()),
        ("EMQX_LISTENERS__WS__DEFAULT__ENABLED", "false".to_owned()),
        ("EMQX_LISTENERS__WSS__DEFAULT__ENABLED", "false".to_owned()),
        (
            "EMQX_DASHBOARD__LISTENERS__HTTP__BIND",
            SocketAddr::from((Ipv4Addr::LOCALHOST, dashboard)).to_string(),
        ),
        (
            "EMQX_MQTT__MAX_PACKET_SIZE",
            EMQX_MAX_PACKET_SIZE.to_owned(),
        ),
        (
            "EMQX_MQTT__MAX_MQUEUE_LEN",
            options.max_queued_messages().to_string(),
        ),
        ("EMQX_AUTHORIZATION__NO_MATCH", "allow".to_owned()),
    ];
    if let Some(inflight) = options.max_inflight_messages {
        env.push(("EMQX_MQTT__MAX_INFLIGHT", inflight.to_string()));
    }
    let mut main = CommandLine::new(program);
    main.args = vec!["foreground".into()];
    main.env = env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    main.env_remove_prefixes = vec!["EMQX_"];
    Ok(erlang_plan(Product::Emqx, context, main))
}

/// The plan for one VerneMQ node.
pub fn vernemq_plan(
    install: &InstallPaths,
    context: &PlanContext<'_>,
) -> Result<LaunchPlan, BrokerError> {
    let program = InstallPaths::locate(Product::VerneMq, &install.vernemq)?;
    let options = &context.spec.options;
    let queued = options.max_queued_messages().to_string();
    let listen = context.listen();
    let listeners = format!(
        "[{{mqtt,[{{{{{},{}}},[{{max_connections,infinity}}]}}]}}]",
        erlang_ip(listen.ip()),
        listen.port()
    );
    let mut settings = vec![
        ("allow_anonymous", "true".to_owned()),
        // 0: no limit on the size of a message.
        ("max_message_size", "0".to_owned()),
        ("max_online_messages", queued.clone()),
        ("max_offline_messages", queued),
        ("listeners", listeners),
    ];
    if let Some(inflight) = options.max_inflight_messages {
        settings.push(("max_inflight_messages", inflight.to_string()));
    }
    let mut main = CommandLine::new(program);
    main.args = ["console", "-noshell", "-noinput"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    for (key, value) in settings {
        main.args
            .extend(["-vmq_server".to_owned(), key.to_owned(), value]);
    }
    Ok(erlang_plan(Product::VerneMq, context, main))
}

/// The plan for one HiveMQ CE instance.
pub fn hivemq_plan(
    install: &InstallPaths,
    context: &PlanContext<'_>,
) -> Result<LaunchPlan, BrokerError> {
    let program = InstallPaths::locate(Product::HiveMq, &install.hivemq)?;
    let [jmx] = free_loopback_ports(1)?[..] else {
        return Err(BrokerError::io(
            "choosing HiveMQ's JMX port",
            std::io::Error::other("expected one port"),
        ));
    };
    let folder = |name: &str| context.dir.join(name);
    let mut main = CommandLine::new(program);
    main.env = [
        ("HIVEMQ_CONFIG_FOLDER", folder("conf")),
        ("HIVEMQ_DATA_FOLDER", folder("data")),
        ("HIVEMQ_LOG_FOLDER", folder("log")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.display().to_string()))
    .chain([("HIVEMQ_JMX_PORT".to_owned(), jmx.to_string())])
    .collect();
    main.env_remove_prefixes = vec!["HIVEMQ_"];
    let config = hivemq_config(
        context.spec.bind,
        context.port,
        context.spec.options.max_queued_messages(),
    );
    Ok(LaunchPlan {
        product: Product::HiveMq,
        listen: context.listen(),
        files: vec![(folder("conf").join("config.xml"), config)],
        helpers: Vec::new(),
        main,
        // run.sh execs java, which shuts down cleanly on SIGTERM.
        stop: None,
        ready_deadline: context.spec.options.start_deadline_or(START_DEADLINE),
        main_process_names: &["java"],
        port_taken_markers: &["Address already in use"],
    })
}

/// The plan shared by the Erlang brokers, which stop cleanly on SIGTERM (OTP 20+).
fn erlang_plan(product: Product, context: &PlanContext<'_>, main: CommandLine) -> LaunchPlan {
    LaunchPlan {
        product,
        listen: context.listen(),
        files: Vec::new(),
        helpers: Vec::new(),
        main,
        stop: None,
        ready_deadline: context.spec.options.start_deadline_or(START_DEADLINE),
        main_process_names: &["beam.smp"],
        port_taken_markers: &["eaddrinuse"],
    }
}

/// An IP address as an Erlang tuple: `{127,0,0,1}`, `{0,0,0,0,0,0,0,1}`.
fn erlang_ip(ip: IpAddr) -> String {
    let parts: Vec<String> = match ip {
        IpAddr::V4(ip) => ip.octets().iter().map(u8::to_string).collect(),
        IpAddr::V6(ip) => ip.segments().iter().map(u16::to_string).collect(),
    };
    format!("{{{}}}", parts.join(","))
}

fn hivemq_config(bind: IpAddr, port: u16, max_queued: u32) -> String {
    format!(
        r#"<?xml version="1.0"?>
<!-- Written by the Continuum agent; regenerated at every start. -->
<hivemq>
    <listeners>
        <tcp-listener>
            <port>{port}</port>
            <bind-address>{bind}</bind-address>
        </tcp-listener>
    </listeners>
    <mqtt>
        <packets>
            <max-packet-size>{HIVEMQ_MAX_PACKET_SIZE}</max-packet-size>
        </packets>
        <queued-messages>
            <max-queue-size>{max_queued}</max-queue-size>
        </queued-messages>
    </mqtt>
    <anonymous-usage-statistics>
        <enabled>false</enabled>
    </anonymous-usage-statistics>
</hivemq>
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::BrokerDriver;
    use crate::broker::error::ErrorCode;
    use crate::broker::native::NativeDriver;
    use crate::broker::test_support::loopback_spec;
    use domain::{BrokerKind, BrokerSpec};
    use std::path::Path;

    /// Install paths where every product "exists" (any executable will do for planning).
    fn fake_install() -> InstallPaths {
        InstallPaths {
            emqx: vec!["/bin/true".into()],
            vernemq: vec!["/bin/true".into()],
            hivemq: vec!["/bin/true".into()],
            ..InstallPaths::default()
        }
    }

    fn plan_for(product: Product, spec: &BrokerSpec) -> LaunchPlan {
        let context = PlanContext {
            spec,
            dir: Path::new("/state/x"),
            port: 1883,
            marker: "cookie-1",
        };
        let install = fake_install();
        match product {
            Product::Emqx => emqx_plan(&install, &context),
            Product::VerneMq => vernemq_plan(&install, &context),
            Product::HiveMq => hivemq_plan(&install, &context),
            other => panic!("{other} is not planned here"),
        }
        .unwrap()
    }

    #[test]
    fn emqx_runs_in_the_foreground_with_the_studys_packet_size() {
        let spec = loopback_spec(
            "x",
            BrokerKind::Native {
                product: Product::Emqx,
            },
        );
        let plan = plan_for(Product::Emqx, &spec);
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
        ] {
            assert_eq!(plan.main.env_value(name), Some(value), "{name}");
        }
        let dashboard = plan
            .main
            .env_value("EMQX_DASHBOARD__LISTENERS__HTTP__BIND")
            .unwrap();
        assert!(dashboard.starts_with("127.0.0.1:"), "{dashboard}");
        assert_eq!(plan.main.env_value("EMQX_MQTT__MAX_INFLIGHT"), None);
        assert_eq!(plan.main_process_names, ["beam.smp"]);
        assert_eq!(plan.ready_deadline, START_DEADLINE);
    }

    #[test]
    fn vernemq_gets_its_settings_on_the_command_line() {
        let mut spec = loopback_spec(
            "v",
            BrokerKind::Native {
                product: Product::VerneMq,
            },
        );
        spec.options.max_inflight_messages = Some(50);
        let plan = plan_for(Product::VerneMq, &spec);
        let args = plan.main.args.join(" ");
        assert_eq!(
            args,
            "console -noshell -noinput \
             -vmq_server allow_anonymous true \
             -vmq_server max_message_size 0 \
             -vmq_server max_online_messages 1000000 \
             -vmq_server max_offline_messages 1000000 \
             -vmq_server listeners [{mqtt,[{{{127,0,0,1},1883},[{max_connections,infinity}]}]}] \
             -vmq_server max_inflight_messages 50"
        );
        assert!(
            plan.main.args.iter().all(|arg| !arg.contains(' ')),
            "the runner word-splits"
        );
        assert_eq!(erlang_ip("::1".parse().unwrap()), "{0,0,0,0,0,0,0,1}");
    }

    #[test]
    fn hivemq_reads_a_private_config_folder() {
        let spec = loopback_spec(
            "h",
            BrokerKind::Native {
                product: Product::HiveMq,
            },
        );
        let plan = plan_for(Product::HiveMq, &spec);
        assert!(plan.main.args.is_empty());
        assert_eq!(
            plan.main.env_value("HIVEMQ_CONFIG_FOLDER"),
            Some("/state/x/conf")
        );
        assert_eq!(
            plan.main.env_value("HIVEMQ_DATA_FOLDER"),
            Some("/state/x/data")
        );
        assert_eq!(
            plan.main.env_value("HIVEMQ_LOG_FOLDER"),
            Some("/state/x/log")
        );
        assert!(plan.main.env_value("HIVEMQ_JMX_PORT").is_some());
        let (path, config) = &plan.files[0];
        assert_eq!(path, Path::new("/state/x/conf/config.xml"));
        assert!(config.contains("<port>1883</port>"));
        assert!(config.contains("<bind-address>127.0.0.1</bind-address>"));
        assert!(config.contains("<max-packet-size>268435460</max-packet-size>"));
        assert_eq!(plan.main_process_names, ["java"]);
    }

    #[tokio::test]
    async fn each_missing_product_is_a_failed_precondition_naming_its_paths() {
        let state = tempfile::tempdir().unwrap();
        for product in [Product::Emqx, Product::VerneMq, Product::HiveMq] {
            let missing = format!("/nonexistent/{product}/bin/start");
            let install = InstallPaths {
                emqx: vec![missing.clone().into()],
                vernemq: vec![missing.clone().into()],
                hivemq: vec![missing.clone().into()],
                ..InstallPaths::default()
            };
            let driver = NativeDriver::new(install, state.path().to_owned());
            let spec = loopback_spec("other", BrokerKind::Native { product });
            let error = driver.start(&spec).await.unwrap_err();
            assert_eq!(
                error.code(),
                ErrorCode::FailedPrecondition,
                "{product}: {error}"
            );
            assert!(error.to_string().contains(&missing), "{error}");
        }
    }
}
