//! `--tls-ca` / `broker.tls_ca_file` names a file that may come from someone other than the
//! operator (a submitted plan reaches an agent's loadgen with it): it is read only as a
//! regular file of at most 1 MiB, so `/dev/zero` is refused with a small peak RSS, and every
//! refusal reads the same, so the answer does not tell an existing file from a missing one.

use std::path::Path;
use std::process::Command;

use tests::free_loopback_port;

/// Runs `loadgen latency` against a closed loopback port with `--tls-ca ca`: the CA is read
/// before any connection. Returns stderr with `ca` replaced by `CA`, and the peak RSS.
fn refused(ca: &Path, port: u16) -> (String, u64) {
    let shown = ca.to_str().expect("UTF-8 path");
    let (output, peak_rss) = tests::process::output_with_peak_rss(
        Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .args(["latency", "--broker", &format!("127.0.0.1:{port}")])
            .args(["--tls-ca", shown, "--no-progress"])
            // The log says why; the error line is what a client of an agent sees.
            .env("RUST_LOG", "off"),
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{shown}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{shown}: {stderr}");
    (stderr.replace(shown, "CA"), peak_rss)
}

#[test]
fn a_ca_file_that_is_not_a_small_regular_file_is_refused_alike_and_small() {
    let port = free_loopback_port().expect("a free port");
    let dir = tempfile::tempdir().expect("temp dir");
    let shadow = dir.path().join("shadow");
    std::fs::write(&shadow, "root:*:19000:0:99999:7:::\n").expect("written");
    let (expected, _) = refused(&dir.path().join("missing.pem"), port);
    assert!(
        expected.contains("broker.tls_ca_file CA: not usable"),
        "{expected}"
    );
    for ca in [Path::new("/dev/zero"), &shadow, dir.path()] {
        let (message, peak_rss) = refused(ca, port);
        eprintln!("{}: peak RSS {} KiB", ca.display(), peak_rss / 1024);
        assert_eq!(message, expected, "{}", ca.display());
        assert!(
            peak_rss < 64 << 20,
            "{} peaked at {} MiB",
            ca.display(),
            peak_rss >> 20
        );
    }
}
