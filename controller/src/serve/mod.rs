//! `controller serve`: the controller as a gRPC service over mutual TLS, which a laptop
//! drives with `controller remote` (submit a plan, watch it, list runs, fetch results,
//! cancel).
//!
//! The service runs one plan at a time, in submission order; each run is exactly what
//! `controller plan.toml` does (netem and brokers undone at the end), observed through
//! [`crate::run::run_plan_observed`], with what only the server may decide taken from its
//! [`ServeConfig`]: results in `<results_dir>/<run id>`, its PKI, its nodes, its external
//! brokers (addresses and WebSocket paths), its CA files by name and its testbed. A plan
//! that sets a path, names another node or external broker, names a CA file by path, sets a
//! WebSocket path or installs a testbed (Nebula, k3s) other than the server's is refused in
//! one line before anything is created, and admission never resolves, dials or opens what a
//! plan names. Each run belongs to the identity that submitted it: only that client, or the
//! controller identity as administrator, may watch, fetch or cancel it, and List shows a
//! client its own runs; agents get PermissionDenied. A client may have 4 runs queued or
//! running and the service remembers its last 32. On shutdown (SIGTERM or SIGINT for
//! [`run`], the `shutdown` future for [`serve`]) queued runs are cancelled, the running one
//! stops after its undo, followers receive its end, and then the server exits. Runs are
//! kept in memory: a restarted service lists none (their folders stay).
//!
//! # Layout
//! - this file: [`serve`] on a bound listener, [`run`] for the binary, [`ServeError`].
//! - `config.rs`: [`ServeConfig`], what the server decides (nodes, [`ServedBroker`]s, CA
//!   files), and the admission of plans.
//! - `service.rs`: the `Controller` RPCs, their role check and run ownership.
//! - `runs.rs`: the run registry (state, counts, event history, all Rust types) and the
//!   worker that runs queued plans one at a time.
//! - `convert.rs`: the registry's runs and history as the protocol's messages.
//! - `files.rs`: a results folder as a stream of file chunks (Fetch).

mod config;
mod convert;
mod files;
mod runs;
mod service;

pub use config::{MAX_ACTIVE_PER_CLIENT, MAX_HISTORY_PER_CLIENT, ServeConfig, ServedBroker};

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use proto::controller::v1::controller_server::ControllerServer;
use proto::mtls::Credentials;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

use self::runs::Runs;
use self::service::ControllerService;

/// The service could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS files could not be loaded or do not make a server identity.
    #[error("TLS: {0}")]
    Tls(#[from] proto::mtls::MtlsError),
    /// The listen address could not be bound.
    #[error("listen on {address}: {source}")]
    Bind {
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The identity is not a controller's.
    #[error("{0} cannot serve the controller: use a controller identity")]
    NotController(proto::pki::PeerIdentity),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves the controller service on `listener` with `credentials` (a controller identity)
/// until `shutdown` completes; then cancels queued runs, waits for the running one to undo
/// netem and brokers, lets followers see its end, and returns.
pub async fn serve(
    listener: TcpListener,
    credentials: Credentials,
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    if credentials.identity().role != proto::pki::Role::Controller {
        return Err(ServeError::NotController(credentials.identity()));
    }
    let mut server = Server::builder().tls_config(credentials.server_tls()?)?;
    let (runs, queue) = Runs::new();
    // Cancelled when the worker is gone, even by a panic: then nothing is left to undo.
    let worker_done = CancellationToken::new();
    let guard = worker_done.clone().drop_guard();
    let worker = runs::worker(Arc::clone(&runs), queue);
    tokio::spawn(async move {
        let _guard = guard;
        worker.await;
    });
    let closing = Arc::clone(&runs);
    let done = worker_done.clone();
    // The server keeps answering while the running plan undoes its changes, so a Watch sees
    // the run end; it stops accepting once the worker is done.
    let stop = async move {
        shutdown.await;
        tracing::info!("shutting down: cancelling runs");
        closing.close();
        done.cancelled().await;
    };
    let served = server
        .add_service(ControllerServer::new(ControllerService::new(
            Arc::clone(&runs),
            Arc::new(config),
        )))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop)
        .await;
    // Also when the server failed: never leave a run's netem and brokers behind.
    runs.close();
    worker_done.cancelled().await;
    Ok(served?)
}

/// `controller serve`: loads the identity `identity` from `pki`, binds `listen` and serves
/// `config`'s nodes until SIGTERM or SIGINT.
pub async fn run(
    listen: &str,
    pki: &Path,
    identity: &str,
    config: ServeConfig,
) -> Result<(), ServeError> {
    let credentials = Credentials::load(pki, identity)?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Bind {
            address: listen.to_string(),
            source,
        })?;
    let address = listener
        .local_addr()
        .map_or_else(|_| listen.to_string(), |a| a.to_string());
    tracing::info!(%address, identity = %credentials.identity(), "controller serving");
    eprintln!(
        "controller: serving on {address} as {}",
        credentials.identity()
    );
    serve(listener, credentials, config, termination()).await
}

/// Completes on SIGTERM or SIGINT, saying what the service does about it.
async fn termination() {
    host::termination().await;
    eprintln!("controller: stopping: cancelling runs, clearing netem and removing brokers");
}
