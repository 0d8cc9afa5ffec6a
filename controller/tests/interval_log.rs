//! A cell's `latency.hlog`, read back by an independent implementation: the HdrHistogram
//! package from PyPI (`hdrh`, in its own virtual environment at /opt/hdrh; `.ci/run` installs
//! it). The study's latency test runs against a real Mosquitto on loopback, its result is
//! recorded as a cell of a results folder, and the log's intervals added up must give the
//! cell's own count, p50 and p99 (within the histograms' three significant digits).

use std::process::Command;

use controller::plan::{CellPoint, TestKind};
use controller::results::{CellRecord, CellStatus, ResultsDir};
use tests::{Mosquitto, MosquittoOptions};

/// The virtual environment's Python, with `hdrhistogram==0.10.8`.
const HDRH_PYTHON: &str = "/opt/hdrh/bin/python";

/// Reads every interval of the log named by argv[1] with hdrh's own reader and prints the
/// number of intervals, the total count, p50 and p99 of their sum (ns).
const READ_BACK: &str = r#"
import sys
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
bounds = (1, 3_600_000_000_000, 3)
reader = HistogramLogReader(sys.argv[1], HdrHistogram(*bounds))
total, intervals = HdrHistogram(*bounds), 0
while True:
    interval = reader.get_next_interval_histogram()
    if interval is None:
        break
    total.add(interval)
    intervals += 1
print(intervals, total.get_total_count(), total.get_value_at_percentile(50),
      total.get_value_at_percentile(99))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cells_interval_log_reads_back_with_pypis_hdrhistogram_as_its_result() {
    if !tests::components_available(&[tests::mosquitto::MOSQUITTO_BINARY, HDRH_PYTHON]) {
        return;
    }
    let broker = Mosquitto::start(MosquittoOptions::default()).expect("mosquitto starts");
    let mut spec = loadgen::presets::latency();
    spec.broker.port = broker.port();
    let (result, summary) = tests::load::run_dedicated(spec.clone()).await;
    tests::load::assert_nothing_lost(&summary);

    let dir = tempfile::tempdir().expect("temp dir");
    let results = ResultsDir::open(dir.path()).expect("a results folder");
    let cell = "mosquitto/local/0-latency/-/1";
    let record = CellRecord {
        cell: cell.to_string(),
        broker: "mosquitto".into(),
        scenario: "local".into(),
        test: TestKind::Latency,
        point: CellPoint::Single,
        repetition: 1,
        status: CellStatus::Ok,
        reason: String::new(),
        earlier_failures: 0,
        spec: Some(spec),
        summary: Some(summary),
        usage: None,
        generator_limit: None,
        saturation: None,
    };
    results
        .record(&record, Some(&result), None)
        .expect("recorded");
    let log = dir.path().join("cells").join(cell).join("latency.hlog");
    let output = Command::new(HDRH_PYTHON)
        .args(["-c", READ_BACK])
        .arg(&log)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "hdrh could not read {}: {}",
        log.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    let numbers: Vec<u64> = printed
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    let [intervals, count, p50, p99] = numbers[..] else {
        panic!("hdrh printed {printed:?}");
    };
    eprintln!(
        "hdrh read {intervals} intervals: count {count}, p50 {p50} ns, p99 {p99} ns; the \
         result: count {}, p50 {} ns, p99 {} ns",
        result.latency.len(),
        result.latency.value_at_quantile(0.5),
        result.latency.value_at_quantile(0.99)
    );
    // 1,800 measured messages over 4.5 s of 250 ms rounds: at least four 1 s intervals.
    assert!(intervals >= 4, "{intervals} intervals");
    assert_eq!(
        count,
        result.latency.len(),
        "every measured delivery is in the log"
    );
    for (name, theirs, ours) in [
        ("p50", p50, result.latency.value_at_quantile(0.5)),
        ("p99", p99, result.latency.value_at_quantile(0.99)),
    ] {
        // Three significant digits: equivalent values differ by less than 1/1000.
        let tolerance = ours / 1000 + 1;
        assert!(
            theirs.abs_diff(ours) <= tolerance,
            "{name}: hdrh {theirs} ns, the cell's result {ours} ns"
        );
    }
}
