//! The native driver: a broker product installed on the node, run as a child process with
//! a configuration the agent generates into the instance's own state directory.
//!
//! Each product's recipe (crate `recipes`) turns an instance into a [`NativePlan`] (files,
//! helper processes, the broker's command line, how to stop it); this driver gives it the
//! node's executables ([`InstallPaths`]), its port and free private ports. Plans are plain
//! data, so the command lines of products that are not installed here are checked by the
//! recipes' unit tests. [`NativeDriver`] runs a plan: writes the files, starts helpers and
//! the broker in their own process groups, waits for an MQTT CONNACK, and on failure stops
//! everything again. Its tests (`native_tests.rs`) include the real Mosquitto and RabbitMQ
//! starts, which skip where the product is not installed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use host::poll::{Attempt, poll_until};
use tokio::net::TcpStream;

use super::error::BrokerError;
use super::install::InstallPaths;
use super::log_watch::LogWatch;
use super::ports::{claim_port, claim_udp_port, connect_address, free_loopback_ports};
use super::quic_listener::{self, QuicCertificate, certified_addresses, make_certificate};
use super::readiness::wait_ready;
use super::sockets::{self, Listening, Transport};
use super::websocket_probe;
use super::{BoxFuture, BrokerDriver, BrokerState, QuicEndpoint, RunningBroker};
use crate::new_marker;
use domain::{BrokerKind, BrokerSpec, Product};
use host::Marker;
use host::{Account, CommandLine, GroupChild, log_tail, run_bounded};
use recipes::{Instance, NativePlan, QuicListen, VersionCommand, WebSocketListen, rabbitmq};

/// Starts tried, each on a fresh port, when the spec asked for any port (0) and the chosen
/// one was taken between picking it and the broker binding it.
const START_ATTEMPTS: usize = 3;
/// How long a helper (epmd) may take to listen.
const HELPER_DEADLINE: Duration = Duration::from_secs(10);
/// How long `PROGRAM --version` may run.
const VERSION_COMMAND_DEADLINE: Duration = Duration::from_secs(5);
/// How long a graceful stop command (`rabbitmqctl stop`) may run.
const STOP_COMMAND_DEADLINE: Duration = Duration::from_secs(30);
/// How long the broker may take to exit after being asked to stop, before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// How long the final sweep of tagged processes may take.
const SWEEP_DEADLINE: Duration = Duration::from_secs(10);
/// Log lines quoted in errors.
const LOG_TAIL_LINES: usize = 30;
/// How long a start still waits for its listener after the broker logged a port taken.
const PORT_TAKEN_GRACE: Duration = Duration::from_secs(3);
/// The broker's console output, inside its state directory.
const LOG_FILE: &str = "broker.log";
/// The instance's process marker, written before its processes start: an agent that died
/// without stopping them leaves it, and the next agent stops what still carries it.
const MARKER_FILE: &str = "marker";
/// How long the sweep of a predecessor's processes may take, per instance.
const LEFTOVER_SWEEP: Duration = Duration::from_secs(10);

/// What a product module is given to plan one start.
#[derive(Debug, Clone, Copy)]
pub struct PlanContext<'a> {
    /// The requested instance.
    pub spec: &'a BrokerSpec,
    /// Its state directory (config, data, logs), empty at this point.
    pub dir: &'a Path,
    /// The MQTT port, resolved if the spec asked for any.
    pub port: u16,
    /// A random per-instance secret (an Erlang cookie): not derived from the process marker,
    /// which anyone on the host can read in the processes' environment.
    pub secret: &'a str,
    /// The WebSocket listener, port resolved, when the spec asks for one.
    pub websocket: Option<WebSocketPlace<'a>>,
    /// The QUIC listener, port resolved and certificate made, when the spec asks for one.
    pub quic: Option<QuicPlace<'a>>,
}

/// Where a QUIC listener goes and what it presents.
#[derive(Debug, Clone, Copy)]
pub struct QuicPlace<'a> {
    /// Bind address (UDP), port resolved.
    pub address: SocketAddr,
    /// The certificate the agent made for it.
    pub certificate: &'a QuicCertificate,
}

/// Where a WebSocket listener goes: its address, the interface holding it (`None` for
/// every interface) and the path clients ask for.
#[derive(Debug, Clone, Copy)]
pub struct WebSocketPlace<'a> {
    /// Bind address, port resolved.
    pub address: SocketAddr,
    /// The interface holding the address.
    pub interface: Option<&'a str>,
    /// The request path of the product's listener.
    pub path: &'static str,
}

impl PlanContext<'_> {
    /// The MQTT listen address.
    pub fn listen(&self) -> SocketAddr {
        self.spec.listen_address(self.port)
    }
}

/// The interface holding `bind`, for a product that binds a listener by interface name;
/// `None` when `bind` is every interface. Err when no interface of this node holds it.
fn interface_of(bind: std::net::IpAddr) -> Result<Option<String>, BrokerError> {
    if bind.is_unspecified() {
        return Ok(None);
    }
    crate::netem::interfaces::holding(bind)
        .map(Some)
        .ok_or_else(|| {
            BrokerError::invalid(
                "bind",
                bind,
                "is held by no interface of this node, so no WebSocket listener can bind it",
            )
        })
}

/// The driver for installed products.
#[derive(Debug, Clone)]
pub struct NativeDriver {
    install: InstallPaths,
    state_dir: PathBuf,
}

impl NativeDriver {
    /// A driver looking for products at `install` and keeping each instance's files in
    /// `state_dir/<name>/` (emptied at every start).
    pub fn new(install: InstallPaths, state_dir: PathBuf) -> Self {
        Self { install, state_dir }
    }

    /// Where products are looked for.
    pub fn install_paths(&self) -> &InstallPaths {
        &self.install
    }

    /// Stops the processes of instances a previous agent started here and never stopped (it
    /// was killed, or the node lost power): each instance's folder keeps the marker its
    /// processes carry. Returns the instances that still had processes.
    pub async fn stop_leftovers(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.state_dir) else {
            return Vec::new();
        };
        let mut stopped = Vec::new();
        for entry in entries.flatten() {
            let file = entry.path().join(MARKER_FILE);
            let Ok(value) = std::fs::read_to_string(&file) else {
                continue;
            };
            let marker = Marker::new(crate::MARKER_VAR, value.trim());
            if !marker.live_processes().is_empty() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let left = marker.sweep(LEFTOVER_SWEEP).await;
                if left.is_empty() {
                    tracing::warn!(broker = %name, %marker, "stopped a broker a previous agent left running");
                } else {
                    tracing::error!(broker = %name, ?left, "a previous agent's broker survived SIGKILL");
                }
                stopped.push(name);
            }
            let _ = std::fs::remove_file(&file);
        }
        stopped
    }

    async fn start_native(
        &self,
        spec: &BrokerSpec,
        product: Product,
    ) -> Result<NativeBroker, BrokerError> {
        // A listener the recipe cannot open is refused whether or not the product is here.
        let websocket_path = match spec.options.websocket_port {
            None => None,
            Some(port) => Some(recipes::websocket_path(product).map_err(|reason| {
                BrokerError::invalid(
                    "options.websocket_port",
                    port,
                    format!("{product}: {reason}"),
                )
            })?),
        };
        if let Some(port) = spec.options.quic_port {
            recipes::quic_listener(product).map_err(|reason| {
                BrokerError::invalid("options.quic_port", port, format!("{product}: {reason}"))
            })?;
        }
        recipes::quic_delivery(product, spec.options.quic_port, spec.options.quic_delivery)
            .map_err(|reason| {
                BrokerError::invalid(
                    "options.quic_delivery",
                    spec.options.quic_delivery.name(),
                    format!("{product}: {reason}"),
                )
            })?;
        self.install.check(product)?;
        let interface = match websocket_path {
            Some(_) => interface_of(spec.bind)?,
            None => None,
        };
        let any_port = spec.port == 0
            || spec.options.websocket_port == Some(0)
            || spec.options.quic_port == Some(0);
        let attempts = if any_port { START_ATTEMPTS } else { 1 };
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Held until this attempt is over: by then the broker holds the port.
            let claim = claim_port(spec.bind, spec.port)?;
            let port = claim.port();
            let websocket_claim = match (websocket_path, spec.options.websocket_port) {
                (Some(_), Some(ws)) => Some(claim_port(spec.bind, ws)?),
                _ => None,
            };
            let websocket = websocket_path
                .zip(websocket_claim.as_ref())
                .map(|(path, claim)| WebSocketPlace {
                    address: SocketAddr::new(spec.bind, claim.port()),
                    interface: interface.as_deref(),
                    path,
                });
            let quic_claim = match spec.options.quic_port {
                Some(port) => Some(claim_udp_port(spec.bind, port)?),
                None => None,
            };
            let dir = self.fresh_dir(&spec.name)?;
            let certificate = match &quic_claim {
                Some(claim) => {
                    let address = SocketAddr::new(spec.bind, claim.port());
                    let names = certified_addresses(spec.bind, connect_address(address).ip());
                    Some((address, make_certificate(&dir, &names)?))
                }
                None => None,
            };
            let quic = certificate
                .as_ref()
                .map(|(address, certificate)| QuicPlace {
                    address: *address,
                    certificate,
                });
            let marker = new_marker(&spec.name);
            let secret = host::secret::random_hex(32)
                .map_err(|e| BrokerError::io("drawing the instance's secret", e))?;
            let context = PlanContext {
                spec,
                dir: &dir,
                port,
                secret: &secret,
                websocket,
                quic,
            };
            let plan = plan(product, &self.install, &context)?;
            match launch(&context, product, plan, marker).await {
                Err(Launch::PortTaken(error)) if attempt < attempts => {
                    tracing::info!(broker = %spec.name, port, "port taken meanwhile, retrying: {error}");
                }
                Err(Launch::PortTaken(error) | Launch::Failed(error)) => return Err(error),
                Ok(broker) => return Ok(broker),
            }
        }
    }

    fn fresh_dir(&self, name: &str) -> Result<PathBuf, BrokerError> {
        // `name` is validated to [A-Za-z0-9_-], so this stays inside `state_dir`.
        let dir = self.state_dir.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| BrokerError::io(format!("emptying {}", dir.display()), e))?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| BrokerError::io(format!("creating {}", dir.display()), e))?;
        Ok(dir)
    }
}

/// The recipe's plan of `product`, with this node's executables and the free loopback ports
/// its private listeners need (RabbitMQ's AMQP, distribution and epmd; EMQX's dashboard and
/// gen_rpc).
fn plan(
    product: Product,
    install: &InstallPaths,
    context: &PlanContext<'_>,
) -> Result<NativePlan, BrokerError> {
    let instance = Instance {
        name: &context.spec.name,
        dir: context.dir,
        listen: context.listen(),
        options: &context.spec.options,
        secret: context.secret,
        websocket: context.websocket.map(|place| WebSocketListen {
            address: place.address,
            interface: place.interface,
        }),
        quic: context.quic.map(|place| QuicListen {
            address: place.address,
            cert_file: &place.certificate.cert_file,
            key_file: &place.certificate.key_file,
        }),
    };
    let locate = |candidates: &[PathBuf]| InstallPaths::locate(product, candidates);
    let mut plan = match product {
        Product::Mosquitto => recipes::mosquitto::native(&locate(&install.mosquitto)?, &instance),
        Product::RabbitMq => {
            let programs = rabbitmq::Programs {
                server: locate(&install.rabbitmq_server)?,
                ctl: locate(&install.rabbitmqctl)?,
                epmd: locate(&install.epmd)?,
            };
            let [amqp, dist, epmd] = free_ports::<3>("RabbitMQ's private ports")?;
            let ports = rabbitmq::PrivatePorts { amqp, dist, epmd };
            rabbitmq::native(&programs, &instance, ports)
        }
        Product::Emqx => {
            let [dashboard, rpc] = free_ports::<2>("EMQX's dashboard and RPC ports")?;
            let ports = recipes::emqx::PrivatePorts { dashboard, rpc };
            recipes::emqx::native(&locate(&install.emqx)?, &instance, ports)
        }
        Product::VerneMq => recipes::vernemq::native(&locate(&install.vernemq)?, &instance),
        Product::HiveMq => recipes::hivemq::native(&locate(&install.hivemq)?, &instance),
        Product::Mqttv5 => recipes::mqttv5::native(&locate(&install.mqttv5)?, &instance),
        Product::Aedes => recipes::aedes::native(&locate(&install.aedes)?, &instance),
        Product::Amqtt => recipes::amqtt::native(&locate(&install.amqtt)?, &instance),
        Product::ActiveMq => recipes::activemq::native(&locate(&install.activemq_java)?, &instance),
        Product::Ejabberd => recipes::ejabberd::native(
            &locate(&install.ejabberd_erl)?,
            &install.ejabberd_libraries()?,
            &instance,
        ),
        Product::Rmqtt => recipes::rmqtt::native(&locate(&install.rmqtt)?, &instance),
    };
    if let Some(place) = context.quic {
        let certificate = place.certificate;
        plan.files
            .push((certificate.cert_file.clone(), certificate.cert_pem.clone()));
        plan.private_files
            .push((certificate.key_file.clone(), certificate.key_pem.clone()));
    }
    Ok(plan)
}

/// `N` distinct free loopback ports for `what`.
fn free_ports<const N: usize>(what: &str) -> Result<[u16; N], BrokerError> {
    free_loopback_ports(N)?.try_into().map_err(|_| {
        BrokerError::io(
            format!("choosing {what}"),
            std::io::Error::other(format!("expected {N} ports")),
        )
    })
}

impl BrokerDriver for NativeDriver {
    fn start<'a>(
        &'a self,
        spec: &'a BrokerSpec,
    ) -> BoxFuture<'a, Result<Box<dyn RunningBroker>, BrokerError>> {
        Box::pin(async move {
            let BrokerKind::Native { product } = spec.kind else {
                return Err(BrokerError::invalid(
                    "kind",
                    spec.summary(),
                    "is not a native broker",
                ));
            };
            let broker = self.start_native(spec, product).await?;
            Ok(Box::new(broker) as Box<dyn RunningBroker>)
        })
    }
}

/// The marker on disk (synced) before any process carries it.
fn write_marker(path: &Path, marker: &Marker) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(marker.value().as_bytes())?;
    file.sync_all()
}

/// The account the broker runs as: the plan's service user when this agent is root and the
/// user exists; this agent's own user otherwise (the start script then does what it does
/// for a caller that is not root).
fn service_account(plan: &NativePlan) -> Result<Option<Account>, BrokerError> {
    let Some(name) = plan.service_account else {
        return Ok(None);
    };
    if !Account::is_root() {
        return Ok(None);
    }
    let account =
        Account::lookup(name).map_err(|e| BrokerError::io(format!("looking up user {name}"), e))?;
    if account.is_none() {
        tracing::warn!(
            user = name,
            "the package's service user does not exist: starting the broker as root"
        );
    }
    Ok(account)
}

/// A secret file, 0400 from its creation (no window in which it is readable by others), in
/// a folder of its own that is private to the file's owner; both owned by `account` if given.
fn write_private(path: &Path, text: &str, account: Option<Account>) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt, chown};
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o700))?;
        if let Some(account) = account {
            chown(parent, Some(account.uid), Some(account.gid))?;
        }
    }
    let mut file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    if let Some(account) = account {
        chown(path, Some(account.uid), Some(account.gid))?;
    }
    Ok(())
}

/// How a launch failed, so the caller knows whether to retry on a fresh port.
enum Launch {
    /// The port was taken between choosing and binding it: worth another try.
    PortTaken(BrokerError),
    /// Any other failure.
    Failed(BrokerError),
}

async fn launch(
    context: &PlanContext<'_>,
    product: Product,
    plan: NativePlan,
    marker: Marker,
) -> Result<NativeBroker, Launch> {
    let (spec, dir) = (context.spec, context.dir);
    for (path, text) in &plan.files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                Launch::Failed(BrokerError::io(format!("creating {}", parent.display()), e))
            })?;
        }
        std::fs::write(path, text).map_err(|e| {
            Launch::Failed(BrokerError::io(format!("writing {}", path.display()), e))
        })?;
    }
    let account = service_account(&plan).map_err(Launch::Failed)?;
    for (path, text) in &plan.private_files {
        write_private(path, text, account).map_err(|e| {
            Launch::Failed(BrokerError::io(format!("writing {}", path.display()), e))
        })?;
    }
    let mut plan = plan;
    plan.main.account = account;
    write_marker(&dir.join(MARKER_FILE), &marker).map_err(|e| {
        Launch::Failed(BrokerError::io(
            format!("writing {}", dir.join(MARKER_FILE).display()),
            e,
        ))
    })?;
    let log = dir.join(LOG_FILE);
    let mut broker = NativeBroker {
        name: spec.name.clone(),
        product,
        listen: context.listen(),
        websocket: context.websocket.map(|place| (place.address, place.path)),
        quic: context.quic.map(|place| QuicEndpoint {
            address: connect_address(place.address),
            ca_pem: place.certificate.ca_pem.clone(),
        }),
        main: None,
        helpers: Vec::new(),
        marker,
        dir: dir.to_owned(),
        log,
        stop_command: plan.stop.clone(),
        pid: 0,
        version: None,
    };
    match start_processes(&mut broker, &plan).await {
        Ok(()) => Ok(broker),
        Err(error) => {
            // Read before the stop: what a broker logs on its way down would bury the line.
            let taken = LogWatch::new(&broker.log, plan.port_taken_markers)
                .poll()
                .is_some();
            if let Err(stop_error) = broker.shutdown().await {
                tracing::warn!(broker = %spec.name, "cleaning up a failed start: {stop_error}");
            }
            Err(if taken {
                Launch::PortTaken(error)
            } else {
                Launch::Failed(error)
            })
        }
    }
}

async fn start_processes(broker: &mut NativeBroker, plan: &NativePlan) -> Result<(), BrokerError> {
    let product = broker.product;
    for helper in &plan.helpers {
        let log = broker.dir.join(format!("{}.log", helper.what));
        let mut child = GroupChild::spawn(
            helper.what,
            &helper.command,
            &broker.marker,
            &broker.dir,
            &log,
        )?;
        let listening = wait_listening(helper.listens_on, &mut child).await;
        broker.helpers.push(child);
        listening.map_err(|reason| BrokerError::NotReady {
            name: broker.name.clone(),
            address: helper.listens_on,
            deadline: HELPER_DEADLINE,
            reason: format!("{} never listened: {reason}", helper.what),
            log_tail: log_tail(&log, LOG_TAIL_LINES),
        })?;
    }
    let main = GroupChild::spawn(
        product.as_str(),
        &plan.main,
        &broker.marker,
        &broker.dir,
        &broker.log,
    )?;
    broker.pid = main.pid();
    let main = broker.main.insert(main);
    let probe_at = connect_address(broker.listen);
    let login = recipes::anonymous_login(product);
    // A broker that logs its port taken may stay up without a listener: stop waiting once
    // the line has stood for a grace period with every probe still failing (a product that
    // logs it about a port it can do without still comes up, and is then ready).
    let mut log = LogWatch::new(&broker.log, plan.port_taken_markers);
    let mut seen_at: Option<std::time::Instant> = None;
    let mut port_taken = move || {
        let marker = log.poll()?;
        let since = *seen_at.get_or_insert_with(std::time::Instant::now);
        (since.elapsed() >= PORT_TAKEN_GRACE)
            .then(|| format!("{product} logged {marker:?}: a port it needs was taken"))
    };
    let ready = wait_ready(probe_at, plan.ready_deadline, login, || {
        main.exited()
            .map(|status| format!("{product} exited ({status}) before answering MQTT"))
            .or_else(&mut port_taken)
    })
    .await
    .and_then(|()| match main.exited() {
        // A probe reached some listener, but not ours: another program owns the port.
        Some(status) => Err(format!(
            "{product} exited ({status}) although a probe was answered; the port has another owner"
        )),
        None => Ok(()),
    });
    if let Err(reason) = ready {
        return Err(BrokerError::NotReady {
            name: broker.name.clone(),
            address: probe_at,
            deadline: plan.ready_deadline,
            reason,
            log_tail: log_tail(&broker.log, LOG_TAIL_LINES),
        });
    }
    if let Some((address, path)) = broker.websocket {
        // RabbitMQ's web-mqtt plugin starts after its MQTT listener: waited for the same.
        let probe_at = connect_address(address);
        let mut main = broker.main.as_mut();
        let ready = websocket_probe::wait_ready(probe_at, path, plan.ready_deadline, || {
            main.as_mut()
                .and_then(|main| main.exited())
                .map(|status| {
                    format!("{product} exited ({status}) before its WebSocket listener answered")
                })
                .or_else(&mut port_taken)
        })
        .await;
        if let Err(reason) = ready {
            return Err(BrokerError::NotReady {
                name: broker.name.clone(),
                address: probe_at,
                deadline: plan.ready_deadline,
                reason: format!("its WebSocket listener (path {path}): {reason}"),
                log_tail: log_tail(&broker.log, LOG_TAIL_LINES),
            });
        }
    }
    if let Some(quic) = &broker.quic {
        let mut main = broker.main.as_mut();
        let ready =
            quic_listener::wait_ready(quic.address, &quic.ca_pem, plan.ready_deadline, || {
                main.as_mut()
                    .and_then(|main| main.exited())
                    .map(|status| {
                        format!("{product} exited ({status}) before its QUIC listener answered")
                    })
                    .or_else(&mut port_taken)
            })
            .await;
        if let Err(reason) = ready {
            return Err(BrokerError::NotReady {
                name: broker.name.clone(),
                address: quic.address,
                deadline: plan.ready_deadline,
                reason: format!("its QUIC listener: {reason}"),
                log_tail: log_tail(&broker.log, LOG_TAIL_LINES),
            });
        }
    }
    if let Some(pid) = broker.marker.find_process_named(plan.main_process_names) {
        broker.pid = pid;
    }
    let listening = broker.listening();
    // Probes were answered, but by the broker's own listeners? A broker that failed to bind
    // and stayed up (amqtt logs the failure and runs on) would otherwise be measured on
    // another program's port.
    let wanted = std::iter::once((Transport::Tcp, broker.listen))
        .chain(
            broker
                .websocket
                .map(|(address, _)| (Transport::Tcp, address)),
        )
        .chain(
            broker
                .quic
                .as_ref()
                .map(|quic| (Transport::Udp, quic.address)),
        );
    for (transport, address) in wanted {
        let own = listening
            .iter()
            .any(|l| l.transport == transport && l.address.port() == address.port());
        if !own {
            return Err(BrokerError::NotReady {
                name: broker.name.clone(),
                address,
                deadline: plan.ready_deadline,
                reason: format!(
                    "{product} answered, but none of its processes {} port {} (another \
                     program owns it)",
                    match transport {
                        Transport::Tcp => "listens on",
                        Transport::Udp => "is bound to UDP",
                    },
                    address.port()
                ),
                log_tail: log_tail(&broker.log, LOG_TAIL_LINES),
            });
        }
    }
    if let Some(version) = &plan.version_command {
        broker.version = version_from_command(version, &broker.marker).await;
    }
    let listening: Vec<String> = listening.iter().map(ToString::to_string).collect();
    tracing::info!(broker = %broker.name, %product, pid = broker.pid, address = %broker.listen, ?listening, "broker ready");
    Ok(())
}

/// The version `command` prints, or why there is none (the broker runs either way).
async fn version_from_command(command: &VersionCommand, marker: &Marker) -> Option<String> {
    match run_bounded(&command.command, marker, VERSION_COMMAND_DEADLINE).await {
        Ok((status, output)) if status.success() => recipes::version_after(command.marker, &output),
        Ok((status, output)) => {
            tracing::warn!(%status, "the version command failed: {}", output.trim());
            None
        }
        Err(reason) => {
            tracing::warn!("the version command could not run: {reason}");
            None
        }
    }
}

/// Polls until `addr` accepts TCP connections, or the child exits, or the helper deadline.
async fn wait_listening(addr: SocketAddr, child: &mut GroupChild) -> Result<(), String> {
    poll_until(HELPER_DEADLINE, Duration::from_millis(25), || {
        let exited = child.exited();
        async move {
            if let Some(status) = exited {
                return Attempt::Stop(format!("exited ({status})"));
            }
            match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await {
                Ok(Ok(_)) => Attempt::Done(()),
                Ok(Err(error)) => Attempt::Retry(error.to_string()),
                Err(_) => Attempt::Retry("connect timed out".to_owned()),
            }
        }
    })
    .await
}

/// A running native broker and everything it started.
#[derive(Debug)]
pub struct NativeBroker {
    name: String,
    product: Product,
    listen: SocketAddr,
    /// The WebSocket listener's address and path, when it has one.
    websocket: Option<(SocketAddr, &'static str)>,
    /// The QUIC listener as clients dial it, when it has one.
    quic: Option<QuicEndpoint>,
    main: Option<GroupChild>,
    helpers: Vec<GroupChild>,
    marker: Marker,
    dir: PathBuf,
    log: PathBuf,
    stop_command: Option<CommandLine>,
    pid: u32,
    /// The version its version command printed, for products whose log does not say it.
    version: Option<String>,
}

impl NativeBroker {
    /// What the broker's processes listen on (TCP) or are bound to (UDP), read from `/proc`.
    pub fn listening(&self) -> Vec<Listening> {
        sockets::listening_of(&self.marker.live_processes())
    }

    /// Stops the broker (gracefully first), its helpers, and every process tagged with its
    /// marker; fails if any survives.
    async fn shutdown(&mut self) -> Result<(), BrokerError> {
        if let Some(main) = self.main.as_mut() {
            if main.exited().is_none() {
                match &self.stop_command {
                    Some(stop) => {
                        if let Err(reason) =
                            run_bounded(stop, &self.marker, STOP_COMMAND_DEADLINE).await
                        {
                            tracing::warn!(broker = %self.name, "graceful stop failed: {reason}");
                        }
                    }
                    None => main.signal(libc::SIGTERM),
                }
                if main.wait_exit(STOP_GRACE).await.is_none() {
                    tracing::warn!(broker = %self.name, "still running {STOP_GRACE:?} after the stop request; killing it");
                }
            }
            // Kills what is left of its process group, and reaps it.
            main.kill().await;
        }
        for helper in &mut self.helpers {
            helper.kill().await;
        }
        let left = self.marker.sweep(SWEEP_DEADLINE).await;
        if left.is_empty() {
            tracing::info!(broker = %self.name, product = %self.product, "broker stopped");
            Ok(())
        } else {
            Err(BrokerError::StopFailed {
                name: self.name.clone(),
                reason: format!("processes {left:?} survived SIGKILL for {SWEEP_DEADLINE:?}"),
            })
        }
    }
}

impl RunningBroker for NativeBroker {
    fn address(&self) -> SocketAddr {
        self.listen
    }

    fn websocket_address(&self) -> Option<SocketAddr> {
        self.websocket.map(|(address, _)| connect_address(address))
    }

    fn quic_endpoint(&self) -> Option<QuicEndpoint> {
        self.quic.clone()
    }

    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn detail(&self) -> String {
        let version = self
            .version
            .clone()
            .or_else(|| {
                std::fs::read(&self.log).ok().and_then(|log| {
                    recipes::version_in_log(self.product, &String::from_utf8_lossy(&log))
                })
            })
            .unwrap_or_else(|| "(version not in its log)".to_string());
        format!(
            "{} {version} (pid {}), files in {}, log {}",
            self.product,
            self.pid,
            self.dir.display(),
            self.log.display()
        )
    }

    fn check(&mut self) -> BoxFuture<'_, BrokerState> {
        Box::pin(async move {
            match self.main.as_mut().and_then(GroupChild::exited) {
                None if self.main.is_some() => BrokerState::Running,
                None => BrokerState::Stopped,
                Some(status) => BrokerState::Failed(format!(
                    "{} exited ({status}); last lines of its log:\n{}",
                    self.product,
                    log_tail(&self.log, LOG_TAIL_LINES)
                )),
            }
        })
    }

    fn stop(mut self: Box<Self>) -> BoxFuture<'static, Result<(), BrokerError>> {
        Box::pin(async move { self.shutdown().await })
    }
}

#[cfg(test)]
#[path = "native_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "native_load_tests.rs"]
mod load_tests;
