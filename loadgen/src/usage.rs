//! What a run cost loadgen itself, read from the kernel: CPU time and time spent waiting for a
//! CPU (schedstat) of its own threads, CPU bandwidth throttling of its cgroup, and the CPU
//! capacity it may use at all. These say whether loadgen, not the broker, was the limit.
//!
//! A run started with [`crate::run_dedicated`] knows its threads (the runtime's workers, the
//! pacer) and measures only them, so an agent's gRPC work or an embedded broker in the same
//! process is not counted as load-generator CPU. A run started on someone else's runtime
//! falls back to the whole process.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::RunClock;
use crate::result::{BrokerOnHost, InstanceLoad, ResourceUsage};
use crate::spec::Shard;

/// How often the monitor reads the counters during a run.
const MONITOR_INTERVAL: Duration = Duration::from_millis(250);
/// The stretch over which the peak CPU share is taken.
const PEAK_SPAN_NS: u64 = 1_000_000_000;

/// The threads of one run, registered as they start.
#[derive(Debug, Clone, Default)]
pub struct RunThreads {
    tids: Arc<Mutex<Vec<i32>>>,
}

impl RunThreads {
    /// Registers the calling thread.
    pub fn register_current(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let mut tids = self.tids.lock().unwrap_or_else(|p| p.into_inner());
        if !tids.contains(&tid) {
            tids.push(tid);
        }
    }

    fn snapshot(&self) -> Vec<i32> {
        self.tids.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Which threads a reading covers.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// The registered threads of a dedicated run.
    Threads(RunThreads),
    /// Every thread of this process.
    Process,
}

/// Counters at one instant; two readings give a run's usage.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reading {
    cpu_ns: u64,
    cpu_user_ns: u64,
    cpu_system_ns: u64,
    wait_ns: u64,
    throttled_ns: u64,
    /// The broker's process on this host, when there is one (see [`crate::local_broker`]).
    broker: crate::local_broker::ProcessCounters,
    /// All of the host's CPUs together, clock ticks.
    host: HostTicks,
    /// Time some task of the host waited for a CPU (PSI "some" total), µs; `None` without PSI.
    host_pressure_us: Option<u64>,
    /// The same for loadgen's own cgroup (v2, below the root), µs.
    cgroup_pressure_us: Option<u64>,
}

/// The host's CPU time from the first line of `/proc/stat`, clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HostTicks {
    /// Every state together: user, nice, system, idle, iowait, irq, softirq, steal.
    total: u64,
    /// Time the hypervisor gave this machine's virtual CPUs to someone else while they wanted
    /// to run.
    steal: u64,
}

impl HostTicks {
    fn now() -> Self {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| Self::parse(&stat))
            .unwrap_or_default()
    }

    /// `None` when the first line is not the `cpu` sum or has fewer than eight figures (a
    /// kernel too old to count steal).
    fn parse(stat: &str) -> Option<Self> {
        let mut fields = stat.lines().next()?.split_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        // guest and guest_nice (9th, 10th) are already inside user and nice.
        let ticks: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        (ticks.len() == 8).then(|| HostTicks {
            total: ticks.iter().sum(),
            steal: ticks[7],
        })
    }

    /// Steal between `self` (earlier) and `later` as a share of all CPU time, percent.
    fn steal_percent_until(self, later: HostTicks) -> f64 {
        let total = later.total.saturating_sub(self.total);
        if total == 0 {
            0.0
        } else {
            later.steal.saturating_sub(self.steal) as f64 * 100.0 / total as f64
        }
    }
}

/// Per-thread schedstat: CPU time and run-queue wait, ns.
fn schedstat(tid: i32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// Per-thread user and system time from `stat`, ns (clock-tick resolution).
fn thread_times(tid: i32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let after_name = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name: state is field 3 of stat(5); utime and stime are fields 14 and 15.
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let tick_ns = 1_000_000_000 / clock_ticks_per_second();
    Some((ticks(11)? * tick_ns, ticks(12)? * tick_ns))
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

fn all_threads() -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn process_rusage() -> (u64, u64, u64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000_000 + (t.tv_usec as u64) * 1_000;
    (
        ns(usage.ru_utime),
        ns(usage.ru_stime),
        (usage.ru_maxrss as u64) * 1024,
    )
}

impl Reading {
    pub(crate) fn now(scope: &Scope) -> Self {
        let tids = match scope {
            Scope::Threads(threads) => threads.snapshot(),
            Scope::Process => all_threads(),
        };
        let mut reading = Reading {
            throttled_ns: cgroup::throttled_ns().unwrap_or(0),
            host: HostTicks::now(),
            host_pressure_us: pressure::host_some_us(),
            cgroup_pressure_us: cgroup::pressure_some_us(),
            ..Reading::default()
        };
        for tid in &tids {
            if let Some((cpu, wait)) = schedstat(*tid) {
                reading.cpu_ns += cpu;
                reading.wait_ns += wait;
            }
        }
        match scope {
            Scope::Threads(_) => {
                for tid in &tids {
                    if let Some((user, system)) = thread_times(*tid) {
                        reading.cpu_user_ns += user;
                        reading.cpu_system_ns += system;
                    }
                }
            }
            Scope::Process => {
                let (user, system, _) = process_rusage();
                reading.cpu_user_ns = user;
                reading.cpu_system_ns = system;
                if reading.cpu_ns == 0 {
                    reading.cpu_ns = user + system;
                }
            }
        }
        reading
    }

    /// The usage between `self` (earlier) and `later`.
    pub(crate) fn until(self, later: Reading, threads: usize) -> ResourceUsage {
        let (_, _, peak_rss_bytes) = process_rusage();
        ResourceUsage {
            cpu_user_ns: later.cpu_user_ns.saturating_sub(self.cpu_user_ns),
            cpu_system_ns: later.cpu_system_ns.saturating_sub(self.cpu_system_ns),
            peak_rss_bytes,
            cpu_ns: later.cpu_ns.saturating_sub(self.cpu_ns),
            cpu_wait_ns: later.wait_ns.saturating_sub(self.wait_ns),
            throttled_ns: later.throttled_ns.saturating_sub(self.throttled_ns),
            cpu_capacity_milli: capacity_milli(threads),
        }
    }
}

/// CPU this process can use with `threads` threads: the least of the threads, the CPUs it
/// may run on and its cgroup's quota, in thousandths of a CPU.
pub(crate) fn capacity_milli(threads: usize) -> u32 {
    let cpus = crate::cpus::cpus_allowed();
    let capacity = [threads.max(1) * 1000, cpus * 1000]
        .into_iter()
        .chain(cgroup::quota_milli())
        .min()
        .unwrap_or(1000);
    u32::try_from(capacity).unwrap_or(u32::MAX)
}

/// Readings taken through a run, so that the generator's share of its CPU can be judged over
/// the window that matters (not diluted by connecting or an idle drain).
#[derive(Debug)]
pub(crate) struct Monitor {
    samples: Arc<Mutex<Vec<(u64, Reading)>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    scope: Scope,
    clock: RunClock,
    broker: Option<u32>,
}

/// A reading of loadgen's threads and, when it runs on this host, the broker's process.
fn sample(scope: &Scope, broker: Option<u32>) -> Reading {
    let mut reading = Reading::now(scope);
    if let Some(counters) = broker.and_then(crate::local_broker::counters) {
        reading.broker = counters;
    }
    reading
}

impl Monitor {
    /// Starts reading every 250 ms, with a first reading now; `broker` is the broker's process
    /// when it runs on this host.
    pub(crate) fn start(scope: Scope, clock: RunClock, broker: Option<u32>) -> Self {
        let samples = Arc::new(Mutex::new(vec![(clock.now_ns(), sample(&scope, broker))]));
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (samples, stop, scope) = (samples.clone(), stop.clone(), scope.clone());
            async move {
                let mut ticker = tokio::time::interval(MONITOR_INTERVAL);
                ticker.tick().await;
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        _ = stop.cancelled() => return,
                    }
                    let reading = (clock.now_ns(), sample(&scope, broker));
                    samples
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(reading);
                }
            }
        });
        Monitor {
            samples,
            stop,
            task,
            scope,
            clock,
            broker,
        }
    }

    /// Stops, with a last reading now; returns every reading in time order.
    pub(crate) async fn finish(self) -> Vec<(u64, Reading)> {
        self.stop.cancel();
        let _ = self.task.await;
        let mut samples =
            std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()));
        samples.push((self.clock.now_ns(), sample(&self.scope, self.broker)));
        samples
    }
}

/// A reading interpolated at `at_ns` between the two around it.
fn reading_at(samples: &[(u64, Reading)], at_ns: u64) -> Option<Reading> {
    let after = samples.iter().position(|(t, _)| *t >= at_ns)?;
    let (t1, r1) = samples[after];
    if after == 0 || t1 == at_ns {
        return Some(r1);
    }
    let (t0, r0) = samples[after - 1];
    let share = (at_ns - t0) as f64 / (t1 - t0).max(1) as f64;
    let mix = |a: u64, b: u64| a + ((b.saturating_sub(a)) as f64 * share) as u64;
    Some(Reading {
        cpu_ns: mix(r0.cpu_ns, r1.cpu_ns),
        cpu_user_ns: mix(r0.cpu_user_ns, r1.cpu_user_ns),
        cpu_system_ns: mix(r0.cpu_system_ns, r1.cpu_system_ns),
        wait_ns: mix(r0.wait_ns, r1.wait_ns),
        throttled_ns: mix(r0.throttled_ns, r1.throttled_ns),
        broker: crate::local_broker::ProcessCounters {
            cpu_ns: mix(r0.broker.cpu_ns, r1.broker.cpu_ns),
            wait_ns: mix(r0.broker.wait_ns, r1.broker.wait_ns),
        },
        host: HostTicks {
            total: mix(r0.host.total, r1.host.total),
            steal: mix(r0.host.steal, r1.host.steal),
        },
        host_pressure_us: r0
            .host_pressure_us
            .zip(r1.host_pressure_us)
            .map(|(a, b)| mix(a, b)),
        cgroup_pressure_us: r0
            .cgroup_pressure_us
            .zip(r1.cgroup_pressure_us)
            .map(|(a, b)| mix(a, b)),
    })
}

/// What one instance spent over `[from_ns, until_ns]`, judged against its CPU capacity.
pub(crate) fn instance_load(
    samples: &[(u64, Reading)],
    from_ns: u64,
    until_ns: u64,
    capacity_milli: u32,
    shard: Shard,
    broker: Option<&crate::local_broker::LocalBroker>,
) -> InstanceLoad {
    let first = samples.first().map_or(from_ns, |(t, _)| *t);
    let last = samples.last().map_or(until_ns, |(t, _)| *t);
    let (from_ns, until_ns) = (from_ns.clamp(first, last), until_ns.clamp(first, last));
    let capacity = f64::from(capacity_milli.max(1)) / 1000.0;
    let busy = |a: &Reading, b: &Reading, span_ns: u64| {
        b.cpu_ns.saturating_sub(a.cpu_ns) as f64 * 100.0 / (span_ns.max(1) as f64 * capacity)
    };
    let (Some(start), Some(end)) = (reading_at(samples, from_ns), reading_at(samples, until_ns))
    else {
        return InstanceLoad {
            node: None,
            shard,
            cpu_capacity_milli: capacity_milli,
            window_ms: 0.0,
            busy_percent: 0.0,
            peak_busy_percent: 0.0,
            cpu_wait_percent: 0.0,
            throttled_percent: 0.0,
            host_steal_percent: 0.0,
            host_cpu_pressure_percent: None,
            cgroup_cpu_pressure_percent: None,
            broker_on_host: None,
        };
    };
    // PSI totals are µs of stall over the window's wall time, whatever the number of CPUs.
    let stalled_percent = |from: Option<u64>, until: Option<u64>, span_ns: u64| {
        from.zip(until).map(|(from, until)| {
            until.saturating_sub(from) as f64 * 1_000.0 * 100.0 / span_ns.max(1) as f64
        })
    };
    let span = until_ns.saturating_sub(from_ns);
    let cpu = end.cpu_ns.saturating_sub(start.cpu_ns);
    let wait = end.wait_ns.saturating_sub(start.wait_ns);
    let mut peak = busy(&start, &end, span);
    if span > PEAK_SPAN_NS {
        let inside: Vec<&(u64, Reading)> = samples
            .iter()
            .filter(|(t, _)| (from_ns..=until_ns).contains(t))
            .collect();
        for (i, (t0, r0)) in inside.iter().enumerate() {
            if let Some((t1, r1)) = inside[i..].iter().find(|(t, _)| *t >= t0 + PEAK_SPAN_NS) {
                peak = peak.max(busy(r0, r1, t1 - t0));
            }
        }
    }
    InstanceLoad {
        node: None,
        shard,
        cpu_capacity_milli: capacity_milli,
        window_ms: span as f64 / 1e6,
        busy_percent: busy(&start, &end, span),
        peak_busy_percent: peak,
        cpu_wait_percent: if cpu + wait == 0 {
            0.0
        } else {
            wait as f64 * 100.0 / (cpu + wait) as f64
        },
        // The cgroup sums throttled time over its CPUs' run queues.
        throttled_percent: end.throttled_ns.saturating_sub(start.throttled_ns) as f64 * 100.0
            / (span.max(1) as f64 * crate::cpus::cpus_allowed() as f64),
        host_steal_percent: start.host.steal_percent_until(end.host),
        host_cpu_pressure_percent: stalled_percent(
            start.host_pressure_us,
            end.host_pressure_us,
            span,
        ),
        cgroup_cpu_pressure_percent: stalled_percent(
            start.cgroup_pressure_us,
            end.cgroup_pressure_us,
            span,
        ),
        broker_on_host: broker.map(|broker| {
            let cpu = end.broker.cpu_ns.saturating_sub(start.broker.cpu_ns);
            let wait = end.broker.wait_ns.saturating_sub(start.broker.wait_ns);
            BrokerOnHost {
                pid: broker.pid,
                command: broker.command.clone(),
                threads: broker.threads,
                cpu_ms: cpu as f64 / 1e6,
                cpus_used: cpu as f64 / span.max(1) as f64,
                cpu_wait_percent: if cpu + wait == 0 {
                    0.0
                } else {
                    wait as f64 * 100.0 / (cpu + wait) as f64
                },
            }
        }),
    }
}

/// Pressure stall information (PSI): how long runnable tasks waited for a CPU. The host's
/// figure says whether other work contended with loadgen, whatever loadgen's own busy share.
mod pressure {
    /// The "some" total of `/proc/pressure/cpu`, µs.
    pub(super) fn host_some_us() -> Option<u64> {
        some_total_us(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
    }

    /// The `total=` of the "some" line of a PSI file, µs.
    pub(super) fn some_total_us(text: &str) -> Option<u64> {
        let line = text.lines().find(|line| line.starts_with("some "))?;
        line.split_whitespace()
            .find_map(|field| field.strip_prefix("total="))?
            .parse()
            .ok()
    }
}

/// The CPU controller of this process's cgroup (v1 or v2): quota and throttling.
mod cgroup {
    use std::path::PathBuf;

    /// The folder of this process's cgroup in the hierarchy holding the cpu controller. The
    /// monitor reads its counters several times a second, so the mount table is parsed again
    /// only when the membership changes: a process can be moved into a quota's cgroup after it
    /// started (the quota must then count), and reading `/proc/self/cgroup` is cheap.
    fn cpu_folder() -> Option<(PathBuf, bool)> {
        type Found = Option<(String, Option<(PathBuf, bool)>)>;
        static FOUND: std::sync::Mutex<Found> = std::sync::Mutex::new(None);
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mut found = FOUND
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*found {
            Some((known, folder)) if *known == membership => folder.clone(),
            _ => {
                let folder = find_cpu_folder(&membership);
                *found = Some((membership, folder.clone()));
                folder
            }
        }
    }

    fn find_cpu_folder(membership: &str) -> Option<(PathBuf, bool)> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        // v1: a line "N:cpu,cpuacct:/path"; v2: "0::/path".
        let v1 = membership.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "cpu")
                .then(|| path.to_string())
        });
        let v2_path = membership.lines().find_map(|l| l.strip_prefix("0::"));
        mountinfo.lines().find_map(|line| {
            // mount ID, parent, major:minor, root, mount point, options... - fstype source super
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split_whitespace().collect();
            let tail: Vec<&str> = right.split_whitespace().collect();
            let (root, mount_point) = (*fields.get(3)?, *fields.get(4)?);
            let options = tail.get(2).copied().unwrap_or("");
            let relative = |path: &str| {
                let inside = path.strip_prefix(root).unwrap_or(path);
                PathBuf::from(mount_point).join(inside.trim_start_matches('/'))
            };
            match (*tail.first()?, &v1) {
                ("cgroup", Some(path)) if options.split(',').any(|o| o == "cpu") => {
                    Some((relative(path), false))
                }
                ("cgroup2", None) => Some((relative(v2_path?), true)),
                _ => None,
            }
        })
    }

    /// Time the cgroup's tasks were throttled by a CPU quota, ns.
    pub(super) fn throttled_ns() -> Option<u64> {
        let (folder, v2) = cpu_folder()?;
        let stat = std::fs::read_to_string(folder.join("cpu.stat")).ok()?;
        let (key, scale) = if v2 {
            ("throttled_usec", 1_000)
        } else {
            ("throttled_time", 1)
        };
        stat.lines().find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then(|| value.trim().parse::<u64>().ok().map(|v| v * scale))?
        })
    }

    /// The cgroup's own CPU pressure (v2 `cpu.pressure`, "some" total), µs; `None` on v1 and
    /// at the root (which has no such file: the host's figure says the same).
    pub(super) fn pressure_some_us() -> Option<u64> {
        let (folder, v2) = cpu_folder()?;
        if !v2 {
            return None;
        }
        let text = std::fs::read_to_string(folder.join("cpu.pressure")).ok()?;
        super::pressure::some_total_us(&text)
    }

    /// The cgroup's CPU quota in thousandths of a CPU, when one is set.
    pub(super) fn quota_milli() -> Option<usize> {
        let (folder, v2) = cpu_folder()?;
        let (quota, period) = if v2 {
            let text = std::fs::read_to_string(folder.join("cpu.max")).ok()?;
            let mut parts = text.split_whitespace();
            (
                parts.next()?.parse::<i64>().ok()?,
                parts.next()?.parse::<i64>().ok()?,
            )
        } else {
            let read = |name: &str| -> Option<i64> {
                std::fs::read_to_string(folder.join(name))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            };
            (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?)
        };
        (quota > 0 && period > 0).then(|| usize::try_from(quota * 1000 / period).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_pressure_is_the_total_of_the_some_line() {
        let text = "some avg10=9.00 avg60=12.60 avg300=12.29 total=70796923\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(pressure::some_total_us(text), Some(70_796_923));
        assert_eq!(pressure::some_total_us("full total=3\n"), None);
    }

    #[test]
    fn steal_is_read_from_the_cpu_sum_of_proc_stat() {
        let before = HostTicks::parse(
            "cpu  1000 10 200 5000 30 0 20 40 0 0\ncpu0 500 5 100 2500 15 0 10 20 0 0\n",
        )
        .expect("a kernel's line");
        assert_eq!(
            before,
            HostTicks {
                total: 6300,
                steal: 40
            }
        );
        // 1000 more ticks of which 150 stolen.
        let later = HostTicks::parse("cpu  1500 10 300 5250 30 0 20 190 0 0\n").expect("line");
        assert!((before.steal_percent_until(later) - 15.0).abs() < 1e-9);
        assert_eq!(before.steal_percent_until(before), 0.0);
        assert!(
            HostTicks::parse("cpu0 1 2 3 4 5 6 7 8\n").is_none(),
            "not the sum"
        );
        assert!(
            HostTicks::parse("cpu  1 2 3 4 5 6 7\n").is_none(),
            "no steal field"
        );
        // This machine's own file parses.
        let here = HostTicks::now();
        assert!(here.total > 0 && here.steal <= here.total, "{here:?}");
    }

    #[test]
    fn a_busy_thread_shows_its_cpu_time() {
        let threads = RunThreads::default();
        threads.register_current();
        let scope = Scope::Threads(threads);
        // The kernel's per-thread CPU clock is the oracle: spin until it says 30 ms ran (on
        // a busy machine that takes longer than 30 ms of wall time), then the schedstat-based
        // reading must show about as much.
        let thread_cpu_ns = || {
            let mut now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime only writes the struct we pass.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
            now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
        };
        let before = Reading::now(&scope);
        let start_cpu = thread_cpu_ns();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut spin = 0u64;
        while thread_cpu_ns() - start_cpu < 30_000_000 && std::time::Instant::now() < deadline {
            spin = spin.wrapping_add(1);
            std::hint::black_box(spin);
        }
        let usage = before.until(Reading::now(&scope), 1);
        assert!(usage.cpu_ns >= 25_000_000, "{usage:?}");
        assert!(usage.cpu_capacity_milli >= 1, "{usage:?}");
    }
}
