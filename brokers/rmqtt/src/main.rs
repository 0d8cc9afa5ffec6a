//! `continuum-rmqtt`: rmqtt's server with the listeners and limits a benchmark asks for.
//!
//! continuum-rmqtt --listen ADDR [--websocket ADDR] [--max-inflight N] [--max-queued N]
//! continuum-rmqtt --version
//!
//! rmqtt's defaults that would cap a test are raised: packets up to MQTT's 256 MB (the
//! default 1 MiB refuses any payload above it), an in-flight window of 65535 (default 16)
//! and queues of a million messages (default 1000) unless the command line sets them, a
//! million handshakes at once (default 1000), a listen backlog of 4096 (default 512), Nagle
//! off, and the address reused as `rmqttd` does. Its "busy" check, which refuses connections
//! while the host's CPU load is high, is off: on a shared host it would refuse a benchmark's
//! clients for another program's load. Anonymous clients. Two plugins run: rmqtt's counter
//! (as in `rmqttd`'s defaults) and its `$SYS` topics, every second, which publish the
//! counters (`$SYS/brokers/0/metrics`, JSON; 0 is the node id) and an event per client
//! connect, disconnect and subscription; neither opens a port. No HTTP API, no cluster port.

use std::net::SocketAddr;
use std::num::NonZeroU16;
use std::process::ExitCode;

use rmqtt::context::ServerContext;
use rmqtt::net::Builder;
use rmqtt::node::Node;
use rmqtt::server::MqttServer;

/// MQTT's largest packet.
const MAX_PACKET_SIZE: u32 = 256 * 1024 * 1024;
const DEFAULT_MAX_INFLIGHT: u16 = 65535;
const DEFAULT_MAX_QUEUED: usize = 1_000_000;
/// The `$SYS` plugin's name, which its config is keyed by.
const SYS_TOPIC_PLUGIN: &str = "rmqtt-sys-topic";

struct Settings {
    listen: SocketAddr,
    websocket: Option<SocketAddr>,
    max_inflight: NonZeroU16,
    max_queued: usize,
}

fn parse(args: &[String]) -> Result<Option<Settings>, String> {
    let mut listen = None;
    let mut websocket = None;
    let mut max_inflight = NonZeroU16::new(DEFAULT_MAX_INFLIGHT);
    let mut max_queued = DEFAULT_MAX_QUEUED;
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        if flag == "--version" {
            return Ok(None);
        }
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |what: &str| format!("{flag} {value:?}: {what}");
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|_| bad("not an address:port"))?),
            "--websocket" => {
                websocket = Some(value.parse().map_err(|_| bad("not an address:port"))?)
            }
            "--max-inflight" => {
                max_inflight = Some(value.parse().map_err(|_| bad("not 1 to 65535"))?)
            }
            "--max-queued" => max_queued = value.parse().map_err(|_| bad("not a count"))?,
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    let listen: SocketAddr = listen.ok_or("--listen ADDR is needed")?;
    // rmqtt keys its listeners by port, and stops the process on a second one.
    if websocket.is_some_and(|ws: SocketAddr| ws.port() == listen.port()) {
        return Err(format!(
            "--listen and --websocket need different ports (both {})",
            listen.port()
        ));
    }
    Ok(Some(Settings {
        listen,
        websocket,
        max_inflight: max_inflight.ok_or("--max-inflight is at least 1")?,
        max_queued,
    }))
}

fn listener(name: &str, address: SocketAddr, settings: &Settings) -> Builder {
    Builder::new()
        .name(name)
        .laddr(address)
        .nodelay(true)
        .backlog(4096)
        // As rmqttd does: a port left in TIME_WAIT by the previous broker binds again.
        .reuseaddr(Some(true))
        .allow_anonymous(true)
        .max_packet_size(MAX_PACKET_SIZE)
        .max_inflight(settings.max_inflight)
        .max_mqueue_len(settings.max_queued)
        .max_handshaking_limit(1_000_000)
        .max_connections(1_000_000)
}

async fn serve(settings: Settings) -> Result<(), String> {
    let scx = ServerContext::new()
        .busy_check_enable(false)
        .plugins_config_map_add(SYS_TOPIC_PLUGIN, "publish_interval = \"1s\"\n")
        .build()
        .await;
    let plugin = |error| format!("starting a plugin: {error}");
    rmqtt_counter::register(&scx, true, false)
        .await
        .map_err(plugin)?;
    rmqtt_sys_topic::register(&scx, true, false)
        .await
        .map_err(plugin)?;
    let tcp = listener("tcp", settings.listen, &settings)
        .bind()
        .and_then(|bound| bound.tcp())
        .map_err(|error| format!("MQTT listener on {}: {error}", settings.listen))?;
    let mut server = MqttServer::new(scx).listener(tcp);
    if let Some(address) = settings.websocket {
        let ws = listener("ws", address, &settings)
            .bind()
            .and_then(|bound| bound.ws())
            .map_err(|error| format!("WebSocket listener on {address}: {error}"))?;
        server = server.listener(ws);
    }
    eprintln!(
        "{} listening on {}{}",
        Node::version(),
        settings.listen,
        settings
            .websocket
            .map(|ws| format!(" and ws://{ws}"))
            .unwrap_or_default()
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| format!("SIGTERM handler: {error}"))?;
    tokio::select! {
        ended = server.build().run() => {
            ended.map_err(|error| format!("the server stopped: {error}"))
        }
        _ = terminate.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = match parse(&args) {
        Ok(Some(settings)) => settings,
        Ok(None) => {
            println!("{}", Node::version());
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("continuum-rmqtt: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("continuum-rmqtt: no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(serve(settings));
    // The engine's background tasks never end by themselves: not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("continuum-rmqtt: {error}");
            ExitCode::FAILURE
        }
    }
}
