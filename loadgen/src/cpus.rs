//! The CPUs this process may use and the runtime threads a run gets from them: read by the
//! runtime that builds a run's threads, by the result that reports them and by the usage
//! figures that measure against them.

use crate::spec::WorkloadSpec;

/// CPUs this process may run on (its affinity mask), at least one.
pub fn cpus_allowed() -> usize {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into `set`.
    let counted = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            libc::CPU_COUNT(&set) as usize
        } else {
            0
        }
    };
    if counted > 0 {
        counted
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    }
}

/// The runtime threads a spec asks for: its own figure, or half the CPUs allowed.
pub fn threads_for(spec: &WorkloadSpec) -> usize {
    match spec.engine.threads {
        0 => (cpus_allowed() / 2).max(1),
        threads => usize::from(threads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn automatic_threads_leave_half_the_cpus() {
        let mut spec = crate::presets::throughput();
        spec.engine.threads = 0;
        assert_eq!(threads_for(&spec), (cpus_allowed() / 2).max(1));
        spec.engine.threads = 3;
        assert_eq!(threads_for(&spec), 3);
    }
}
