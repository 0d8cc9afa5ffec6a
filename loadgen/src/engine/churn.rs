//! The churn fleet of a run ([`crate::spec::Churn`]): arrivals on a fixed schedule from the
//! start barrier, each a client that connects, stays for the hold and disconnects cleanly,
//! every outcome counted by kind.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;
use crate::codec::Codec;
use crate::result::ChurnOutcome;
use crate::session::connect_fields;
use crate::session::{self, ConnectFailure};
use crate::spec::{Churn, WorkloadSpec};
use crate::transport::Dialer;

/// What one churn run needs (owned: it runs on a task of its own beside the workload);
/// `start_ns` is the first arrival on the run clock.
pub(super) struct Fleet {
    pub spec: Arc<WorkloadSpec>,
    pub churn: Churn,
    pub run_id: String,
    pub dialer: Dialer,
    pub codec: Codec,
    pub clock: RunClock,
    pub start_ns: u64,
}

/// How one churn client ended.
enum Visit {
    /// Connected, stayed, and its DISCONNECT was written.
    Completed { connect_ns: u64 },
    /// Connected, but the DISCONNECT could not be written (the broker closed it meanwhile).
    Dropped { connect_ns: u64 },
    /// CONNECT did not succeed.
    Failed(ConnectFailure),
    /// The run was cancelled before it ended.
    Cancelled,
}

impl Fleet {
    /// Runs every arrival (until `cancel`) and waits for the last to disconnect.
    pub(super) async fn run(self, cancel: CancellationToken) -> ChurnOutcome {
        let mut outcome = ChurnOutcome::empty();
        let open = Arc::new(AtomicU64::new(0));
        let most_open = Arc::new(AtomicU64::new(0));
        let mut visits = JoinSet::new();
        let spec = self.spec.clone();
        for n in 0..self.churn.connections {
            let due_ns = self
                .start_ns
                .saturating_add(crate::clock::saturating_nanos(self.churn.arrival(n)));
            tokio::select! {
                () = tokio::time::sleep_until(self.clock.instant_at(due_ns).into()) => {}
                () = cancel.cancelled() => break,
            }
            let lateness = self.clock.now_ns().saturating_sub(due_ns);
            outcome.most_late_ns = outcome.most_late_ns.max(lateness);
            if n == 0 {
                outcome.first_arrival_ns = self.clock.now_ns();
            }
            outcome.last_arrival_ns = self.clock.now_ns();
            outcome.attempted += 1;
            let client_id = format!(
                "{}-{}-churn{n}",
                self.spec.connection.client_id_prefix, self.run_id
            );
            let visit = visit(
                spec.clone(),
                client_id,
                self.dialer.clone(),
                self.codec,
                self.churn.hold,
                (open.clone(), most_open.clone()),
                cancel.clone(),
            );
            visits.spawn(visit);
            // Reap finished visits as we go, so a long churn does not keep every handle.
            while let Some(done) = visits.try_join_next() {
                outcome.count(done.unwrap_or(Visit::Cancelled));
            }
        }
        while let Some(done) = visits.join_next().await {
            outcome.count(done.unwrap_or(Visit::Cancelled));
        }
        outcome.most_open = most_open.load(Ordering::Relaxed);
        outcome
    }
}

/// Counting a visit into the outcome: a trait, as the outcome is a result type of
/// `loadgen-model` and only its own crate gives it methods.
trait CountVisit {
    fn count(&mut self, visit: Visit);
}

impl CountVisit for ChurnOutcome {
    fn count(&mut self, visit: Visit) {
        match visit {
            Visit::Completed { connect_ns } | Visit::Dropped { connect_ns } => {
                self.connected += 1;
                let _ = self.connect_time.record(connect_ns.max(1));
                if matches!(visit, Visit::Completed { .. }) {
                    self.disconnected += 1;
                } else {
                    *self.failures.entry("disconnect_failed".into()).or_insert(0) += 1;
                }
            }
            Visit::Failed(failure) => {
                // A refusal is counted by its reason code: the broker said why.
                *self.failures.entry(failure.kind().to_string()).or_insert(0) += 1;
            }
            Visit::Cancelled => self.cancelled += 1,
        }
    }
}

/// One churn client: connect (timed), hold, DISCONNECT, close.
async fn visit(
    spec: Arc<WorkloadSpec>,
    client_id: String,
    dialer: Dialer,
    codec: Codec,
    hold: Duration,
    (open, most_open): (Arc<AtomicU64>, Arc<AtomicU64>),
    cancel: CancellationToken,
) -> Visit {
    let fields = connect_fields(&spec, &client_id);
    let started = tokio::time::Instant::now();
    let connected = tokio::select! {
        connected = session::open(&dialer, codec, &fields, None, spec.connection.connect_timeout) => connected,
        () = cancel.cancelled() => return Visit::Cancelled,
    };
    let mut session = match connected {
        Ok(session) => session,
        Err(failure) => return Visit::Failed(failure),
    };
    let connect_ns = started.elapsed().as_nanos() as u64;
    let now_open = open.fetch_add(1, Ordering::Relaxed) + 1;
    most_open.fetch_max(now_open, Ordering::Relaxed);
    let held = tokio::select! {
        () = tokio::time::sleep(hold) => true,
        () = cancel.cancelled() => false,
    };
    let mut out = BytesMut::new();
    let disconnected = codec.disconnect(&mut out).is_ok()
        && session.writer.write_all(&out).await.is_ok()
        && session.writer.flush().await.is_ok();
    let _ = session.writer.shutdown().await;
    open.fetch_sub(1, Ordering::Relaxed);
    match (held, disconnected) {
        (false, _) => Visit::Cancelled,
        (true, true) => Visit::Completed { connect_ns },
        (true, false) => Visit::Dropped { connect_ns },
    }
}
