//! A private RabbitMQ node with the MQTT plugin, for one test.
//!
//! Nothing is shared with a system instance: the node name
//! (`ct-<pid>-<n>@localhost`), the data and log directories, the config, the
//! enabled-plugins file, the Erlang cookie (`HOME`), and every port (AMQP,
//! MQTT, distribution, epmd) are this instance's own. The harness starts the
//! node's epmd itself, in the foreground on the instance's port, so it can
//! stop it by PID: an epmd that Erlang starts with `-daemon` would outlive
//! `rabbitmqctl stop`. Erlang is told to resolve names from files only
//! (`ERL_INETRC`), so the node sends no DNS query anywhere.
//!
//! Every process of the instance is tagged (see [`crate::process`]); drop
//! stops the node with `rabbitmqctl stop`, then kills whatever is left.
//!
//! [`RabbitMq::start_with`] can also open MQTT over WebSocket (the
//! `rabbitmq_web_mqtt` plugin) on a loopback port of its own.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use host::{Attempt, poll_until_blocking};
use tempfile::TempDir;

use crate::mqtt_wire::wait_for_connack;
use crate::ports::{LOOPBACK, free_loopback_ports};
use crate::process::{POLL_INTERVAL, instance_marker, new_instance_id};
use crate::rabbitmq_counters::{OVERVIEW_EXPRESSION, RabbitCounters};
use crate::rabbitmq_env::{apply_env, instance_env, write_files};
use host::blocking::{kill_group_and_reap, run_with_deadline, wait_with_deadline};

/// The broker's start script from Debian's `rabbitmq-server` package.
pub const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// The control tool from the same package.
pub const RABBITMQCTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";
/// Erlang's port mapper daemon, from `erlang-base`.
pub const EPMD: &str = "/usr/bin/epmd";

/// A cold first boot takes about 11 s on the 2-core test machines.
const START_DEADLINE: Duration = Duration::from_secs(60);
const EPMD_DEADLINE: Duration = Duration::from_secs(10);
const STOP_DEADLINE: Duration = Duration::from_secs(20);
const CTL_DEADLINE: Duration = Duration::from_secs(30);
const SETTLE_DEADLINE: Duration = Duration::from_secs(30);
/// Gap between two counter reads that must agree for them to count as settled.
const SETTLE_GAP: Duration = Duration::from_millis(300);
/// How long the WebSocket listener may take to open once MQTT answers.
const WEB_MQTT_DEADLINE: Duration = Duration::from_secs(20);

/// The request path of RabbitMQ's MQTT-over-WebSocket listener (its default, written out).
pub const WEB_MQTT_PATH: &str = "/ws";

/// What a node offers beyond MQTT on its listener. The default is what
/// [`RabbitMq::start`] runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RabbitOptions {
    /// MQTT over WebSocket (`rabbitmq_web_mqtt`) on its own loopback port
    /// ([`RabbitMq::web_mqtt_port`]), at [`WEB_MQTT_PATH`].
    pub web_mqtt: bool,
}

/// The loopback ports of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RabbitPorts {
    /// MQTT listener.
    pub mqtt: u16,
    /// AMQP 0-9-1 listener (unused by the tests, but it must not clash).
    pub amqp: u16,
    /// Erlang distribution, which `rabbitmqctl` talks to.
    pub dist: u16,
    /// The node's private epmd.
    pub epmd: u16,
}

/// A running private RabbitMQ node, stopped on drop.
#[derive(Debug)]
pub struct RabbitMq {
    server: Child,
    epmd: Child,
    instance_id: String,
    node: String,
    ports: RabbitPorts,
    web_mqtt_port: Option<u16>,
    env: Vec<(String, String)>,
    // Last field: the directory must outlive the processes writing into it.
    dir: TempDir,
}

impl RabbitMq {
    /// Starts a node and waits until its MQTT listener answers CONNECT.
    pub fn start() -> Result<Self> {
        Self::start_with(RabbitOptions::default())
    }

    /// Starts a node with `options` and waits until its MQTT listener answers
    /// CONNECT (and the WebSocket listener, if asked for, accepts connections).
    pub fn start_with(options: RabbitOptions) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("continuum-rabbitmq-")
            .tempdir()
            .context("creating the node's temporary directory")?;
        let [mqtt, amqp, dist, epmd, web_mqtt] = free_loopback_ports(5)?[..] else {
            bail!("expected five free ports");
        };
        let ports = RabbitPorts {
            mqtt,
            amqp,
            dist,
            epmd,
        };
        let instance_id = new_instance_id();
        let node = format!("{instance_id}@localhost");
        write_files(dir.path(), &ports)?;
        let mut env = instance_env(dir.path(), &instance_id, &node, &ports);
        let web_mqtt_port = options.web_mqtt.then_some(web_mqtt);
        if let Some(port) = web_mqtt_port {
            enable_web_mqtt(dir.path(), &mut env, port)?;
        }

        let epmd = spawn_epmd(&env, &ports, dir.path())?;
        let server = match spawn_server(&env, dir.path()) {
            Ok(server) => server,
            Err(error) => {
                let mut epmd = epmd;
                kill_group_and_reap(&mut epmd);
                return Err(error);
            }
        };
        let mut rabbit = Self {
            server,
            epmd,
            instance_id,
            node,
            ports,
            web_mqtt_port,
            env,
            dir,
        };
        wait_for_connack(rabbit.addr(), &mut rabbit.server, START_DEADLINE).with_context(|| {
            format!(
                "RabbitMQ node {} did not become ready; its log:\n{}",
                rabbit.node,
                rabbit.log()
            )
        })?;
        if let Some(port) = rabbit.web_mqtt_port {
            let addr = SocketAddr::from((LOOPBACK, port));
            poll_until_blocking(WEB_MQTT_DEADLINE, POLL_INTERVAL, || {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                    Ok(_) => Attempt::Done(()),
                    Err(error) => Attempt::Retry(error),
                }
            })
            .with_context(|| {
                format!(
                    "RabbitMQ's web-mqtt listener {addr} did not open; its log:\n{}",
                    rabbit.log()
                )
            })?;
        }
        Ok(rabbit)
    }

    /// Address of the MQTT listener (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((LOOPBACK, self.ports.mqtt))
    }

    /// The MQTT port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.ports.mqtt
    }

    /// The MQTT-over-WebSocket port on 127.0.0.1 (path [`WEB_MQTT_PATH`]), if
    /// [`RabbitOptions::web_mqtt`] asked for it.
    pub fn web_mqtt_port(&self) -> Option<u16> {
        self.web_mqtt_port
    }

    /// All ports of the node.
    pub fn ports(&self) -> RabbitPorts {
        self.ports
    }

    /// The Erlang node name, e.g. `ct-1234-1@localhost`.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The id tagging this node's processes, see [`crate::process`].
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// PID of the `rabbitmq-server` script, parent of the Erlang VM.
    pub fn server_pid(&self) -> u32 {
        self.server.id()
    }

    /// PID of the node's private epmd.
    pub fn epmd_pid(&self) -> u32 {
        self.epmd.id()
    }

    /// Every running process of this node (script, VM, helpers, epmd).
    pub fn processes(&self) -> Vec<u32> {
        instance_marker(&self.instance_id).live_processes()
    }

    /// The directory holding config, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node's console output so far, for failure messages.
    pub fn log(&self) -> String {
        let path = self.dir.path().join("server.log");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|error| format!("(cannot read {}: {error})", path.display()))
    }

    /// Runs `rabbitmqctl -n NODE ARGS...` against this node with its private
    /// environment; returns stdout, or an error with both streams.
    pub fn rabbitmqctl(&self, args: &[&str]) -> Result<String> {
        let mut command = Command::new(RABBITMQCTL);
        command.arg("-n").arg(&self.node).args(args);
        apply_env(&mut command, &self.env);
        let output = run_with_deadline(&mut command, None, CTL_DEADLINE)?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!(
                "rabbitmqctl {args:?} failed ({}): {stdout}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(stdout)
    }

    /// The node's global message counters right now.
    pub fn counters(&self) -> Result<RabbitCounters> {
        let output = self.rabbitmqctl(&["eval", OVERVIEW_EXPRESSION])?;
        RabbitCounters::parse(&output)
    }

    /// Reads the counters until two reads a moment apart report the same
    /// traffic, and returns the later one. Call it once clients stopped.
    pub fn counters_settled(&self) -> Result<RabbitCounters> {
        let mut previous = self.counters()?;
        thread::sleep(SETTLE_GAP);
        poll_until_blocking(SETTLE_DEADLINE, SETTLE_GAP, || {
            let current = match self.counters() {
                Ok(current) => current,
                Err(error) => return Attempt::Stop(error),
            };
            if current.same_traffic(&previous) {
                return Attempt::Done(current);
            }
            let changing =
                anyhow!("RabbitMQ counters still changing after {SETTLE_DEADLINE:?}: {current:?}");
            previous = current;
            Attempt::Retry(changing)
        })
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        // A clean stop first; it is bounded, and whatever it leaves is killed.
        let mut stop = Command::new(RABBITMQCTL);
        stop.arg("-n").arg(&self.node).arg("stop");
        apply_env(&mut stop, &self.env);
        let _ = run_with_deadline(&mut stop, None, STOP_DEADLINE);
        if wait_with_deadline(&mut self.server, Duration::from_secs(10)).is_none() {
            kill_group_and_reap(&mut self.server);
        }
        kill_group_and_reap(&mut self.epmd);
        instance_marker(&self.instance_id).sweep_blocking(Duration::from_secs(10));
    }
}

/// Adds the `rabbitmq_web_mqtt` plugin, listening on 127.0.0.1:`port`, to the
/// node's files and environment (which names the plugins enabled at boot).
fn enable_web_mqtt(dir: &Path, env: &mut [(String, String)], port: u16) -> Result<()> {
    const PLUGINS: &str = "rabbitmq_mqtt,rabbitmq_web_mqtt";
    let plugins = dir.join("enabled_plugins");
    std::fs::write(&plugins, format!("[{PLUGINS}].\n"))
        .with_context(|| format!("writing {}", plugins.display()))?;
    for (name, value) in env.iter_mut() {
        if name == "RABBITMQ_ENABLED_PLUGINS" {
            *value = PLUGINS.to_owned();
        }
    }
    let config = dir.join("rabbitmq.conf");
    let mut text = std::fs::read_to_string(&config)
        .with_context(|| format!("reading {}", config.display()))?;
    text.push_str(&format!(
        "web_mqtt.tcp.ip = {LOOPBACK}\nweb_mqtt.tcp.port = {port}\nweb_mqtt.ws_path = {WEB_MQTT_PATH}\n"
    ));
    std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))
}

/// Starts the instance's epmd in the foreground and waits until it listens.
fn spawn_epmd(env: &[(String, String)], ports: &RabbitPorts, dir: &Path) -> Result<Child> {
    let log = log_file(&dir.join("epmd.log"))?;
    let mut command = Command::new(EPMD);
    command
        .args([
            "-port",
            &ports.epmd.to_string(),
            "-address",
            &LOOPBACK.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("duplicating the epmd log handle")?)
        .stderr(log)
        .process_group(0);
    apply_env(&mut command, env);
    let mut epmd = command
        .spawn()
        .with_context(|| format!("spawning {EPMD}"))?;

    let addr = SocketAddr::from((LOOPBACK, ports.epmd));
    let listening = poll_until_blocking(EPMD_DEADLINE, POLL_INTERVAL, || {
        if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
            return Attempt::Done(());
        }
        match epmd.try_wait().ok().flatten() {
            Some(exited) => Attempt::Stop(Some(exited)),
            None => Attempt::Retry(None),
        }
    });
    if let Err(exited) = listening {
        kill_group_and_reap(&mut epmd);
        let log = std::fs::read_to_string(dir.join("epmd.log")).unwrap_or_default();
        bail!("epmd did not listen on {addr} (exit: {exited:?}); its log:\n{log}");
    }
    Ok(epmd)
}

fn spawn_server(env: &[(String, String)], dir: &Path) -> Result<Child> {
    let log = log_file(&dir.join("server.log"))?;
    let mut command = Command::new(RABBITMQ_SERVER);
    command
        .stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .context("duplicating the server log handle")?,
        )
        .stderr(log)
        // Its own group, so a forced stop reaches the VM and its helpers too.
        .process_group(0);
    apply_env(&mut command, env);
    command
        .spawn()
        .with_context(|| format!("spawning {RABBITMQ_SERVER}"))
}

fn log_file(path: &Path) -> Result<File> {
    File::create(path).with_context(|| format!("creating {}", path.display()))
}
