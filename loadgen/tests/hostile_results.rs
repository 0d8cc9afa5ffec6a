//! `loadgen merge` on result files crafted to harm the machine that reads them: shards out of
//! range, `publishers = 4000000000`, a file that is a link to `/dev/zero`, a pipe, a device.
//! Each is refused in one line naming the file and the problem, exit 1, never a panic or an
//! abort, at a small peak RSS (the child's own, from `wait4`); a sound file merges.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use loadgen::RunResult;

/// A generous bound on the child's peak resident set: reading `/dev/zero` reached 1 GB, a
/// 4e9-publisher allocation aborted; a sound merge stays near 15 MB.
const MAX_RSS_BYTES: u64 = 200 << 20;

/// A sound result of the latency preset, every publisher's messages delivered.
fn sound() -> RunResult {
    let spec = loadgen::presets::latency();
    let mut result = RunResult::empty(&spec, "hostile");
    result.shards.push(spec.effective_shard());
    for p in 0..spec.publishers as usize {
        result.published[p] = spec.messages_per_publisher;
        result.acknowledged[p] = spec.messages_per_publisher;
        result.delivered_unique[p] = spec.messages_per_publisher;
        result
            .latency
            .record(1_000_000 + p as u64 * 1_000)
            .expect("in range");
    }
    result.received = u64::from(spec.publishers) * spec.messages_per_publisher;
    result
}

/// Writes `result` as JSON at `path`, edited through its JSON first.
fn write(path: &Path, result: &RunResult, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut json = serde_json::to_value(result).expect("json");
    edit(&mut json);
    std::fs::write(path, json.to_string()).expect("written");
}

fn merge(files: &[&Path]) -> (Output, u64) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loadgen"));
    command.arg("merge").args(files).env("RUST_BACKTRACE", "0");
    tests::process::output_with_peak_rss(&mut command)
}

/// Exit 1, one line on stderr holding each of `parts`, no panic, a small peak RSS.
fn refused(what: &str, files: &[&Path], parts: &[&str]) {
    let (output, peak_rss) = merge(files);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!(
        "{what}: peak RSS {:.1} MB: {}",
        peak_rss as f64 / 1e6,
        stderr.trim_end()
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert_eq!(output.status.code(), Some(1), "{what}: {output:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: {stderr}");
    for part in parts {
        assert!(
            lines[0].contains(part),
            "{what}: {part:?} not in {:?}",
            lines[0]
        );
    }
    assert!(
        peak_rss < MAX_RSS_BYTES,
        "{what}: peak RSS {peak_rss} bytes"
    );
}

#[test]
fn a_sound_split_result_merges() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut halves: Vec<PathBuf> = Vec::new();
    for (i, range) in [(0u32..50), (50..100)].into_iter().enumerate() {
        let mut half = sound();
        half.shards[0].publishers = range.clone();
        half.shards[0].subscribers = if i == 0 { 0..1 } else { 1..1 };
        let path = dir.path().join(format!("half{i}.json"));
        write(&path, &half, |_| {});
        halves.push(path);
    }
    let (output, peak_rss) = merge(&[&halves[0], &halves[1]]);
    println!("sound merge: peak RSS {:.1} MB", peak_rss as f64 / 1e6);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("latency"));
    assert!(peak_rss < MAX_RSS_BYTES);
}

#[test]
fn crafted_counts_and_ranges_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let result = sound();
    let publishers = result.spec.publishers;
    let path = dir.path().join("shards.json");
    write(&path, &result, |json| {
        json["shards"][0]["publishers"]["end"] = (publishers + 3).into();
    });
    let problem = format!(
        "shards[0].publishers: 0..{} does not lie within the workload's {publishers} publishers",
        publishers + 3
    );
    refused("shards out of range", &[&path], &["shards.json", &problem]);

    let path = dir.path().join("publishers.json");
    write(&path, &result, |json| {
        json["spec"]["publishers"] = 4_000_000_000u64.into();
    });
    refused(
        "4e9 publishers",
        &[&path],
        &[
            "publishers.json",
            "spec.publishers: 4000000000: at most 100000",
        ],
    );

    let path = dir.path().join("published.json");
    write(&path, &result, |json| {
        json["published"][0] = u64::MAX.into();
    });
    refused(
        "a count near u64::MAX",
        &[&path],
        &["published: counts more than"],
    );
}

#[test]
fn a_link_a_pipe_or_a_device_is_not_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let link = dir.path().join("result.json");
    std::os::unix::fs::symlink("/dev/zero", &link).expect("link");
    refused(
        "a link to /dev/zero",
        &[&link],
        &["result.json", "symbolic link"],
    );
    refused(
        "/dev/zero itself",
        &[Path::new("/dev/zero")],
        &["/dev/zero", "is a device"],
    );
    let pipe = dir.path().join("pipe.json");
    let name = std::ffi::CString::new(pipe.as_os_str().as_encoded_bytes()).expect("a C path");
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
    refused("a pipe", &[&pipe], &["pipe.json", "is a pipe"]);
}
