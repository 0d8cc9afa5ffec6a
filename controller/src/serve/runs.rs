//! The runs a service knows and the queue that runs them one at a time.
//!
//! A run's state is Rust: [`RunState`] (queued, running, ended with an [`Outcome`]), times
//! as [`SystemTime`], a folder as `Option<PathBuf>`; `convert.rs` turns it into the
//! protocol's messages only where the service answers.
//!
//! Every run keeps its whole history of [`Update`]s (a few per cell), so a Watch that starts
//! late replays it and then follows; a per-run `watch` channel carries a version number that
//! wakes followers whenever the history or state changes.
//!
//! Run ids are 128 random bits in hex, not a sequence, and a run that is not the caller's
//! is answered exactly like a missing one (NotFound, naming no one).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use proto::pki::{PeerIdentity, Role};
use tracing::Instrument;

use super::config::{MAX_ACTIVE_PER_CLIENT, MAX_HISTORY_PER_CLIENT};
use crate::plan::Plan;
use crate::results::CellStatus;
use crate::run::{
    EventLines, RunCounts, RunEvent, RunOptions, RunSummary, event_channel, run_plan_observed,
};

/// Why runs are cancelled when the service stops.
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

/// Where a run is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunState {
    /// Waiting for the runs before it.
    Queued,
    /// Being carried out by the worker.
    Running {
        /// When it began.
        started: SystemTime,
        /// Its results folder, once the run has opened it.
        dir: Option<PathBuf>,
        /// Who or what asked it to stop, once someone did.
        stop_reason: Option<String>,
    },
    /// Over.
    Ended {
        /// When it began running; None for a run that ended while queued.
        started: Option<SystemTime>,
        /// When it ended.
        ended: SystemTime,
        /// How.
        outcome: Outcome,
        /// Its results folder, if it opened one.
        dir: Option<PathBuf>,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every cell was handled (measured, failed or skipped); see the counts.
    Finished,
    /// The run could not be carried out, or stopped on a failed cell: why.
    Failed(String),
    /// Cancelled by a client or by the service stopping: by whom, and what it interrupted.
    Cancelled(String),
}

impl Outcome {
    /// Why the run failed or stopped; None when it finished.
    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Finished => None,
            Outcome::Failed(reason) | Outcome::Cancelled(reason) => Some(reason),
        }
    }
}

/// A run as List, Cancel and the log show it.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    /// Its id.
    pub(crate) id: String,
    /// The plan's `name`.
    pub(crate) plan_name: String,
    /// When it was queued.
    pub(crate) submitted: SystemTime,
    /// Where it is.
    pub(crate) state: RunState,
    /// How far it is, in cells.
    pub(crate) counts: RunCounts,
}

/// One step of a run's history, as a Watch replays and follows it: the run's own changes of
/// state and the run events the protocol carries, each with the counts of its moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Update {
    /// The run was queued.
    Queued(RunCounts),
    /// The run began running.
    Running(RunCounts),
    /// The run opened its results folder.
    Started {
        /// The folder.
        dir: PathBuf,
        /// Cells of the plan.
        total: usize,
    },
    /// A cell was recorded.
    Cell {
        /// Its id.
        id: String,
        /// How it ended.
        status: CellStatus,
        /// Its one-line figures, or why it failed or was skipped.
        note: String,
        /// The run's counts after it.
        counts: RunCounts,
    },
    /// Anything else the run's terminal shows, as its line.
    Step {
        /// The line; none for an event that only sets the runnable cells.
        line: Option<String>,
        /// Before the first broker: the cells that will be attempted.
        runnable: Option<usize>,
    },
    /// The last step of every run.
    Ended {
        /// How it ended.
        outcome: Outcome,
        /// Its final counts.
        counts: RunCounts,
        /// Its results folder, if it opened one.
        dir: Option<PathBuf>,
    },
}

#[derive(Debug)]
struct Run {
    id: String,
    /// Who submitted it: only they (and the controller identity) may watch, fetch, cancel.
    owner: PeerIdentity,
    /// Where it writes: `<the service's results_dir>/<id>`.
    folder: PathBuf,
    plan: Arc<Plan>,
    text: Arc<str>,
    submitted: SystemTime,
    state: RunState,
    counts: RunCounts,
    cancel: CancellationToken,
    history: Vec<Update>,
    /// Renders the run's events as its terminal would.
    lines: EventLines,
    version: watch::Sender<u64>,
}

impl Run {
    fn is_over(&self) -> bool {
        matches!(self.state, RunState::Ended { .. })
    }

    fn info(&self) -> RunInfo {
        RunInfo {
            id: self.id.clone(),
            plan_name: self.plan.name.clone(),
            submitted: self.submitted,
            state: self.state.clone(),
            counts: self.counts,
        }
    }

    /// Appends to the history and wakes followers.
    fn push(&mut self, update: Update) {
        self.history.push(update);
        self.version.send_modify(|v| *v += 1);
    }

    /// Ends the run with `outcome` (its folder: `dir`, else the one it opened), stamps the
    /// end and appends the last update. A run ends once: ending it again changes nothing.
    fn end(&mut self, outcome: Outcome, dir: Option<PathBuf>) {
        let (started, opened) = match &mut self.state {
            RunState::Queued => (None, None),
            RunState::Running { started, dir, .. } => (Some(*started), dir.take()),
            RunState::Ended { .. } => return,
        };
        let dir = dir.or(opened);
        self.state = RunState::Ended {
            started,
            ended: SystemTime::now(),
            outcome: outcome.clone(),
            dir: dir.clone(),
        };
        let counts = self.counts;
        self.push(Update::Ended {
            outcome,
            counts,
            dir,
        });
    }
}

/// What the worker needs to carry out a run.
struct Job {
    plan: Arc<Plan>,
    text: Arc<str>,
    folder: PathBuf,
    cancel: CancellationToken,
}

/// A snapshot for a follower: the history from its position on, and whether the run is over.
pub(crate) struct Followed {
    pub(crate) updates: Vec<Update>,
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
        results_root: &Path,
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
        let counts = RunCounts {
            total: plan.cell_count(),
            ..RunCounts::default()
        };
        let mut run = Run {
            id: id.clone(),
            owner,
            folder: results_root.join(&id),
            plan: Arc::new(plan),
            text: text.into(),
            submitted: SystemTime::now(),
            state: RunState::Queued,
            counts,
            cancel: self.closing.child_token(),
            history: Vec::new(),
            lines: EventLines::default(),
            version: watch::Sender::new(0),
        };
        run.push(Update::Queued(counts));
        inner.runs.push(run);
        drop(inner);
        // The receiver lives as long as the worker; once it is gone, close() has cancelled
        // everything queued, this one included (it was pushed before the send).
        if self.queue.send(id.clone()).is_err() {
            self.with_run(&id, |run| {
                run.end(Outcome::Cancelled(SHUTTING_DOWN.into()), None);
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
    pub(crate) fn list(&self, caller: &PeerIdentity) -> Vec<RunInfo> {
        self.lock()
            .runs
            .iter()
            .filter(|run| run.owner == *caller || caller.role == Role::Controller)
            .map(Run::info)
            .collect()
    }

    /// One run's info.
    pub(crate) fn info(&self, id: &str) -> Result<RunInfo, UnknownRun> {
        self.with_run(id, |run| run.info())
            .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// The run's results folder, once it has one.
    pub(crate) fn results_dir(&self, id: &str) -> Result<Option<PathBuf>, UnknownRun> {
        self.with_run(id, |run| match &run.state {
            RunState::Queued => None,
            RunState::Running { dir, .. } | RunState::Ended { dir, .. } => dir.clone(),
        })
        .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// A receiver of the run's version, to wait for changes.
    pub(crate) fn subscribe(&self, id: &str) -> Result<watch::Receiver<u64>, UnknownRun> {
        self.with_run(id, |run| run.version.subscribe())
            .ok_or_else(|| UnknownRun(id.to_string()))
    }

    /// The history from `from` on, and whether the run is over.
    pub(crate) fn follow(&self, id: &str, from: usize) -> Result<Followed, UnknownRun> {
        self.with_run(id, |run| Followed {
            updates: run.history.get(from..).unwrap_or_default().to_vec(),
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
    ) -> Result<RunInfo, UnknownRun> {
        let mut version = self.subscribe(id)?;
        self.with_run(id, |run| match &mut run.state {
            RunState::Queued => {
                run.cancel.cancel();
                run.end(Outcome::Cancelled(format!("{reason} while queued")), None);
            }
            RunState::Running { stop_reason, .. } if !run.cancel.is_cancelled() => {
                *stop_reason = Some(reason.to_string());
                run.cancel.cancel();
            }
            RunState::Running { .. } | RunState::Ended { .. } => {}
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
            match &mut run.state {
                RunState::Queued => run.end(Outcome::Cancelled(SHUTTING_DOWN.into()), None),
                RunState::Running { stop_reason, .. } => {
                    stop_reason.get_or_insert_with(|| SHUTTING_DOWN.into());
                }
                RunState::Ended { .. } => {}
            }
        }
    }

    /// Marks a queued run running and hands out what running it takes; None if it was
    /// cancelled meanwhile.
    fn begin(&self, id: &str) -> Option<Job> {
        self.with_run(id, |run| {
            if run.state != RunState::Queued {
                return None;
            }
            run.state = RunState::Running {
                started: SystemTime::now(),
                dir: None,
                stop_reason: None,
            };
            run.push(Update::Running(run.counts));
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
                if let RunState::Running { dir: opened, .. } = &mut run.state {
                    *opened = Some(dir.clone());
                }
                run.push(Update::Started { dir, total });
            }
            RunEvent::Cell {
                id,
                status,
                note,
                counts,
                ..
            } => {
                run.counts = counts;
                run.push(Update::Cell {
                    id,
                    status,
                    note,
                    counts,
                });
            }
            // The rest (nodes, brokers, netem, skips, the undo, the report) as the terminal
            // shows them.
            other => {
                let runnable = match &other {
                    RunEvent::Runnable { runnable, .. } => Some(*runnable),
                    _ => None,
                };
                let line = run.lines.line(&other);
                if line.is_some() || runnable.is_some() {
                    run.push(Update::Step { line, runnable });
                }
            }
        });
    }

    /// Ends a running run with what the run returned (or why it could not run).
    fn finish(&self, id: &str, ran: Result<RunSummary, String>) {
        self.with_run(id, |run| {
            let cancelled = run.cancel.is_cancelled();
            let reason = match &run.state {
                RunState::Running {
                    stop_reason: Some(reason),
                    ..
                } => reason.clone(),
                _ => "cancelled".to_string(),
            };
            let mut dir = None;
            let outcome = match ran {
                Ok(summary) => {
                    run.counts.measured = summary.measured;
                    run.counts.failed = summary.failed;
                    run.counts.skipped = summary.skipped;
                    dir = Some(summary.dir);
                    if cancelled && summary.interrupted {
                        Outcome::Cancelled(reason)
                    } else if summary.interrupted {
                        Outcome::Failed(
                            "stopped after a failed cell (on_failure = \"stop\")".to_string(),
                        )
                    } else {
                        Outcome::Finished
                    }
                }
                Err(error) if cancelled => Outcome::Cancelled(format!("{reason}; {error}")),
                Err(error) => Outcome::Failed(error),
            };
            run.end(outcome, dir);
        });
    }
}

/// Runs queued plans one at a time until the service closes (after the run in progress, if
/// any, has undone its netem and brokers).
pub(crate) async fn worker(runs: Arc<Runs>, mut queue: mpsc::UnboundedReceiver<String>) {
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
            runs.finish(&id, Err(error.to_string()));
            continue;
        }
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
        let ran = match task.await {
            Ok(ran) => ran.map_err(|error| error.to_string()),
            Err(error) => Err(format!("the run stopped abnormally: {error}")),
        };
        runs.finish(&id, ran);
        if let Ok(RunInfo {
            state: RunState::Ended { outcome, .. },
            ..
        }) = runs.info(&id)
        {
            tracing::info!(
                run = %id,
                ?outcome,
                "run ended"
            );
        }
    }
    // Anything still queued ends as cancelled (close() did it; this covers a closed queue).
    runs.close();
}

#[cfg(test)]
mod tests {
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

    /// The run's whole history, as a Watch from the start would see it.
    fn history(runs: &Runs, id: &str) -> Vec<Update> {
        runs.follow(id, 0).expect("a known run").updates
    }

    #[tokio::test]
    async fn a_queued_run_cancelled_ends_at_once_never_started_and_says_by_whom() {
        let (runs, _queue) = Runs::new();
        let id = submit(&runs, &client("laptop"));
        let info = runs
            .cancel(&id, "cancelled by laptop", Duration::ZERO)
            .await
            .expect("a known run");
        let reason = "cancelled by laptop while queued".to_string();
        assert!(
            matches!(
                &info.state,
                RunState::Ended { started: None, outcome: Outcome::Cancelled(why), dir: None, .. }
                    if *why == reason
            ),
            "{info:?}"
        );
        let total = info.counts.total;
        assert_eq!(total, 1, "{info:?}");
        let queued = RunCounts {
            total,
            ..RunCounts::default()
        };
        assert_eq!(
            history(&runs, &id),
            [
                Update::Queued(queued),
                Update::Ended {
                    outcome: Outcome::Cancelled(reason),
                    counts: queued,
                    dir: None,
                },
            ]
        );
        assert!(runs.begin(&id).is_none(), "the worker skips it");
    }

    #[test]
    fn a_run_queued_after_the_worker_is_gone_ends_cancelled_by_the_shutdown() {
        let (runs, queue) = Runs::new();
        drop(queue);
        let id = submit(&runs, &client("laptop"));
        let info = runs.info(&id).expect("a known run");
        assert!(
            matches!(&info.state, RunState::Ended { outcome: Outcome::Cancelled(why), .. }
                if why == SHUTTING_DOWN),
            "{info:?}"
        );
    }

    #[tokio::test]
    async fn a_running_run_keeps_its_folder_and_ends_as_what_stopped_it() {
        let (runs, _queue) = Runs::new();
        let laptop = client("laptop");
        let opened = PathBuf::from("/srv/results/opened");
        let summary = |interrupted| RunSummary {
            dir: PathBuf::from("/srv/results/summary"),
            measured: 0,
            failed: 1,
            skipped: 0,
            interrupted,
        };
        let ended = |id: &str| match runs.info(id).expect("a known run").state {
            RunState::Ended {
                started: Some(_),
                outcome,
                dir,
                ..
            } => (outcome, dir),
            other => panic!("{other:?}"),
        };

        // An error before the summary: the folder the run opened, the error as the reason.
        let id = submit(&runs, &laptop);
        assert!(runs.begin(&id).is_some());
        runs.on_event(
            &id,
            RunEvent::Started {
                dir: opened.clone(),
                total: 1,
            },
        );
        assert_eq!(runs.results_dir(&id).expect("known"), Some(opened.clone()));
        runs.finish(&id, Err("node n: unreachable".into()));
        assert_eq!(
            ended(&id),
            (
                Outcome::Failed("node n: unreachable".into()),
                Some(opened.clone())
            )
        );

        // on_failure = "stop": failed, in the summary's folder.
        let id = submit(&runs, &laptop);
        assert!(runs.begin(&id).is_some());
        runs.finish(&id, Ok(summary(true)));
        let (outcome, dir) = ended(&id);
        assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
        assert_eq!(dir, Some(summary(true).dir));
        assert_eq!(runs.info(&id).expect("known").counts.failed, 1);

        // Interrupted after a cancel: cancelled, by whom the first cancel said.
        let id = submit(&runs, &laptop);
        assert!(runs.begin(&id).is_some());
        let info = runs
            .cancel(&id, "cancelled by laptop", Duration::ZERO)
            .await
            .expect("a known run");
        assert!(
            matches!(
                &info.state,
                RunState::Running {
                    stop_reason: Some(_),
                    ..
                }
            ),
            "{info:?}"
        );
        runs.close();
        runs.finish(&id, Ok(summary(true)));
        assert_eq!(
            ended(&id).0,
            Outcome::Cancelled("cancelled by laptop".into())
        );
    }
}
