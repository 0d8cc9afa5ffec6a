//! The Metrics stream: node CPU and memory, and CPU/RSS of watched processes (the broker),
//! sampled with sysinfo at the requested interval.

use std::time::Duration;

use proto::agent::v1 as pb;
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::status::{invalid, missing};

/// Shortest interval: below it, CPU percentages are mostly noise.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A process to watch and what to call it.
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub pid: u32,
    pub label: String,
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
    let mut system = System::new().map_err(|e| Status::unavailable(format!("sysinfo: {e}")))?;
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        let pids: Vec<Pid> = watched.iter().map(|w| Pid::from_u32(w.pid)).collect();
        refresh(&mut system, &pids);
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await; // the first tick is immediate; CPU needs one interval to measure
        let mut sent = 0u32;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = tx.closed() => return,
            }
            refresh(&mut system, &pids);
            if tx.send(Ok(sample(&system, &watched))).await.is_err() {
                return;
            }
            sent += 1;
            if samples != 0 && sent >= samples {
                return;
            }
        }
    });
    Ok(ReceiverStream::new(rx))
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

fn sample(system: &System, watched: &[Watched]) -> pb::MetricsSample {
    pb::MetricsSample {
        unix_ns: loadgen::clock::unix_now_ns(),
        cpu_percent: f64::from(system.global_cpu_usage()),
        memory_used_bytes: system.used_memory(),
        memory_total_bytes: system.total_memory(),
        processes: watched
            .iter()
            .map(|w| match system.process(Pid::from_u32(w.pid)) {
                Some(process) => pb::ProcessSample {
                    pid: w.pid,
                    label: w.label.clone(),
                    cpu_percent: f64::from(process.cpu_usage()),
                    rss_bytes: process.memory(),
                    alive: true,
                },
                None => pb::ProcessSample {
                    pid: w.pid,
                    label: w.label.clone(),
                    cpu_percent: 0.0,
                    rss_bytes: 0,
                    alive: false,
                },
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;

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
        let me = Watched {
            pid: std::process::id(),
            label: "self".into(),
        };
        let gone = Watched {
            pid: u32::MAX - 1,
            label: "gone".into(),
        };
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
}
