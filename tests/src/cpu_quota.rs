//! A CPU quota on one process, through a cgroup of its own: a broker held to a share of a
//! core (an edge node's broker, and one the load generator can outrun), or a load generator
//! deliberately starved to see it say so.
//!
//! Works with cgroup v1 (a `cpu` hierarchy: `cpu.cfs_quota_us`) and v2 (`cpu.max`, with the
//! `cpu` controller enabled for children of the root). The cgroup is removed on drop, after
//! moving its processes back to the root.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The scheduler's accounting period the quota is a share of, µs.
const PERIOD_US: u64 = 10_000;

/// A cgroup holding one process to a share of one CPU.
#[derive(Debug)]
pub struct CpuQuota {
    dir: PathBuf,
    root: PathBuf,
}

/// Where the CPU controller's hierarchy is mounted, and whether it is v2.
fn cpu_root() -> Option<(PathBuf, bool)> {
    for v1 in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
        if Path::new(v1).join("cpu.cfs_quota_us").exists() {
            return Some((PathBuf::from(v1), false));
        }
    }
    for v2 in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let controllers = fs::read_to_string(Path::new(v2).join("cgroup.controllers")).ok()?;
        if controllers.split_whitespace().any(|c| c == "cpu") {
            return Some((PathBuf::from(v2), true));
        }
    }
    None
}

/// Why a CPU quota cannot be set on this machine, or `None` if it can.
pub fn cpu_quota_unavailable() -> Option<String> {
    let (root, _) = match cpu_root() {
        None => return Some("no cgroup CPU controller is mounted".to_string()),
        Some(found) => found,
    };
    // Mode bits say little here (cgroup folders are 0555 yet writable by root): try it.
    let probe = root.join(format!("continuum-probe-{}", std::process::id()));
    match fs::create_dir(&probe) {
        Ok(()) => {
            let _ = fs::remove_dir(&probe);
            None
        }
        Err(error) => Some(format!(
            "cannot make a cgroup under {}: {error}",
            root.display()
        )),
    }
}

impl CpuQuota {
    /// Holds process `pid` (all its threads) to `share` of one CPU (0.3 = 30 %).
    pub fn limit(pid: u32, share: f64) -> Result<Self> {
        let Some((root, v2)) = cpu_root() else {
            bail!("no cgroup CPU controller is mounted");
        };
        if !(share > 0.0 && share <= 64.0) {
            bail!("a CPU share must lie in (0, 64], not {share}");
        }
        let dir = root.join(format!("continuum-test-{pid}-{}", std::process::id()));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let quota_us = ((share * PERIOD_US as f64) as u64).max(1_000);
        let quota = CpuQuota {
            dir: dir.clone(),
            root,
        };
        if v2 {
            fs::write(dir.join("cpu.max"), format!("{quota_us} {PERIOD_US}"))
                .context("writing cpu.max")?;
        } else {
            fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())
                .context("writing cpu.cfs_period_us")?;
            fs::write(dir.join("cpu.cfs_quota_us"), quota_us.to_string())
                .context("writing cpu.cfs_quota_us")?;
        }
        fs::write(dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving process {pid} into {}", dir.display()))?;
        Ok(quota)
    }

    /// Time the quota held its processes back so far, ns.
    pub fn throttled_ns(&self) -> u64 {
        let stat = fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        stat.lines()
            .find_map(|line| match line.split_once(' ') {
                Some(("throttled_time", ns)) => ns.trim().parse().ok(),
                Some(("throttled_usec", us)) => us.trim().parse::<u64>().ok().map(|v| v * 1_000),
                _ => None,
            })
            .unwrap_or(0)
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // A cgroup with processes cannot be removed: hand them back to the root first.
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = fs::write(self.root.join("cgroup.procs"), pid);
            }
        }
        let _ = fs::remove_dir(&self.dir);
    }
}
