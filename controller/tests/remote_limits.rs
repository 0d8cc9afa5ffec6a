//! `controller remote` against servers that misbehave, on loopback over real mTLS:
//!
//! - a server that accepts the TCP connection and then says nothing: `connect` gives up at its
//!   deadline, in one line naming the address;
//! - a server that goes silent in the middle of `watch` (a proxy that stops forwarding,
//!   connection left open): HTTP/2 keep-alive ends the watch within its ping interval and
//!   timeout instead of waiting forever;
//! - a server that takes `submit`, `list` and `cancel` and never answers them: each fails at
//!   its deadline, in one line naming the address and the call;
//! - a server whose `fetch` sends more than the caps: a message over [`remote::MAX_MESSAGE`]
//!   and files over [`remote::FetchLimits`] are refused, in one line, nothing over the cap
//!   written.

use std::pin::Pin;
use std::time::{Duration, Instant};

use controller::remote::{self, FetchLimits, RemoteAction, RemoteError};
use futures_util::Stream;
use proto::controller::v1 as pb;
use proto::mtls::Credentials;
use proto::pki::{IdentitySpec, Role};
use tests::pki::TestPki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The controller's server identity and a laptop's client identity from one test CA.
fn pki() -> Result<(Credentials, Credentials), Box<dyn std::error::Error + Send + Sync>> {
    let pki = TestPki::in_memory()?;
    Ok((
        pki.issue(
            &IdentitySpec::new(Role::Controller, "controller")
                .with_ip_address([127, 0, 0, 1].into()),
        )?,
        pki.issue(&IdentitySpec::new(Role::Client, "laptop"))?,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_says_nothing_is_given_up_on_at_the_connect_deadline() -> TestResult {
    let (_, laptop) = pki()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    // Accepts, holds the connections open, answers nothing (no TLS handshake).
    let mute = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let deadline = Duration::from_secs(1);
    let started = Instant::now();
    // The outer bound only catches a hang: a deadline that did not fire.
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        remote::connect_within(&address, None, &laptop, deadline),
    )
    .await
    .map_err(|_| "connect waited past its deadline")?;
    match outcome {
        Err(error @ RemoteError::ConnectTimeout { .. }) => {
            let shown = error.to_string();
            assert!(
                shown.starts_with(&format!("controller {address}: no connection within 1s")),
                "{shown}"
            );
            assert!(!shown.contains('\n'), "{shown}");
        }
        Err(other) => panic!("not the deadline: {other}"),
        Ok(_) => panic!("connected to a server that never answered"),
    }
    assert!(started.elapsed() >= deadline);
    mute.abort();
    Ok(())
}

/// A controller service that answers Watch with a stream that never ends (signalling on
/// `watching` when asked) and Fetch with `chunks`.
struct Scripted {
    watching: mpsc::UnboundedSender<()>,
    chunks: Vec<pb::FileChunk>,
}

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl pb::controller_server::Controller for Scripted {
    async fn submit(
        &self,
        _: tonic::Request<pb::SubmitRequest>,
    ) -> Result<tonic::Response<pb::RunId>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    type WatchStream = Boxed<pb::RunEvent>;

    async fn watch(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        let _ = self.watching.send(());
        Ok(tonic::Response::new(Box::pin(tokio_stream::pending())))
    }

    async fn list(
        &self,
        _: tonic::Request<pb::ListRequest>,
    ) -> Result<tonic::Response<pb::ListReply>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    type FetchStream = Boxed<pb::FileChunk>;

    async fn fetch(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<Self::FetchStream>, tonic::Status> {
        let chunks: Vec<_> = self.chunks.iter().cloned().map(Ok).collect();
        Ok(tonic::Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn cancel(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<pb::RunInfo>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }
}

/// A controller service that takes every call and answers none.
struct Silent;

#[tonic::async_trait]
impl pb::controller_server::Controller for Silent {
    async fn submit(
        &self,
        _: tonic::Request<pb::SubmitRequest>,
    ) -> Result<tonic::Response<pb::RunId>, tonic::Status> {
        std::future::pending().await
    }

    type WatchStream = Boxed<pb::RunEvent>;

    async fn watch(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        std::future::pending().await
    }

    async fn list(
        &self,
        _: tonic::Request<pb::ListRequest>,
    ) -> Result<tonic::Response<pb::ListReply>, tonic::Status> {
        std::future::pending().await
    }

    type FetchStream = Boxed<pb::FileChunk>;

    async fn fetch(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<Self::FetchStream>, tonic::Status> {
        std::future::pending().await
    }

    async fn cancel(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<pb::RunInfo>, tonic::Status> {
        std::future::pending().await
    }
}

/// Serves `service` over mTLS on 127.0.0.1:0; its address.
async fn serve(
    controller: &Credentials,
    service: impl pb::controller_server::Controller,
) -> Result<
    (std::net::SocketAddr, tokio::task::JoinHandle<()>),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tonic::transport::Server::builder()
        .tls_config(controller.server_tls()?)?
        .add_service(pb::controller_server::ControllerServer::new(service))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let task = tokio::spawn(async move {
        let _ = server.await;
    });
    Ok((address, task))
}

/// Copies `from` to `to` until `frozen` turns true; then stops forwarding but keeps both
/// ends open, as a machine that froze would.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            // The freeze first: nothing read after it is forwarded.
            biased;
            // The only change ever sent is the freeze.
            _ = frozen.changed() => break,
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            },
        }
    }
    // Frozen: hold the connection (both halves stay in scope), forward nothing.
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_silent_mid_watch_ends_the_watch_through_keep_alive() -> TestResult {
    let (controller, laptop) = pki()?;
    let (watching, mut watched) = mpsc::unbounded_channel();
    let (server, service) = serve(
        &controller,
        Scripted {
            watching,
            chunks: Vec::new(),
        },
    )
    .await?;
    // A proxy in front of the server that can stop forwarding.
    let proxy = TcpListener::bind("127.0.0.1:0").await?;
    let proxy_address = proxy.local_addr()?;
    let (freeze, frozen) = watch::channel(false);
    let proxying = tokio::spawn(async move {
        while let Ok((client, _)) = proxy.accept().await {
            let Ok(upstream) = TcpStream::connect(server).await else {
                return;
            };
            let (client_read, client_write) = client.into_split();
            let (upstream_read, upstream_write) = upstream.into_split();
            tokio::spawn(forward(client_read, upstream_write, frozen.clone()));
            tokio::spawn(forward(upstream_read, client_write, frozen.clone()));
        }
    });

    let mut client = remote::connect(&proxy_address.to_string(), None, &laptop).await?;
    let watching = tokio::spawn(async move { remote::watch(&mut client, "run-1", |_| {}).await });
    // The server is streaming the (endless) watch: now it goes silent.
    tokio::time::timeout(Duration::from_secs(30), watched.recv())
        .await
        .map_err(|_| "the watch never reached the server")?;
    freeze.send(true)?;
    // Keep-alive notices within its interval and timeout (5 s + 10 s); the bound is that
    // with a margin for a loaded machine. Without keep-alive the watch waits forever.
    let bound = proto::client::KEEP_ALIVE + proto::client::KEEP_ALIVE_TIMEOUT;
    let ended = tokio::time::timeout(bound + Duration::from_secs(15), watching)
        .await
        .map_err(|_| "a silent server kept the watch waiting past the keep-alive timeout")??;
    match ended {
        Err(RemoteError::Rpc(_)) => {}
        other => panic!("the watch did not fail on the dead connection: {other:?}"),
    }
    proxying.abort();
    service.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_gives_up_on_a_silent_server_at_its_deadline() -> TestResult {
    let (controller, laptop) = pki()?;
    let (server, service) = serve(&controller, Silent).await?;
    let address = server.to_string();
    let plan = tempfile::NamedTempFile::new()?;
    std::fs::write(plan.path(), "name = \"p\"\n")?;
    let fetched = tempfile::tempdir()?;
    let deadline = Duration::from_secs(1);
    let deadlines = remote::Deadlines {
        call: deadline,
        cancel: deadline,
    };
    let mut client = remote::connect(&address, None, &laptop).await?;
    for (call, action) in [
        (
            "submit",
            RemoteAction::Submit {
                plan: plan.path().to_path_buf(),
            },
        ),
        ("list", RemoteAction::List),
        (
            "cancel",
            RemoteAction::Cancel {
                run: "run-1".to_string(),
            },
        ),
        (
            "watch",
            RemoteAction::Watch {
                run: "run-1".to_string(),
            },
        ),
        (
            "fetch",
            RemoteAction::Fetch {
                run: "run-1".to_string(),
                dir: fetched.path().join("run-1"),
                caps: Default::default(),
            },
        ),
    ] {
        let started = Instant::now();
        // The outer bound only catches a hang: a deadline that did not fire.
        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            remote::perform(&mut client, &address, action, deadlines),
        )
        .await
        .map_err(|_| format!("{call} waited past its deadline"))?;
        match outcome {
            Err(error @ RemoteError::NoAnswer { .. }) => {
                assert_eq!(
                    error.to_string(),
                    format!("controller {address}: no answer to {call} within 1s")
                );
            }
            other => panic!("{call} did not stop at its deadline: {other:?}"),
        }
        assert!(started.elapsed() >= deadline, "{call}");
    }
    // The command line's deadlines: a submit or list is answered at once, a cancel after the
    // run's undo (up to the service's 120 s wait).
    let defaults = remote::Deadlines::default();
    assert_eq!(defaults.call, Duration::from_secs(30));
    assert!(defaults.cancel > Duration::from_secs(120), "{defaults:?}");
    service.abort();
    Ok(())
}

fn chunk(path: &str, offset: u64, data: Vec<u8>) -> pb::FileChunk {
    pb::FileChunk {
        path: path.to_string(),
        offset,
        data,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_over_its_caps_is_refused_in_one_line() -> TestResult {
    let (controller, laptop) = pki()?;
    let root = tempfile::tempdir()?;

    // One message larger than the client takes.
    let (watching, _) = mpsc::unbounded_channel();
    let (address, service) = serve(
        &controller,
        Scripted {
            watching,
            chunks: vec![
                chunk("report.md", 0, b"# ok".to_vec()),
                chunk("huge", 0, vec![0; remote::MAX_MESSAGE + 1]),
            ],
        },
    )
    .await?;
    let mut client = remote::connect(&address.to_string(), None, &laptop).await?;
    let target = root.path().join("message");
    match remote::fetch(&mut client, "run-1", &target).await {
        Err(RemoteError::Rpc(status)) => {
            let shown = RemoteError::Rpc(status).to_string();
            assert!(shown.contains("too large"), "{shown}");
            assert!(!shown.contains('\n'), "{shown}");
        }
        other => panic!("a message over the cap was taken: {other:?}"),
    }
    assert!(!target.join("huge").exists());
    service.abort();

    // Files over the fetch caps (small caps, the same code as the default ones).
    let (watching, _) = mpsc::unbounded_channel();
    let (address, service) = serve(
        &controller,
        Scripted {
            watching,
            chunks: vec![
                chunk("a", 0, vec![1; 1000]),
                chunk("a", 1000, vec![2; 1000]),
                chunk("a", 2000, vec![3; 1000]),
            ],
        },
    )
    .await?;
    let mut client = remote::connect(&address.to_string(), None, &laptop).await?;
    let limits = FetchLimits {
        total_bytes: 10_000,
        file_bytes: 2500,
        files: 10,
    };
    let target = root.path().join("files");
    match remote::fetch_within(&mut client, "run-1", &target, limits).await {
        Err(error @ RemoteError::Fetch(remote::FetchError::OverLimit { .. })) => {
            assert_eq!(
                error.to_string(),
                "a: the server sent more than the fetch cap of 2500 bytes; fetch stopped (copy a folder this large from the server by other means)"
            );
        }
        other => panic!("a file over its cap was written: {other:?}"),
    }
    assert_eq!(std::fs::metadata(target.join("a"))?.len(), 2000);
    let limits = FetchLimits {
        total_bytes: 1500,
        ..limits
    };
    let target = root.path().join("total");
    match remote::fetch_within(&mut client, "run-1", &target, limits).await {
        Err(RemoteError::Fetch(remote::FetchError::OverLimit { what, limit, .. })) => {
            assert_eq!((what.as_str(), limit), ("the run's folder", 1500));
        }
        other => panic!("a folder over its cap was written: {other:?}"),
    }
    assert_eq!(std::fs::metadata(target.join("a"))?.len(), 1000);
    service.abort();
    Ok(())
}
