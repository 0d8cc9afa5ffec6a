//! The shipped systemd unit: systemd itself must accept it (PID 1 here is not systemd, so it
//! is verified with `systemd-analyze verify`, not started), and it must keep what the agent
//! needs: SIGTERM for a clean stop, CAP_NET_ADMIN for netem.

use std::time::Duration;

use host::blocking::run_with_deadline;
use tests::skip_unless_installed;

const UNIT: &str = include_str!("../systemd/continuum-agent.service");
const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";

#[test]
fn systemd_accepts_the_unit_and_it_keeps_what_the_agent_needs() {
    skip_unless_installed!(SYSTEMD_ANALYZE);
    let dir = tempfile::tempdir().expect("temp dir");
    // verify checks that ExecStart exists: point it at the binary this build made.
    let unit = UNIT.replace(
        "/usr/local/bin/continuum-agent",
        env!("CARGO_BIN_EXE_continuum-agent"),
    );
    let path = dir.path().join("continuum-agent.service");
    std::fs::write(&path, unit).expect("unit written");
    let mut verify = std::process::Command::new(SYSTEMD_ANALYZE);
    verify.arg("verify").arg(&path);
    let output = run_with_deadline(&mut verify, None, Duration::from_secs(30))
        .expect("systemd-analyze runs");
    let complaints = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "systemd-analyze verify failed: {complaints}"
    );
    assert!(
        !complaints.contains("continuum-agent.service"),
        "systemd complains about the unit: {complaints}"
    );
    for needed in [
        "KillSignal=SIGTERM",
        "CAP_NET_ADMIN",
        "Restart=on-failure",
        "LimitNOFILE=",
    ] {
        assert!(UNIT.contains(needed), "the unit lost {needed}");
    }
}
