//! Publishing: the publisher tasks (released by a pacer thread in an open loop) send the run's
//! messages from the start barrier; the phase ends when the last publisher has finished.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::prepare::{Run, StatusFeed};
use super::start::{Started, Timing};
use super::state::{Phase, Role};
use crate::LoadgenError;
use crate::codec::PublishExtras;
use crate::live::Live;
use crate::pacer::{self, PacedPublisher, Release};
use crate::publisher::{self, PublisherJob, PublisherOutcome, PublisherPacing};
use crate::reconnect::Reconnector;
use crate::session::Session;
use crate::usage::Scope;

/// The pacer thread of an open-loop run and the token that stops it.
struct Pacer {
    thread: std::thread::JoinHandle<()>,
    stop: CancellationToken,
}

/// Runs every publisher to its end and stops the pacer; returns what each publisher did.
pub(super) async fn publish(
    run: &Run<'_>,
    started: &Started,
    sessions: Vec<(u32, Session)>,
) -> Result<Vec<PublisherOutcome>, LoadgenError> {
    run.status.update(|s| s.phase = Phase::Publishing);
    let (publishers, pacer) =
        start_publishers(run, &started.timing, sessions, started.reconnector.as_ref())?;
    let outcomes = await_publishers(publishers, &run.live, &run.status).await?;
    if let Some(Pacer { thread, stop }) = pacer {
        stop.cancel();
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
    Ok(outcomes)
}

/// Spawns one task per publisher session and, for an open loop, the pacer that releases them.
fn start_publishers(
    run: &Run<'_>,
    timing: &Timing,
    sessions: Vec<(u32, Session)>,
    reconnector: Option<&Arc<Reconnector>>,
) -> Result<(JoinSet<PublisherOutcome>, Option<Pacer>), LoadgenError> {
    let (spec, run_id, live, cancel) = (run.spec, run.run_id.as_str(), &run.live, &run.cancel);
    let header = spec.header_encoding();
    let payload_len =
        usize::try_from(spec.payload.bytes()).map_err(|e| LoadgenError::Internal(e.to_string()))?;
    // The payload is the header and zeros, or zeros alone when the header is a property.
    let in_payload = if spec.header_in.is_property() {
        0
    } else {
        header.len()
    };
    let padding: Arc<[u8]> = vec![0u8; payload_len - in_payload].into();
    let mut paced = Vec::new();
    let mut tasks = JoinSet::new();
    let mut sessions = sessions;
    sessions.sort_by_key(|(id, _)| *id);
    for (id, session) in sessions {
        let topic = spec.topic_of(run_id, id);
        // A topic alias only where the broker's CONNACK allows one (MQTT 5's default: none).
        let aliased = spec.connection.topic_alias
            && session
                .limits
                .topic_alias_maximum
                .is_some_and(|most| most >= 1);
        let extras = PublishExtras {
            expiry_secs: spec.message_expiry_secs(),
            header_property: spec.header_in.is_property(),
        };
        let template = if aliased {
            run.codec
                .aliased_publish_template(&topic, spec.qos, payload_len, 1, extras)
        } else {
            run.codec
                .publish_template_with(&topic, spec.qos, payload_len, extras)
        }
        .map_err(|e| LoadgenError::Internal(e.to_string()))?;
        let alias_refused = spec.connection.topic_alias && !aliased;
        let template = if spec.retain.is_some() {
            template.retained()
        } else {
            template
        };
        let pacing = match spec.schedule_of(id) {
            None => PublisherPacing::Flat {
                start_ns: timing.start_ns(),
            },
            Some(schedule) => {
                let schedule = schedule.starting_at(timing.start_ns());
                let release = Arc::new(Release::default());
                paced.push(PacedPublisher {
                    schedule,
                    release: release.clone(),
                });
                PublisherPacing::OpenLoop { schedule, release }
            }
        };
        let job = PublisherJob {
            id,
            template,
            header,
            padding: padding.clone(),
            messages: timing.messages_of(spec, id),
            end_ns: timing.end_ns,
            warmup: timing.warmup,
            qos: spec.qos,
            inflight: spec.connection.inflight,
            keep_alive: spec.connection.keep_alive,
            drain_timeout: spec.drain.timeout,
            pacing,
            credit: live.credits.get(id as usize).map(|credit| {
                let fanout = run.routing.fanout_of(id);
                (credit.clone(), fanout)
            }),
            credit_timeout: spec.drain.idle,
            clock: run.clock,
            live: live.clone(),
            cancel: cancel.clone(),
            reconnect: reconnector.map(|reconnector| publisher::Reconnecting {
                reconnector: reconnector.clone(),
                client_id: super::connect::client_id(spec, run_id, Role::Publisher, id),
            }),
            alias_refused,
        };
        tasks.spawn(publisher::run(session, job));
    }
    let pacer = if paced.is_empty() {
        None
    } else {
        Some(start_pacer(run, timing, paced)?)
    };
    Ok((tasks, pacer))
}

/// The thread that releases the open loop's publishers on schedule, on the run's CPU scope.
fn start_pacer(
    run: &Run<'_>,
    timing: &Timing,
    paced: Vec<PacedPublisher>,
) -> Result<Pacer, LoadgenError> {
    let token = run.cancel.child_token();
    let threads = match &run.scope {
        Scope::Threads(threads) => Some(threads.clone()),
        Scope::Process => None,
    };
    let resolution = pacer::Resolution::of(&run.spec.pacing);
    let handle = pacer::spawn(
        run.clock,
        paced,
        timing.end_ns,
        resolution,
        token.clone(),
        threads,
    )
    .map_err(|e| LoadgenError::Internal(format!("pacer thread: {e}")))?;
    Ok(Pacer {
        thread: handle,
        stop: token,
    })
}

/// Waits for every publisher to finish, updating the progress display meanwhile.
async fn await_publishers(
    mut tasks: JoinSet<PublisherOutcome>,
    live: &Live,
    status: &StatusFeed,
) -> Result<Vec<PublisherOutcome>, LoadgenError> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    let mut ticker = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(joined) => outcomes.push(joined.map_err(|e| LoadgenError::Internal(format!("publisher task: {e}")))?),
                None => return Ok(outcomes),
            },
            _ = ticker.tick() => status.update(|s| s.progress = live.progress()),
        }
    }
}
