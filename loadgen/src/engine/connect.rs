//! Connecting: one preflight probe, then every connection of the shard, ramped up and with a
//! bounded number of handshakes at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Role, Status};
use crate::LoadgenError;
use crate::codec::{Codec, ConnectFields};
use crate::result::RunResult;
use crate::session::{self, ConnectFailure, Session};
use crate::spec::WorkloadSpec;
use crate::transport::Dialer;

/// Handshakes under way at once while connecting, so a broker's listen backlog is not flooded.
const CONCURRENT_HANDSHAKES: usize = 64;
/// The preflight probe gives up after this long, whatever the connect timeout.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection to check the broker answers MQTT before anything else happens, so a broker
/// that is down fails the run within seconds with one clear message.
pub(super) async fn preflight(
    dialer: &Dialer,
    codec: Codec,
    spec: &WorkloadSpec,
    run_id: &str,
) -> Result<(), LoadgenError> {
    let client_id = format!("{}-{run_id}-probe", spec.connection.client_id_prefix);
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

/// The CONNECT of `client_id`: every client of a run sends the same settings.
pub(crate) fn connect_fields<'a>(spec: &'a WorkloadSpec, client_id: &'a str) -> ConnectFields<'a> {
    ConnectFields {
        client_id,
        keep_alive_secs: u16::try_from(spec.connection.keep_alive.as_secs()).unwrap_or(u16::MAX),
        clean_session: spec.connection.clean_session,
        login: spec
            .broker
            .username
            .as_deref()
            .map(|user| (user, spec.broker.password.as_deref().unwrap_or(""))),
        max_packet_size: u32::try_from(spec.max_packet_bytes()).unwrap_or(u32::MAX),
    }
}

/// The client id of `role`'s client `id`: `{prefix}-{run id}-p{n}` or `...-s{n}`.
pub(super) fn client_id(spec: &WorkloadSpec, run_id: &str, role: Role, id: u32) -> String {
    let tag = match role {
        Role::Publisher => 'p',
        Role::Subscriber => 's',
    };
    format!("{}-{run_id}-{tag}{id}", spec.connection.client_id_prefix)
}

/// Opens a run's connections, one role at a time.
pub(super) struct Connector<'a> {
    /// The workload, for ramp-up, timeouts and topics.
    pub(super) spec: &'a WorkloadSpec,
    /// Part of every client id, so runs never share a session.
    pub(super) run_id: &'a str,
    /// Where the broker is.
    pub(super) dialer: &'a Dialer,
    /// The MQTT version's packets.
    pub(super) codec: Codec,
    /// Stops connecting early.
    pub(super) cancel: &'a CancellationToken,
}

impl Connector<'_> {
    /// Opens the connections of `ids`, paced by the ramp-up rate; the first failure aborts.
    pub(super) async fn connect_all(
        &self,
        role: Role,
        ids: std::ops::Range<u32>,
        result: &mut RunResult,
        status: &Option<watch::Sender<Status>>,
    ) -> Result<Vec<(u32, Session)>, LoadgenError> {
        let handshakes = Arc::new(Semaphore::new(CONCURRENT_HANDSHAKES));
        let mut pending = JoinSet::new();
        let ramp_start = Instant::now();
        let mut sessions = Vec::with_capacity(ids.len());
        for (n, id) in ids.clone().enumerate() {
            if let Some(rate) = self.spec.connection.ramp_up_per_second {
                let at = ramp_start + Duration::from_secs_f64(n as f64 / f64::from(rate));
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = self.cancel.cancelled() => return Err(LoadgenError::Cancelled),
                }
            }
            let permit = handshakes
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| LoadgenError::Internal(e.to_string()))?;
            let client_id = client_id(self.spec, self.run_id, role, id);
            let subscription = match role {
                Role::Subscriber => {
                    let publisher = self
                        .spec
                        .topology
                        .publishers_of(id, self.spec.publishers)
                        .start;
                    Some((self.spec.topic_of(self.run_id, publisher), self.spec.qos))
                }
                Role::Publisher => None,
            };
            let (spec, dialer, codec) = (self.spec.clone(), self.dialer.clone(), self.codec);
            pending.spawn(async move {
                let began = Instant::now();
                let fields = connect_fields(&spec, &client_id);
                let subscription = subscription
                    .as_ref()
                    .map(|(topic, qos)| (topic.as_str(), *qos));
                let opened = session::open(
                    &dialer,
                    codec,
                    &fields,
                    subscription,
                    spec.connection.connect_timeout,
                )
                .await;
                drop(permit);
                (id, began.elapsed(), opened)
            });
            // Collect finished handshakes as we go, so a failure stops the ramp early.
            while let Some(joined) = pending.try_join_next() {
                self.collect(role, joined, result, &mut sessions)?;
            }
            if let Some(sender) = status {
                sender.send_modify(|s| s.connected.0 = result.connect_time.len());
            }
        }
        while let Some(joined) = tokio::select! {
            joined = pending.join_next() => joined,
            _ = self.cancel.cancelled() => return Err(LoadgenError::Cancelled),
        } {
            self.collect(role, joined, result, &mut sessions)?;
        }
        if let Some(sender) = status {
            sender.send_modify(|s| s.connected.0 = result.connect_time.len());
        }
        Ok(sessions)
    }

    fn collect(
        &self,
        role: Role,
        joined: Result<(u32, Duration, Result<Session, ConnectFailure>), tokio::task::JoinError>,
        result: &mut RunResult,
        sessions: &mut Vec<(u32, Session)>,
    ) -> Result<(), LoadgenError> {
        let (id, elapsed, opened) =
            joined.map_err(|e| LoadgenError::Internal(format!("connect task: {e}")))?;
        match opened {
            Ok(session) => {
                result
                    .connect_time
                    .saturating_record(elapsed.as_nanos().max(1) as u64);
                sessions.push((id, session));
                Ok(())
            }
            Err(failure) => Err(LoadgenError::Connect {
                role,
                client: id,
                address: self.dialer.address().to_string(),
                failure,
            }),
        }
    }
}
