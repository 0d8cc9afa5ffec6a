//! ActiveMQ Classic (Debian's `activemq` 5.17): the JVM started directly on the package's
//! launcher jar with an instance folder of its own (`activemq.base`), a broker XML with one
//! MQTT transport connector, and the MQTT transport's libraries (Debian's
//! `libmqtt-client-java` and `libhawtdispatch-java`, which the package does not pull in) on
//! its extension classpath. No web console (the package ships no Jetty), no JMX connector,
//! no persistence. The pod runs Apache's image of the same minor release with the same
//! broker XML mounted over its `conf/activemq.xml`, which then imports no `jetty.xml`: no
//! web console there either.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use domain::BrokerOptions;
use host::CommandLine;

use crate::{ConfigUse, Instance, MQTT_PORT, NativePlan, Pod, Readiness, WRITTEN_BY_AGENT, data};

/// Where `java` is looked for.
pub const JAVA_PROGRAMS: &[&str] = &["/usr/bin/java"];

/// The package's home: its launcher jar is `bin/activemq.jar`, its libraries `lib/`.
pub const HOME: &str = "/usr/share/activemq";

/// The launcher jar, inside [`HOME`].
pub const LAUNCHER: &str = "/usr/share/activemq/bin/activemq.jar";

/// The MQTT transport's libraries, from Debian's packages.
pub const MQTT_LIBRARIES: &[&str] = &[
    "/usr/share/java/mqtt-client.jar",
    "/usr/share/java/hawtdispatch.jar",
    "/usr/share/java/hawtdispatch-transport.jar",
];

/// The pinned image; [`PROVENANCE`] says why this tag.
pub const IMAGE: &str = "apache/activemq-classic:5.17.7";

/// Why [`IMAGE`].
pub const PROVENANCE: &str = "The study did not measure ActiveMQ. The native recipe runs \
            Debian 12's 5.17; 5.17.7 is the last release of that line, and Apache's repository \
            builds its official image from the tag (on eclipse-temurin:11-jre, which is \
            multi-arch). The image itself was not pulled from here: neither the tag on Docker \
            Hub nor an arm64 build of it was checked.";

/// Where the image's broker reads its XML (ACTIVEMQ_HOME is /opt/apache-activemq).
const POD_CONFIG_PATH: &str = "/opt/apache-activemq/conf/activemq.xml";

/// The image's home, whose `data` folder is writable.
const POD_HOME: &str = "/opt/apache-activemq";

/// How to install it.
pub const INSTALL: &str = "apt-get install activemq libmqtt-client-java libhawtdispatch-java";

/// How long the JVM may take to answer MQTT (about 10 s here).
pub const START_DEADLINE: Duration = Duration::from_secs(60);

/// The broker's XML, in the instance's folder (also `activemq.conf`).
pub const CONFIG_FILE: &str = "activemq.xml";

/// Its logging: the broker's start lines (with the version) to stderr, else warnings.
pub const LOG_CONFIG_FILE: &str = "log4j.properties";

/// The process that is the broker.
pub const PROCESS_NAMES: &[&str] = &["java"];

/// What the JVM logs when the port is taken (`java.net.BindException`).
pub const PORT_TAKEN: &[&str] = &["Address already in use"];

/// What precedes the version in its start line ("Apache ActiveMQ 5.17.2 (...) is starting").
pub const VERSION_IN_LOG: Option<&str> = Some("Apache ActiveMQ ");

/// Variables the JVM or the launcher read as options (`JAVA_TOOL_OPTIONS` and
/// `JDK_JAVA_OPTIONS` load agents into the broker; `ACTIVEMQ_*` and `CLASSPATH` redirect it):
/// removed from its environment.
pub const ENV_PREFIXES: &[&str] = &[
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "ACTIVEMQ_",
    "CLASSPATH",
];

/// The JVM's heap: fixed, so the broker's memory limit below is a known share of it.
const HEAP: &str = "1g";

/// Messages the broker holds in memory before it slows producers (flow control): 70 % of
/// the heap, where the package's 64 MB default would throttle a 1 MB payload test.
const MEMORY_PERCENT_OF_HEAP: u32 = 70;

/// The broker's XML for one instance: MQTT on `listen` only (connections unbounded, frames up
/// to MQTT's 256 MB), in memory, no JMX connector, no advisory topics.
pub fn broker_xml(name: &str, dir: &Path, listen: SocketAddr) -> String {
    let data = dir.join("data");
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by {WRITTEN_BY_AGENT}. -->
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="continuum-{name}"
      persistent="false" useJmx="false" advisorySupport="false" schedulerSupport="false"
      dataDirectory="{data}">
    <managementContext><managementContext createConnector="false"/></managementContext>
    <systemUsage><systemUsage>
      <memoryUsage><memoryUsage percentOfJvmHeap="{MEMORY_PERCENT_OF_HEAP}"/></memoryUsage>
    </systemUsage></systemUsage>
    <transportConnectors>
      <transportConnector name="mqtt"
          uri="mqtt://{listen}?maximumConnections=1000000&amp;wireFormat.maxFrameSize=268435456"/>
    </transportConnectors>
  </broker>
</beans>
"#,
        data = data.display()
    )
}

/// Its log4j 1.2 configuration: the start lines to stderr, which the agent captures.
pub fn log_config() -> String {
    format!(
        "# Written by {WRITTEN_BY_AGENT}.\n\
         log4j.rootLogger=WARN, stderr\n\
         log4j.logger.org.apache.activemq.broker.BrokerService=INFO\n\
         log4j.logger.org.apache.activemq.broker.TransportConnector=INFO\n\
         log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n\
         log4j.appender.stderr.Target=System.err\n\
         log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n\
         log4j.appender.stderr.layout.ConversionPattern=%d{{ISO8601}} %-5p %c{{1}} - %m%n\n"
    )
}

/// The plan for one native instance run by `java`.
pub fn native(java: &Path, instance: &Instance<'_>) -> NativePlan {
    let dir = instance.dir;
    let config = dir.join(CONFIG_FILE);
    let log_config_path = dir.join(LOG_CONFIG_FILE);
    let mut main = CommandLine::new(java);
    main.args = vec![
        format!("-Xms{HEAP}"),
        format!("-Xmx{HEAP}"),
        format!("-Dlog4j.configuration=file:{}", log_config_path.display()),
        format!("-Dactivemq.home={HOME}"),
        format!("-Dactivemq.base={}", dir.display()),
        format!("-Dactivemq.conf={}", dir.display()),
        format!("-Dactivemq.data={}", dir.join("data").display()),
        format!("-Dactivemq.classpath={}", MQTT_LIBRARIES.join(":")),
        format!("-Djava.io.tmpdir={}", dir.join("tmp").display()),
        "-jar".into(),
        LAUNCHER.into(),
        "start".into(),
        format!("xbean:file:{}", config.display()),
    ];
    main.env_remove_prefixes = ENV_PREFIXES.to_vec();
    NativePlan {
        files: vec![
            (config, broker_xml(instance.name, dir, instance.listen)),
            (log_config_path, log_config()),
            // The JVM's temporary folder must exist.
            (dir.join("tmp").join(".keep"), String::new()),
        ],
        main_process_names: PROCESS_NAMES,
        port_taken_markers: PORT_TAKEN,
        // SIGTERM: the JVM's shutdown hook stops the broker; nothing is persisted.
        ..NativePlan::of(main, instance.options.start_deadline_or(START_DEADLINE))
    }
}

/// The pod: [`IMAGE`] with the native recipe's broker XML (MQTT on every interface of the
/// pod) over its `conf/activemq.xml`, and the same fixed 1 GiB heap. `ACTIVEMQ_OPTS` replaces
/// the image's own (a Jetty host for the console this XML never starts); none of the
/// `ACTIVEMQ_*_USER` variables is set, since the image's entrypoint would edit the mounted,
/// read-only XML for them.
pub fn pod(_options: &BrokerOptions) -> Pod {
    let listen = SocketAddr::from((Ipv4Addr::UNSPECIFIED, MQTT_PORT));
    let xml = broker_xml("pod", Path::new(POD_HOME), listen);
    Pod {
        image: IMAGE,
        provenance: PROVENANCE,
        default_node_port: 31888,
        config: data([(CONFIG_FILE, xml)]),
        config_use: ConfigUse::Files(vec![(CONFIG_FILE, POD_CONFIG_PATH)]),
        env: vec![("ACTIVEMQ_OPTS", format!("-Xms{HEAP} -Xmx{HEAP}"))],
        secret_env: Vec::new(),
        ports: vec![("mqtt", MQTT_PORT)],
        // No health endpoint without the console.
        readiness: Readiness::MqttPort,
        cpu_request: "500m",
        memory_request_mib: 1280,
        // The 1 GiB heap plus the JVM's own memory.
        memory_limit_mib: 2048,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::BrokerOptions;

    #[test]
    fn the_broker_opens_only_mqtt_where_asked_with_no_jmx_or_persistence() {
        let options = BrokerOptions::default();
        let instance = Instance {
            name: "amq",
            dir: Path::new("/state/amq"),
            listen: "127.0.0.1:4242".parse().unwrap(),
            options: &options,
            secret: "s",
            quic: None,
            websocket: None,
        };
        let plan = native(Path::new("/usr/bin/java"), &instance);
        let (path, xml) = &plan.files[0];
        assert_eq!(path, Path::new("/state/amq/activemq.xml"));
        assert_eq!(xml.matches("<transportConnector ").count(), 1, "{xml}");
        assert!(xml.contains("uri=\"mqtt://127.0.0.1:4242?"), "{xml}");
        for setting in [
            "persistent=\"false\"",
            "useJmx=\"false\"",
            "createConnector=\"false\"",
            "brokerName=\"continuum-amq\"",
            "percentOfJvmHeap=\"70\"",
        ] {
            assert!(xml.contains(setting), "{setting} in {xml}");
        }
        assert!(!xml.contains("jetty") && !xml.contains("0.0.0.0"), "{xml}");
        let args = &plan.main.args;
        assert!(args.contains(&"-Dactivemq.base=/state/amq".to_string()));
        assert!(
            args.iter()
                .any(|a| a.starts_with("-Dactivemq.classpath=") && a.contains("mqtt-client.jar"))
        );
        assert_eq!(
            &args[args.len() - 4..],
            [
                "-jar",
                LAUNCHER,
                "start",
                "xbean:file:/state/amq/activemq.xml"
            ]
        );
        assert!(plan.main.env_remove_prefixes.contains(&"JAVA_TOOL_OPTIONS"));
        assert_eq!(plan.main_process_names, ["java"]);
        assert!(plan.files[1].1.contains("BrokerService=INFO"));
        let ipv6 = broker_xml("x", Path::new("/d"), "[::1]:1883".parse().unwrap());
        assert!(ipv6.contains("uri=\"mqtt://[::1]:1883?"), "{ipv6}");
    }
}
