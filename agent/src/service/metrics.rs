//! The Metrics stream: node CPU and memory, and CPU/RSS of watched processes (the broker),
//! sampled with sysinfo at the requested interval. A broker with no process on this node (a
//! pod on Kubernetes) is sampled by its driver instead; its samples carry PID 0.

use std::sync::Arc;
use std::time::Duration;

use proto::agent::v1 as pb;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::slots::Slots;
use super::status::{invalid, missing};
use crate::broker::{Usage, UsageSampler};

/// Shortest interval: below it, CPU percentages are mostly noise.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Most processes and brokers one request may watch.
pub(crate) const MAX_WATCHED: usize = 64;
/// Most metrics streams an agent serves at once (a run needs one per broker node).
pub(crate) const MAX_STREAMS: usize = 16;

/// Streams being served now.
static STREAMS: Slots = Slots::new(MAX_STREAMS, "metrics streams");

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
    Ok(interval)
}

/// Streams samples until `samples` were sent (0 = forever) or the caller goes away.
pub(crate) fn stream(
    interval: Duration,
    samples: u32,
    watched: Vec<Watched>,
) -> Result<ReceiverStream<Result<pb::MetricsSample, Status>>, Status> {
    let slot = STREAMS.take()?;
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
            if samples != 0 && sent >= samples {
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

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;
    use crate::broker::BrokerError;

    #[tokio::test]
    async fn samples_the_node_and_a_busy_process() {
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
        let samples: Vec<_> = stream(Duration::from_millis(200), 2, vec![me, gone])
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
        let samples: Vec<_> = stream(Duration::from_millis(100), 3, watched)
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
        let open: Vec<_> = (0..MAX_STREAMS)
            .map(|_| stream(MIN_INTERVAL, 0, Vec::new()).expect("within the bound"))
            .collect();
        let refused = stream(MIN_INTERVAL, 0, Vec::new()).expect_err("one too many");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        drop(open); // the callers go away: each stream's task ends and frees its slot
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while stream(MIN_INTERVAL, 1, Vec::new()).is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no slot came back within 5 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
