//! Connecting to an agent over mutual TLS with the controller's (or a client's) identity.

use crate::agent::v1::agent_client::AgentClient;
use crate::mtls::{Credentials, PinnedConnectError};
use crate::pki::Role;
use tonic::transport::Channel;

/// An agent could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The address names no server a certificate can be checked against.
    #[error("agent address {address}: {reason}")]
    Name {
        /// `host:port`.
        address: String,
        /// Why.
        reason: String,
    },
    /// TLS could not be set up from the credentials.
    #[error("TLS: {0}")]
    Tls(#[from] crate::mtls::MtlsError),
    /// The connection (TCP, TLS handshake) failed.
    #[error("agent {address}: {}", error_chain(source))]
    Connect {
        /// `host:port`.
        address: String,
        /// Why.
        source: tonic::transport::Error,
    },
}

/// HTTP/2 PING interval on agent channels.
pub const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);
/// A PING unanswered this long closes the channel.
pub const KEEP_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `endpoint` with HTTP/2 keep-alive: a PING every [`KEEP_ALIVE`], idle or not, and the
/// connection closed (every call on it failing) when one goes unanswered for
/// [`KEEP_ALIVE_TIMEOUT`]. A peer that stops answering (a frozen or unplugged machine) is then
/// noticed even mid-stream, instead of waiting forever on a TCP connection that looks alive.
pub fn with_keep_alive(endpoint: tonic::transport::Endpoint) -> tonic::transport::Endpoint {
    endpoint
        .http2_keep_alive_interval(KEEP_ALIVE)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
}

/// Opens an mTLS channel to the agent at `address` (`host:port`); `server_name` is the name
/// its certificate carries when `address` is not among its certificate's names. A server
/// whose certificate is not an agent's (a controller's, say) is refused in the handshake.
pub async fn connect_agent(
    address: &str,
    server_name: Option<&str>,
    credentials: &Credentials,
) -> Result<AgentClient<Channel>, ConnectError> {
    connect_agent_via(address, server_name, credentials, None).await
}

/// [`connect_agent`], with the TCP connection opened by `dial` when given (from inside the
/// agent's network namespace, for a node emulated on this machine).
pub async fn connect_agent_via(
    address: &str,
    server_name: Option<&str>,
    credentials: &Credentials,
    dial: Option<crate::mtls::TcpDial>,
) -> Result<AgentClient<Channel>, ConnectError> {
    let channel = credentials
        .connect_pinned_via(
            address,
            server_name,
            Role::Agent,
            |endpoint| {
                // An agent that stops answering is noticed within KEEP_ALIVE +
                // KEEP_ALIVE_TIMEOUT even mid-stream.
                with_keep_alive(endpoint.connect_timeout(std::time::Duration::from_secs(5)))
            },
            dial,
        )
        .await
        .map_err(|error| match error {
            PinnedConnectError::Tls(error) => ConnectError::Tls(error),
            PinnedConnectError::Name { .. } => ConnectError::Name {
                address: address.to_string(),
                reason: error.to_string(),
            },
            PinnedConnectError::Transport(source) => ConnectError::Connect {
                address: address.to_string(),
                source,
            },
        })?;
    Ok(AgentClient::new(channel))
}

/// An error and its causes, `outer: inner: root`: tonic's transport errors say only
/// "transport error" on their own, the cause ("Connection refused") is further down.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        cause = inner.source();
    }
    text
}

/// A gRPC status as text, with the transport cause when there is one.
pub fn status_text(status: &tonic::Status) -> String {
    match std::error::Error::source(status) {
        Some(cause) => format!("{}: {}", status.message(), error_chain(cause)),
        None => status.message().to_string(),
    }
}
