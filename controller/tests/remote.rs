//! `controller serve` and `controller remote` end to end on loopback, over real mTLS: a PKI
//! with a controller, a laptop (client) and an agent identity; the service in-process on a
//! port bound to 0; plans that use a local agent with the embedded broker.
//!
//! - a client submits a tiny latency plan, watches it to the end, lists it finished, fetches
//!   its folder (byte for byte the server's files), cancels a long run (cancelled, and the
//!   service runs the next plan);
//! - an agent identity is PermissionDenied, a bad plan InvalidArgument naming the TOML path;
//! - each run is its submitter's: another client cannot see, watch, fetch or cancel it; a
//!   plan that sets results_dir or pki_dir, or names a node unlike the service's, is refused
//!   with nothing created; each client's active runs are bounded;
//! - a queued run is cancelled at once and shutting down cancels the running one, whose
//!   watchers see it end;
//! - a malicious server cannot make `fetch` write outside the target folder.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use controller::remote::{self, RemoteError};
use controller::serve::ServeConfig;
use proto::controller::v1 as pb;
use proto::controller::v1::controller_client::ControllerClient;
use proto::mtls::Credentials;
use proto::pki::{IdentitySpec, Role};
use tests::pki::TestPki;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Generous: a local latency cell takes about two seconds.
const DEADLINE: Duration = Duration::from_secs(120);

struct Pki {
    controller: Credentials,
    laptop: Credentials,
    /// A second client: another researcher sharing the service.
    tablet: Credentials,
    agent: Credentials,
}

fn pki() -> Result<Pki, Box<dyn std::error::Error + Send + Sync>> {
    let pki = TestPki::in_memory()?;
    Ok(Pki {
        controller: pki.issue(
            &IdentitySpec::new(Role::Controller, "controller")
                .with_ip_address([127, 0, 0, 1].into()),
        )?,
        laptop: pki.issue(&IdentitySpec::new(Role::Client, "laptop"))?,
        tablet: pki.issue(&IdentitySpec::new(Role::Client, "tablet"))?,
        agent: pki.issue(
            &IdentitySpec::new(Role::Agent, "worker-1").with_ip_address([127, 0, 0, 1].into()),
        )?,
    })
}

/// A service on 127.0.0.1:0; dropping `stop` (or sending on it) shuts it down.
struct Service {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), controller::serve::ServeError>>,
}

/// The one node the service offers: a local agent (started in-process by each run).
const NODES: &str = r#"
[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]
"#;

/// The service, its runs' results under `results`, its nodes [`NODES`].
async fn start(
    credentials: Credentials,
    results: &Path,
) -> Result<Service, Box<dyn std::error::Error + Send + Sync>> {
    let nodes = results.join("nodes.toml");
    std::fs::write(&nodes, NODES)?;
    let config = ServeConfig::with_nodes_file(results.to_path_buf(), results.join("pki"), &nodes)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(controller::serve::serve(
        listener,
        credentials,
        config,
        async move {
            let _ = stopped.await;
        },
    ));
    Ok(Service {
        address,
        stop: Some(stop),
        task,
    })
}

impl Service {
    async fn client(
        &self,
        credentials: &Credentials,
    ) -> Result<ControllerClient<Channel>, RemoteError> {
        remote::connect(&self.address.to_string(), None, credentials).await
    }

    /// Shuts the service down and waits for it (runs cancelled and undone).
    async fn shutdown(mut self) -> TestResult {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(DEADLINE, self.task).await???;
        Ok(())
    }
}

/// A plan on the service's local node with the embedded broker.
fn plan(name: &str, test: &str) -> String {
    format!(
        r#"
name = "{name}"
repetitions = 1

[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]

[[brokers]]
name = "embedded"
kind = "embedded"
node = "local"

[[scenarios]]
name = "local"

[[tests]]
{test}
"#
    )
}

const TINY: &str = r#"kind = "latency"
loadgen = ["local"]
publishers = 5
messages = 3
warmup = 1"#;

/// About 40 minutes of open-loop latency messages: only a cancel ends it in a test.
const LONG: &str = r#"kind = "latency"
loadgen = ["local"]
publishers = 2
messages = 10000
warmup = 1"#;

/// Every file under `root`, relative path to bytes.
fn files(root: &Path) -> std::io::Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        for entry in std::fs::read_dir(root.join(&relative))? {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                pending.push(path);
            } else {
                out.insert(
                    path.to_string_lossy().into_owned(),
                    std::fs::read(entry.path())?,
                );
            }
        }
    }
    Ok(out)
}

/// Follows `run` until its first cell is under way (the run started and its agent answers).
async fn wait_running(client: &mut ControllerClient<Channel>, run: &str) -> TestResult {
    let mut stream = client
        .watch(pb::RunId { id: run.into() })
        .await?
        .into_inner();
    while let Some(event) = stream.message().await? {
        if let Some(pb::run_event::Event::Started(_)) = event.event {
            // The folder is open; give the agent and broker a moment so the cancel lands in
            // the middle of a cell.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return Ok(());
        }
    }
    Err("the run ended before it started".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_laptop_submits_watches_lists_fetches_and_cancels() -> TestResult {
    let pki = pki()?;
    let results = tempfile::tempdir()?;
    let service = start(pki.controller.clone(), results.path()).await?;
    let mut client = service.client(&pki.laptop).await?;
    tokio::time::timeout(DEADLINE, async {
        // Submit and watch to the end.
        let id = remote::submit_text(&mut client, &plan("remote-tiny", TINY), "tiny.toml").await?;
        let mut lines = Vec::new();
        let finished = remote::watch(&mut client, &id, |event| {
            lines.extend(remote::describe_event(event));
        })
        .await?;
        assert_eq!(finished.state(), pb::RunState::Finished, "{lines:#?}");
        let counts = finished.counts.unwrap_or_default();
        assert_eq!(
            (counts.total, counts.done, counts.measured),
            (1, 1, 1),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("embedded/local/0-latency") && l.contains(" ok: latency p50")),
            "{lines:#?}"
        );
        assert_eq!(remote::exit_code(finished.state()), 0);
        // What the controller's terminal shows, in its order: the broker deployed, the cell,
        // the broker removed, the report.
        let at = |what: &str| {
            lines
                .iter()
                .position(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no line with {what:?}: {lines:#?}"))
        };
        let order = [
            at("controller: broker embedded ready at "),
            at("embedded/local/0-latency"),
            at("controller: broker embedded removed"),
            at("controller: report "),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{lines:#?}");
        // A watcher that comes later gets the run from its start.
        let mut replayed = Vec::new();
        remote::watch(&mut client, &id, |event| {
            replayed.extend(remote::describe_event(event));
        })
        .await?;
        assert_eq!(replayed, lines);

        // List: finished, with its counts and folder.
        let runs = remote::list(&mut client).await?;
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].id, id);
        assert_eq!(runs[0].plan_name, "remote-tiny");
        assert_eq!(runs[0].state(), pb::RunState::Finished);
        assert!(runs[0].started_unix_ms >= runs[0].submitted_unix_ms);
        assert!(runs[0].ended_unix_ms >= runs[0].started_unix_ms);
        assert_eq!(runs[0].results_dir, finished.results_dir);

        // Fetch: a copy, byte for byte.
        let server_dir = PathBuf::from(&finished.results_dir);
        assert!(server_dir.starts_with(results.path()));
        let copy = tempfile::tempdir()?;
        let target = copy.path().join("run");
        let fetched = remote::fetch(&mut client, &id, &target).await?;
        let theirs = files(&server_dir)?;
        let ours = files(&target)?;
        for must in ["report.html", "summary.csv", "manifest.json", "report.md"] {
            assert!(
                ours.contains_key(must),
                "{must} not fetched: {:?}",
                ours.keys()
            );
        }
        assert_eq!(
            std::fs::read(target.join("report.html"))?,
            std::fs::read(server_dir.join("report.html"))?
        );
        assert_eq!(
            std::fs::read(target.join("summary.csv"))?,
            std::fs::read(server_dir.join("summary.csv"))?
        );
        assert!(
            ours.keys().any(|k| k.starts_with("cells/")),
            "{:?}",
            ours.keys()
        );
        assert_eq!(ours, theirs);
        assert_eq!(fetched.files, theirs.len());

        // Cancel a long run: it ends cancelled, after its undo.
        let long =
            remote::submit_text(&mut client, &plan("remote-long", LONG), "long.toml").await?;
        wait_running(&mut client, &long).await?;
        let info = remote::cancel(&mut client, &long).await?;
        assert_eq!(info.state(), pb::RunState::Cancelled, "{info:?}");
        let finished = remote::watch(&mut client, &long, |_| {}).await?;
        assert_eq!(finished.state(), pb::RunState::Cancelled);
        assert_eq!(remote::exit_code(finished.state()), 3);

        // The service is still usable: the next plan runs to the end.
        let again =
            remote::submit_text(&mut client, &plan("remote-again", TINY), "again.toml").await?;
        let finished = remote::watch(&mut client, &again, |_| {}).await?;
        assert_eq!(finished.state(), pb::RunState::Finished);
        let states: Vec<pb::RunState> = remote::list(&mut client)
            .await?
            .iter()
            .map(pb::RunInfo::state)
            .collect();
        assert_eq!(
            states,
            [
                pb::RunState::Finished,
                pb::RunState::Cancelled,
                pb::RunState::Finished
            ]
        );
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })
    .await??;
    service.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_may_not_drive_the_controller_and_bad_plans_name_the_path() -> TestResult {
    let pki = pki()?;
    let results = tempfile::tempdir()?;
    let service = start(pki.controller.clone(), results.path()).await?;

    let mut agent = service.client(&pki.agent).await?;
    for outcome in [
        remote::list(&mut agent).await.map(|_| ()),
        remote::submit_text(&mut agent, &plan("x", TINY), "x.toml")
            .await
            .map(|_| ()),
        remote::cancel(&mut agent, "r1").await.map(|_| ()),
        remote::fetch(&mut agent, "r1", results.path())
            .await
            .map(|_| ()),
    ] {
        match outcome {
            Err(RemoteError::Rpc(status)) => {
                assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
                assert!(status.message().contains("worker-1"), "{status:?}");
            }
            other => panic!("an agent was not refused: {other:?}"),
        }
    }

    // The controller's own identity may drive it too.
    let mut controller = service.client(&pki.controller).await?;
    assert!(remote::list(&mut controller).await?.is_empty());

    let mut laptop = service.client(&pki.laptop).await?;
    let bad = plan("bad", TINY).replace(
        "name = \"local\"\n\n[[tests]]",
        "name = \"local\"\nloss_percent = 200.0\n\n[[tests]]",
    );
    match remote::submit_text(&mut laptop, &bad, "study.toml").await {
        Err(RemoteError::Rpc(status)) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            let message = status.message();
            assert!(message.contains("study.toml"), "{message}");
            assert!(message.contains("scenarios[0].loss_percent"), "{message}");
            assert!(message.contains("200"), "{message}");
        }
        other => panic!("a bad plan was accepted: {other:?}"),
    }
    match remote::submit_text(&mut laptop, "name = \"x\"\nbogus = 1\n", "typo.toml").await {
        Err(RemoteError::Rpc(status)) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains("typo.toml"), "{status:?}");
        }
        other => panic!("a bad plan was accepted: {other:?}"),
    }
    match remote::watch(&mut laptop, "r404", |_| {}).await {
        Err(RemoteError::Rpc(status)) => assert_eq!(status.code(), tonic::Code::NotFound),
        other => panic!("an unknown run was found: {other:?}"),
    }
    assert!(remote::list(&mut laptop).await?.is_empty());
    service.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_run_is_its_owners_and_the_server_decides_paths_and_nodes() -> TestResult {
    let pki = pki()?;
    let results = tempfile::tempdir()?;
    let service = start(pki.controller.clone(), results.path()).await?;
    let mut laptop = service.client(&pki.laptop).await?;
    let mut tablet = service.client(&pki.tablet).await?;
    tokio::time::timeout(DEADLINE, async {
        let id = remote::submit_text(&mut laptop, &plan("mine", TINY), "mine.toml").await?;
        let finished = remote::watch(&mut laptop, &id, |_| {}).await?;
        assert_eq!(finished.state(), pb::RunState::Finished);
        // The run's folder is named by its id, under the service's results folder.
        assert_eq!(
            PathBuf::from(&finished.results_dir),
            results.path().join(&id)
        );

        // Another client neither sees it nor watches, fetches or cancels it.
        assert!(remote::list(&mut tablet).await?.is_empty());
        let target = tempfile::tempdir()?;
        for outcome in [
            remote::watch(&mut tablet, &id, |_| {}).await.map(|_| ()),
            remote::fetch(&mut tablet, &id, &target.path().join("copy"))
                .await
                .map(|_| ()),
            remote::cancel(&mut tablet, &id).await.map(|_| ()),
        ] {
            match outcome {
                // Answered like a missing run: the tablet learns neither that the run
                // exists nor whose it is.
                Err(RemoteError::Rpc(status)) => {
                    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
                    assert!(!status.message().contains("laptop"), "{status:?}");
                }
                other => panic!("another client reached the run: {other:?}"),
            }
        }
        assert!(!target.path().join("copy").exists(), "nothing fetched");
        // The controller identity administers every run.
        let mut admin = service.client(&pki.controller).await?;
        assert_eq!(remote::list(&mut admin).await?.len(), 1);
        assert_eq!(remote::list(&mut laptop).await?.len(), 1);

        // Paths and nodes are the server's: refused, with nothing created on disk.
        let before = files(results.path())?;
        let elsewhere = tempfile::tempdir()?;
        let with_results = plan("paths", TINY).replacen(
            "repetitions = 1",
            &format!(
                "repetitions = 1\nresults_dir = {:?}",
                elsewhere.path().join("r")
            ),
            1,
        );
        let with_pki = plan("paths", TINY).replacen(
            "repetitions = 1",
            "repetitions = 1\npki_dir = \"/root\"",
            1,
        );
        let unknown_node = plan("nodes", TINY).replace(
            "name = \"local\"\nagent = \"local\"",
            "name = \"local\"\nagent = \"192.0.2.9:7100\"",
        );
        for (text, says) in [
            (with_results, "results_dir: set by the service"),
            (with_pki, "pki_dir: set by the service"),
            (
                unknown_node,
                "nodes[0] (\"local\"): differs from the service's node",
            ),
        ] {
            match remote::submit_text(&mut tablet, &text, "theirs.toml").await {
                Err(RemoteError::Rpc(status)) => {
                    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
                    assert!(status.message().contains(says), "{}", status.message());
                }
                other => panic!("the plan was accepted: {other:?}"),
            }
        }
        assert!(
            !elsewhere.path().join("r").exists(),
            "the plan's results_dir was not created"
        );
        assert_eq!(
            files(results.path())?,
            before,
            "nothing written for refused plans"
        );
        assert!(remote::list(&mut tablet).await?.is_empty());

        // Each client may have a bounded number of runs queued or running.
        let mut queued = Vec::new();
        for n in 0..controller::serve::MAX_ACTIVE_PER_CLIENT {
            let name = format!("long-{n}");
            queued.push(remote::submit_text(&mut tablet, &plan(&name, LONG), "long.toml").await?);
        }
        match remote::submit_text(&mut tablet, &plan("one-more", TINY), "more.toml").await {
            Err(RemoteError::Rpc(status)) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}")
            }
            other => panic!("a fifth active run was queued: {other:?}"),
        }
        // The bound is per client: the laptop may still submit (and cancel what it queued).
        let laptops = remote::submit_text(&mut laptop, &plan("laptops", TINY), "l.toml").await?;
        remote::cancel(&mut laptop, &laptops).await?;
        for id in queued.iter().rev() {
            remote::cancel(&mut tablet, id).await?;
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })
    .await??;
    service.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_runs_cancel_at_once_and_shutdown_cancels_the_running_one() -> TestResult {
    let pki = pki()?;
    let results = tempfile::tempdir()?;
    let service = start(pki.controller.clone(), results.path()).await?;
    let mut client = service.client(&pki.laptop).await?;
    let long = remote::submit_text(&mut client, &plan("shutdown-long", LONG), "long.toml").await?;
    let queued =
        remote::submit_text(&mut client, &plan("shutdown-queued", TINY), "tiny.toml").await?;
    wait_running(&mut client, &long).await?;

    // Nothing to undo for a queued run: cancelled at once, never started, no folder.
    let info = tokio::time::timeout(Duration::from_secs(5), remote::cancel(&mut client, &queued))
        .await??;
    assert_eq!(info.state(), pb::RunState::Cancelled);
    assert_eq!(info.started_unix_ms, 0);
    assert!(info.results_dir.is_empty());
    match remote::fetch(&mut client, &queued, results.path()).await {
        Err(RemoteError::Rpc(status)) => {
            assert_eq!(status.code(), tonic::Code::FailedPrecondition)
        }
        other => panic!("a queued run had a folder: {other:?}"),
    }

    // Shutting down (SIGTERM in the binary) cancels the running plan; a watcher sees it end.
    let mut watcher = service.client(&pki.laptop).await?;
    let watching = tokio::spawn(async move { remote::watch(&mut watcher, &long, |_| {}).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    service.shutdown().await?;
    let finished = tokio::time::timeout(DEADLINE, watching).await???;
    assert_eq!(finished.state(), pb::RunState::Cancelled);
    Ok(())
}

/// A server that answers Fetch with a legitimate file, then one whose path climbs out.
#[derive(Debug)]
struct Malicious;

#[tonic::async_trait]
impl pb::controller_server::Controller for Malicious {
    async fn submit(
        &self,
        _: tonic::Request<pb::SubmitRequest>,
    ) -> Result<tonic::Response<pb::RunId>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    type WatchStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::RunEvent, tonic::Status>>>;

    async fn watch(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    async fn list(
        &self,
        _: tonic::Request<pb::ListRequest>,
    ) -> Result<tonic::Response<pb::ListReply>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    type FetchStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::FileChunk, tonic::Status>>>;

    async fn fetch(
        &self,
        request: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<Self::FetchStream>, tonic::Status> {
        let evil = request.into_inner().id;
        let chunks = vec![
            Ok(pb::FileChunk {
                path: "report.html".into(),
                offset: 0,
                data: b"<html></html>".to_vec(),
            }),
            Ok(pb::FileChunk {
                path: evil,
                offset: 0,
                data: b"owned".to_vec(),
            }),
        ];
        Ok(tonic::Response::new(tokio_stream::iter(chunks)))
    }

    async fn cancel(
        &self,
        _: tonic::Request<pb::RunId>,
    ) -> Result<tonic::Response<pb::RunInfo>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malicious_server_cannot_write_outside_the_fetch_folder() -> TestResult {
    let pki = pki()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tonic::transport::Server::builder()
        .tls_config(pki.controller.server_tls()?)?
        .add_service(pb::controller_server::ControllerServer::new(Malicious))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let server = tokio::spawn(server);
    let mut client = remote::connect(&address.to_string(), None, &pki.laptop).await?;
    let root = tempfile::tempdir()?;
    let target = root.path().join("copy");
    let absolute = root.path().join("absolute-escape");
    for evil in [
        "../escape".to_string(),
        "cells/../../escape".to_string(),
        absolute.display().to_string(),
    ] {
        match remote::fetch(&mut client, &evil, &target).await {
            Err(RemoteError::Fetch(remote::FetchError::UnsafePath { path, .. })) => {
                assert_eq!(path, evil)
            }
            other => panic!("{evil:?} was not refused: {other:?}"),
        }
    }
    // Only the legitimate file exists, inside the folder.
    let mut names: Vec<String> = std::fs::read_dir(root.path())?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    names.sort();
    assert_eq!(names, ["copy"]);
    assert_eq!(std::fs::read(target.join("report.html"))?, b"<html></html>");
    assert_eq!(std::fs::read_dir(&target)?.count(), 1);
    server.abort();
    Ok(())
}
