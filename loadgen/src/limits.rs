//! Open-file limits: every client is a socket, and the usual soft limit (1024) is lower than
//! a few hundred pairs need. The soft limit is raised to the hard one where allowed; a
//! workload that needs more than that is refused before it connects, saying what to raise.

/// Descriptors a process needs beyond its clients' sockets (runtime, files, gRPC, ...).
pub const SPARE_FILES: u64 = 256;

/// The process's open-file limits: (soft, hard).
pub fn open_file_limits() -> Option<(u64, u64)> {
    // SAFETY: getrlimit only writes the struct we pass.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0)
            .then_some((limit.rlim_cur as u64, limit.rlim_max as u64))
    }
}

/// Raises the soft limit to the hard one; the soft limit after it.
pub fn raise_open_file_limit() -> Option<u64> {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    open_file_limits().map(|(soft, _)| soft)
}

/// Fails, naming both limits and how to raise them, when `connections` sockets (plus
/// [`SPARE_FILES`]) do not fit in this process's open-file limit, raised first where allowed.
pub fn ensure_open_files(connections: u64) -> Result<(), String> {
    let needed = connections + SPARE_FILES;
    raise_open_file_limit();
    match open_file_limits() {
        Some((soft, hard)) if soft < needed => Err(format!(
            "{connections} connections need about {needed} open files, but this process may \
             open {soft} (RLIMIT_NOFILE, hard limit {hard}): raise it (`ulimit -n {needed}` as \
             root before starting, or LimitNOFILE= in the agent's systemd unit, which sets \
             1048576) or spread the load over more loadgen nodes"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_beyond_the_hard_limit_is_refused_saying_what_to_raise() {
        let (_, hard) = open_file_limits().expect("limits");
        assert_eq!(ensure_open_files(10), Ok(()));
        let soft = open_file_limits().expect("limits").0;
        assert_eq!(soft, hard, "the soft limit was raised to the hard one");
        if hard < u64::MAX - SPARE_FILES {
            let error = ensure_open_files(hard).unwrap_err();
            assert!(error.contains(&format!("hard limit {hard}")), "{error}");
            assert!(error.contains("LimitNOFILE="), "{error}");
        }
    }
}
