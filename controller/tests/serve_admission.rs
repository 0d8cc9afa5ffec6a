//! `controller serve` decides everything that touches its machine, end to end on loopback
//! over real mTLS (issue 25 items 2 and 3):
//!
//! - a plan whose external broker is not the server's (another name, or the server's name at
//!   another address), that sets a WebSocket path, names a CA file by path or installs a
//!   testbed is refused in one line, nothing created, and the refusal reads the same whether
//!   the plan's address answers, refuses or does not resolve (admission never dials or
//!   resolves: the answering listener is never connected to), and whether a CA path exists;
//! - the server's own external broker (a real Mosquitto, wss) is measured with the server's
//!   WebSocket path and the CA the plan names by name;
//! - the binary refuses a `[ca_files]` entry of `/dev/zero` at its start, in one line, with a
//!   small peak RSS.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use controller::remote::{self, RemoteError};
use controller::serve::ServeConfig;
use proto::controller::v1 as pb;
use proto::mtls::Credentials;
use proto::pki::{IdentitySpec, Role};
use tests::mosquitto::WebSocketListener;
use tests::pki::TestPki;
use tests::{Mosquitto, MosquittoOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Generous: a local latency cell takes about two seconds.
const DEADLINE: Duration = Duration::from_secs(120);

/// The service on 127.0.0.1:0 with `nodes_file`; sending on `stop` (or dropping it) ends it.
struct Service {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), controller::serve::ServeError>>,
}

impl Service {
    async fn start(
        controller: Credentials,
        results: &Path,
        nodes_file: &Path,
    ) -> Result<Service, Box<dyn std::error::Error + Send + Sync>> {
        let config =
            ServeConfig::with_nodes_file(results.to_path_buf(), results.join("pki"), nodes_file)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(controller::serve::serve(
            listener,
            controller,
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

    async fn shutdown(mut self) -> TestResult {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(DEADLINE, self.task).await???;
        Ok(())
    }
}

/// A controller identity for 127.0.0.1 and a client identity.
fn identities() -> Result<(Credentials, Credentials), Box<dyn std::error::Error + Send + Sync>> {
    let pki = TestPki::in_memory()?;
    Ok((
        pki.issue(
            &IdentitySpec::new(Role::Controller, "controller")
                .with_ip_address([127, 0, 0, 1].into()),
        )?,
        pki.issue(&IdentitySpec::new(Role::Client, "laptop"))?,
    ))
}

const NODES: &str = r#"
[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]
"#;

/// A plan on the service's local node measuring `broker` (a `[[brokers]]` body) with a
/// short latency test whose `[tests.workload.broker]` is `workload_broker`.
fn plan(broker: &str, workload_broker: &str, top: &str) -> String {
    format!(
        r#"name = "admission"
repetitions = 1
{top}
{NODES}
[[brokers]]
{broker}

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["local"]
publishers = 2
messages = 3
warmup = 1
[tests.workload.broker]
{workload_broker}
"#
    )
}

/// A plan text made around one address.
type PlanAt = fn(&str) -> String;

fn external(name: &str, address: &str, websocket: &str) -> String {
    format!(
        "name = \"{name}\"\nkind = \"external\"\naddress = \"{address}\"\n\
         websocket_address = \"{websocket}\""
    )
}

/// The refusal's message; panics unless Submit was refused as InvalidArgument in one line.
async fn refusal(
    client: &mut proto::controller::v1::controller_client::ControllerClient<
        tonic::transport::Channel,
    >,
    text: &str,
) -> String {
    match remote::submit_text(client, text, "theirs.toml").await {
        Err(RemoteError::Rpc(status)) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            let message = status.message().to_string();
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
        other => panic!("the plan was accepted: {other:?}\n{text}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_naming_what_the_server_did_not_are_refused_alike_whatever_answers() -> TestResult {
    let (controller, laptop) = identities()?;
    let work = tempfile::tempdir()?;
    let results = work.path().join("results");
    std::fs::create_dir(&results)?;
    let ca_dir = work.path().join("ca");
    TestPki::create(&ca_dir, &[])?;
    let nodes_file = work.path().join("nodes.toml");
    std::fs::write(
        &nodes_file,
        format!(
            "{NODES}\n[[external_brokers]]\nname = \"lab\"\naddress = \"127.0.0.1:1883\"\n\
             websocket_address = \"127.0.0.1:8080\"\n\n[ca_files]\nlab-ca = \"{}\"\n",
            ca_dir.join("ca.pem").display()
        ),
    )?;
    let service = Service::start(controller, &results, &nodes_file).await?;
    let mut client = remote::connect(&service.address.to_string(), None, &laptop).await?;

    // An address that answers, one that refuses (a port closed after binding it) and one
    // that does not resolve (.invalid never does).
    let answering = std::net::TcpListener::bind("127.0.0.1:0")?;
    answering.set_nonblocking(true)?;
    let answers = answering.local_addr()?.to_string();
    let refuses = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
        closed.local_addr()?.to_string()
    };
    let unresolved = "broker.continuum.invalid:1883".to_string();
    let addresses = [answers, refuses, unresolved];

    let shapes: [(&str, PlanAt); 4] = [
        ("an unknown external broker", |address| {
            plan(&external("mine", address, address), "protocol = \"5\"", "")
        }),
        ("the server's broker at another address", |address| {
            plan(
                &external("lab", address, "127.0.0.1:8080"),
                "protocol = \"5\"",
                "",
            )
        }),
        (
            "the server's broker at another WebSocket address",
            |address| {
                plan(
                    &external("lab", "127.0.0.1:1883", address),
                    "transport = \"websocket\"",
                    "",
                )
            },
        ),
        ("a WebSocket path", |address| {
            plan(
                &external("lab", "127.0.0.1:1883", "127.0.0.1:8080"),
                &format!(
                    "transport = \"websocket\"\nwebsocket_path = \"/latest/meta-data/{address}\""
                ),
                "",
            )
        }),
    ];
    for (shape, text) in shapes {
        let mut messages = Vec::new();
        for address in &addresses {
            messages.push(refusal(&mut client, &text(address)).await);
        }
        eprintln!("{shape}: {}", messages[0]);
        assert!(
            messages.iter().all(|m| *m == messages[0]),
            "{shape}: {messages:#?}"
        );
        assert!(messages[0].starts_with("theirs.toml: "), "{}", messages[0]);
    }

    // A CA by path: the same refusal for a file that exists and one that does not.
    let lab = external("lab", "127.0.0.1:1883", "127.0.0.1:8080");
    let mut messages = Vec::new();
    for path in ["/etc/passwd", "/nonexistent/ca.pem", "other-ca"] {
        let text = plan(&lab, &format!("tls_ca_file = \"{path}\""), "");
        messages.push(refusal(&mut client, &text).await);
    }
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:#?}");
    assert!(
        messages[0].contains(
            "tests[0].workload.broker.tls_ca_file: name one of this service's CAs (it has: lab-ca)"
        ),
        "{}",
        messages[0]
    );

    // A testbed install: Nebula (with k3s or without) is the operator's.
    let testbed = plan(
        &lab,
        "protocol = \"5\"",
        "[testbed]\noverlay = \"nebula\"\norchestrator = \"k3s\"\nheadnode = \"h\"",
    )
    .replace(
        NODES,
        r#"
[[nodes]]
name = "h"
agent = "192.0.2.1:7100"
roles = ["loadgen"]
overlay_ip = "198.19.0.1/24"
[[nodes]]
name = "local"
agent = "192.0.2.2:7100"
roles = ["loadgen", "broker"]
overlay_ip = "198.19.0.2/24"
"#,
    );
    let message = refusal(&mut client, &testbed).await;
    assert!(
        message.contains(
            "testbed.overlay: the service's testbed (Nebula, k3s) is installed by its operator"
        ),
        "{message}"
    );

    // Nothing created: no run, no folder, and no one dialled the listener that answers.
    assert!(remote::list(&mut client).await?.is_empty());
    assert_eq!(
        std::fs::read_dir(&results)?.count(),
        0,
        "results stay empty"
    );
    match answering.accept() {
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("admission connected to the plan's address: {other:?}"),
    }
    service.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_servers_external_broker_is_measured_with_its_path_and_named_ca() -> TestResult {
    // skip_unless_installed! returns (), this test a Result: the same check by hand.
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY]) {
        return Ok(());
    }
    let broker = Mosquitto::start(MosquittoOptions {
        websocket: Some(WebSocketListener::Tls),
        ..MosquittoOptions::default()
    })?;
    let ws_port = broker.websocket_port().ok_or("a WebSocket listener")?;
    let ca = broker.websocket_ca_file().ok_or("a CA")?;
    let (controller, laptop) = identities()?;
    let work = tempfile::tempdir()?;
    let results = work.path().join("results");
    std::fs::create_dir(&results)?;
    let nodes_file = work.path().join("nodes.toml");
    std::fs::write(
        &nodes_file,
        format!(
            "{NODES}\n[[external_brokers]]\nname = \"lab\"\naddress = \"{}\"\n\
             websocket_address = \"127.0.0.1:{ws_port}\"\nwebsocket_path = \"/served\"\n\n\
             [ca_files]\nlab-ca = \"{}\"\n",
            broker.addr(),
            ca.display()
        ),
    )?;
    let service = Service::start(controller, &results, &nodes_file).await?;
    let mut client = remote::connect(&service.address.to_string(), None, &laptop).await?;
    let text = plan(
        &external(
            "lab",
            &broker.addr().to_string(),
            &format!("127.0.0.1:{ws_port}"),
        ),
        "transport = \"websocket\"\ntls_ca_file = \"lab-ca\"",
        "",
    );
    let before = broker.counters_settled()?;
    tokio::time::timeout(DEADLINE, async {
        let id = remote::submit_text(&mut client, &text, "lab.toml").await?;
        let mut lines = Vec::new();
        let finished = remote::watch(&mut client, &id, |event| {
            lines.extend(remote::describe_event(event));
        })
        .await?;
        assert_eq!(finished.state(), pb::RunState::Finished, "{lines:#?}");
        let counts = finished.counts.unwrap_or_default();
        assert_eq!((counts.measured, counts.failed), (1, 0), "{lines:#?}");
        // The cell's recorded spec has the server's path and CA file, not the plan's name.
        let result = find_result(Path::new(&finished.results_dir))?;
        assert!(result.contains("\"/served\""), "{result}");
        assert!(result.contains(&ca.display().to_string()), "{result}");
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })
    .await??;
    // The broker's own count: the messages went to the server's broker.
    let after = broker.counters_settled()?;
    assert!(
        after.publish_received >= before.publish_received + 6,
        "{before:?} -> {after:?}"
    );
    service.shutdown().await
}

/// The text of the one `result.json` under `dir`.
fn find_result(dir: &Path) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                pending.push(entry.path());
            } else if entry.file_name() == "result.json" {
                return Ok(std::fs::read_to_string(entry.path())?);
            }
        }
    }
    Err(format!("no result.json under {}", dir.display()).into())
}

#[test]
fn the_binary_refuses_dev_zero_as_a_ca_at_start_and_stays_small() {
    let work = tempfile::tempdir().expect("temp dir");
    let nodes_file = work.path().join("nodes.toml");
    std::fs::write(
        &nodes_file,
        format!("{NODES}\n[ca_files]\nzero = \"/dev/zero\"\n"),
    )
    .expect("written");
    let (output, peak_rss) = tests::process::output_with_peak_rss(
        Command::new(env!("CARGO_BIN_EXE_controller")).args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pki",
            work.path().join("pki").to_str().expect("UTF-8"),
            "--nodes",
            nodes_file.to_str().expect("UTF-8"),
            "--results",
            work.path().join("results").to_str().expect("UTF-8"),
        ]),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "controller serve, ca_files.zero = /dev/zero: peak RSS {} KiB",
        peak_rss / 1024
    );
    assert!(!output.status.success(), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("ca_files.zero: /dev/zero: not a regular file"),
        "{stderr}"
    );
    assert!(peak_rss < 64 << 20, "peaked at {} MiB", peak_rss >> 20);
    assert!(!work.path().join("results").exists(), "nothing created");
}
