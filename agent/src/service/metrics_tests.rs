//! The Metrics stream served for real (gRPC over mTLS on 127.0.0.1:0): no client identity
//! holds more than its share of the agent's streams, client identities together leave the
//! controller its own, a stream's slot comes back when its reader goes away, and a request's
//! interval and length are bounded, refused naming the field.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::AgentConfig;
use proto::agent::v1 as pb;
use proto::agent::v1::agent_client::AgentClient;
use proto::client::connect_agent;
use proto::mtls::Credentials;
use proto::pki::{IdentitySpec, Role};
use tests::pki::TestPki;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{
    MAX_CLIENT_STREAMS, MAX_INTERVAL, MAX_STREAMS, MAX_STREAMS_PER_CLIENT, MIN_INTERVAL, STREAMS,
    STREAMS_COUNTED,
};
use crate::service::AgentService;

/// An agent serving on 127.0.0.1:0 until `stop`, and a PKI to issue its callers from.
async fn served_agent(state: &std::path::Path, stop: CancellationToken) -> (SocketAddr, TestPki) {
    let pki = TestPki::in_memory().expect("CA");
    let agent = pki
        .issue(&IdentitySpec::new(Role::Agent, "tester").with_ip_address([127, 0, 0, 1].into()))
        .expect("agent credentials");
    let config: AgentConfig = toml::from_str(&format!(
        "name = \"tester\"\nlisten = \"127.0.0.1:0\"\nstate_dir = \"{}\"\nroles = [\"broker\"]\n\
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
    (address, pki)
}

/// A caller of `address` with the identity `role`/`name` from `pki`.
async fn caller(
    address: SocketAddr,
    pki: &TestPki,
    role: Role,
    name: &str,
) -> AgentClient<Channel> {
    let credentials: Credentials = pki
        .issue(&IdentitySpec::new(role, name))
        .expect("caller credentials");
    connect_agent(&address.to_string(), None, &credentials)
        .await
        .expect("connected")
}

fn request(interval: Duration, samples: u32) -> pb::MetricsRequest {
    pb::MetricsRequest {
        interval: prost_types::Duration::try_from(interval).ok(),
        pids: vec![std::process::id()],
        brokers: Vec::new(),
        samples,
    }
}

/// Opens a stream as the controller does (samples = 0, until it goes away).
async fn open(
    client: &mut AgentClient<Channel>,
) -> Result<tonic::Streaming<pb::MetricsSample>, tonic::Status> {
    Ok(client.metrics(request(MIN_INTERVAL, 0)).await?.into_inner())
}

/// Waits up to 5 s for the agent's streams in use to come down to `count`.
async fn until_in_use(count: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while STREAMS.in_use() != count {
        assert!(
            Instant::now() < deadline,
            "{} streams in use 5 s after their readers went away, expected {count}",
            STREAMS.in_use()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_identity_takes_more_than_its_share() {
    let _alone = STREAMS_COUNTED.lock().await;
    let state = tempfile::tempdir().expect("state dir");
    let stop = CancellationToken::new();
    let (agent, pki) = served_agent(state.path(), stop.clone()).await;
    let mut greedy = caller(agent, &pki, Role::Client, "greedy").await;
    let mut held = Vec::new();
    for stream in 0..MAX_STREAMS_PER_CLIENT {
        held.push(
            open(&mut greedy)
                .await
                .unwrap_or_else(|status| panic!("greedy's stream {stream} refused: {status}")),
        );
    }
    let refused = open(&mut greedy).await.expect_err("beyond greedy's share");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("the most one client may")
            && !refused.message().contains("greedy"),
        "{}",
        refused.message()
    );
    // Other identities still get streams, up to what clients may hold together...
    let mut others = Vec::new();
    for name in ["second", "third"] {
        let mut other = caller(agent, &pki, Role::Client, name).await;
        for _ in 0..MAX_STREAMS_PER_CLIENT {
            held.push(open(&mut other).await.expect("another identity's stream"));
        }
        others.push(other);
    }
    assert_eq!(STREAMS.in_use(), MAX_CLIENT_STREAMS);
    let mut fourth = caller(agent, &pki, Role::Client, "fourth").await;
    let refused = open(&mut fourth)
        .await
        .expect_err("beyond the clients' share");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // ...and the controller still gets the rest, so its cells record their broker's usage.
    let mut controller = caller(agent, &pki, Role::Controller, "controller").await;
    let mut controllers = Vec::new();
    for _ in MAX_CLIENT_STREAMS..MAX_STREAMS {
        controllers.push(
            open(&mut controller)
                .await
                .expect("the controller's stream"),
        );
    }
    // The readers go away: their streams end and give their slots back.
    drop(held);
    until_in_use(MAX_STREAMS - MAX_CLIENT_STREAMS).await;
    let mut again = open(&mut greedy).await.expect("greedy's share is back");
    let sample = tokio::time::timeout(Duration::from_secs(10), again.message())
        .await
        .expect("a sample within 10 s")
        .expect("a sample")
        .expect("the stream goes on");
    assert!(sample.processes[0].alive && sample.processes[0].pid == std::process::id());
    drop((again, controllers));
    until_in_use(0).await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_and_lengths_beyond_the_bounds_are_refused_naming_the_field() {
    let _alone = STREAMS_COUNTED.lock().await;
    let state = tempfile::tempdir().expect("state dir");
    let stop = CancellationToken::new();
    let (agent, pki) = served_agent(state.path(), stop.clone()).await;
    let mut client = caller(agent, &pki, Role::Client, "someone").await;
    let refusal = |request| {
        let mut client = client.clone();
        async move { client.metrics(request).await.expect_err("out of bounds") }
    };
    // Above an hour, up to the longest a request can carry (which panicked a task once).
    for interval in [
        MAX_INTERVAL + Duration::from_nanos(1),
        Duration::new(i64::MAX as u64, 999_999_999),
    ] {
        let refused = refusal(request(interval, 1)).await;
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(
            refused.message().starts_with("interval: ")
                && refused.message().contains("above the maximum of 3600s"),
            "{}",
            refused.message()
        );
    }
    // More samples than a day holds at the interval.
    let refused = refusal(request(MAX_INTERVAL, 25)).await;
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().starts_with("samples: "),
        "{}",
        refused.message()
    );
    assert_eq!(STREAMS.in_use(), 0, "a refused request holds no slot");
    // The longest accepted: the largest interval, 0 samples (a day's worth).
    let stream = client
        .metrics(request(MAX_INTERVAL, 0))
        .await
        .expect("an hour apart for a day");
    assert_eq!(STREAMS.in_use(), 1);
    drop(stream);
    until_in_use(0).await;
    stop.cancel();
}
