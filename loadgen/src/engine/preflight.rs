//! Preflight: one connection to check the broker answers MQTT before anything else happens,
//! and the broker's process when it runs on this host, so its CPU is sampled beside ours.

use std::time::Duration;

use super::prepare::Run;
use crate::LoadgenError;
use crate::local_broker::{Listener, LocalBroker};
use crate::session;
use crate::session::connect_fields;
use crate::spec::Transport;

/// The preflight probe gives up after this long, whatever the connect timeout.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// Probes the broker, then looks for its process on this host.
pub(super) async fn preflight(run: &Run<'_>) -> Result<Option<LocalBroker>, LoadgenError> {
    probe(run).await?;
    let (host, port) = (run.spec.broker.host.clone(), run.spec.broker.port);
    let listener = match run.spec.broker.transport {
        Transport::Quic => Listener::Udp,
        Transport::Tcp | Transport::WebSocket => Listener::Tcp,
    };
    Ok(
        tokio::task::spawn_blocking(move || crate::local_broker::find(&host, port, listener))
            .await
            .ok()
            .flatten(),
    )
}

/// One connection, closed cleanly, so a broker that is down fails the run within seconds with
/// one clear message.
async fn probe(run: &Run<'_>) -> Result<(), LoadgenError> {
    let (spec, dialer, codec) = (run.spec, &run.dialer, run.codec);
    let client_id = format!("{}-{}-probe", spec.connection.client_id_prefix, run.run_id);
    let fields = connect_fields(spec, &client_id);
    let deadline = spec.connection.connect_timeout.min(PREFLIGHT_TIMEOUT);
    let mut probe = session::open(dialer, codec, &fields, None, deadline)
        .await
        .map_err(|failure| LoadgenError::BrokerUnreachable {
            address: dialer.address().to_string(),
            failure,
        })?;
    let mut goodbye = bytes::BytesMut::new();
    if codec.disconnect(&mut goodbye).is_ok() {
        use tokio::io::AsyncWriteExt;
        let _ = probe.writer.write_all(&goodbye).await;
        let _ = probe.writer.shutdown().await;
    }
    Ok(())
}
