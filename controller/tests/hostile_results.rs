//! `controller report DIR` on results folders crafted to harm the machine that reads them
//! (they may come from anywhere, and the controller runs as root): shards out of range,
//! `publishers = 4000000000`, `result.json` a link to `/dev/zero`, a cell id that climbs out
//! with `../`, `figures`, `report.md` and `report.partial` as links to elsewhere, a pipe where
//! a result should be, a `record.json` that is a link or another cell's. (`loadgen merge` on
//! such files: loadgen's `tests/hostile_results.rs`.)
//!
//! The real binaries run on each, and every case checks what a user of the machine cares
//! about: a one-line answer naming the file and the problem, never a panic or an abort, a
//! small peak RSS (the child's own `ru_maxrss` from `wait4`), nothing written outside the
//! folder and no file outside it changed or removed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use controller::plan::{Plan, workload_for};
use controller::results::{CellRecord, CellStatus, Manifest, ResultsDir};
use loadgen::{RunResult, Summary};

const PLAN: &str = r#"
name = "hostile"
nodes = [{ name = "tester", agent = "198.18.0.1:7100", roles = ["loadgen", "broker"] }]
brokers = [{ name = "mosquitto", kind = "native", product = "mosquitto", node = "tester" }]
scenarios = [{ name = "local" }]
tests = [{ kind = "latency", loadgen = ["tester"] }]
"#;

/// A generous bound on a child's peak resident set: reading `/dev/zero` reached 1 GB, a
/// 4e9-publisher allocation aborted; a sound report of this folder stays near 20 MB.
const MAX_RSS_BYTES: u64 = 200 << 20;

/// A hostile input must not make a child hang either.
const DEADLINE: Duration = Duration::from_secs(120);

/// How a child ended.
#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    stderr: String,
    max_rss_bytes: u64,
}

impl Outcome {
    /// Exit 1 and a single line on stderr holding each of `parts`; no panic, small RSS.
    fn refused(&self, what: &str, parts: &[&str]) {
        self.sane(what);
        assert_eq!(self.code, Some(1), "{what}: {self:#?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: one line, got {self:#?}");
        for part in parts {
            assert!(
                lines[0].contains(part),
                "{what}: {part:?} not in {:?}",
                lines[0]
            );
        }
    }

    /// No panic, no abort, a small peak RSS.
    fn sane(&self, what: &str) {
        println!(
            "{what}: exit {:?}, peak RSS {:.1} MB",
            self.code,
            self.max_rss_bytes as f64 / 1e6
        );
        assert!(
            !self.stderr.contains("panicked") && self.code != Some(101),
            "{what}: {self:#?}"
        );
        assert!(self.code.is_some(), "{what}: killed by a signal: {self:#?}");
        assert!(
            self.max_rss_bytes < MAX_RSS_BYTES,
            "{what}: peak RSS {} bytes",
            self.max_rss_bytes
        );
    }
}

/// Runs `program` with `args`, its output in files (a full pipe must not stall it), and
/// reaps it with `wait4` for its own resource usage.
fn run(program: &Path, args: &[OsString], scratch: &Path) -> Outcome {
    let stdout_path = scratch.join("stdout");
    let stderr_path = scratch.join("stderr");
    let child = Command::new(program)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("spawned");
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let started = Instant::now();
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: rusage is plain data wait4 fills; the pid is our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            break (status, usage);
        }
        assert!(reaped == 0, "wait4: {}", std::io::Error::last_os_error());
        if started.elapsed() > DEADLINE {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!(
                "{} {args:?} did not end within {DEADLINE:?}",
                program.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(child);
    Outcome {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stderr: fs::read_to_string(&stderr_path).unwrap_or_default(),
        // ru_maxrss is in KiB on Linux.
        max_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
    }
}

/// Every entry under `root` (links as their target text, files as their bytes, with their
/// modification time), to show that nothing there changed.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("listed") {
            let path = entry.expect("entry").path();
            let meta = fs::symlink_metadata(&path).expect("stat");
            let mtime = format!("{:?}", meta.modified().ok());
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).expect("link");
                out.insert(
                    path,
                    (
                        format!("link {mtime}"),
                        target.into_os_string().into_encoded_bytes(),
                    ),
                );
            } else if meta.is_dir() {
                out.insert(path.clone(), (format!("dir {mtime}"), Vec::new()));
                pending.push(path);
            } else {
                out.insert(
                    path.clone(),
                    (format!("file {mtime}"), fs::read(&path).expect("read")),
                );
            }
        }
    }
    out
}

/// A sound results folder at `dir`: the plan's one latency cell measured, read through its
/// `record.json` or (`cell_records` false, a folder written before records) through
/// `summary.csv`. Returns its cell id and result.
fn sound_folder(dir: &Path, cell_records: bool) -> (String, RunResult) {
    let plan = Plan::parse(PLAN, "plan.toml").expect("plan");
    let results = ResultsDir::open(dir).expect("open");
    let manifest = Manifest {
        plan: plan.clone(),
        plan_text: PLAN.to_string(),
        controller_version: "0.1.0".into(),
        started_unix_ms: 1_777_638_896_789,
        nodes: Vec::new(),
        netem: Vec::new(),
        skipped: Vec::new(),
        brokers: Vec::new(),
        testbed: None,
        paths: Vec::new(),
        cell_records,
    };
    results.write_manifest(&manifest).expect("manifest");
    let cell = plan.cells().swap_remove(0);
    let id = cell.id(&plan);
    let spec = workload_for(&plan.tests[0], None, None).expect("workload");
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
    let record = CellRecord {
        cell: id.clone(),
        broker: "mosquitto".into(),
        scenario: "local".into(),
        test: plan.tests[0].kind,
        point: cell.point,
        repetition: cell.repetition,
        status: CellStatus::Ok,
        reason: String::new(),
        earlier_failures: 0,
        spec: Some(result.spec.clone()),
        summary: Some(Summary::of(&result)),
        usage: None,
        generator_limit: None,
        saturation: None,
    };
    results
        .record(&record, Some(&result), None)
        .expect("record");
    (id, result)
}

/// The folders of one case: the run's, and decoys beside it that must stay untouched.
struct Case {
    _root: tempfile::TempDir,
    run: PathBuf,
    outside: PathBuf,
    scratch: PathBuf,
    cell: String,
    publishers: u32,
}

impl Case {
    /// A folder as this version writes it: each cell has its record.
    fn new() -> Self {
        Self::with(true)
    }

    /// A folder written before records: the report reads `summary.csv`.
    fn legacy() -> Self {
        Self::with(false)
    }

    fn with(cell_records: bool) -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        let run = root.path().join("run");
        let outside = root.path().join("outside");
        let scratch = root.path().join("scratch");
        for dir in [&outside, &scratch] {
            fs::create_dir_all(dir).expect("mkdir");
        }
        let (cell, result) = sound_folder(&run, cell_records);
        // Decoys a hostile folder points at: a result, figures and a file to overwrite.
        fs::create_dir_all(outside.join("x")).expect("mkdir");
        let decoy = serde_json::to_string(&result).expect("json");
        fs::write(outside.join("x/result.json"), decoy).expect("decoy result");
        fs::create_dir_all(outside.join("figures")).expect("mkdir");
        fs::write(outside.join("figures/old.svg"), "<svg/>").expect("decoy figure");
        fs::write(outside.join("figures/keep.txt"), "keep").expect("decoy file");
        fs::write(outside.join("target.txt"), "do not overwrite").expect("decoy target");
        Case {
            publishers: result.spec.publishers,
            _root: root,
            run,
            outside,
            scratch,
            cell,
        }
    }

    fn result_path(&self) -> PathBuf {
        self.run.join("cells").join(&self.cell).join("result.json")
    }

    /// Rewrites the cell's `result.json` through its JSON.
    fn edit_result(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = self.result_path();
        let mut json: serde_json::Value =
            serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
        edit(&mut json);
        fs::write(&path, json.to_string()).expect("write");
    }

    /// `controller report` on the folder; checks that nothing outside it changed.
    fn report(&self) -> Outcome {
        let before = snapshot(&self.outside);
        let outcome = run(
            Path::new(env!("CARGO_BIN_EXE_controller")),
            &["report".into(), self.run.clone().into_os_string()],
            &self.scratch,
        );
        assert_eq!(snapshot(&self.outside), before, "something outside changed");
        outcome
    }

    /// The report's Markdown, its escapes (`\\[`) removed.
    fn markdown(&self) -> String {
        fs::read_to_string(self.run.join("report.md"))
            .expect("report.md")
            .replace('\\', "")
    }
}

/// The report is written, and names the cell's `result.json` and the problem in one line.
fn left_out(case: &Case, what: &str, problem: &str) {
    let outcome = case.report();
    outcome.sane(what);
    assert_eq!(outcome.code, Some(0), "{what}: {outcome:#?}");
    let md = case.markdown();
    let line = md
        .lines()
        .find(|line| line.contains(problem))
        .unwrap_or_else(|| panic!("{what}: {problem:?} not in the report:\n{md}"));
    assert!(
        line.contains("result.json") && line.contains("cell left out"),
        "{what}: {line}"
    );
}

#[test]
fn a_sound_folder_reports() {
    for case in [Case::new(), Case::legacy()] {
        let outcome = case.report();
        outcome.sane("sound folder");
        assert_eq!(outcome.code, Some(0), "{outcome:#?}");
        assert!(!case.markdown().contains("left out"), "{}", case.markdown());
    }
}

#[test]
fn shards_beyond_the_workload_are_named_not_indexed() {
    let case = Case::new();
    let end = case.publishers + 3;
    case.edit_result(|json| json["shards"][0]["publishers"]["end"] = end.into());
    let problem = format!(
        "shards[0].publishers: 0..{end} does not lie within the workload's {} publishers",
        case.publishers
    );
    left_out(&case, "shards out of range", &problem);
}

#[test]
fn four_billion_publishers_are_refused_before_anything_is_allocated() {
    let case = Case::new();
    case.edit_result(|json| json["spec"]["publishers"] = 4_000_000_000u64.into());
    let problem = "spec.publishers: 4000000000: at most 100000";
    left_out(&case, "4e9 publishers", problem);
}

#[test]
fn a_result_that_is_a_link_or_a_pipe_is_not_read() {
    let case = Case::new();
    let path = case.result_path();
    fs::remove_file(&path).expect("removed");
    symlink("/dev/zero", &path).expect("link");
    left_out(&case, "result.json -> /dev/zero", "is a symbolic link");

    fs::remove_file(&path).expect("removed");
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a C path");
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
    left_out(&case, "result.json a pipe", "is a pipe, not a regular file");
}

#[test]
fn a_cell_id_that_climbs_out_of_the_folder_is_not_followed() {
    for climb in ["../../outside/x", "../../../../outside/x"] {
        let case = Case::legacy();
        let summary = case.run.join("summary.csv");
        let text = fs::read_to_string(&summary).expect("summary");
        fs::write(&summary, text.replace(&case.cell, climb)).expect("rewritten");
        left_out(&case, climb, "not a path inside");
    }
}

#[test]
fn links_planted_where_the_report_writes_are_not_written_through() {
    // figures -> a folder elsewhere: refused in one line, its files untouched.
    let case = Case::new();
    symlink(case.outside.join("figures"), case.run.join("figures")).expect("link");
    case.report()
        .refused("figures -> elsewhere", &["figures", "symbolic link"]);

    // report.md and report.partial -> a file elsewhere: replaced by the report, the file
    // they point at untouched (report() compares everything outside).
    let case = Case::new();
    let target = case.outside.join("target.txt");
    symlink(&target, case.run.join("report.md")).expect("link");
    symlink(&target, case.run.join("report.partial")).expect("link");
    symlink(&target, case.run.join("figures.partial")).expect("link");
    let outcome = case.report();
    outcome.sane("report.md and report.partial -> elsewhere");
    assert_eq!(outcome.code, Some(0), "{outcome:#?}");
    let written = fs::symlink_metadata(case.run.join("report.md")).expect("stat");
    assert!(written.is_file(), "report.md is now the report itself");
    assert!(case.markdown().starts_with('#'), "{}", case.markdown());
    assert_eq!(
        fs::read_to_string(&target).expect("read"),
        "do not overwrite"
    );

    // A stale figure that is a link elsewhere is removed as a link, its target kept.
    let case = Case::new();
    fs::create_dir_all(case.run.join("figures")).expect("mkdir");
    symlink(
        case.outside.join("figures/old.svg"),
        case.run.join("figures/old.svg"),
    )
    .expect("link");
    let outcome = case.report();
    outcome.sane("a stale figure linked elsewhere");
    assert_eq!(outcome.code, Some(0), "{outcome:#?}");
    assert!(fs::symlink_metadata(case.run.join("figures/old.svg")).is_err());
}

/// A folder of records: a broker name in the manifest's plan that would make a cell id climb
/// out is not followed; a record that is a link, or that is another cell's, is left out and
/// named.
#[test]
fn a_record_that_climbs_out_is_a_link_or_is_another_cells_is_left_out() {
    let line_of = |case: &Case, problem: &str| {
        let md = case.markdown();
        md.lines()
            .find(|line| line.contains(problem))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{problem:?} not in the report:\n{md}"))
    };
    let case = Case::new();
    let manifest = case.run.join("manifest.json");
    let text = fs::read_to_string(&manifest).expect("manifest");
    fs::write(
        &manifest,
        text.replace("\"mosquitto\"", "\"../../outside/x\""),
    )
    .expect("edit");
    let outcome = case.report();
    outcome.sane("a broker name that climbs");
    assert_eq!(outcome.code, Some(0), "{outcome:#?}");
    assert!(line_of(&case, "not a path inside").contains("record.json"));

    let case = Case::new();
    let record = case.run.join("cells").join(&case.cell).join("record.json");
    fs::remove_file(&record).expect("removed");
    symlink("/dev/zero", &record).expect("link");
    let outcome = case.report();
    outcome.sane("record.json -> /dev/zero");
    assert_eq!(outcome.code, Some(0), "{outcome:#?}");
    assert!(line_of(&case, "is a symbolic link").contains("record.json"));

    let case = Case::new();
    let record = case.run.join("cells").join(&case.cell).join("record.json");
    let text = fs::read_to_string(&record).expect("record");
    fs::write(
        &record,
        text.replace(&case.cell, "mosquitto/local/0-latency/-/9"),
    )
    .expect("edit");
    let outcome = case.report();
    outcome.sane("another cell's record");
    assert_eq!(outcome.code, Some(0), "{outcome:#?}");
    assert!(line_of(&case, "it is the record of cell").contains("cell left out"));
}

/// A manifest whose plan unrolls to billions of cells (no run accepts such a plan, but the
/// manifest is read back unvalidated) is named, not listed cell by cell.
#[test]
fn a_manifest_of_billions_of_cells_is_named_not_listed() {
    let case = Case::new();
    let manifest = case.run.join("manifest.json");
    let text = fs::read_to_string(&manifest).expect("manifest");
    let huge = text.replace("\"repetitions\": 1,", "\"repetitions\": 4294967295,");
    assert_ne!(text, huge, "the manifest names its repetitions");
    fs::write(&manifest, huge).expect("edit");
    let outcome = case.report();
    outcome.sane("4e9 repetitions");
    assert_eq!(outcome.code, Some(0), "{outcome:#?}");
    assert!(
        case.markdown()
            .contains("manifest.json: its plan has more than 100000 cells"),
        "{}",
        case.markdown()
    );
}

#[test]
fn a_summary_or_manifest_that_is_a_link_is_refused_in_one_line() {
    for name in ["summary.csv", "manifest.json"] {
        let case = Case::legacy();
        let path = case.run.join(name);
        fs::remove_file(&path).expect("removed");
        symlink("/dev/zero", &path).expect("link");
        case.report()
            .refused(&format!("{name} -> /dev/zero"), &[name, "symbolic link"]);
    }
}
