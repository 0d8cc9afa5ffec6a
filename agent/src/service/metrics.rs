//! The Metrics stream: node CPU and memory, and CPU/RSS of watched processes (the broker),
//! sampled with sysinfo at the requested interval. A broker with no process on this node (a
//! pod on Kubernetes) is sampled by its driver instead; its samples carry PID 0.
//!
//! Streams are bounded so that no reader can keep the controller's cells from recording their
//! broker's usage: in number (the agent's, each client identity's, and client identities'
//! together, which leaves the controller some), in length, and in interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::agent::v1 as pb;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use proto::pki::{PeerIdentity, Role};

use super::slots::{Slot, Slots};
use super::status::{invalid, missing};
use crate::broker::{Usage, UsageSampler};

/// Shortest interval: below it, CPU percentages are mostly noise.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Longest interval: an hour, the longest a timed load runs (`loadgen::spec::MAX_DURATION`);
/// a sample less often than that describes no cell.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(3_600);
/// Longest a stream runs: a day, the longest cell timeout a plan may set (the controller's
/// `MAX_TIMEOUT`), since the controller watches a cell's broker until the cell ends and asks
/// with `samples = 0`. That now means as many samples as fit in this at the interval.
pub(crate) const MAX_LENGTH: Duration = Duration::from_secs(24 * 3_600);
/// Most processes and brokers one request may watch.
pub(crate) const MAX_WATCHED: usize = 64;
/// Most metrics streams an agent serves at once (a run needs one per broker node).
pub(crate) const MAX_STREAMS: usize = 16;

/// Most streams one client identity holds at once.
pub(crate) const MAX_STREAMS_PER_CLIENT: usize = 4;
/// Most streams client identities hold together: the other `MAX_STREAMS - MAX_CLIENT_STREAMS`
/// are the controller's, so its cells record their broker's usage whoever else reads.
pub(crate) const MAX_CLIENT_STREAMS: usize = 12;

/// Streams being served now.
static STREAMS: Slots = Slots::new(MAX_STREAMS, "metrics streams");
/// Streams being served to client identities now.
static CLIENT_STREAMS: Slots = Slots::new(MAX_CLIENT_STREAMS, "metrics streams to clients");
/// Streams each client identity holds now, by name (an identity holding none has no entry).
static PER_CLIENT: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

/// Who asked for a stream: the controller, or a client identity, whose streams are bounded
/// per identity and together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The controller, bounded only by [`MAX_STREAMS`].
    Controller,
    /// A client identity, by name.
    Client(String),
}

impl Reader {
    /// The reader of a call whose caller was authorized (controller or client role).
    pub(crate) fn of<T>(request: &tonic::Request<T>) -> Result<Self, Status> {
        Ok(Self::from(proto::mtls::peer_identity(request)?))
    }
}

impl From<PeerIdentity> for Reader {
    fn from(identity: PeerIdentity) -> Self {
        match identity.role {
            Role::Controller => Reader::Controller,
            // Only the controller and clients may read; should another role get here, it is
            // bounded like a client rather than like the controller.
            _ => Reader::Client(identity.name),
        }
    }
}

/// The slots a stream holds while it runs, given back when dropped.
#[derive(Debug)]
struct Held {
    _stream: Slot,
    _client: Option<(Slot, ClientShare)>,
}

/// One stream of a client identity, counted in [`PER_CLIENT`] until dropped.
#[derive(Debug)]
struct ClientShare(String);

impl ClientShare {
    fn take(name: &str) -> Result<Self, Status> {
        let mut held = PER_CLIENT.lock().unwrap_or_else(|e| e.into_inner());
        let count = held
            .get_or_insert_with(HashMap::new)
            .entry(name.to_owned())
            .or_insert(0);
        if *count >= MAX_STREAMS_PER_CLIENT {
            // Not named: the caller knows who it is, and a log reader has the trace.
            return Err(Status::resource_exhausted(format!(
                "this identity already holds {MAX_STREAMS_PER_CLIENT} metrics streams on this \
                 agent, the most one client may"
            )));
        }
        *count += 1;
        Ok(ClientShare(name.to_owned()))
    }
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut held = PER_CLIENT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(counts) = held.as_mut()
            && let Some(count) = counts.get_mut(&self.0)
        {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.0);
            }
        }
    }
}

/// The slots for one more stream of `reader`, or ResourceExhausted naming the bound reached.
fn take_slots(reader: &Reader) -> Result<Held, Status> {
    let stream = STREAMS.take()?;
    let client = match reader {
        Reader::Controller => None,
        Reader::Client(name) => {
            let share = ClientShare::take(name)?;
            Some((CLIENT_STREAMS.take()?, share))
        }
    };
    Ok(Held {
        _stream: stream,
        _client: client,
    })
}

/// Refuses a request watching more than [`MAX_WATCHED`] processes and brokers.
pub(crate) fn check_watched(request: &pb::MetricsRequest) -> Result<(), Status> {
    let watched = request.pids.len() + request.brokers.len();
    if watched > MAX_WATCHED {
        return Err(invalid(
            "pids",
            format!("{watched} processes and brokers to watch, at most {MAX_WATCHED}"),
        ));
    }
    Ok(())
}

/// What to watch and what to call it.
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub source: Source,
    pub label: String,
}

/// Where a watched broker's CPU and memory come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A process on this node, read with sysinfo.
    Process(u32),
    /// A broker without one (a pod), read by its driver's sampler.
    Sampled(Arc<dyn UsageSampler>),
}

impl Watched {
    /// The process `pid`.
    pub(crate) fn process(pid: u32, label: impl Into<String>) -> Self {
        Self {
            source: Source::Process(pid),
            label: label.into(),
        }
    }

    /// A broker read by `sampler`.
    pub(crate) fn sampled(sampler: Arc<dyn UsageSampler>, label: impl Into<String>) -> Self {
        Self {
            source: Source::Sampled(sampler),
            label: label.into(),
        }
    }
}

/// The sampling interval of a request, checked.
pub(crate) fn interval_of(request: &pb::MetricsRequest) -> Result<Duration, Status> {
    let interval = request
        .interval
        .as_ref()
        .ok_or_else(|| missing("interval"))?;
    let interval = Duration::try_from(*interval).map_err(|_| invalid("interval", "negative"))?;
    if interval < MIN_INTERVAL {
        return Err(invalid(
            "interval",
            format!("{interval:?} is below the minimum of {MIN_INTERVAL:?}"),
        ));
    }
    if interval > MAX_INTERVAL {
        return Err(invalid(
            "interval",
            format!("{interval:?} is above the maximum of {MAX_INTERVAL:?}"),
        ));
    }
    Ok(interval)
}

/// How many samples a request's stream sends, checked: `samples` as asked, or for 0 as many as
/// fit in [`MAX_LENGTH`] at `interval`; more than fit is refused naming the field.
pub(crate) fn samples_of(request: &pb::MetricsRequest, interval: Duration) -> Result<u32, Status> {
    let most = most_samples(interval);
    match request.samples {
        0 => Ok(most),
        samples if samples <= most => Ok(samples),
        samples => Err(invalid(
            "samples",
            format!(
                "{samples} samples every {interval:?} run longer than {MAX_LENGTH:?}, \
                 at most {most} at that interval"
            ),
        )),
    }
}

/// The samples that fit in [`MAX_LENGTH`] at `interval` (at least one).
fn most_samples(interval: Duration) -> u32 {
    let most = MAX_LENGTH.as_nanos() / interval.as_nanos().max(1);
    u32::try_from(most).unwrap_or(u32::MAX).max(1)
}

/// Streams `samples` samples (see [`samples_of`]) or until the caller goes away, holding one
/// of `reader`'s slots meanwhile.
pub(crate) fn stream(
    reader: &Reader,
    interval: Duration,
    samples: u32,
    watched: Vec<Watched>,
) -> Result<ReceiverStream<Result<pb::MetricsSample, Status>>, Status> {
    // Checked by `samples_of` for a request; bounded here too for any other caller.
    let samples = match samples {
        0 => most_samples(interval),
        samples => samples.min(most_samples(interval)),
    };
    let slot = take_slots(reader)?;
    let mut system = System::new().map_err(|e| Status::unavailable(format!("sysinfo: {e}")))?;
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let _slot = slot;
        let pids: Vec<Pid> = watched
            .iter()
            .filter_map(|w| match w.source {
                Source::Process(pid) => Some(Pid::from_u32(pid)),
                Source::Sampled(_) => None,
            })
            .collect();
        refresh(&mut system, &pids);
        let mut ticker = ticker(interval);
        ticker.tick().await; // the first tick is immediate; CPU needs one interval to measure
        let mut sent = 0u32;
        let mut failed = Failures::default();
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = tx.closed() => break,
            }
            refresh(&mut system, &pids);
            let usage = sampled_usage(&watched, &mut failed).await;
            if tx
                .send(Ok(sample(&system, &watched, &usage)))
                .await
                .is_err()
            {
                break;
            }
            sent += 1;
            if sent >= samples {
                break;
            }
        }
        if let Some(last) = failed.last {
            tracing::warn!(failed = failed.count, %last, "samplers failed; those samples say alive = false");
        }
    });
    Ok(ReceiverStream::new(rx))
}

/// A ticker every `interval`, capped at [`loadgen::clock::FAR_FUTURE`]: tokio's interval adds
/// its period to an `Instant`, which panics on overflow, and the interval is the caller's.
fn ticker(interval: Duration) -> tokio::time::Interval {
    tokio::time::interval(interval.min(loadgen::clock::FAR_FUTURE))
}

fn refresh(system: &mut System, pids: &[Pid]) {
    system.refresh_cpu_usage();
    system.refresh_memory();
    if !pids.is_empty() {
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(pids),
            true,
            ProcessRefreshKind::nothing().with_cpu().with_memory(),
        );
    }
}

/// Sampler failures of one stream, summarised once when it ends.
#[derive(Debug, Default)]
struct Failures {
    count: u64,
    last: Option<String>,
}

/// The usage each sampler reports now, in `watched` order (`None` for processes, and for a
/// sampler with nothing to report or failing).
async fn sampled_usage(watched: &[Watched], failed: &mut Failures) -> Vec<Option<Usage>> {
    let results = futures_util::future::join_all(watched.iter().map(|w| async move {
        match &w.source {
            Source::Process(_) => Ok(None),
            Source::Sampled(sampler) => sampler.sample().await,
        }
    }))
    .await;
    results
        .into_iter()
        .map(|result| {
            result.unwrap_or_else(|error| {
                failed.count += 1;
                failed.last = Some(error.to_string());
                None
            })
        })
        .collect()
}

fn sample(system: &System, watched: &[Watched], usage: &[Option<Usage>]) -> pb::MetricsSample {
    pb::MetricsSample {
        unix_ns: loadgen::clock::unix_now_ns(),
        cpu_percent: f64::from(system.global_cpu_usage()),
        memory_used_bytes: system.used_memory(),
        memory_total_bytes: system.total_memory(),
        processes: watched
            .iter()
            .zip(usage)
            .map(|(w, usage)| match (&w.source, usage) {
                (Source::Process(pid), _) => match system.process(Pid::from_u32(*pid)) {
                    Some(process) => pb::ProcessSample {
                        pid: *pid,
                        label: w.label.clone(),
                        cpu_percent: f64::from(process.cpu_usage()),
                        rss_bytes: process.memory(),
                        alive: true,
                    },
                    None => gone(*pid, &w.label),
                },
                (Source::Sampled(_), Some(usage)) => pb::ProcessSample {
                    pid: 0,
                    label: w.label.clone(),
                    cpu_percent: usage.cpu_percent,
                    rss_bytes: usage.memory_bytes,
                    alive: true,
                },
                (Source::Sampled(_), None) => gone(0, &w.label),
            })
            .collect(),
    }
}

/// A sample of something with no reading: the process is gone, or the sampler has nothing.
fn gone(pid: u32, label: &str) -> pb::ProcessSample {
    pb::ProcessSample {
        pid,
        label: label.to_owned(),
        cpu_percent: 0.0,
        rss_bytes: 0,
        alive: false,
    }
}

/// The tests that count the agent's process-wide stream slots: one at a time.
#[cfg(test)]
static STREAMS_COUNTED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod served_tests;

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;
    use crate::broker::BrokerError;

    #[tokio::test]
    async fn samples_the_node_and_a_busy_process() {
        let _alone = STREAMS_COUNTED.lock().await;
        // This test process spins one thread; its CPU must show up.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let me = Watched::process(std::process::id(), "self");
        let gone = Watched::process(u32::MAX - 1, "gone");
        let samples: Vec<_> = stream(
            &Reader::Controller,
            Duration::from_millis(200),
            2,
            vec![me, gone],
        )
        .expect("stream")
        .collect()
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().expect("spinner");
        assert_eq!(samples.len(), 2);
        let last = samples[1].as_ref().expect("sample");
        assert!(last.memory_total_bytes > 0 && last.memory_used_bytes > 0);
        assert!(
            last.processes[0].alive && last.processes[0].cpu_percent > 30.0,
            "{:?}",
            last.processes[0]
        );
        assert!(last.processes[0].rss_bytes > 0);
        assert!(!last.processes[1].alive);
    }

    /// A sampler with one canned answer per call: usage, nothing yet, or a failure.
    #[derive(Debug)]
    struct Canned(std::sync::Mutex<Vec<Option<Usage>>>);

    impl UsageSampler for Canned {
        fn sample(&self) -> crate::broker::BoxFuture<'_, Result<Option<Usage>, BrokerError>> {
            let next = self.0.lock().unwrap().pop();
            Box::pin(async move {
                next.ok_or_else(|| BrokerError::io("canned", std::io::Error::other("no more")))
            })
        }
    }

    #[tokio::test]
    async fn a_sampled_broker_reports_what_its_sampler_says() {
        let _alone = STREAMS_COUNTED.lock().await;
        let usage = Usage {
            cpu_percent: 137.5,
            memory_bytes: 42 << 20,
        };
        // Popped from the end: usage, then nothing yet, then a failure.
        let sampler = Arc::new(Canned(std::sync::Mutex::new(vec![None, Some(usage)])));
        let watched = vec![
            Watched::sampled(sampler, "pod"),
            Watched::process(std::process::id(), "self"),
        ];
        let samples: Vec<_> = stream(&Reader::Controller, Duration::from_millis(100), 3, watched)
            .expect("stream")
            .collect()
            .await;
        let pods: Vec<pb::ProcessSample> = samples
            .iter()
            .map(|s| s.as_ref().expect("sample").processes[0].clone())
            .collect();
        let expected = |cpu_percent, rss_bytes, alive| pb::ProcessSample {
            pid: 0,
            label: "pod".into(),
            cpu_percent,
            rss_bytes,
            alive,
        };
        assert_eq!(
            pods,
            [
                expected(137.5, 42 << 20, true),
                expected(0.0, 0, false),
                expected(0.0, 0, false)
            ]
        );
        // The process next to it is sampled as before.
        let me = &samples[2].as_ref().expect("sample").processes[1];
        assert!(me.alive && me.pid == std::process::id());
    }

    #[test]
    fn too_short_an_interval_is_refused() {
        let request = pb::MetricsRequest {
            interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 1_000_000,
            }),
            ..Default::default()
        };
        assert!(
            interval_of(&request)
                .expect_err("1 ms")
                .message()
                .starts_with("interval:")
        );
    }

    #[tokio::test]
    async fn an_interval_of_u64_max_seconds_ticks_without_a_panic() {
        // The longest interval a request can carry.
        let longest = Duration::try_from(prost_types::Duration {
            seconds: i64::MAX,
            nanos: 999_999_999,
        })
        .expect("positive");
        for interval in [longest, Duration::from_secs(u64::MAX), Duration::MAX] {
            let mut ticker = ticker(interval);
            // The first tick is immediate and sets the next one an interval later, where
            // `Instant + Duration` overflowed; the second is far away.
            ticker.tick().await;
            assert!(
                tokio::time::timeout(Duration::from_millis(20), ticker.tick())
                    .await
                    .is_err()
            );
        }
    }

    #[test]
    fn samples_are_bounded_by_the_longest_stream() {
        let at = |interval: Duration, samples: u32| {
            let request = pb::MetricsRequest {
                samples,
                ..Default::default()
            };
            samples_of(&request, interval)
        };
        // The controller's request (0, every 500 ms) gets a day of samples.
        assert_eq!(at(Duration::from_millis(500), 0).expect("0"), 172_800);
        assert_eq!(at(MAX_INTERVAL, 0).expect("0"), 24);
        assert_eq!(at(MAX_INTERVAL, 24).expect("a day"), 24);
        let refused = at(MAX_INTERVAL, 25).expect_err("over a day");
        assert!(
            refused
                .message()
                .starts_with("samples: 25 samples every 3600s")
                && refused.message().contains("at most 24"),
            "{}",
            refused.message()
        );
        assert!(at(MIN_INTERVAL, u32::MAX).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_asked_for_0_samples_ends_after_the_longest_length() {
        let _alone = STREAMS_COUNTED.lock().await;
        let started = tokio::time::Instant::now();
        // Paused time: the hours pass as soon as the stream waits.
        let samples: Vec<_> = stream(&Reader::Controller, MAX_INTERVAL, 0, Vec::new())
            .expect("stream")
            .collect()
            .await;
        assert_eq!(samples.len(), 24);
        let elapsed = started.elapsed();
        assert!(
            elapsed >= MAX_LENGTH && elapsed < MAX_LENGTH + MAX_INTERVAL,
            "{elapsed:?}"
        );
        assert_eq!(STREAMS.in_use(), 0, "the ended stream gave its slot back");
    }

    #[test]
    fn a_request_watching_too_much_is_refused() {
        let mut request = pb::MetricsRequest {
            pids: (0..MAX_WATCHED as u32).collect(),
            ..Default::default()
        };
        assert!(check_watched(&request).is_ok());
        request.brokers.push("one-more".into());
        let refused = check_watched(&request).expect_err("over the bound");
        assert!(
            refused.message().contains("at most 64"),
            "{}",
            refused.message()
        );
    }

    #[tokio::test]
    async fn streams_beyond_the_bound_are_refused_and_their_slots_come_back() {
        let _alone = STREAMS_COUNTED.lock().await;
        let open: Vec<_> = (0..MAX_STREAMS)
            .map(|_| {
                stream(&Reader::Controller, MIN_INTERVAL, 0, Vec::new()).expect("within the bound")
            })
            .collect();
        let refused =
            stream(&Reader::Controller, MIN_INTERVAL, 0, Vec::new()).expect_err("one too many");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        drop(open); // the callers go away: each stream's task ends and frees its slot
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while stream(&Reader::Controller, MIN_INTERVAL, 1, Vec::new()).is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no slot came back within 5 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
