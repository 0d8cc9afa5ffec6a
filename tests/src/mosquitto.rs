//! A real Mosquitto broker on its own loopback port, for one test.
//!
//! [`Mosquitto::start`] writes a config into a private temporary directory,
//! runs `/usr/sbin/mosquitto -c FILE` with its log in that directory, and
//! returns once an MQTT CONNECT gets a CONNACK. Dropping the value kills the
//! broker and reaps it. The broker's own counters come from its `$SYS` tree,
//! see [`crate::mosquitto_sys`] and the private `mosquitto_sys_reader`.
//!
//! With [`MosquittoOptions::websocket`] the broker also speaks MQTT over
//! WebSocket (ws://, or wss:// with a certificate from a CA of its own) on a
//! second loopback port.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::mosquitto_sys::MosquittoCounters;
use crate::mosquitto_sys_reader::SysTreeReader;
use crate::mqtt_wire::wait_for_connack;
use crate::pki::TestPki;
use crate::ports::{LOOPBACK, free_loopback_ports};
use crate::process::{INSTANCE_MARKER_VAR, instance_marker, new_instance_id};
use host::blocking::kill_group_and_reap;

/// Where Debian's `mosquitto` package installs the broker.
pub const MOSQUITTO_BINARY: &str = "/usr/sbin/mosquitto";

/// Queue limit used unless [`MosquittoOptions::max_queued_messages`] is set:
/// high enough that a benchmark measures the broker, not Mosquitto's default
/// of 1000 queued messages per client.
pub const DEFAULT_MAX_QUEUED_MESSAGES: u32 = 1_000_000;

/// How long a start may take before it counts as failed.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// Starts tried, each on a fresh port, when the chosen port was taken between
/// picking it and Mosquitto binding it.
const START_ATTEMPTS: usize = 3;

/// How long `$SYS` reads wait for the first complete update.
const COUNTERS_DEADLINE: Duration = Duration::from_secs(15);

/// How long [`Mosquitto::counters_settled`] waits for the figures to settle.
const SETTLE_DEADLINE: Duration = Duration::from_secs(30);

/// Broker limits for one test. The default lifts every limit a load test
/// could trip over by accident.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MosquittoOptions {
    /// `max_queued_messages`: messages queued per client beyond those in
    /// flight; also the bound on QoS 0 messages waiting for a slow online
    /// subscriber. `None` means [`DEFAULT_MAX_QUEUED_MESSAGES`].
    pub max_queued_messages: Option<u32>,
    /// `max_inflight_messages`: unacknowledged QoS 1/2 messages per client.
    /// `None` keeps Mosquitto's default (20).
    pub max_inflight_messages: Option<u32>,
    /// `max_packet_size` in bytes. `None` leaves it unset: no limit beyond
    /// MQTT's own 256 MB.
    pub max_packet_size: Option<u32>,
    /// Raw lines appended to the generated config.
    pub extra_config: Vec<String>,
    /// A second listener, for MQTT over WebSocket, on its own loopback port
    /// ([`Mosquitto::websocket_port`]); `None` opens none.
    pub websocket: Option<WebSocketListener>,
    /// Keep sessions and queued messages on disk: saved when the broker stops, loaded when
    /// it starts again ([`Mosquitto::restart`]).
    pub persistence: bool,
}

/// How the WebSocket listener of [`MosquittoOptions::websocket`] is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebSocketListener {
    /// `ws://`: plain WebSocket.
    Plain,
    /// `wss://`: WebSocket over TLS, with a certificate for 127.0.0.1 from a CA
    /// the harness makes for this broker ([`Mosquitto::websocket_ca_file`]).
    Tls,
}

/// Where the WebSocket listener is and, for wss, the files it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WebSocketSetup {
    port: u16,
    /// The CA, certificate and key files, for wss.
    tls: Option<ServerTlsFiles>,
}

/// A test CA and a broker certificate and key it signed, for a Mosquitto TLS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The CA certificate clients trust.
    pub ca: PathBuf,
    /// The broker's certificate.
    pub cert: PathBuf,
    /// The broker's key.
    pub key: PathBuf,
}

impl MosquittoOptions {
    /// The config file text for a broker listening on 127.0.0.1:`port`, and
    /// for WebSocket as `websocket` says.
    fn render_config(
        &self,
        port: u16,
        websocket: Option<&WebSocketSetup>,
        persistence_dir: Option<&Path>,
    ) -> String {
        let persistence = match persistence_dir {
            Some(dir) => format!("persistence true\npersistence_location {}/", dir.display()),
            None => "persistence false".to_owned(),
        };
        let mut lines = vec![
            "# Written by Continuum's test harness; one broker per test.".to_owned(),
            "allow_anonymous true".to_owned(),
            persistence,
            // The $SYS tree is how the harness reads the broker's counters;
            // refresh it as often as Mosquitto allows.
            "sys_interval 1".to_owned(),
            format!(
                "max_queued_messages {}",
                self.max_queued_messages
                    .unwrap_or(DEFAULT_MAX_QUEUED_MESSAGES)
            ),
            // message_size_limit is left out: its default 0 already means no
            // limit, and writing it only earns a deprecation note in the log.
            "log_dest stdout".to_owned(),
            // One type per line: Mosquitto reads only the first word of a log_type line (with
            // "error warning notice information" on one line it logged errors alone).
            "log_type error".to_owned(),
            "log_type warning".to_owned(),
            "log_type notice".to_owned(),
            "log_type information".to_owned(),
        ];
        if let Some(inflight) = self.max_inflight_messages {
            lines.push(format!("max_inflight_messages {inflight}"));
        }
        if let Some(size) = self.max_packet_size {
            lines.push(format!("max_packet_size {size}"));
        }
        lines.push(format!("listener {port} {LOOPBACK}"));
        lines.extend(self.extra_config.iter().cloned());
        // After the extra lines, so settings there still belong to the listener they follow.
        if let Some(websocket) = websocket {
            // Mosquitto 2.0.11 fails to start a websockets listener bound to an IP address
            // ("Unable to start any listening sockets"); bound to `lo` it serves 127.0.0.1.
            lines.push(format!("listener {} lo", websocket.port));
            lines.push("protocol websockets".to_owned());
            if let Some(tls) = &websocket.tls {
                lines.push(format!("certfile {}", tls.cert.display()));
                lines.push(format!("keyfile {}", tls.key.display()));
            }
        }
        lines.push(String::new());
        lines.join("\n")
    }
}

/// A running Mosquitto broker, killed and reaped on drop.
#[derive(Debug)]
pub struct Mosquitto {
    child: Child,
    port: u16,
    websocket: Option<WebSocketSetup>,
    instance_id: String,
    log_path: PathBuf,
    sys_tree: Option<SysTreeReader>,
    // Last field: the directory must outlive the process writing into it.
    dir: TempDir,
}

impl Mosquitto {
    /// Starts a broker with `options` and waits until it answers CONNECT.
    pub fn start(options: MosquittoOptions) -> Result<Self> {
        let mut last_failure = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(&options)? {
                Ok(mosquitto) => return Ok(mosquitto),
                Err(port_taken) => last_failure = Some(port_taken),
            }
        }
        Err(last_failure.unwrap_or_else(|| anyhow::anyhow!("mosquitto never started")))
            .context(format!("starting mosquitto {START_ATTEMPTS} times"))
    }

    /// One start on a fresh port. The inner error means "port taken, retry".
    fn start_once(options: &MosquittoOptions) -> Result<Result<Self>> {
        let dir = tempfile::Builder::new()
            .prefix("continuum-mosquitto-")
            .tempdir()
            .context("creating the broker's temporary directory")?;
        let [port, websocket_port] = free_loopback_ports(2)?[..] else {
            bail!("expected two free ports");
        };
        let websocket = match options.websocket {
            None => None,
            Some(WebSocketListener::Plain) => Some(WebSocketSetup {
                port: websocket_port,
                tls: None,
            }),
            Some(WebSocketListener::Tls) => Some(WebSocketSetup {
                port: websocket_port,
                tls: Some(server_tls_files(dir.path())?),
            }),
        };
        let persistence_dir = match options.persistence {
            true => Some(persistence_dir(dir.path())?),
            false => None,
        };
        let config_path = dir.path().join("mosquitto.conf");
        std::fs::write(
            &config_path,
            options.render_config(port, websocket.as_ref(), persistence_dir.as_deref()),
        )
        .with_context(|| format!("writing {}", config_path.display()))?;
        let log_path = dir.path().join("mosquitto.log");
        let log =
            File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let log_for_stderr = log.try_clone().context("duplicating the log file handle")?;

        let instance_id = new_instance_id();
        let child = spawn_broker(&config_path, &instance_id, log, log_for_stderr)?;
        let mut mosquitto = Self {
            child,
            port,
            websocket,
            instance_id,
            log_path,
            sys_tree: None,
            dir,
        };

        let addr = mosquitto.addr();
        if let Err(error) = wait_for_connack(addr, &mut mosquitto.child, START_DEADLINE) {
            let log = mosquitto.log();
            // A taken websockets port logs only this (other websockets failures do too; they
            // fail again on the next port and are reported with the log then).
            let websocket_failed = log.contains("Unable to create websockets listener");
            if log.contains("Address already in use") || websocket_failed {
                return Ok(Err(error.context(format!("port {port} was taken"))));
            }
            return Err(error.context(format!("mosquitto did not become ready; its log:\n{log}")));
        }
        let sys_tree = SysTreeReader::connect(addr, &mosquitto.instance_id)
            .with_context(|| format!("subscribing to $SYS; mosquitto log:\n{}", mosquitto.log()))?;
        mosquitto.sys_tree = Some(sys_tree);
        Ok(Ok(mosquitto))
    }

    /// Address MQTT clients connect to (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((LOOPBACK, self.port))
    }

    /// The broker's listening port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The WebSocket listener's port on 127.0.0.1, if
    /// [`MosquittoOptions::websocket`] asked for one.
    pub fn websocket_port(&self) -> Option<u16> {
        self.websocket.as_ref().map(|websocket| websocket.port)
    }

    /// The CA certificate (PEM) that signed the wss listener's certificate,
    /// for [`WebSocketListener::Tls`].
    pub fn websocket_ca_file(&self) -> Option<&Path> {
        let tls = self.websocket.as_ref()?.tls.as_ref()?;
        Some(&tls.ca)
    }

    /// PID of the `mosquitto` process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The id tagging this broker's processes, see [`crate::process`].
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The directory holding the config and the log.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The broker's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path)
            .unwrap_or_else(|error| format!("(cannot read {}: {error})", self.log_path.display()))
    }

    /// The counters of the most recent complete `$SYS` update.
    ///
    /// `$SYS` is refreshed about every two seconds (`sys_interval 1`; see
    /// [`crate::mosquitto_sys`]), so traffic of the last seconds may be
    /// missing: use [`Self::counters_settled`] for the final figures of a run.
    pub fn counters(&self) -> Result<MosquittoCounters> {
        self.reader()?
            .latest(COUNTERS_DEADLINE)
            .with_context(|| format!("reading $SYS; mosquitto log:\n{}", self.log()))
    }

    /// Waits until two consecutive `$SYS` updates, both published after this
    /// call, report the same traffic, and returns the later one.
    ///
    /// Call it once the clients have stopped sending; under steady load the
    /// figures never settle and this fails after its deadline (30 s).
    pub fn counters_settled(&self) -> Result<MosquittoCounters> {
        self.reader()?
            .settled(SETTLE_DEADLINE)
            .with_context(|| format!("waiting for $SYS to settle; mosquitto log:\n{}", self.log()))
    }

    /// Every `$SYS` update completed so far, each with the Unix time (ns) at which Mosquitto
    /// published it: the broker's own counters over time, to compare rates with.
    pub fn counter_history(&self) -> Result<Vec<(u64, MosquittoCounters)>> {
        Ok(self.reader()?.history())
    }

    /// Stops the broker with SIGTERM (with [`MosquittoOptions::persistence`] it saves its
    /// sessions and queues) and starts it again on the same port and config, returning once
    /// it answers CONNECT: the outage a fleet reconnects after. The `$SYS` counters start
    /// again from zero.
    pub fn restart(&mut self) -> Result<()> {
        drop(self.sys_tree.take());
        let pid = libc::pid_t::try_from(self.child.id()).context("mosquitto's pid")?;
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            bail!("SIGTERM to mosquitto: {}", std::io::Error::last_os_error());
        }
        self.child.wait().context("waiting for mosquitto to stop")?;
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let log_for_stderr = log.try_clone().context("duplicating the log file handle")?;
        let config_path = self.dir.path().join("mosquitto.conf");
        self.child = spawn_broker(&config_path, &self.instance_id, log, log_for_stderr)?;
        let addr = self.addr();
        wait_for_connack(addr, &mut self.child, START_DEADLINE)
            .with_context(|| format!("mosquitto did not come back; its log:\n{}", self.log()))?;
        self.sys_tree = Some(
            SysTreeReader::connect(addr, &self.instance_id)
                .with_context(|| format!("subscribing to $SYS again; log:\n{}", self.log()))?,
        );
        Ok(())
    }

    fn reader(&self) -> Result<&SysTreeReader> {
        match &self.sys_tree {
            Some(reader) => Ok(reader),
            None => bail!("the $SYS reader of this broker is not running"),
        }
    }
}

/// Runs `mosquitto -c config_path` in a process group of its own, tagged with `instance_id`.
fn spawn_broker(config_path: &Path, instance_id: &str, log: File, stderr: File) -> Result<Child> {
    Command::new(MOSQUITTO_BINARY)
        .arg("-c")
        .arg(config_path)
        .env(INSTANCE_MARKER_VAR, instance_id)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .with_context(|| format!("spawning {MOSQUITTO_BINARY}"))
}

/// `broker_dir/persist`, writable by Mosquitto: started as root, it writes its database as
/// its own user.
fn persistence_dir(broker_dir: &Path) -> Result<PathBuf> {
    let dir = broker_dir.join("persist");
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .with_context(|| format!("chmod 777 {}", dir.display()))?;
    std::fs::set_permissions(broker_dir, std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("chmod 711 {}", broker_dir.display()))?;
    Ok(dir)
}

/// A CA and a server certificate for 127.0.0.1 in `broker_dir/tls`, readable
/// by Mosquitto: started as root, it reads them as its own user.
fn server_tls_files(broker_dir: &Path) -> Result<ServerTlsFiles> {
    let dir = broker_dir.join("tls");
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(broker_dir, std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("chmod 711 {}", broker_dir.display()))?;
    tls_files_in(&dir, LOOPBACK.into())
}

/// A CA of the test's own and a certificate for `ip` it signed, in `dir`, readable by a
/// Mosquitto started as root (it reads them as its own user; a test key may be readable).
pub fn tls_files_in(dir: &Path, ip: std::net::IpAddr) -> Result<ServerTlsFiles> {
    TestPki::create(dir, &[("mosquitto", ip)])?;
    let files = ServerTlsFiles {
        ca: dir.join(proto::pki::CA_CERT_FILE),
        cert: proto::pki::cert_path(dir, "mosquitto"),
        key: proto::pki::key_path(dir, "mosquitto"),
    };
    for (path, mode) in [(dir, 0o755), (&files.key, 0o644)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {mode:o} {}", path.display()))?;
    }
    Ok(files)
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        // Stop reading first so the reader sees its own shutdown, not a crash.
        drop(self.sys_tree.take());
        kill_group_and_reap(&mut self.child);
        instance_marker(&self.instance_id).sweep_blocking(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_lifts_limits_and_listens_on_loopback_only() {
        let config = MosquittoOptions::default().render_config(4242, None, None);
        assert!(config.contains("listener 4242 127.0.0.1\n"));
        assert!(config.contains("max_queued_messages 1000000\n"));
        assert!(config.contains("allow_anonymous true\n"));
        assert!(config.contains("persistence false\n"));
        assert!(config.contains("sys_interval 1\n"));
        assert!(!config.contains("max_packet_size"));
        assert!(!config.contains("max_inflight_messages"));
        assert!(!config.contains("websockets"));
    }

    #[test]
    fn options_and_extra_lines_reach_the_config() {
        let options = MosquittoOptions {
            max_queued_messages: Some(10),
            max_inflight_messages: Some(5),
            max_packet_size: Some(2_000_000),
            extra_config: vec!["max_connections -1".to_owned()],
            websocket: None,
            persistence: true,
        };
        let config = options.render_config(1, None, Some(Path::new("/b/persist")));
        for line in [
            "max_queued_messages 10",
            "max_inflight_messages 5",
            "max_packet_size 2000000",
            "max_connections -1",
            "persistence true",
            "persistence_location /b/persist/",
        ] {
            assert!(config.lines().any(|l| l == line), "missing {line:?}");
        }
    }

    #[test]
    fn a_websocket_listener_binds_lo_after_the_extra_lines() {
        let options = MosquittoOptions {
            extra_config: vec!["listener 9999 127.0.0.1".to_owned(), "cafile /c".to_owned()],
            ..MosquittoOptions::default()
        };
        let tls = ServerTlsFiles {
            ca: "/t/ca.pem".into(),
            cert: "/t/m.pem".into(),
            key: "/t/m.key".into(),
        };
        let websocket = WebSocketSetup {
            port: 9001,
            tls: Some(tls),
        };
        let config = options.render_config(1, Some(&websocket), None);
        assert!(
            config.ends_with(
                "cafile /c\nlistener 9001 lo\nprotocol websockets\ncertfile /t/m.pem\nkeyfile /t/m.key\n"
            ),
            "{config}"
        );
    }
}
