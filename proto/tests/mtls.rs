//! mTLS end to end: real rustls, real tonic, the conformance service `continuum.testing.v1.Ping`
//! on 127.0.0.1 (port 0). Shows that only certificates from the project CA, within their
//! validity, get a request through, and that the controller alone may mutate.

use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use tonic::{Code, Request, Response, Status};

use proto::mtls::{Credentials, MtlsError, require_role};
use proto::pki::{
    CA_CERT_FILE, CA_KEY_FILE, CertificateAuthority, IdentitySpec, IssuedIdentity, Overwrite, Role,
    key_path, write_pki,
};
use proto::testing::v1::ping_client::PingClient;
use proto::testing::v1::ping_server::{Ping, PingServer};
use proto::testing::v1::{MutateReply, MutateRequest, PingReply, PingRequest};

/// Bounds every network step, so a broken handshake fails the test instead of hanging it.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The conformance service with the agent's policy: controller and agents read, only the
/// controller mutates.
#[derive(Debug, Default)]
struct PingService {
    /// Requests that reached a handler, allowed or not: stays 0 when TLS refuses the peer.
    handled: Arc<AtomicU64>,
    counter: AtomicU64,
}

#[tonic::async_trait]
impl Ping for PingService {
    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
        self.handled.fetch_add(1, Ordering::SeqCst);
        let caller = require_role(&request, &[Role::Controller, Role::Agent])?;
        Ok(Response::new(PingReply {
            payload: request.into_inner().payload,
            caller_role: caller.role.to_string(),
            caller_name: caller.name,
        }))
    }

    async fn mutate(
        &self,
        request: Request<MutateRequest>,
    ) -> Result<Response<MutateReply>, Status> {
        self.handled.fetch_add(1, Ordering::SeqCst);
        require_role(&request, &[Role::Controller])?;
        let increment = request.into_inner().increment;
        let counter = self.counter.fetch_add(increment, Ordering::SeqCst) + increment;
        Ok(Response::new(MutateReply { counter }))
    }
}

/// A PKI in a temporary directory: the CA, agent `worker-1` serving on 127.0.0.1, agent
/// `worker-2`, the controller and a laptop client, all written to disk.
struct Testbed {
    /// Keeps the temporary root alive; the PKI is in its `pki` subdirectory, which
    /// `write_pki` creates.
    _root: tempfile::TempDir,
    dir: PathBuf,
    ca: CertificateAuthority,
}

impl Testbed {
    fn new() -> Result<Self> {
        let root = tempfile::tempdir()?;
        let dir = root.path().join("pki");
        let ca = CertificateAuthority::generate("Continuum test CA")?;
        let identities = [
            IdentitySpec::new(Role::Agent, "worker-1").with_ip_address(LOOPBACK),
            IdentitySpec::new(Role::Agent, "worker-2").with_ip_address(LOOPBACK),
            IdentitySpec::new(Role::Controller, "controller"),
            IdentitySpec::new(Role::Client, "laptop"),
        ]
        .iter()
        .map(|spec| ca.issue(spec))
        .collect::<Result<Vec<_>, _>>()?;
        write_pki(&dir, &ca, &identities, Overwrite::Refuse)?;
        Ok(Self {
            _root: root,
            dir,
            ca,
        })
    }

    fn credentials(&self, name: &str) -> Result<Credentials> {
        Ok(Credentials::load(&self.dir, name)?)
    }

    fn client_tls(&self, name: &str) -> Result<ClientTlsConfig> {
        Ok(self.credentials(name)?.client_tls())
    }

    /// Trusts this testbed's CA but presents `identity`, whatever issued it.
    fn client_tls_presenting(&self, identity: &IssuedIdentity) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.ca.cert_pem()))
            .identity(Identity::from_pem(&identity.cert_pem, &identity.key_pem))
    }

    /// Serves `worker-1`'s conformance service.
    async fn serve_worker(&self) -> Result<TestServer> {
        TestServer::start(self.credentials("worker-1")?.server_tls()?).await
    }
}

struct TestServer {
    port: u16,
    handled: Arc<AtomicU64>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl TestServer {
    /// Binds 127.0.0.1:0 first, so the port is known and accepting before any client dials.
    async fn start(tls: ServerTlsConfig) -> Result<Self> {
        let listener = TcpListener::bind((LOOPBACK, 0)).await?;
        let port = listener.local_addr()?.port();
        let service = PingService::default();
        let handled = service.handled.clone();
        let (shutdown, stopped) = oneshot::channel::<()>();
        let router = Server::builder()
            .tls_config(tls)?
            .add_service(PingServer::new(service));
        let task = tokio::spawn(router.serve_with_incoming_shutdown(
            TcpIncoming::from(listener),
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            port,
            handled,
            shutdown: Some(shutdown),
            task,
        })
    }

    fn handled(&self) -> u64 {
        self.handled.load(Ordering::SeqCst)
    }

    async fn connect(&self, tls: ClientTlsConfig) -> Result<PingClient<Channel>> {
        let endpoint =
            Endpoint::from_shared(format!("https://{LOOPBACK}:{}", self.port))?.tls_config(tls)?;
        let channel = tokio::time::timeout(STEP_TIMEOUT, endpoint.connect())
            .await
            .context("connect timed out")??;
        Ok(PingClient::new(channel))
    }

    async fn ping(&self, tls: ClientTlsConfig) -> Result<Result<PingReply, Status>> {
        let mut client = self.connect(tls).await?;
        let request = PingRequest {
            payload: "hello".into(),
        };
        let reply = tokio::time::timeout(STEP_TIMEOUT, client.ping(request))
            .await
            .context("ping timed out")?;
        Ok(reply.map(Response::into_inner))
    }

    async fn mutate(&self, tls: ClientTlsConfig, increment: u64) -> Result<Result<u64, Status>> {
        let mut client = self.connect(tls).await?;
        let reply = tokio::time::timeout(STEP_TIMEOUT, client.mutate(MutateRequest { increment }))
            .await
            .context("mutate timed out")?;
        Ok(reply.map(|reply| reply.into_inner().counter))
    }

    /// Asserts that a ping with `tls` fails before reaching the service: the handshake or the
    /// connection fails, no handler runs, and the error is not an application status
    /// (PermissionDenied, Unauthenticated) but the transport's. Returns the error chain.
    async fn assert_refused_by_tls(&self, tls: ClientTlsConfig) -> Result<String> {
        let before = self.handled();
        let chain = match self.ping(tls).await {
            Ok(Ok(reply)) => bail!("the call went through: {reply:?}"),
            Ok(Err(status)) => {
                if matches!(
                    status.code(),
                    Code::PermissionDenied | Code::Unauthenticated
                ) {
                    bail!("refused by the handler, not by TLS: {status:?}");
                }
                error_chain(&status)
            }
            Err(connect) => format!("{connect:#}"),
        };
        assert_eq!(self.handled(), before, "a handler ran: {chain}");
        Ok(chain)
    }

    async fn stop(mut self) -> Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        tokio::time::timeout(STEP_TIMEOUT, &mut self.task)
            .await
            .context("server did not stop")???;
        Ok(())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    chain
}

#[tokio::test]
async fn controller_identity_may_read_and_mutate() -> Result<()> {
    let testbed = Testbed::new()?;
    let server = testbed.serve_worker().await?;

    let reply = server.ping(testbed.client_tls("controller")?).await??;
    assert_eq!(reply.payload, "hello");
    assert_eq!(
        (reply.caller_role.as_str(), reply.caller_name.as_str()),
        ("controller", "controller")
    );
    assert_eq!(
        server
            .mutate(testbed.client_tls("controller")?, 5)
            .await??,
        5
    );
    server.stop().await
}

#[tokio::test]
async fn agent_identity_may_read_but_not_mutate() -> Result<()> {
    let testbed = Testbed::new()?;
    let server = testbed.serve_worker().await?;

    let reply = server.ping(testbed.client_tls("worker-2")?).await??;
    assert_eq!(
        (reply.caller_role.as_str(), reply.caller_name.as_str()),
        ("agent", "worker-2")
    );

    let denied = server
        .mutate(testbed.client_tls("worker-2")?, 7)
        .await?
        .expect_err("an agent must not mutate");
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(
        denied.message(),
        r#"agent "worker-2" may not call this RPC: it requires role controller"#
    );
    // Nothing changed: the controller's first increment starts from zero.
    assert_eq!(
        server
            .mutate(testbed.client_tls("controller")?, 1)
            .await??,
        1
    );
    server.stop().await
}

#[tokio::test]
async fn remote_client_identity_is_denied_agent_reads() -> Result<()> {
    let testbed = Testbed::new()?;
    let server = testbed.serve_worker().await?;
    let denied = server
        .ping(testbed.client_tls("laptop")?)
        .await?
        .expect_err("a laptop does not talk to agents");
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(
        denied.message().starts_with(r#"client "laptop""#),
        "{denied:?}"
    );
    server.stop().await
}

#[tokio::test]
async fn client_without_certificate_is_refused_by_tls() -> Result<()> {
    let testbed = Testbed::new()?;
    let server = testbed.serve_worker().await?;
    let anonymous =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(testbed.ca.cert_pem()));
    let chain = server.assert_refused_by_tls(anonymous).await?;
    assert!(chain.contains("CertificateRequired"), "{chain}");
    server.stop().await
}

#[tokio::test]
async fn certificate_from_another_ca_is_refused_by_tls() -> Result<()> {
    let testbed = Testbed::new()?;
    let server = testbed.serve_worker().await?;
    // Same role and name as the real controller, issued by an impostor CA: one with a name of
    // its own (rustls finds no issuer) and one copying the real CA's name (rustls finds the
    // issuer by name, then the signature does not verify).
    for (impostor_name, alert) in [
        ("Impostor CA", "UnknownCA"),
        ("Continuum test CA", "DecryptError"),
    ] {
        let impostor_ca = CertificateAuthority::generate(impostor_name)?;
        let impostor = impostor_ca.issue(&IdentitySpec::new(Role::Controller, "controller"))?;
        let chain = server
            .assert_refused_by_tls(testbed.client_tls_presenting(&impostor))
            .await?;
        assert!(chain.contains(alert), "{impostor_name}: {chain}");

        // Credentials refuse the mix before any connection is made.
        let mixed = Credentials::new(testbed.ca.cert_pem().to_owned(), impostor, "testbed ca.pem");
        assert!(
            matches!(mixed, Err(MtlsError::NotIssuedByCa { .. })),
            "{mixed:?}"
        );
    }
    server.stop().await
}

#[tokio::test]
async fn expired_certificate_is_refused_by_tls() -> Result<()> {
    let testbed = Testbed::new()?;
    let server = testbed.serve_worker().await?;
    let day = Duration::from_secs(24 * 3600);
    let now = SystemTime::now();
    let expired = testbed.ca.issue(
        &IdentitySpec::new(Role::Controller, "controller").valid_between(now - 2 * day, now - day),
    )?;
    let chain = server
        .assert_refused_by_tls(testbed.client_tls_presenting(&expired))
        .await?;
    assert!(chain.contains("CertificateExpired"), "{chain}");

    // The same CA, role and name within validity get through: expiry alone was refused.
    server.ping(testbed.client_tls("controller")?).await??;
    server.stop().await
}

#[tokio::test]
async fn clients_refuse_a_server_from_another_ca() -> Result<()> {
    let testbed = Testbed::new()?;
    let impostor_ca = CertificateAuthority::generate("Continuum test CA")?;
    let impostor =
        impostor_ca.issue(&IdentitySpec::new(Role::Agent, "worker-1").with_ip_address(LOOPBACK))?;
    let impostor_dir = tempfile::tempdir()?;
    write_pki(
        impostor_dir.path(),
        &impostor_ca,
        &[impostor],
        Overwrite::Refuse,
    )?;
    let server =
        TestServer::start(Credentials::load(impostor_dir.path(), "worker-1")?.server_tls()?)
            .await?;

    let error = server
        .ping(testbed.client_tls("controller")?)
        .await
        .expect_err("the client must not accept the impostor");
    // The impostor CA copies the real CA's name, so the signature check is what fails.
    assert!(format!("{error:#}").contains("BadSignature"), "{error:#}");
    assert_eq!(server.handled(), 0);
    server.stop().await
}

#[tokio::test]
async fn server_names_are_checked_and_can_be_overridden() -> Result<()> {
    let testbed = Testbed::new()?;
    // A server certificate for a DNS name only: dialing 127.0.0.1 does not match it.
    let named = testbed
        .ca
        .issue(&IdentitySpec::new(Role::Agent, "named").with_dns_name("worker-3.testbed"))?;
    named.write(&testbed.dir, Overwrite::Refuse)?;
    let server = TestServer::start(testbed.credentials("named")?.server_tls()?).await?;

    let error = server
        .ping(testbed.client_tls("controller")?)
        .await
        .expect_err("127.0.0.1 is not in the certificate");
    assert!(
        format!("{error:#}").contains(r#"not valid for name "127.0.0.1""#),
        "{error:#}"
    );

    let overridden = testbed
        .client_tls("controller")?
        .domain_name("worker-3.testbed");
    server.ping(overridden).await??;
    server.stop().await
}

/// A channel from `connect_pinned` expecting `role`, pinging once: the reply or the error
/// chain of the connection.
async fn ping_pinned(
    credentials: &Credentials,
    port: u16,
    role: Role,
) -> Result<std::result::Result<PingReply, String>> {
    let address = format!("{LOOPBACK}:{port}");
    let connect = credentials.connect_pinned(&address, None, role, |endpoint| {
        endpoint.connect_timeout(STEP_TIMEOUT)
    });
    let channel = match tokio::time::timeout(STEP_TIMEOUT, connect).await? {
        Ok(channel) => channel,
        Err(error) => return Ok(Err(error_chain(&error))),
    };
    let request = PingRequest {
        payload: "hello".into(),
    };
    let reply = tokio::time::timeout(STEP_TIMEOUT, PingClient::new(channel).ping(request)).await?;
    Ok(Ok(reply?.into_inner()))
}

#[tokio::test]
async fn pinned_clients_refuse_a_server_of_another_role() -> Result<()> {
    let testbed = Testbed::new()?;
    // A controller certificate valid for 127.0.0.1: it chains to the CA and matches the name,
    // so only the role tells it from an agent.
    let controller = testbed
        .ca
        .issue(&IdentitySpec::new(Role::Controller, "serving").with_ip_address(LOOPBACK))?;
    controller.write(&testbed.dir, Overwrite::Refuse)?;
    let as_controller = TestServer::start(testbed.credentials("serving")?.server_tls()?).await?;
    let as_agent = testbed.serve_worker().await?;
    let caller = testbed.credentials("controller")?;

    let refused = ping_pinned(&caller, as_controller.port, Role::Agent)
        .await?
        .expect_err("an agent client must not accept a controller");
    assert!(
        refused.contains("the server is controller \"serving\", not an identity of role agent"),
        "{refused}"
    );
    assert_eq!(
        as_controller.handled(),
        0,
        "a request reached the controller"
    );
    let refused = ping_pinned(&caller, as_agent.port, Role::Controller)
        .await?
        .expect_err("a controller client must not accept an agent");
    assert!(
        refused.contains("the server is agent \"worker-1\", not an identity of role controller"),
        "{refused}"
    );
    assert_eq!(as_agent.handled(), 0, "a request reached the agent");

    // The expected roles get through, over the same CA and names.
    let reply = ping_pinned(&caller, as_agent.port, Role::Agent).await?;
    assert_eq!(reply.map_err(anyhow::Error::msg)?.caller_name, "controller");
    let reply = ping_pinned(&caller, as_controller.port, Role::Controller).await?;
    assert_eq!(reply.map_err(anyhow::Error::msg)?.payload, "hello");
    as_controller.stop().await?;
    as_agent.stop().await
}

#[test]
fn a_client_identity_cannot_serve() -> Result<()> {
    let testbed = Testbed::new()?;
    let error = testbed
        .credentials("laptop")?
        .server_tls()
        .expect_err("client certificates are not server certificates");
    assert!(matches!(error, MtlsError::NotAServer(_)), "{error}");
    Ok(())
}

#[test]
fn keys_on_disk_are_private() -> Result<()> {
    let testbed = Testbed::new()?;
    let dir = testbed.dir.as_path();
    let mode = |path: &Path| -> Result<u32> {
        Ok(std::fs::metadata(path)
            .with_context(|| path.display().to_string())?
            .permissions()
            .mode()
            & 0o777)
    };
    assert_eq!(mode(dir)?, 0o700);
    assert_eq!(mode(&dir.join(CA_KEY_FILE))?, 0o600);
    assert_eq!(mode(&dir.join(CA_CERT_FILE))?, 0o644);
    for name in ["worker-1", "worker-2", "controller", "laptop"] {
        assert_eq!(mode(&key_path(dir, name))?, 0o600, "{name}.key");
    }
    Ok(())
}
