//! HiveMQ CE: natively `bin/run.sh` with a private config folder; on Kubernetes the official
//! image with the same `config.xml` mounted.
//!
//! Natively `HIVEMQ_CONFIG_FOLDER`, `HIVEMQ_DATA_FOLDER` and `HIVEMQ_LOG_FOLDER` point into
//! the instance's directory, where a generated `config.xml` listens on the spec's address.
//! Anonymous access comes from the allow-all extension that HiveMQ CE ships in its
//! `extensions/` folder, which is left as installed (the image keeps it only with
//! `HIVEMQ_ALLOW_ALL_CLIENTS=true`). `run.sh` always opens JMX on every interface without
//! authentication (anyone who reaches it runs code as the broker's user), so the JVM is
//! started directly instead, with `run.sh`'s other options and no JMX at all; inherited JVM
//! option variables (`JAVA_TOOL_OPTIONS` and kin) are dropped, so none can turn it back on.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Instance, MQTT_PORT, NativePlan, Pod, Readiness, data};

/// Where HiveMQ CE's `bin/run.sh` is looked for: its tarball unpacked in `/opt`.
pub const PROGRAMS: &[&str] = &["/opt/hivemq/bin/run.sh", "/opt/hivemq-ce/bin/run.sh"];

/// How long the JVM may take to answer MQTT.
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// HiveMQ's largest MQTT packet: the MQTT maximum (and HiveMQ's default), stated.
pub const MAX_PACKET_SIZE: u32 = 268_435_460;

/// HiveMQ's start line is not known here: no version is read from its log.
pub const VERSION_IN_LOG: Option<&str> = None;

/// The pinned image; [`PROVENANCE`] says why this tag.
pub const IMAGE: &str = "hivemq/hivemq-ce:2024.3";

/// Which image the study deployed, and why [`IMAGE`].
pub const PROVENANCE: &str = "The study deployed hivemq/hivemq-ce:2023.3, published for amd64 only; \
            2024.3 is the first HiveMQ CE release with an official multi-arch image (amd64, \
            arm64), the nearest to the study's that both setups can run.";

/// The config file's name, in the config folder.
pub const CONFIG_FILE: &str = "config.xml";

/// `config.xml` for a listener on `bind:port`; `note` ends the header comment.
fn config(bind: IpAddr, port: u16, max_queued: u32, note: &str) -> String {
    format!(
        r#"<?xml version="1.0"?>
<!-- Written by {}{note} -->
<hivemq>
    <listeners>
        <tcp-listener>
            <port>{port}</port>
            <bind-address>{bind}</bind-address>
        </tcp-listener>
    </listeners>
    <mqtt>
        <packets>
            <max-packet-size>{MAX_PACKET_SIZE}</max-packet-size>
        </packets>
        <queued-messages>
            <max-queue-size>{max_queued}</max-queue-size>
        </queued-messages>
    </mqtt>
    <anonymous-usage-statistics>
        <enabled>false</enabled>
    </anonymous-usage-statistics>
</hivemq>
"#,
        crate::WRITTEN_BY_AGENT
    )
}

/// The JVM the native instance runs on, looked up on the agent's `PATH`.
pub const JAVA: &str = "java";

/// What `run.sh` (HiveMQ CE 2024.3) passes the JVM besides JMX and heap sizing.
pub const JVM_OPTIONS: &[&str] = &[
    "-Djava.net.preferIPv4Stack=true",
    "-Djava.security.egd=file:/dev/./urandom",
    "-XX:+CrashOnOutOfMemoryError",
    "-XX:+HeapDumpOnOutOfMemoryError",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-exports",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
];

/// Keeps the JMX agent that the image's `run.sh` starts on the pod's loopback.
pub const JMX_ON_LOOPBACK: &str = "-Dcom.sun.management.jmxremote.host=127.0.0.1";

/// Inherited variables the JVM launcher reads options from: any could enable JMX again.
const JVM_OPTION_VARIABLES: &[&str] = &["JAVA_", "_JAVA_", "JDK_JAVA_"];

/// The plan for one native instance installed with `run` (`HOME/bin/run.sh`): the JVM on
/// `HOME/bin/hivemq.jar`, without JMX.
pub fn native(run: &Path, instance: &Instance<'_>) -> NativePlan {
    let folder = |name: &str| instance.dir.join(name);
    let bin = run.parent().unwrap_or(Path::new("."));
    let home = bin.parent().unwrap_or(bin);
    let folders = [
        ("config", folder("conf")),
        ("data", folder("data")),
        ("log", folder("log")),
    ];
    let mut main = CommandLine::new(JAVA);
    main.args = std::iter::once(format!("-Dhivemq.home={}", home.display()))
        .chain(
            folders
                .iter()
                .map(|(name, path)| format!("-Dhivemq.{name}.folder={}", path.display())),
        )
        .chain(std::iter::once(format!(
            "-XX:HeapDumpPath={}",
            folder("log").join("heap-dump.hprof").display()
        )))
        .chain(JVM_OPTIONS.iter().map(|o| (*o).to_owned()))
        .chain([
            "-jar".to_owned(),
            bin.join("hivemq.jar").display().to_string(),
        ])
        .collect();
    main.env = folders
        .iter()
        .map(|(name, path)| {
            (
                format!("HIVEMQ_{}_FOLDER", name.to_ascii_uppercase()),
                path.display().to_string(),
            )
        })
        .collect();
    main.env_remove_prefixes = std::iter::once("HIVEMQ_")
        .chain(JVM_OPTION_VARIABLES.iter().copied())
        .collect();
    let text = config(
        instance.listen.ip(),
        instance.listen.port(),
        instance.options.max_queued_messages(),
        "; regenerated at every start.",
    );
    NativePlan {
        files: vec![(folder("conf").join(CONFIG_FILE), text)],
        // The JVM shuts down cleanly on SIGTERM.
        main_process_names: &["java"],
        port_taken_markers: &["Address already in use"],
        ..NativePlan::of(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

/// The pod: [`IMAGE`] with the same `config.xml`, listening on every interface of the pod.
pub fn pod(options: &BrokerOptions) -> Pod {
    let text = config(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        MQTT_PORT,
        options.max_queued_messages(),
        ".",
    );
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31887,
        config: data([(CONFIG_FILE, text)]),
        config_use: ConfigUse::Files(vec![(CONFIG_FILE, "/opt/hivemq/conf/config.xml")]),
        env: vec![
            // Anonymous clients: the image keeps its allow-all extension only when this is true.
            ("HIVEMQ_ALLOW_ALL_CLIENTS", "true".to_owned()),
            // The JVM sizes its heap from the pod's limit: half of it, rather than the default
            // quarter, leaves HiveMQ room to queue what a benchmark sends. The image's run.sh
            // opens JMX without authentication; it does not set the JMX host, so this binds
            // it to the pod's loopback.
            (
                "JAVA_OPTS",
                format!("-XX:+UseNUMA -XX:MaxRAMPercentage=50 {JMX_ON_LOOPBACK}"),
            ),
        ],
        secret_env: Vec::new(),
        ports: vec![("mqtt", MQTT_PORT)],
        // HiveMQ CE has no HTTP health endpoint (the enterprise edition has).
        readiness: Readiness::MqttPort,
        cpu_request: "500m",
        memory_request_mib: 1024,
        memory_limit_mib: 4096,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hivemq_reads_a_private_config_folder() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "h",
            dir: Path::new("/state/x"),
            listen: "127.0.0.1:1883".parse().unwrap(),
            options: &options,
            secret: "m",
            quic: None,
            websocket: None,
        };
        let plan = native(Path::new("/opt/hivemq/bin/run.sh"), &instance);
        assert_eq!(plan.main.program, Path::new("java"));
        let args = plan.main.args.join(" ");
        assert!(args.ends_with("-jar /opt/hivemq/bin/hivemq.jar"), "{args}");
        assert!(args.contains("-Dhivemq.home=/opt/hivemq "), "{args}");
        assert!(
            args.contains("-Dhivemq.config.folder=/state/x/conf "),
            "{args}"
        );
        // No JMX: not on the command line, and no inherited JVM option variable can add it.
        assert!(!args.contains("jmxremote"), "{args}");
        for variable in [
            "JAVA_TOOL_OPTIONS",
            "JAVA_OPTS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
        ] {
            assert!(
                plan.main
                    .env_remove_prefixes
                    .iter()
                    .any(|prefix| variable.starts_with(prefix)),
                "{variable} is inherited"
            );
        }
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
        assert_eq!(plan.main.env_value("HIVEMQ_JMX_PORT"), None);
        let (path, config) = &plan.files[0];
        assert_eq!(path, Path::new("/state/x/conf/config.xml"));
        assert!(config.contains("<port>1883</port>"));
        assert!(config.contains("<bind-address>127.0.0.1</bind-address>"));
        assert!(config.contains("<max-packet-size>268435460</max-packet-size>"));
        assert_eq!(plan.main_process_names, ["java"]);
    }
}
