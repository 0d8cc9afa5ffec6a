//! The metrics listener: `GET /metrics` answers the page an [`Exposition`] renders, over
//! plain HTTP/1.1, one request per connection. Bounded everywhere, since anyone who
//! reaches the address can call it: a request head of at most 8 KiB read within 5 s, at most
//! 16 connections at once; anything but `GET /metrics` gets 404.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::Exposition;

/// The largest request head read.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request and read the answer.
const CLIENT_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once; more wait for a slot.
const MAX_CONNECTIONS: usize = 16;

/// A bound metrics listener and where it listens.
#[derive(Debug)]
pub struct MetricsListener {
    listener: TcpListener,
    /// The address bound (the port the system chose, when 0 was asked).
    pub address: SocketAddr,
}

impl MetricsListener {
    /// Binds `address`, or says why not naming `setting` (where the address was given).
    pub async fn bind(address: SocketAddr, setting: &str) -> Result<Self, String> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|error| format!("{setting} {address}: {error}"))?;
        let address = listener
            .local_addr()
            .map_err(|error| format!("{setting} {address}: {error}"))?;
        Ok(MetricsListener { listener, address })
    }
}

/// Serves `metrics` on `listener` until `stop` resolves.
pub async fn serve<M: Exposition + ?Sized>(
    listener: MetricsListener,
    metrics: Arc<M>,
    stop: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            accepted = listener.listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // A failed accept (out of descriptors) must not spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let slot = tokio::select! {
            () = &mut stop => return,
            slot = Arc::clone(&slots).acquire_owned() => slot,
        };
        let Ok(slot) = slot else {
            return;
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CLIENT_DEADLINE, answer(stream, metrics.as_ref())).await;
            drop(slot);
        });
    }
}

/// Reads one request head and answers it.
async fn answer<M: Exposition + ?Sized>(mut stream: TcpStream, metrics: &M) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = stream.read(&mut chunk).await?;
        if read == 0 || head.len() + read > MAX_REQUEST_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..read]);
    }
    let request_line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|b| *b == b' ');
    let (method, target) = (parts.next(), parts.next());
    let path = target.map(|t| t.split(|b| *b == b'?').next().unwrap_or_default());
    let (status, content_type, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render().await,
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "only GET /metrics is served here\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of one line.
    struct Fixed;

    impl Exposition for Fixed {
        fn render(&self) -> std::pin::Pin<Box<dyn Future<Output = String> + Send + '_>> {
            Box::pin(async { "continuum_test_value 1\n".to_string() })
        }
    }

    async fn get(address: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(address).await.expect("connected");
        stream.write_all(request.as_bytes()).await.expect("sent");
        let mut answer = Vec::new();
        // A server that stops reading may reset the connection: what came before counts.
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn metrics_are_served_and_nothing_else() {
        let listener = MetricsListener::bind("127.0.0.1:0".parse().expect("an address"), "test")
            .await
            .expect("bound");
        let address = listener.address;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(serve(listener, Arc::new(Fixed), async move {
            let _ = stopped.await;
        }));
        let answer = get(address, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.ends_with("\r\n\r\ncontinuum_test_value 1\n"),
            "{answer}"
        );
        let other = get(address, "GET /admin HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        // A head that never ends is cut off at the cap, unanswered.
        let flood = format!(
            "GET /metrics HTTP/1.1\r\nX: {}",
            "a".repeat(MAX_REQUEST_HEAD)
        );
        assert_eq!(get(address, &flood).await, "");
        let _ = stop.send(());
        serving.await.expect("the listener ends");
    }
}
