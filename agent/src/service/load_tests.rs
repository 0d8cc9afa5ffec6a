//! RunLoad served for real (gRPC over mTLS on 127.0.0.1:0, Mosquitto on loopback): a load
//! whose caller went away (a controller whose cell timed out drops the call) ends and gives
//! its slot back, even while its pacer waits the longest interval a spec may ask for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::AgentConfig;
use loadgen::spec::{MAX_DURATION, Pacing};
use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use proto::client::connect_agent;
use proto::mtls::Credentials;
use proto::pki::{IdentitySpec, Role};
use tests::pki::TestPki;
use tests::{Mosquitto, MosquittoOptions, skip_unless_installed};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{LOADS, MAX_CONCURRENT_LOADS};
use crate::service::AgentService;

/// The cell timeout of the issue's scenario: a load must be gone within it of its drop.
const CELL_TIMEOUT: Duration = Duration::from_secs(5);

/// The tests here count the agent's process-wide load slots: one at a time.
static SLOTS_COUNTED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An agent serving on 127.0.0.1:0 until `stop`: its address, and the controller's
/// credentials to call it with.
async fn served_agent(
    state: &std::path::Path,
    stop: CancellationToken,
) -> (SocketAddr, Credentials) {
    let pki = TestPki::in_memory().expect("CA");
    let loopback = [127, 0, 0, 1].into();
    let issue = |spec: IdentitySpec| pki.issue(&spec).expect("credentials");
    let controller =
        issue(IdentitySpec::new(Role::Controller, "controller").with_ip_address(loopback));
    let agent = issue(IdentitySpec::new(Role::Agent, "tester").with_ip_address(loopback));
    let config: AgentConfig = toml::from_str(&format!(
        "name = \"tester\"\nlisten = \"127.0.0.1:0\"\nstate_dir = \"{}\"\nroles = [\"loadgen\"]\n\
         [tls]\nca = \"ca.pem\"\ncert = \"tester.pem\"\nkey = \"tester.key\"\n",
        state.display()
    ))
    .expect("agent config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let service = Arc::new(AgentService::new(config).await);
    tokio::spawn(async move {
        crate::server::serve(service, &agent, listener, stop.cancelled_owned()).await
    });
    (address, controller)
}

async fn client(address: SocketAddr, credentials: &Credentials) -> AgentClient<Channel> {
    connect_agent(&address.to_string(), None, credentials)
        .await
        .expect("connected")
}

fn request(spec: &loadgen::WorkloadSpec) -> pb::RunLoadRequest {
    pb::RunLoadRequest {
        spec: Some(spec.into()),
        origin_unix_ns: 0,
        start_at_ns: 0,
        labels: Default::default(),
    }
}

/// One publisher and one subscriber against `broker`, a message every `interval`.
fn workload(broker: &Mosquitto, interval: Duration, messages: u64) -> loadgen::WorkloadSpec {
    let mut spec = loadgen::presets::latency();
    spec.broker.host = "127.0.0.1".into();
    spec.broker.port = broker.port();
    spec.publishers = 1;
    spec.subscribers = 1;
    spec.pacing = Pacing::OpenLoop { interval };
    spec.messages_per_publisher = messages;
    spec.warmup_messages = 0;
    spec
}

/// Waits until `events` say the load publishes: its first message left and the pacer sleeps
/// towards the next, an hour away.
async fn until_publishing(events: &mut tonic::Streaming<pb::RunLoadEvent>) {
    let publishing = async {
        while let Some(event) = events.next().await {
            match event.expect("an event").event {
                Some(pb::run_load_event::Event::Progress(progress))
                    if progress.phase == "publishing" && progress.published >= 1 =>
                {
                    return;
                }
                Some(pb::run_load_event::Event::Result(_)) => panic!("the load ended by itself"),
                _ => {}
            }
        }
        panic!("the load's stream ended without a result");
    };
    tokio::time::timeout(Duration::from_secs(30), publishing)
        .await
        .expect("publishing within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_whose_caller_went_away_end_and_free_their_slots() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let _alone = SLOTS_COUNTED.lock().await;
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let state = tempfile::tempdir().expect("state dir");
    let stop = CancellationToken::new();
    let (agent, credentials) = served_agent(state.path(), stop.clone()).await;
    let mut client = client(agent, &credentials).await;
    let hour_apart = workload(&broker, MAX_DURATION, 20);
    // More loads than the agent has slots: each must give its slot back once dropped.
    for load in 0..MAX_CONCURRENT_LOADS + 2 {
        let mut events = client
            .run_load(request(&hour_apart))
            .await
            .unwrap_or_else(|status| panic!("load {load} refused: {status}"))
            .into_inner();
        until_publishing(&mut events).await;
        // What the controller does when the cell times out: it drops the call.
        drop(events);
        let dropped = Instant::now();
        while LOADS.in_use() > 0 {
            assert!(
                dropped.elapsed() < CELL_TIMEOUT,
                "load {load} still holds its slot {CELL_TIMEOUT:?} after its caller went away"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!(
            "load {load}: slot free {:?} after the drop",
            dropped.elapsed()
        );
    }
    // And the agent's next load runs to its result.
    let mut events = client
        .run_load(request(&workload(&broker, Duration::from_millis(10), 5)))
        .await
        .expect("the next load is accepted")
        .into_inner();
    let result = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.next().await {
            if let Some(pb::run_load_event::Event::Result(result)) = event.expect("event").event {
                return *result;
            }
        }
        panic!("no result");
    })
    .await
    .expect("a result within 30 s");
    let result = loadgen::RunResult::try_from(result).expect("a result");
    assert_eq!(result.published.iter().sum::<u64>(), 5);
    assert!(!result.interrupted);
    stop.cancel();
}

/// A TCP relay on 127.0.0.1:0 to `upstream` that, once `frozen` fires, stops relaying and
/// keeps its sockets open: a caller cut off without its connection closing.
async fn freezable_relay(upstream: SocketAddr, frozen: CancellationToken) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((downstream, _)) = listener.accept().await {
            let Ok(upstream) = TcpStream::connect(upstream).await else {
                return;
            };
            let (down_read, down_write) = downstream.into_split();
            let (up_read, up_write) = upstream.into_split();
            tokio::spawn(relay(down_read, up_write, frozen.clone()));
            tokio::spawn(relay(up_read, down_write, frozen.clone()));
        }
    });
    address
}

async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: CancellationToken,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            () = frozen.cancelled() => break,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
    // Cut off: neither side hears from the other again, and neither socket closes (both
    // halves live as long as this task).
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_whose_caller_was_cut_off_ends_by_the_keep_alive() {
    skip_unless_installed!(tests::mosquitto::MOSQUITTO_BINARY);
    let _alone = SLOTS_COUNTED.lock().await;
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let state = tempfile::tempdir().expect("state dir");
    let stop = CancellationToken::new();
    let frozen = CancellationToken::new();
    let (agent, credentials) = served_agent(state.path(), stop.clone()).await;
    let mut client = client(freezable_relay(agent, frozen.clone()).await, &credentials).await;
    let mut events = client
        .run_load(request(&workload(&broker, MAX_DURATION, 20)))
        .await
        .expect("the load is accepted")
        .into_inner();
    until_publishing(&mut events).await;
    assert!(LOADS.in_use() >= 1);
    // The caller is cut off: its stream is neither read nor closed.
    frozen.cancel();
    let cut = Instant::now();
    let bound = proto::client::KEEP_ALIVE + proto::client::KEEP_ALIVE_TIMEOUT + CELL_TIMEOUT;
    while LOADS.in_use() > 0 {
        assert!(
            cut.elapsed() < bound,
            "the load still holds its slot {bound:?} after its caller was cut off"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "cut-off caller: slot free {:?} after the cut",
        cut.elapsed()
    );
    drop(events);
    stop.cancel();
}
