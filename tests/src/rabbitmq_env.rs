//! The files and environment that make a RabbitMQ node private to one test: the recipe's
//! ([`recipes::rabbitmq::Node`], which the agent runs too), with the harness's name in the
//! config, its marker in the environment and the Erlang schedulers told not to spin.
//!
//! Every RabbitMQ and Erlang tool started for an instance (server, epmd,
//! `rabbitmqctl`) gets [`instance_env`], so none of them reads the system's
//! `/etc/rabbitmq`, its Erlang cookie, or the default ports.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use recipes::rabbitmq::{ENV_REMOVE_PREFIXES, Node, PrivatePorts};

use crate::ports::LOOPBACK;
use crate::process::INSTANCE_MARKER_VAR;
use crate::rabbitmq::RabbitPorts;

/// Who the config's header says wrote it.
const WRITTEN_BY: &str = "Continuum's test harness; one node per test";

/// Appended to the recipe's `RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS` in tests only: the Erlang
/// schedulers spin while idle by default, and on a 2-core test machine that spinning takes
/// the CPU the load generator beside the node needs.
const TEST_ERL_ARGS: &str = "+sbwt none +sbwtdcpu none +sbwtdio none";

/// The recipe's node in `dir`, named `name`, on the private ports of `ports`.
fn node<'a>(dir: &'a Path, name: &str, ports: &RabbitPorts) -> Node<'a> {
    Node {
        dir,
        name: name.to_owned(),
        ports: PrivatePorts {
            amqp: ports.amqp,
            dist: ports.dist,
            epmd: ports.epmd,
        },
    }
}

/// Writes the recipe's files: the config (MQTT on loopback), the enabled-plugins file, an
/// empty env file (so the system's /etc/rabbitmq/rabbitmq-env.conf is not read) and the
/// inetrc (no DNS query leaves the machine).
pub(crate) fn write_files(dir: &Path, ports: &RabbitPorts) -> Result<()> {
    let mqtt = SocketAddr::from((LOOPBACK, ports.mqtt));
    // The node name is not part of any file.
    for (name, text) in node(dir, "", ports).files(WRITTEN_BY, mqtt, None) {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The environment that makes every RabbitMQ and Erlang tool act on this
/// instance only: the recipe's, tagged with the harness's marker.
pub(crate) fn instance_env(
    dir: &Path,
    instance_id: &str,
    node_name: &str,
    ports: &RabbitPorts,
) -> Vec<(String, String)> {
    let mut env = vec![(INSTANCE_MARKER_VAR.to_owned(), instance_id.to_owned())];
    env.extend(
        node(dir, node_name, ports)
            .env()
            .into_iter()
            .map(|(name, mut value)| {
                if name == "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS" {
                    value.push(' ');
                    value.push_str(TEST_ERL_ARGS);
                }
                (name, value)
            }),
    );
    env
}

/// Applies `env` to `command`, after removing any RabbitMQ or Erlang
/// setting inherited from the test's own environment.
pub(crate) fn apply_env(command: &mut Command, env: &[(String, String)]) {
    for (name, _) in std::env::vars_os() {
        let inherited = name.to_string_lossy();
        if ENV_REMOVE_PREFIXES
            .iter()
            .any(|prefix| inherited.starts_with(prefix))
        {
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
        assert_eq!(
            get("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"),
            Some(
                "-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none"
            )
        );
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
