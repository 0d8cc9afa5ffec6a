//! Connecting: every connection of the shard, subscribers first, ramped up and with a bounded
//! number of handshakes at once; the connect times start the run's result.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::prepare::Run;
use super::state::{Phase, Role};
use crate::LoadgenError;
use crate::result::RunResult;
use crate::session::{self, ConnectFailure, Session, connect_fields};
use crate::spec::WorkloadSpec;
use crate::transport::Dialer;

/// Handshakes under way at once while connecting, so a broker's listen backlog is not flooded.
const CONCURRENT_HANDSHAKES: usize = 64;

/// A run's open connections, and the result their connect times started.
pub(super) struct Connected {
    /// The result so far: the shard, the clock's origin and the connect times.
    pub(super) result: RunResult,
    /// The subscribers' sessions (subscribed), by client id.
    pub(super) subscribers: Vec<(u32, Session)>,
    /// The publishers' sessions, by client id.
    pub(super) publishers: Vec<(u32, Session)>,
}

/// Opens the subscribers', then the publishers' connections; the first failure aborts.
pub(super) async fn connect(run: &Run<'_>) -> Result<Connected, LoadgenError> {
    run.status.update(|s| s.phase = Phase::Connecting);
    let mut result = RunResult::empty(run.spec, &run.run_id);
    result.shards.push(run.shard.clone());
    result.clock_origin_unix_ns = run.clock.origin_unix_ns();
    let subscribers = connect_all(
        run,
        Role::Subscriber,
        run.shard.subscribers.clone(),
        &mut result,
    )
    .await?;
    let publishers = connect_all(
        run,
        Role::Publisher,
        run.shard.publishers.clone(),
        &mut result,
    )
    .await?;
    Ok(Connected {
        result,
        subscribers,
        publishers,
    })
}

/// The client id of `role`'s client `id`: `{prefix}-{run id}-p{n}` or `...-s{n}`.
pub(super) fn client_id(spec: &WorkloadSpec, run_id: &str, role: Role, id: u32) -> String {
    let tag = match role {
        Role::Publisher => 'p',
        Role::Subscriber => 's',
    };
    format!("{}-{run_id}-{tag}{id}", spec.connection.client_id_prefix)
}

/// Opens the connections of `ids`, paced by the ramp-up rate; the first failure aborts.
async fn connect_all(
    run: &Run<'_>,
    role: Role,
    ids: std::ops::Range<u32>,
    result: &mut RunResult,
) -> Result<Vec<(u32, Session)>, LoadgenError> {
    let handshakes = Arc::new(Semaphore::new(CONCURRENT_HANDSHAKES));
    let mut pending = JoinSet::new();
    let ramp_start = Instant::now();
    let mut sessions = Vec::with_capacity(ids.len());
    for (n, id) in ids.clone().enumerate() {
        if let Some(rate) = run.spec.connection.ramp_up_per_second {
            let at = ramp_start + Duration::from_secs_f64(n as f64 / f64::from(rate));
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = run.cancel.cancelled() => return Err(LoadgenError::Cancelled),
            }
        }
        let permit = handshakes
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| LoadgenError::Internal(e.to_string()))?;
        let client_id = client_id(run.spec, &run.run_id, role, id);
        let subscription = match role {
            Role::Subscriber => Some((
                run.spec.subscription_of(&run.run_id, id),
                run.spec.subscription_qos(),
            )),
            Role::Publisher => None,
        };
        let (spec, dialer, codec) = (run.spec.clone(), run.dialer.clone(), run.codec);
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
            collect(&run.dialer, role, joined, result, &mut sessions)?;
        }
        run.status
            .update(|s| s.connected.0 = result.connect_time.len());
    }
    while let Some(joined) = tokio::select! {
        joined = pending.join_next() => joined,
        _ = run.cancel.cancelled() => return Err(LoadgenError::Cancelled),
    } {
        collect(&run.dialer, role, joined, result, &mut sessions)?;
    }
    run.status
        .update(|s| s.connected.0 = result.connect_time.len());
    Ok(sessions)
}

/// Records one finished handshake: its time and session, or the failure that aborts the run.
fn collect(
    dialer: &Dialer,
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
            address: dialer.address().to_string(),
            failure,
        }),
    }
}
