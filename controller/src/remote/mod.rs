//! `controller remote`: driving a `controller serve` from a laptop over mutual TLS with a
//! remote-client identity: submit a plan, watch a run, list runs, fetch a run's results
//! folder, cancel a run.
//!
//! Each operation is a library function over a [`ControllerClient`] (what the tests use);
//! [`run`] is the command line's: it performs one [`RemoteAction`], prints human-readable
//! lines on stdout and gives the exit code.
//!
//! # Layout
//! - this file: [`connect`], the operations, [`run`] and [`perform`], [`RemoteError`].
//! - `cli.rs`: the command line's actions ([`RemoteAction`]) and fetch caps ([`FetchCaps`]).
//! - `fetch.rs`: writing fetched files under a folder, refusing paths that leave it
//!   ([`safe_join`], [`FetchWriter`]) and what goes over its caps ([`FetchLimits`]).
//! - `print.rs`: one-line descriptions of runs and events.
//!
//! The server is trusted no more than any peer: the connection must be up within
//! [`CONNECT_DEADLINE`], `submit`, `list` and `cancel` must be answered within their
//! [`Deadlines`], HTTP/2 keep-alive notices a server gone silent mid-stream (`watch`,
//! `fetch`), each message is capped at [`MAX_MESSAGE`] and a fetch at [`FetchLimits`].

mod cli;
mod fetch;
mod print;

use std::path::Path;
use std::time::Duration;

use proto::controller::v1 as pb;
use proto::controller::v1::controller_client::ControllerClient;
use proto::mtls::{Credentials, PinnedConnectError};
use proto::pki::Role;
use tonic::transport::Channel;

pub use self::cli::{FetchCaps, RemoteAction};
pub use self::fetch::{FetchError, FetchLimits, FetchWriter, safe_join};
pub use self::print::{WatchDisplay, describe_event, describe_run, state_name};

/// A remote operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The controller address names no server a certificate can be checked against, or the
    /// credentials make no TLS configuration.
    #[error("controller address {address}: {reason}")]
    Address {
        /// `host:port`.
        address: String,
        /// Why.
        reason: String,
    },
    /// The connection (TCP, TLS handshake, the server's role among them) failed.
    #[error("controller {address}: {}", proto::client::error_chain(source))]
    Connect {
        /// `host:port`.
        address: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The connection (TCP, TLS, HTTP/2) was not up within the deadline.
    #[error(
        "controller {address}: no connection within {}s (TCP connect, TLS and HTTP/2 handshakes)",
        deadline.as_secs_f32()
    )]
    ConnectTimeout {
        /// `host:port`.
        address: String,
        /// The deadline.
        deadline: Duration,
    },
    /// A call got no answer within its deadline (the connection is up: the server is
    /// silent, or stuck).
    #[error(
        "controller {address}: no answer to {call} within {}s",
        deadline.as_secs_f32()
    )]
    NoAnswer {
        /// `host:port`.
        address: String,
        /// The call: `submit`, `list`, `cancel`.
        call: &'static str,
        /// Its deadline.
        deadline: Duration,
    },
    /// The controller answered with an error.
    #[error("{:?}: {}", .0.code(), .0.message())]
    Rpc(#[from] tonic::Status),
    /// The plan file could not be read.
    #[error("{path}: {source}")]
    ReadPlan {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A fetched file was refused or could not be written.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The event stream ended before the run did.
    #[error("the controller closed the stream of run {0} before it ended")]
    StreamEnded(String),
}

/// How long connecting may take, TCP connect, TLS and HTTP/2 handshakes together: a server
/// that accepts and then says nothing is given up on.
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// How long `submit` and `list` wait for the controller's answer, and `watch` and `fetch` for
/// their stream to open: it answers at once (a submitted plan is checked and queued, not run;
/// a stream opens before its first event or chunk), so a silent one is given up on.
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// How long `cancel` waits: the service answers once the run has ended, after waiting up to
/// 120 s for its undo (netem cleared, brokers removed), and then as any call.
pub const CANCEL_DEADLINE: Duration = Duration::from_secs(120).saturating_add(CALL_DEADLINE);

/// How long each call of the command line waits for the controller's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// `submit` and `list`, and opening the streams of `watch` and `fetch`.
    pub call: Duration,
    /// `cancel`.
    pub cancel: Duration,
}

impl Default for Deadlines {
    /// [`CALL_DEADLINE`] and [`CANCEL_DEADLINE`].
    fn default() -> Self {
        Deadlines {
            call: CALL_DEADLINE,
            cancel: CANCEL_DEADLINE,
        }
    }
}

/// `call` (the RPC named `name`) to the controller at `address`, given up on after
/// `deadline` with [`RemoteError::NoAnswer`].
pub async fn answered_within<T>(
    address: &str,
    name: &'static str,
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    tokio::time::timeout(deadline, call)
        .await
        .map_err(|_| RemoteError::NoAnswer {
            address: address.to_string(),
            call: name,
            deadline,
        })?
}

/// The largest message taken from the controller. Fetch chunks are 256 KiB and a list of
/// runs a few hundred bytes a run; tonic's own default (4 MiB) could cut a long list short.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Opens an mTLS channel to the controller service at `address` (`host:port`);
/// `server_name` is the name its certificate carries when `address` is not among them. A
/// server whose certificate is not the controller's (an agent's) is refused in the handshake.
/// The connection must be up within [`CONNECT_DEADLINE`]; it sends HTTP/2 keep-alive pings
/// as agent channels do, and messages over [`MAX_MESSAGE`] are refused.
pub async fn connect(
    address: &str,
    server_name: Option<&str>,
    credentials: &Credentials,
) -> Result<ControllerClient<Channel>, RemoteError> {
    connect_within(address, server_name, credentials, CONNECT_DEADLINE).await
}

/// [`connect`] with another connect deadline than [`CONNECT_DEADLINE`].
pub async fn connect_within(
    address: &str,
    server_name: Option<&str>,
    credentials: &Credentials,
    deadline: Duration,
) -> Result<ControllerClient<Channel>, RemoteError> {
    let connecting =
        credentials.connect_pinned(address, server_name, Role::Controller, |endpoint| {
            proto::client::with_keep_alive(endpoint.connect_timeout(deadline))
        });
    let too_late = || RemoteError::ConnectTimeout {
        address: address.to_string(),
        deadline,
    };
    // The endpoint's timeout bounds each (re)connection's TCP and TLS, and the outer one the
    // HTTP/2 handshake too; either firing is the same deadline.
    let channel = tokio::time::timeout(deadline, connecting)
        .await
        .map_err(|_| too_late())?
        .map_err(|error| match error {
            PinnedConnectError::Transport(source) if timed_out(&source) => too_late(),
            PinnedConnectError::Transport(source) => RemoteError::Connect {
                address: address.to_string(),
                source,
            },
            other => RemoteError::Address {
                address: address.to_string(),
                reason: other.to_string(),
            },
        })?;
    Ok(ControllerClient::new(channel).max_decoding_message_size(MAX_MESSAGE))
}

/// Whether a transport error is a connect timeout (an I/O `TimedOut` among its causes).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Submits plan text; `name` names it in the controller's errors. Returns the run id.
pub async fn submit_text(
    client: &mut ControllerClient<Channel>,
    text: &str,
    name: &str,
) -> Result<String, RemoteError> {
    let reply = client
        .submit(pb::SubmitRequest {
            plan: text.to_string(),
            name: name.to_string(),
        })
        .await?;
    Ok(reply.into_inner().id)
}

/// Reads the plan file and submits it under its file name. Returns the run id.
pub async fn submit(
    client: &mut ControllerClient<Channel>,
    plan: &Path,
) -> Result<String, RemoteError> {
    let text = std::fs::read_to_string(plan).map_err(|source| RemoteError::ReadPlan {
        path: plan.display().to_string(),
        source,
    })?;
    let name = plan.file_name().map_or_else(
        || plan.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    submit_text(client, &text, &name).await
}

/// Follows a run to its end, calling `on_event` for each event (the history first); returns
/// the run's last event.
pub async fn watch(
    client: &mut ControllerClient<Channel>,
    run: &str,
    on_event: impl FnMut(&pb::RunEvent),
) -> Result<pb::RunFinished, RemoteError> {
    let stream = open_watch(client, run).await?;
    follow(stream, run, on_event).await
}

/// Asks to follow `run`: the controller answers at once with the stream of its events.
pub async fn open_watch(
    client: &mut ControllerClient<Channel>,
    run: &str,
) -> Result<tonic::Streaming<pb::RunEvent>, RemoteError> {
    Ok(client
        .watch(pb::RunId {
            id: run.to_string(),
        })
        .await?
        .into_inner())
}

/// Reads `run`'s events from `stream` to the run's end (as long as the run lasts: a silent
/// connection is ended by HTTP/2 keep-alive, not by a deadline).
async fn follow(
    mut stream: tonic::Streaming<pb::RunEvent>,
    run: &str,
    mut on_event: impl FnMut(&pb::RunEvent),
) -> Result<pb::RunFinished, RemoteError> {
    while let Some(event) = stream.message().await? {
        on_event(&event);
        if let Some(pb::run_event::Event::Finished(finished)) = event.event {
            return Ok(finished);
        }
    }
    Err(RemoteError::StreamEnded(run.to_string()))
}

/// Every run the controller knows, oldest first.
pub async fn list(client: &mut ControllerClient<Channel>) -> Result<Vec<pb::RunInfo>, RemoteError> {
    Ok(client.list(pb::ListRequest {}).await?.into_inner().runs)
}

/// What a fetch wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Files written.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// Copies a run's results folder into `dir` (created if needed), refusing any path that
/// would leave it and stopping at the default [`FetchLimits`].
pub async fn fetch(
    client: &mut ControllerClient<Channel>,
    run: &str,
    dir: &Path,
) -> Result<Fetched, RemoteError> {
    fetch_within(client, run, dir, FetchLimits::default()).await
}

/// [`fetch`], stopping at `limits`.
pub async fn fetch_within(
    client: &mut ControllerClient<Channel>,
    run: &str,
    dir: &Path,
    limits: FetchLimits,
) -> Result<Fetched, RemoteError> {
    let stream = open_fetch(client, run).await?;
    write_fetched(stream, dir, limits).await
}

/// Asks for `run`'s results folder: the controller answers at once with a stream of chunks.
pub async fn open_fetch(
    client: &mut ControllerClient<Channel>,
    run: &str,
) -> Result<tonic::Streaming<pb::FileChunk>, RemoteError> {
    Ok(client
        .fetch(pb::RunId {
            id: run.to_string(),
        })
        .await?
        .into_inner())
}

/// Writes the chunks of `stream` under `dir`, stopping at `limits`.
async fn write_fetched(
    mut stream: tonic::Streaming<pb::FileChunk>,
    dir: &Path,
    limits: FetchLimits,
) -> Result<Fetched, RemoteError> {
    let mut writer = FetchWriter::with_limits(dir, limits)?;
    while let Some(chunk) = stream.message().await? {
        writer.chunk(&chunk.path, chunk.offset, &chunk.data)?;
    }
    let (files, bytes) = writer.totals();
    Ok(Fetched { files, bytes })
}

/// Cancels a run; answers its state once it has ended (or the controller stopped waiting).
pub async fn cancel(
    client: &mut ControllerClient<Channel>,
    run: &str,
) -> Result<pb::RunInfo, RemoteError> {
    Ok(client
        .cancel(pb::RunId {
            id: run.to_string(),
        })
        .await?
        .into_inner())
}

/// The exit code of `watch` for a run that ended in `state`: 0 finished, 3 cancelled
/// (as an interrupted `controller plan.toml`), 1 otherwise.
pub fn exit_code(state: pb::RunState) -> u8 {
    match state {
        pb::RunState::Finished => 0,
        pb::RunState::Cancelled => 3,
        _ => 1,
    }
}

/// `controller remote`: connects to the controller at `address` and runs `action` there
/// ([`perform`]) within the default [`Deadlines`].
pub async fn run(
    address: &str,
    server_name: Option<&str>,
    credentials: &Credentials,
    action: RemoteAction,
) -> Result<u8, RemoteError> {
    let mut client = connect(address, server_name, credentials).await?;
    perform(&mut client, address, action, Deadlines::default()).await
}

/// Runs `action` against the controller at `address` (to which `client` is connected),
/// printing lines on stdout; returns the exit code (see [`exit_code`] for `watch`; 0 for the
/// others). `submit`, `list` and `cancel` fail at their `deadlines`.
pub async fn perform(
    client: &mut ControllerClient<Channel>,
    address: &str,
    action: RemoteAction,
    deadlines: Deadlines,
) -> Result<u8, RemoteError> {
    match action {
        RemoteAction::Submit { plan } => {
            let id = answered_within(address, "submit", deadlines.call, submit(client, &plan));
            println!("{}", id.await?);
            Ok(0)
        }
        RemoteAction::Watch { run } => {
            let opening = open_watch(client, &run);
            let stream = answered_within(address, "watch", deadlines.call, opening).await?;
            let display = WatchDisplay::new();
            let finished = follow(stream, &run, |event| display.show(event)).await?;
            drop(display);
            Ok(exit_code(finished.state()))
        }
        RemoteAction::List => {
            let runs = answered_within(address, "list", deadlines.call, list(client)).await?;
            if runs.is_empty() {
                println!("no runs");
            }
            for run in &runs {
                println!("{}", describe_run(run));
            }
            Ok(0)
        }
        RemoteAction::Fetch { run, dir, caps } => {
            let opening = open_fetch(client, &run);
            let stream = answered_within(address, "fetch", deadlines.call, opening).await?;
            let fetched = write_fetched(stream, &dir, caps.into()).await?;
            println!(
                "{}: {} files, {} bytes",
                dir.display(),
                fetched.files,
                fetched.bytes
            );
            Ok(0)
        }
        RemoteAction::Cancel { run } => {
            let cancelling = cancel(client, &run);
            let info = answered_within(address, "cancel", deadlines.cancel, cancelling).await?;
            println!("{}", describe_run(&info));
            Ok(0)
        }
    }
}
