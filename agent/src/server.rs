//! Serving the agent: gRPC over mutual TLS on a bound listener until a shutdown signal, then
//! undoing everything the agent did (netem cleared, brokers stopped, loads cancelled).

use std::future::Future;
use std::sync::Arc;

use proto::agent::v1::agent_server::AgentServer;
use proto::mtls::Credentials;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;

use crate::service::AgentService;
use domain::AgentConfig;

/// The agent could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS files could not be loaded.
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
    /// The metrics listener (`metrics_listen`) could not be bound.
    #[error("{0}")]
    Metrics(String),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves `service` on `listener` with `credentials` until `shutdown` completes, then runs
/// the service's own shutdown (clear netem, stop brokers).
pub async fn serve(
    service: Arc<AgentService>,
    credentials: &Credentials,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let tls = credentials.server_tls()?;
    // On the signal, undo at once: the server's graceful stop waits for in-flight calls, and
    // a load or an install in flight ends only once the service's shutdown cancels it.
    let undo = Arc::clone(&service);
    let shutdown = async move {
        shutdown.await;
        undo.shutdown().await;
    };
    let served = Server::builder()
        // A caller that vanished without closing its connection (frozen, cut off) is noticed
        // by its unanswered pings: the connection closes, and with it its loads (issue 25).
        .http2_keepalive_interval(Some(proto::client::KEEP_ALIVE))
        .http2_keepalive_timeout(Some(proto::client::KEEP_ALIVE_TIMEOUT))
        .tls_config(tls)?
        .add_service(AgentServer::from_arc(Arc::clone(&service)))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await;
    // Again after the last call ended (a broker a call started meanwhile), and when the
    // server failed: a node must never stay impaired.
    service.shutdown().await;
    Ok(served?)
}

/// Loads the configuration's credentials, binds its listen address (and its metrics
/// listener, when it has one) and serves until SIGTERM or SIGINT (systemd stops services with
/// SIGTERM).
pub async fn run(config: AgentConfig) -> Result<(), ServeError> {
    let credentials = Credentials::from_files(&config.tls.ca, &config.tls.cert, &config.tls.key)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            address: config.listen.to_string(),
            source,
        })?;
    let metrics = match config.metrics_listen {
        Some(address) => Some(
            exposition::MetricsListener::bind(address, "metrics_listen")
                .await
                .map_err(ServeError::Metrics)?,
        ),
        None => None,
    };
    let (name, listen) = (config.name.clone(), config.listen);
    // What a previous agent left (netem, brokers) is undone here, before any call is served.
    let service = Arc::new(AgentService::new(config).await);
    tracing::info!(%name, %listen, "agent serving");
    let stop_metrics = CancellationToken::new();
    if let Some(metrics) = metrics {
        tracing::info!(listen = %metrics.address, "metrics served");
        tokio::spawn(exposition::serve(
            metrics,
            Arc::clone(&service),
            stop_metrics.clone().cancelled_owned(),
        ));
    }
    let served = serve(service, &credentials, listener, host::termination()).await;
    stop_metrics.cancel();
    served
}
