//! The runs a service knows and the queue that runs them one at a time.
//!
//! Every run keeps its whole event history (a few events per cell), so a Watch that starts
//! late replays it and then follows; a per-run `watch` channel carries a version number that
//! wakes followers whenever the history or state changes.
//!
//! Run ids are 128 random bits in hex, not a sequence, and a run that is not the caller's
//! is answered exactly like a missing one (NotFound, naming no one).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use proto::controller::v1 as pb;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use proto::pki::{PeerIdentity, Role};
use tracing::Instrument;

use super::config::{MAX_ACTIVE_PER_CLIENT, MAX_HISTORY_PER_CLIENT};
use crate::plan::Plan;

use crate::run::{RunCounts, RunEvent, RunOptions, event_channel, run_plan_observed};

/// The `error` of runs cancelled because the service stops.
const SHUTTING_DOWN: &str = "cancelled: the service is shutting down";

/// How long Cancel waits for a running run to undo netem and brokers before it answers.
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(120);

/// The registry of runs and the sender of the queue its worker reads.
#[derive(Debug)]
pub(crate) struct Runs {
    inner: Mutex<Inner>,
    queue: mpsc::UnboundedSender<String>,
    closing: CancellationToken,
}

#[derive(Debug, Default)]
struct Inner {
    runs: Vec<Run>,
}

/// Random bytes in a run id: 128 bits, so a client cannot guess another's run.
const RUN_ID_BYTES: usize = 16;

#[derive(Debug)]
struct Run {
    id: String,
    /// Who submitted it: only they (and the controller identity) may watch, fetch, cancel.
    owner: PeerIdentity,
    /// Where it writes: `<the service's results_dir>/<id>`.
    folder: PathBuf,
    plan: Arc<Plan>,
    text: Arc<str>,
    state: pb::RunState,
    counts: RunCounts,
    submitted_unix_ms: u64,
    started_unix_ms: u64,
    ended_unix_ms: u64,
    dir: Option<PathBuf>,
    error: String,
    cancel: CancellationToken,
    /// Who or what cancelled it, for its `error`.
    cancel_reason: String,
    events: Vec<pb::RunEvent>,
    version: watch::Sender<u64>,
}

impl Run {
    fn is_over(&self) -> bool {
        matches!(
            self.state,
            pb::RunState::Finished | pb::RunState::Failed | pb::RunState::Cancelled
        )
    }

    fn info(&self) -> pb::RunInfo {
        pb::RunInfo {
            id: self.id.clone(),
            plan_name: self.plan.name.clone(),
            state: self.state.into(),
            counts: Some(counts(&self.counts)),
            submitted_unix_ms: self.submitted_unix_ms,
            started_unix_ms: self.started_unix_ms,
            ended_unix_ms: self.ended_unix_ms,
            results_dir: self.dir_text(),
            error: self.error.clone(),
        }
    }

    fn dir_text(&self) -> String {
        self.dir
            .as_ref()
            .map(|dir| dir.display().to_string())
            .unwrap_or_default()
    }

    /// Appends an event and wakes followers.
    fn push(&mut self, event: pb::run_event::Event) {
        self.events.push(pb::RunEvent { event: Some(event) });
        self.version.send_modify(|v| *v += 1);
    }

    fn progress(&mut self) {
        let event = pb::run_event::Event::Progress(pb::RunProgress {
            state: self.state.into(),
            counts: Some(counts(&self.counts)),
        });
        self.push(event);
    }

    /// Sets a final state, stamps the end and appends the RunFinished event.
    fn end(&mut self, state: pb::RunState, error: String) {
        self.state = state;
        self.error = error;
        self.ended_unix_ms = now_ms();
        let event = pb::run_event::Event::Finished(pb::RunFinished {
            state: state.into(),
            counts: Some(counts(&self.counts)),
            results_dir: self.dir_text(),
            error: self.error.clone(),
        });
        self.push(event);
    }
}

/// What the worker needs to carry out a run.
struct Job {
    plan: Arc<Plan>,
    text: Arc<str>,
    folder: PathBuf,
    cancel: CancellationToken,
}

/// A snapshot for a follower: events from its position on, and whether the run is over.
pub(crate) struct Followed {
    pub(crate) events: Vec<pb::RunEvent>,
    pub(crate) over: bool,
}

/// A run id that is not known.
#[derive(Debug, thiserror::Error)]
#[error("no run {0:?} on this controller")]
pub(crate) struct UnknownRun(pub(crate) String);

/// Why a submission was not queued.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// The service is closing.
    #[error("the controller is shutting down")]
    ShuttingDown,
    /// The client has as many active runs as it may.
    #[error(
        "{0} of your runs are queued or running, at most {MAX_ACTIVE_PER_CLIENT}: wait for one to end or cancel one"
    )]
    TooMany(usize),
    /// No random run id could be drawn (`/dev/urandom` unreadable).
    #[error("cannot draw a run id from /dev/urandom: {0}")]
    NoRunId(#[source] std::io::Error),
}

/// Forgets `owner`'s oldest ended runs until fewer than [`MAX_HISTORY_PER_CLIENT`] remain.
fn forget_oldest_ended(runs: &mut Vec<Run>, owner: &PeerIdentity) {
    let ended = runs
        .iter()
        .filter(|run| run.owner == *owner && run.is_over())
        .count();
    let mut excess = (ended + 1).saturating_sub(MAX_HISTORY_PER_CLIENT);
    runs.retain(|run| {
        if excess > 0 && run.owner == *owner && run.is_over() {
            excess -= 1;
            false
        } else {
            true
        }
    });
}

impl Runs {
    /// A registry and the queue's receiving end, for [`worker`].
    pub(crate) fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<String>) {
        let (queue, receiver) = mpsc::unbounded_channel();
        let runs = Arc::new(Runs {
            inner: Mutex::new(Inner::default()),
            queue,
            closing: CancellationToken::new(),
        });
        (runs, receiver)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data; carry on with it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True once the service is shutting down.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Queues a plan the service admitted for `owner`; returns its run id. Refused while
    /// shutting down, or when `owner` already has [`MAX_ACTIVE_PER_CLIENT`] runs queued or
    /// running; the owner's oldest ended runs beyond [`MAX_HISTORY_PER_CLIENT`] are forgotten
    /// (their folders stay).
    pub(crate) fn submit(
        &self,
        plan: Plan,
        text: String,
        owner: PeerIdentity,
        results_root: &std::path::Path,
    ) -> Result<String, Refused> {
        if self.is_closing() {
            return Err(Refused::ShuttingDown);
        }
        let mut inner = self.lock();
        let active = inner
            .runs
            .iter()
            .filter(|run| run.owner == owner && !run.is_over())
            .count();
        if active >= MAX_ACTIVE_PER_CLIENT {
            return Err(Refused::TooMany(active));
        }
        // Random, not sequential: an id says nothing about other runs, and guessing one
        // of someone else's is hopeless (authorize() answers it like a missing one anyway).
        let id = host::secret::random_hex(RUN_ID_BYTES).map_err(Refused::NoRunId)?;
        forget_oldest_ended(&mut inner.runs, &owner);
        let mut run = Run {
            id: id.clone(),
            owner,
            folder: results_root.join(&id),
            counts: RunCounts {
                total: plan.cells().len(),
                ..RunCounts::default()
            },
            plan: Arc::new(plan),
            text: text.into(),
            state: pb::RunState::Queued,
            submitted_unix_ms: now_ms(),
            started_unix_ms: 0,
            ended_unix_ms: 0,
            dir: None,
            error: String::new(),
            cancel: self.closing.child_token(),
            cancel_reason: String::new(),
            events: Vec::new(),
            version: watch::Sender::new(0),
        };
        run.progress();
        inner.runs.push(run);
        drop(inner);
        // The receiver lives as long as the worker; once it is gone, close() has cancelled
        // everything queued, this one included (it was pushed before the send).
        if self.queue.send(id.clone()).is_err() {
            self.with_run(&id, |run| {
                if !run.is_over() {
                    run.end(pb::RunState::Cancelled, SHUTTING_DOWN.into());
                }
            });
        }
        Ok(id)
    }

    /// Whether `caller` may see and act on run `id`: its owner, or the controller identity.
    /// Someone else's run is answered exactly like a missing one, so a client learns neither
    /// that it exists nor whose it is; the service's log keeps the attempt.
    pub(crate) fn authorize(&self, id: &str, caller: &PeerIdentity) -> Result<(), UnknownRun> {
        let owner = self
            .with_run(id, |run| run.owner.clone())
            .ok_or_else(|| UnknownRun(id.to_string()))?;
        if owner == *caller || caller.role == Role::Controller {
            Ok(())
        } else {
            tracing::warn!(%caller, %owner, run = id, "refused: another identity's run");
            Err(UnknownRun(id.to_string()))
        }
    }

    fn with_run<T>(&self, id: &str, f: impl FnOnce(&mut Run) -> T) -> Option<T> {
        let mut inner = self.lock();
        inner.runs.iter_mut().find(|run| run.id == id).map(f)
    }

    /// The runs `caller` may see (the controller identity: all), oldest first.
    pub(crate) fn list(&self, caller: &PeerIdentity) -> Vec<pb::RunInfo> {
        self.lock()
            .runs
            .iter()
            .filter(|run| run.owner == *caller || caller.role == Role::Controller)
            .map(Run::info)
            .collect()
    }

    /// One run's info.
    pub(crate) fn info(&self, id: &str) -> Result<pb::RunInfo, UnknownRun> {
        self.with_run(id, |run| run.info())
            .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// The run's results folder, once it has one.
    pub(crate) fn results_dir(&self, id: &str) -> Result<Option<PathBuf>, UnknownRun> {
        self.with_run(id, |run| run.dir.clone())
            .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// A receiver of the run's version, to wait for changes.
    pub(crate) fn subscribe(&self, id: &str) -> Result<watch::Receiver<u64>, UnknownRun> {
        self.with_run(id, |run| run.version.subscribe())
            .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// Events from `from` on, and whether the run is over.
    pub(crate) fn follow(&self, id: &str, from: usize) -> Result<Followed, UnknownRun> {
        self.with_run(id, |run| Followed {
            events: run.events.get(from..).unwrap_or_default().to_vec(),
            over: run.is_over(),
        })
        .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// Cancels a run (`reason` says by whom): a queued one ends at once, a running one is
    /// told to stop; then waits (up to `wait`) for it to be over and answers its info.
    pub(crate) async fn cancel(
        &self,
        id: &str,
        reason: &str,
        wait: Duration,
    ) -> Result<pb::RunInfo, UnknownRun> {
        let mut version = self.subscribe(id)?;
        self.with_run(id, |run| match run.state {
            pb::RunState::Queued => {
                run.cancel.cancel();
                run.end(pb::RunState::Cancelled, format!("{reason} while queued"));
            }
            pb::RunState::Running if !run.cancel.is_cancelled() => {
                run.cancel_reason = reason.to_string();
                run.cancel.cancel();
            }
            _ => {}
        });
        let over = async {
            loop {
                if self.with_run(id, |run| run.is_over()).unwrap_or(true) {
                    break;
                }
                if version.changed().await.is_err() {
                    break;
                }
            }
        };
        if tokio::time::timeout(wait, over).await.is_err() {
            tracing::warn!(run = id, "cancel: the run has not ended yet");
        }
        self.info(id)
    }

    /// Shutting down: no new runs, every queued run cancelled, the running one told to stop.
    pub(crate) fn close(&self) {
        self.closing.cancel();
        let mut inner = self.lock();
        for run in inner.runs.iter_mut() {
            match run.state {
                pb::RunState::Queued => run.end(pb::RunState::Cancelled, SHUTTING_DOWN.into()),
                pb::RunState::Running if run.cancel_reason.is_empty() => {
                    run.cancel_reason = SHUTTING_DOWN.into();
                }
                _ => {}
            }
        }
    }

    /// Marks a queued run running and hands out what running it takes; None if it was
    /// cancelled meanwhile.
    fn begin(&self, id: &str) -> Option<Job> {
        self.with_run(id, |run| {
            if run.state != pb::RunState::Queued {
                return None;
            }
            run.state = pb::RunState::Running;
            run.started_unix_ms = now_ms();
            run.progress();
            Some(Job {
                plan: Arc::clone(&run.plan),
                text: Arc::clone(&run.text),
                folder: run.folder.clone(),
                cancel: run.cancel.clone(),
            })
        })
        .flatten()
    }

    fn on_event(&self, id: &str, event: RunEvent) {
        self.with_run(id, |run| match event {
            RunEvent::Started { dir, total } => {
                run.counts.total = total;
                run.dir = Some(dir);
                let event = pb::run_event::Event::Started(pb::RunStarted {
                    results_dir: run.dir_text(),
                    total_cells: saturate(total),
                });
                run.push(event);
            }
            RunEvent::Cell {
                id,
                status,
                note,
                counts: now,
            } => {
                run.counts = now;
                let event = pb::run_event::Event::Cell(pb::CellFinished {
                    id,
                    status: status.as_str().to_string(),
                    note,
                    counts: Some(counts(&now)),
                });
                run.push(event);
            }
            // The watch protocol carries starts and cells; the rest (nodes, brokers, netem,
            // undo, report) are in the service's log under the run's span.
            _ => {}
        });
    }

    fn finish(&self, id: &str, outcome: Outcome) {
        self.with_run(id, |run| {
            let cancelled = run.cancel.is_cancelled();
            let reason = if run.cancel_reason.is_empty() {
                "cancelled".to_string()
            } else {
                run.cancel_reason.clone()
            };
            let (state, error) = match outcome {
                Outcome::Ran(summary) => {
                    run.counts.measured = summary.measured;
                    run.counts.failed = summary.failed;
                    run.counts.skipped = summary.skipped;
                    run.dir = Some(summary.dir);
                    if cancelled && summary.interrupted {
                        (pb::RunState::Cancelled, reason)
                    } else if summary.interrupted {
                        (
                            pb::RunState::Failed,
                            "stopped after a failed cell (on_failure = \"stop\")".to_string(),
                        )
                    } else {
                        (pb::RunState::Finished, String::new())
                    }
                }
                Outcome::Error(error) if cancelled => {
                    (pb::RunState::Cancelled, format!("{reason}; {error}"))
                }
                Outcome::Error(error) => (pb::RunState::Failed, error),
            };
            run.end(state, error);
        });
    }
}

enum Outcome {
    Ran(crate::run::RunSummary),
    Error(String),
}

/// Runs queued plans one at a time until the service closes (after the run in progress, if
/// any, has undone its netem and brokers).
pub(crate) async fn worker(runs: Arc<Runs>, mut queue: mpsc::UnboundedReceiver<String>) {
    let mut last_start_secs = 0;
    loop {
        let id = tokio::select! {
            biased;
            _ = runs.closing.cancelled() => break,
            id = queue.recv() => match id {
                Some(id) => id,
                None => break,
            },
        };
        let Some(job) = runs.begin(&id) else {
            continue;
        };
        // Results are the submitter's: the runs' root is closed to other users of the
        // machine, and each run's folder and files, created in it, are 0700 and 0600.
        if let Some(root) = job.folder.parent()
            && let Err(error) = crate::results::close_to_others(root)
        {
            runs.finish(&id, Outcome::Error(error.to_string()));
            continue;
        }
        // A run's folder is named after the plan and the second it starts: two runs of one
        // plan must not start within the same second, or the second would find the first's
        // cells "finished".
        let now_secs = now_ms() / 1_000;
        if now_secs == last_start_secs {
            tokio::time::sleep(Duration::from_millis(1_000 - now_ms() % 1_000 + 10)).await;
        }
        last_start_secs = now_ms() / 1_000;
        tracing::info!(run = %id, plan = %job.plan.name, "run started");
        let (events, mut received) = event_channel();
        let span = tracing::info_span!("run", run = %id);
        let task = tokio::spawn(
            async move {
                let options = RunOptions {
                    folder: Some(job.folder),
                    ..RunOptions::default()
                };
                run_plan_observed(&job.plan, &job.text, options, job.cancel, Some(events)).await
            }
            .instrument(span),
        );
        // The channel closes when the run's future (and with it the sender) is done.
        while let Some(event) = received.recv().await {
            runs.on_event(&id, event);
        }
        let outcome = match task.await {
            Ok(Ok(summary)) => Outcome::Ran(summary),
            Ok(Err(error)) => Outcome::Error(error.to_string()),
            Err(error) => Outcome::Error(format!("the run stopped abnormally: {error}")),
        };
        runs.finish(&id, outcome);
        if let Ok(info) = runs.info(&id) {
            tracing::info!(
                run = %id,
                state = info.state().as_str_name(),
                error = %info.error,
                "run ended"
            );
        }
    }
    // Anything still queued ends as cancelled (close() did it; this covers a closed queue).
    runs.close();
}

fn counts(counts: &RunCounts) -> pb::Counts {
    pb::Counts {
        total: saturate(counts.total),
        done: saturate(counts.done),
        measured: saturate(counts.measured),
        failed: saturate(counts.failed),
        skipped: saturate(counts.skipped),
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Unix ms now, on this machine's clock.
pub(crate) fn now_ms() -> u64 {
    loadgen::clock::unix_now_ns() / 1_000_000
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const PLAN: &str = r#"name = "p"
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
kind = "latency"
loadgen = ["local"]
"#;

    fn client(name: &str) -> PeerIdentity {
        PeerIdentity {
            role: Role::Client,
            name: name.into(),
        }
    }

    fn submit(runs: &Runs, owner: &PeerIdentity) -> String {
        let plan = Plan::parse(PLAN, "p.toml").expect("a valid plan");
        runs.submit(plan, PLAN.into(), owner.clone(), Path::new("/srv/results"))
            .expect("queued")
    }

    #[test]
    fn run_ids_are_random_128_bit_hex_not_a_sequence() {
        let (runs, _queue) = Runs::new();
        let laptop = client("laptop");
        let first = submit(&runs, &laptop);
        let second = submit(&runs, &laptop);
        for id in [&first, &second] {
            assert_eq!(id.len(), 2 * RUN_ID_BYTES, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        assert_ne!(first, second);
        assert_ne!(first, "r1");
    }

    #[test]
    fn another_clients_run_is_answered_like_a_missing_one_naming_no_one() {
        let (runs, _queue) = Runs::new();
        let laptop = client("laptop");
        let id = submit(&runs, &laptop);
        assert!(runs.authorize(&id, &laptop).is_ok());
        let admin = PeerIdentity {
            role: Role::Controller,
            name: "controller".into(),
        };
        assert!(runs.authorize(&id, &admin).is_ok());

        let foreign = runs
            .authorize(&id, &client("tablet"))
            .expect_err("not the tablet's run")
            .to_string();
        assert!(!foreign.contains("laptop"), "{foreign}");
        let missing = "0".repeat(2 * RUN_ID_BYTES);
        let unknown = runs
            .authorize(&missing, &client("tablet"))
            .expect_err("no such run")
            .to_string();
        // The same sentence but for the id the caller itself sent.
        assert_eq!(foreign.replace(&id, "ID"), unknown.replace(&missing, "ID"));
    }
}
