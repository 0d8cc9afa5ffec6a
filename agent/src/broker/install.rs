//! [`InstallPaths`]: where the native driver looks for each product's executables, and
//! which products are installed on this node (for the Info RPC's capabilities).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::error::BrokerError;
use domain::Product;

/// Where the products' executables are looked for, first match wins. The defaults are each
/// recipe's `PROGRAMS`: the paths of Debian packages and of the products' tarballs in `/opt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallPaths {
    /// `mosquitto`.
    pub mosquitto: Vec<PathBuf>,
    /// RabbitMQ's `rabbitmq-server` start script (not Debian's `/usr/sbin` wrapper, which
    /// switches to the `rabbitmq` user and the system node).
    pub rabbitmq_server: Vec<PathBuf>,
    /// `rabbitmqctl`, used for a graceful stop.
    pub rabbitmqctl: Vec<PathBuf>,
    /// Erlang's `epmd`, run privately for each RabbitMQ instance.
    pub epmd: Vec<PathBuf>,
    /// EMQX's `bin/emqx`.
    pub emqx: Vec<PathBuf>,
    /// VerneMQ's `bin/vernemq`.
    pub vernemq: Vec<PathBuf>,
    /// HiveMQ CE's `bin/run.sh`.
    pub hivemq: Vec<PathBuf>,
    /// The `mqttv5` command line (its `broker` subcommand).
    pub mqttv5: Vec<PathBuf>,
    /// aedes-cli's `aedes`.
    pub aedes: Vec<PathBuf>,
    /// amqtt's `amqtt` script.
    pub amqtt: Vec<PathBuf>,
    /// The `java` that runs ActiveMQ.
    pub activemq_java: Vec<PathBuf>,
    /// Files ActiveMQ needs, each of them: its launcher jar and its MQTT transport's
    /// libraries.
    pub activemq_files: Vec<PathBuf>,
    /// The `erl` that runs ejabberd.
    pub ejabberd_erl: Vec<PathBuf>,
    /// Folders that may hold ejabberd's applications (`ejabberd-VERSION/ebin/ejabberd.app`):
    /// the first that does is the VM's `ERL_LIBS`.
    pub ejabberd_libraries: Vec<PathBuf>,
    /// `continuum-rmqtt`, rmqtt's engine as `brokers/rmqtt` builds it.
    pub rmqtt: Vec<PathBuf>,
}

impl Default for InstallPaths {
    fn default() -> Self {
        let paths = |list: &[&str]| list.iter().map(PathBuf::from).collect();
        Self {
            mosquitto: paths(recipes::mosquitto::PROGRAMS),
            rabbitmq_server: paths(recipes::rabbitmq::SERVER_PROGRAMS),
            rabbitmqctl: paths(recipes::rabbitmq::CTL_PROGRAMS),
            epmd: paths(recipes::rabbitmq::EPMD_PROGRAMS),
            emqx: paths(recipes::emqx::PROGRAMS),
            vernemq: paths(recipes::vernemq::PROGRAMS),
            hivemq: paths(recipes::hivemq::PROGRAMS),
            mqttv5: paths(recipes::mqttv5::PROGRAMS),
            aedes: paths(recipes::aedes::PROGRAMS),
            amqtt: paths(recipes::amqtt::PROGRAMS),
            activemq_java: paths(recipes::activemq::JAVA_PROGRAMS),
            activemq_files: std::iter::once(recipes::activemq::LAUNCHER)
                .chain(recipes::activemq::MQTT_LIBRARIES.iter().copied())
                .map(PathBuf::from)
                .collect(),
            ejabberd_erl: paths(recipes::ejabberd::ERL_PROGRAMS),
            ejabberd_libraries: paths(recipes::ejabberd::LIBRARY_DIRS),
            rmqtt: paths(recipes::rmqtt::PROGRAMS),
        }
    }
}

impl InstallPaths {
    /// The first executable among `candidates`, or [`BrokerError::NotInstalled`] naming
    /// them all.
    pub fn locate(product: Product, candidates: &[PathBuf]) -> Result<PathBuf, BrokerError> {
        candidates
            .iter()
            .find(|path| is_executable(path))
            .cloned()
            .ok_or_else(|| BrokerError::NotInstalled {
                product,
                looked_at: candidates.to_vec(),
            })
    }

    /// Checks that every executable `product` needs is installed.
    pub fn check(&self, product: Product) -> Result<(), BrokerError> {
        let needed: Vec<&[PathBuf]> = match product {
            Product::Mosquitto => vec![&self.mosquitto],
            Product::RabbitMq => vec![&self.rabbitmq_server, &self.rabbitmqctl, &self.epmd],
            Product::Emqx => vec![&self.emqx],
            Product::VerneMq => vec![&self.vernemq],
            Product::HiveMq => vec![&self.hivemq],
            Product::Mqttv5 => vec![&self.mqttv5],
            Product::Aedes => vec![&self.aedes],
            Product::Amqtt => vec![&self.amqtt],
            Product::ActiveMq => {
                if let Some(missing) = self.activemq_files.iter().find(|file| !file.is_file()) {
                    return Err(BrokerError::NotInstalled {
                        product,
                        looked_at: vec![missing.clone()],
                    });
                }
                vec![&self.activemq_java]
            }
            Product::Ejabberd => {
                self.ejabberd_libraries()?;
                vec![&self.ejabberd_erl]
            }
            Product::Rmqtt => vec![&self.rmqtt],
        };
        needed
            .into_iter()
            .try_for_each(|candidates| Self::locate(product, candidates).map(drop))
    }

    /// The first of [`InstallPaths::ejabberd_libraries`] holding ejabberd's application, or
    /// [`BrokerError::NotInstalled`] naming where it was looked for.
    pub fn ejabberd_libraries(&self) -> Result<PathBuf, BrokerError> {
        let holds_ejabberd = |dir: &PathBuf| {
            std::fs::read_dir(dir).is_ok_and(|entries| {
                entries.flatten().any(|entry| {
                    entry.file_name().to_string_lossy().starts_with("ejabberd-")
                        && entry
                            .path()
                            .join(recipes::ejabberd::APPLICATION_FILE)
                            .is_file()
                })
            })
        };
        self.ejabberd_libraries
            .iter()
            .find(|dir| holds_ejabberd(dir))
            .cloned()
            .ok_or_else(|| BrokerError::NotInstalled {
                product: Product::Ejabberd,
                looked_at: self
                    .ejabberd_libraries
                    .iter()
                    .map(|dir| {
                        dir.join("ejabberd-*")
                            .join(recipes::ejabberd::APPLICATION_FILE)
                    })
                    .collect(),
            })
    }

    /// The products whose executables are all present, each with its main program, for
    /// the agent's Info RPC.
    pub fn installed(&self) -> Vec<(Product, PathBuf)> {
        Product::ALL
            .into_iter()
            .filter(|product| self.check(*product).is_ok())
            .filter_map(|product| {
                let main = Self::locate(product, self.main_candidates(product)).ok()?;
                Some((product, main))
            })
            .collect()
    }

    /// Where the program that starts `product` is looked for.
    fn main_candidates(&self, product: Product) -> &[PathBuf] {
        match product {
            Product::Mosquitto => &self.mosquitto,
            Product::RabbitMq => &self.rabbitmq_server,
            Product::Emqx => &self.emqx,
            Product::VerneMq => &self.vernemq,
            Product::HiveMq => &self.hivemq,
            Product::Mqttv5 => &self.mqttv5,
            Product::Aedes => &self.aedes,
            Product::Amqtt => &self.amqtt,
            Product::ActiveMq => &self.activemq_java,
            Product::Ejabberd => &self.ejabberd_erl,
            Product::Rmqtt => &self.rmqtt,
        }
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::ErrorCode;

    #[test]
    fn a_missing_product_names_every_path_it_looked_at() {
        let install = InstallPaths {
            emqx: vec!["/nonexistent/emqx".into(), "/etc".into()],
            ..InstallPaths::default()
        };
        let error = install.check(Product::Emqx).unwrap_err();
        assert_eq!(error.code(), ErrorCode::FailedPrecondition);
        assert!(
            error.to_string().contains("/nonexistent/emqx, /etc"),
            "{error}"
        );
    }

    #[test]
    fn activemq_without_its_mqtt_libraries_is_not_installed_and_the_missing_one_is_named() {
        let install = InstallPaths {
            activemq_java: vec!["/bin/sh".into()],
            activemq_files: vec!["/bin/sh".into(), "/nonexistent/mqtt-client.jar".into()],
            ..InstallPaths::default()
        };
        let error = install.check(Product::ActiveMq).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/mqtt-client.jar"), "{error}");
        assert!(
            error.contains("libmqtt-client-java"),
            "the install line: {error}"
        );
        let complete = InstallPaths {
            activemq_files: vec!["/bin/sh".into()],
            ..install
        };
        assert!(complete.check(Product::ActiveMq).is_ok());
    }

    #[test]
    fn ejabberd_without_its_applications_is_not_installed_whatever_erl_there_is() {
        let libraries = tempfile::tempdir().unwrap();
        let install = InstallPaths {
            ejabberd_erl: vec!["/bin/sh".into()],
            ejabberd_libraries: vec!["/nonexistent".into(), libraries.path().to_owned()],
            ..InstallPaths::default()
        };
        let error = install.check(Product::Ejabberd).unwrap_err().to_string();
        assert!(
            error.contains("/nonexistent/ejabberd-*/ebin/ejabberd.app"),
            "{error}"
        );
        assert!(error.contains("apt-get install ejabberd"), "{error}");
        // A folder named like ejabberd's but without its application is not it either.
        let ebin = libraries.path().join("ejabberd-23.01/ebin");
        std::fs::create_dir_all(&ebin).unwrap();
        assert!(install.check(Product::Ejabberd).is_err());
        std::fs::write(ebin.join("ejabberd.app"), "{application, ejabberd, []}.").unwrap();
        install.check(Product::Ejabberd).unwrap();
        assert_eq!(install.ejabberd_libraries().unwrap(), libraries.path());
    }

    #[test]
    fn the_defaults_are_the_usual_install_locations() {
        let install = InstallPaths::default();
        assert!(install.mosquitto.contains(&"/usr/sbin/mosquitto".into()));
        assert!(
            install
                .rabbitmq_server
                .contains(&"/usr/lib/rabbitmq/bin/rabbitmq-server".into())
        );
        assert!(install.emqx.contains(&"/opt/emqx/bin/emqx".into()));
        assert!(install.vernemq.contains(&"/opt/vernemq/bin/vernemq".into()));
        assert!(install.hivemq.contains(&"/opt/hivemq/bin/run.sh".into()));
        assert!(install.mqttv5.contains(&"/usr/local/bin/mqttv5".into()));
    }
}
