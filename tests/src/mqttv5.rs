//! The mqttv5 broker (crates.io `mqttv5-cli`) run by a test on loopback with the agent's own
//! config (`recipes::mqttv5`), plus a QUIC listener beside its TCP one: certificate and key
//! from a test CA, one stream per connection (`control_only` delivery) unless a test asks for
//! another [`QuicDelivery`]. Its `$SYS` tree counts every PUBLISH received and sent, whatever the
//! transport; its log names each extra stream a client opens.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use domain::{BrokerOptions, QuicDelivery};
use host::blocking::kill_group_and_reap;
use tempfile::TempDir;

use crate::mosquitto::{ServerTlsFiles, tls_files_in};
use crate::mqtt_wire::wait_for_connack;
use crate::ports::{LOOPBACK, free_loopback_ports};
use crate::process::{INSTANCE_MARKER_VAR, instance_marker, new_instance_id};
use crate::sys_snapshot::{SysCounter, SysSnapshot};

/// Where `cargo install --root /usr/local mqttv5-cli` puts the broker (.ci/run does).
pub const MQTTV5_BINARY: &str = "/usr/local/bin/mqttv5";

/// How long the broker may take to answer MQTT.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// Its log (stdout and stderr), in its folder.
const LOG_FILE: &str = "mqttv5.log";

/// Starts tried, each on fresh ports, when a port turns out taken.
const START_ATTEMPTS: usize = 3;

/// The broker's module that logs, at debug level, each QUIC stream a client opens beside the
/// control stream (mqtt5 0.49's "Additional ... data stream accepted").
const STREAM_LOG_FILTER: &str = "mqtt5::broker::quic_acceptor=debug";

/// What that log line says.
const DATA_STREAM_ACCEPTED: &str = "data stream accepted from";

/// One mqttv5 broker with TCP, TLS and QUIC listeners on 127.0.0.1; stopped on drop.
#[derive(Debug)]
pub struct Mqttv5 {
    child: Child,
    tcp_port: u16,
    tls_port: u16,
    quic_port: u16,
    tls: ServerTlsFiles,
    delivery: QuicDelivery,
    instance_id: String,
    dir: TempDir,
}

impl Mqttv5 {
    /// Starts a broker with a QUIC listener, retrying on fresh ports if one was taken.
    pub fn start_with_quic() -> Result<Self> {
        Self::start_with_quic_delivering(QuicDelivery::ControlOnly)
    }

    /// [`Mqttv5::start_with_quic`], delivering PUBLISH over QUIC as `delivery` says.
    pub fn start_with_quic_delivering(delivery: QuicDelivery) -> Result<Self> {
        Self::start(delivery, None)
    }

    /// Another broker with `other`'s certificate and delivery, so trusted as `other` is, on
    /// ports and with TLS ticket keys of its own: what a client meets when a broker restarts
    /// (or fails over) behind the same address.
    pub fn start_with_the_certificate_of(other: &Mqttv5) -> Result<Self> {
        Self::start(other.delivery, Some(&other.tls))
    }

    fn start(delivery: QuicDelivery, certificate: Option<&ServerTlsFiles>) -> Result<Self> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(delivery, certificate) {
                Ok(broker) => return Ok(broker),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("mqttv5 never started")))
            .context(format!("starting mqttv5 {START_ATTEMPTS} times"))
    }

    fn start_once(delivery: QuicDelivery, certificate: Option<&ServerTlsFiles>) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("continuum-mqttv5-")
            .tempdir()
            .context("creating the broker's temporary directory")?;
        // The UDP port is a TCP port found free: taken for UDP, the broker exits and the
        // start is tried again.
        let [tcp_port, tls_port, quic_port] = free_loopback_ports(3)?[..] else {
            bail!("expected three free ports");
        };
        let tls_dir = dir.path().join("tls");
        std::fs::create_dir(&tls_dir).with_context(|| format!("creating {}", tls_dir.display()))?;
        let tls = match certificate {
            Some(files) => copy_tls_files(files, &tls_dir)?,
            None => tls_files_in(&tls_dir, LOOPBACK.into())?,
        };
        let config = recipes::mqttv5::with_quic(
            recipes::mqttv5::config(
                &BrokerOptions {
                    quic_delivery: delivery,
                    ..BrokerOptions::default()
                },
                SocketAddr::from((LOOPBACK, tcp_port)),
                None,
            ),
            &recipes::QuicListen {
                address: SocketAddr::from((LOOPBACK, quic_port)),
                cert_file: &tls.cert,
                key_file: &tls.key,
            },
        );
        let mut config = config;
        // MQTT over TLS beside them, with the same certificate: TCP with TLS against QUIC.
        config["tls_config"] = serde_json::json!({
            "cert_file": tls.cert,
            "key_file": tls.key,
            "ca_file": null,
            "require_client_cert": false,
            "bind_addresses": [SocketAddr::from((LOOPBACK, tls_port)).to_string()],
        });
        let config_path = dir.path().join(recipes::mqttv5::CONFIG_FILE);
        std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let log_path = dir.path().join(LOG_FILE);
        let log =
            File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let instance_id = new_instance_id();
        let child = Command::new(MQTTV5_BINARY)
            .args(["broker", "-c"])
            .arg(&config_path)
            .arg("--non-interactive")
            .env(INSTANCE_MARKER_VAR, &instance_id)
            .env("RUST_LOG", STREAM_LOG_FILTER)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating the log file handle")?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawning {MQTTV5_BINARY}"))?;
        let mut broker = Mqttv5 {
            child,
            tcp_port,
            tls_port,
            quic_port,
            tls,
            delivery,
            instance_id,
            dir,
        };
        let address = broker.address();
        if let Err(error) = wait_for_connack(address, &mut broker.child, START_DEADLINE) {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(error.context(format!("mqttv5 did not become ready; its log:\n{log}")));
        }
        Ok(broker)
    }

    /// Its TCP listener.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from((LOOPBACK, self.tcp_port))
    }

    /// Its MQTT-over-TLS listener (the certificate [`Mqttv5::ca_file`] signed).
    pub fn tls_address(&self) -> SocketAddr {
        SocketAddr::from((LOOPBACK, self.tls_port))
    }

    /// Its QUIC listener's UDP port on 127.0.0.1.
    pub fn quic_port(&self) -> u16 {
        self.quic_port
    }

    /// The CA that signed its certificate (for 127.0.0.1).
    pub fn ca_file(&self) -> &Path {
        &self.tls.ca
    }

    /// The folder of its config, certificate and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// How many QUIC streams clients have opened beside their control streams, as its log
    /// says (streams carrying PUBLISH in loadgen's per-topic and per-publish modes).
    pub fn data_streams_accepted(&self) -> Result<usize> {
        let path = self.dir.path().join(LOG_FILE);
        let log = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(log.matches(DATA_STREAM_ACCEPTED).count())
    }

    /// Its `$SYS` counters of PUBLISH packets received from and sent to clients, every QoS
    /// and transport; read through the TCP listener.
    pub fn counters() -> [SysCounter; 2] {
        [
            SysCounter::Topic("$SYS/broker/messages/publish/received".into()),
            SysCounter::Topic("$SYS/broker/messages/publish/sent".into()),
        ]
    }

    /// One reading of [`Mqttv5::counters`].
    pub fn read_counters(&self) -> Result<SysSnapshot> {
        SysSnapshot::read(self.address(), &Self::counters())
    }
}

/// Copies `files` into `dir`: a second broker with the first one's certificate.
fn copy_tls_files(files: &ServerTlsFiles, dir: &Path) -> Result<ServerTlsFiles> {
    let copy = |from: &Path| -> Result<std::path::PathBuf> {
        let name = from.file_name().context("a TLS file has a name")?;
        let to = dir.join(name);
        std::fs::copy(from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        Ok(to)
    };
    Ok(ServerTlsFiles {
        ca: copy(&files.ca)?,
        cert: copy(&files.cert)?,
        key: copy(&files.key)?,
    })
}

impl Drop for Mqttv5 {
    fn drop(&mut self) {
        kill_group_and_reap(&mut self.child);
        instance_marker(&self.instance_id).sweep_blocking(Duration::from_secs(5));
    }
}
