//! The files and environment that make a RabbitMQ node private to one test.
//!
//! Every RabbitMQ and Erlang tool started for an instance (server, epmd,
//! `rabbitmqctl`) gets [`instance_env`], so none of them reads the system's
//! `/etc/rabbitmq`, its Erlang cookie, or the default ports.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::ports::LOOPBACK;
use crate::process::INSTANCE_MARKER_VAR;
use crate::rabbitmq::RabbitPorts;

/// Writes the config, the enabled-plugins file, an empty env file (so the
/// system's /etc/rabbitmq/rabbitmq-env.conf is not read) and the inetrc.
pub(crate) fn write_files(dir: &Path, ports: &RabbitPorts) -> Result<()> {
    let config = format!(
        "\
# Written by Continuum's test harness; one node per test.
# Clients connect over loopback only, so the guest user may be used there.
loopback_users = none
mqtt.listeners.tcp.default = {LOOPBACK}:{mqtt}
mqtt.allow_anonymous = true
mqtt.default_user = guest
mqtt.default_pass = guest
mqtt.vhost = /
mqtt.exchange = amq.topic
# 3.10's MQTT plugin has no size limit of its own; rabbit's max_message_size
# (default 128 MiB) applies. Stated so payloads of 1 MB+ are allowed on purpose.
max_message_size = 134217728
# A nearly full test disk must not block publishers mid-test.
disk_free_limit.absolute = 1MB
log.console = true
log.console.level = info
",
        mqtt = ports.mqtt
    );
    let files = [
        ("rabbitmq.conf", config),
        ("enabled_plugins", "[rabbitmq_mqtt].\n".to_owned()),
        ("rabbitmq-env.conf", String::new()),
        // Resolve host names from files only: no DNS query leaves the machine.
        (
            "inetrc",
            "{lookup, [file]}.\n{host, {127,0,0,1}, [\"localhost\"]}.\n".to_owned(),
        ),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The environment that makes every RabbitMQ and Erlang tool act on this
/// instance only.
pub(crate) fn instance_env(
    dir: &Path,
    instance_id: &str,
    node: &str,
    ports: &RabbitPorts,
) -> Vec<(String, String)> {
    let path = |name: &str| dir.join(name).display().to_string();
    [
        (INSTANCE_MARKER_VAR, instance_id.to_owned()),
        ("HOME", dir.display().to_string()),
        ("RABBITMQ_NODENAME", node.to_owned()),
        ("RABBITMQ_USE_LONGNAME", "false".to_owned()),
        ("RABBITMQ_MNESIA_BASE", path("mnesia")),
        ("RABBITMQ_LOG_BASE", path("log")),
        ("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf")),
        ("RABBITMQ_ADVANCED_CONFIG_FILE", path("advanced.config")),
        ("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf")),
        ("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins")),
        ("RABBITMQ_ENABLED_PLUGINS", "rabbitmq_mqtt".to_owned()),
        ("RABBITMQ_NODE_IP_ADDRESS", LOOPBACK.to_string()),
        ("RABBITMQ_NODE_PORT", ports.amqp.to_string()),
        ("RABBITMQ_DIST_PORT", ports.dist.to_string()),
        // Erlang distribution listens on every interface unless told otherwise. Its schedulers
        // spin while idle by default; on a 2-core test machine that spinning takes the CPU the
        // load generator beside it needs, so tests turn it off.
        (
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none"
                .to_owned(),
        ),
        ("ERL_EPMD_PORT", ports.epmd.to_string()),
        ("ERL_EPMD_ADDRESS", LOOPBACK.to_string()),
        ("ERL_INETRC", path("inetrc")),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// Applies `env` to `command`, after removing any RabbitMQ or Erlang
/// setting inherited from the test's own environment.
pub(crate) fn apply_env(command: &mut Command, env: &[(String, String)]) {
    for (name, _) in std::env::vars_os() {
        let inherited = name.to_string_lossy();
        if inherited.starts_with("RABBITMQ_") || inherited.starts_with("ERL_") {
            command.env_remove(&name);
        }
    }
    command.envs(env.iter().map(|(name, value)| (name, value)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_isolates_the_instance() {
        let ports = RabbitPorts {
            mqtt: 1,
            amqp: 2,
            dist: 3,
            epmd: 4,
        };
        let env = instance_env(Path::new("/tmp/x"), "ct-1-1", "ct-1-1@localhost", &ports);
        let get = |name: &str| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        assert_eq!(get("HOME"), Some("/tmp/x"));
        assert_eq!(get("RABBITMQ_NODENAME"), Some("ct-1-1@localhost"));
        assert_eq!(get("ERL_EPMD_PORT"), Some("4"));
        assert_eq!(get("RABBITMQ_DIST_PORT"), Some("3"));
        assert_eq!(get("RABBITMQ_NODE_PORT"), Some("2"));
        assert_eq!(
            get("RABBITMQ_CONF_ENV_FILE"),
            Some("/tmp/x/rabbitmq-env.conf")
        );
        assert_eq!(get(INSTANCE_MARKER_VAR), Some("ct-1-1"));
    }

    #[test]
    fn the_config_listens_on_loopback_and_allows_large_messages() {
        let dir = tempfile::tempdir().unwrap();
        let ports = RabbitPorts {
            mqtt: 1883,
            amqp: 2,
            dist: 3,
            epmd: 4,
        };
        write_files(dir.path(), &ports).unwrap();
        let config = std::fs::read_to_string(dir.path().join("rabbitmq.conf")).unwrap();
        assert!(config.contains("mqtt.listeners.tcp.default = 127.0.0.1:1883\n"));
        assert!(config.contains("mqtt.allow_anonymous = true\n"));
        assert!(config.contains("max_message_size = 134217728\n"));
    }
}
