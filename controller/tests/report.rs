//! The report rebuilt from a results folder written with the real writer API: 2 brokers x 2
//! scenarios x 3 tests x 2 repetitions of synthetic results with known figures, one cell
//! retried, one failed for good, an optional broker skipped.

mod report_svg;
use report_svg::check_svg;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use controller::plan::{CellPoint, Plan, TestKind, workload_for};
use controller::report::{ReportFiles, write_report};
use controller::results::{
    AppliedNetem, BrokerRecord, CellRecord, CellStatus, ClusterNode, ClusterRecord, Manifest,
    MetricsRow, NetemRecord, NodeRecord, OverlayPeer, OverlayRecord, ResultsDir, TestbedRecord,
};
use loadgen::result::ClientWindow;
use loadgen::{RunResult, Summary};

const PLAN: &str = r#"
name = "report-test"
repetitions = 2
nodes = [
  { name = "tester", agent = "198.18.0.1:7100", roles = ["loadgen", "netem"] },
  { name = "worker", agent = "198.18.0.3:7100", roles = ["broker", "netem"] },
]
brokers = [
  { name = "mosquitto", kind = "native", product = "mosquitto", node = "worker" },
  { name = "rabbitmq", kind = "native", product = "rabbitmq", node = "worker" },
  { name = "emqx", kind = "native", product = "emqx", node = "worker", optional = true },
]
scenarios = [{ name = "local" }, { name = "edge" }]
tests = [
  { kind = "latency", loadgen = ["tester"] },
  { kind = "payload", loadgen = ["tester"] },
  { kind = "burst", loadgen = ["tester"], clients = [100, 200], messages = 1000 },
]
"#;

/// netem asked on each end of the edge scenario: half of its 2.5 ms.
const EDGE_HALF: NetemRecord = NetemRecord {
    delay_ns: 1_250_000,
    jitter_ns: 250_000,
    loss_percent: 0.02,
    rate_bytes_per_sec: None,
    limit_packets: None,
    gilbert_elliott: None,
};

/// Reads one rate of a cell's summary.
type Rate = fn(&Summary) -> f64;

const FAILED: &str = "rabbitmq/edge/2-burst/200/2";
const RETRIED: &str = "mosquitto/local/0-latency/-/2";

/// The median latency recorded for a broker, scenario and payload, µs.
fn median_us(broker: &str, scenario: &str, payload: u64) -> f64 {
    let (base, edge) = match broker {
        "mosquitto" => (4_000.0, 2_450.0),
        _ => (5_000.0, 2_600.0),
    };
    base + edge * f64::from(u8::from(scenario == "edge")) + payload as f64 * 0.06
}

/// Latency cell: every measured message at median -1, -0.5, 0, +0.5, +1 ms in equal numbers,
/// so median, p25 and p75 are exactly known.
fn fill_latency(result: &mut RunResult, median: f64) {
    let spec = result.spec.clone();
    let measured = spec.messages_per_publisher - spec.warmup_messages;
    for p in 0..spec.publishers as usize {
        for seq in 0..measured {
            let offset = [-1_000.0, -500.0, 0.0, 500.0, 1_000.0][(p + seq as usize) % 5];
            let ns = ((median + offset) * 1_000.0) as u64;
            result.latency.record(ns).expect("in range");
            let sent = seq * 250_000_000 + p as u64 * 1_000_000;
            result.publish_series.add(sent, 1);
            result.receive_series.add(sent + ns, 1);
        }
        result.published[p] = spec.messages_per_publisher;
        result.acknowledged[p] = spec.messages_per_publisher;
        result.delivered_unique[p] = spec.messages_per_publisher;
    }
    result.received = u64::from(spec.publishers) * spec.messages_per_publisher;
}

/// Throughput cell: N pairs, publisher p sending at `rate * (0.8 + 0.4 p / N)` msg/s from
/// p x 0.2 ms on, its subscriber receiving at half that; rabbitmq loses every 100th message.
fn fill_throughput(result: &mut RunResult, broker: &str, rate: f64) {
    let spec = result.spec.clone();
    let pairs = spec.publishers;
    for p in 0..pairs {
        let own = rate * (0.8 + 0.4 * f64::from(p) / f64::from(pairs));
        let start = u64::from(p) * 200_000;
        let (mut received, mut last_receive) = (0, 0);
        for seq in 0..spec.messages_per_publisher {
            let sent = start + (seq as f64 * 1e9 / own) as u64;
            result.publish_series.add(sent, 1);
            if broker == "rabbitmq" && seq % 100 == 99 {
                continue;
            }
            last_receive = start + 1_000_000 + (seq as f64 * 2e9 / own) as u64;
            result.receive_series.add(last_receive, 1);
            let latency = last_receive - sent;
            result.latency.record(latency).expect("in range");
            received += 1;
        }
        let (n, count) = (p as usize, spec.messages_per_publisher);
        result.published[n] = count;
        result.delivered_unique[n] = received;
        result.received += received;
        let last_sent = start + ((count - 1) as f64 * 1e9 / own) as u64;
        let (sending, receiving) = (start, start + 1_000_000);
        let publisher = window(p, sending, last_sent, count);
        result.publisher_windows.push(publisher);
        let subscriber = window(p, receiving, last_receive, received);
        result.subscriber_windows.push(subscriber);
    }
}

fn window(client: u32, first_ns: u64, last_ns: u64, count: u64) -> ClientWindow {
    ClientWindow {
        client,
        first_ns,
        last_ns,
        count,
    }
}

/// The folder as [`build`] writes it, its manifest saying the report reads `summary.csv`
/// instead of the cells' records, as a folder written before records does.
fn to_legacy(dir: &Path) {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).expect("manifest");
    let legacy = text.replace("\"cell_records\": true", "\"cell_records\": false");
    assert_ne!(text, legacy, "the manifest names its records");
    std::fs::write(&path, legacy).expect("manifest");
}

/// Writes the whole folder; returns the summaries of the throughput cells by cell id.
fn build(dir: &Path, plan_text: &str) -> Vec<(String, Summary)> {
    let plan = Plan::parse(plan_text, "plan.toml").expect("plan");
    let results = ResultsDir::open(dir).expect("open");
    let node = |name: &str, offset: i64| NodeRecord {
        name: name.into(),
        agent: "198.18.0.1:7100".into(),
        arch: "x86_64".into(),
        cores: 4,
        memory_bytes: 8_000_000_000,
        kernel: "6.1.0-18-amd64".into(),
        os: "Debian GNU/Linux 12".into(),
        agent_version: "0.1.0".into(),
        netem: "yes".into(),
        clock_offset_ns: offset,
        clock_error_bound_ns: 40_000,
    };
    let netem = |broker: &str, node: &str| AppliedNetem {
        broker: broker.into(),
        scenario: "edge".into(),
        node: node.into(),
        interface: "nebula1".into(),
        asked: EDGE_HALF,
        read_back: Some(NetemRecord {
            limit_packets: Some(1000),
            ..EDGE_HALF
        }),
    };
    let manifest = Manifest {
        plan: plan.clone(),
        plan_text: plan_text.to_string(),
        controller_version: "0.1.0".into(),
        started_unix_ms: 1_777_638_896_789,
        nodes: vec![node("tester", 0), node("worker", -1_250_000)],
        netem: ["mosquitto", "rabbitmq"]
            .iter()
            .flat_map(|b| [netem(b, "tester"), netem(b, "worker")])
            .collect(),
        skipped: vec!["broker emqx: not installed on worker (optional), skipped".into()],
        brokers: vec![BrokerRecord {
            name: "mosquitto".into(),
            node: "headnode".into(),
            address: "198.19.0.3:31883".into(),
            websocket_address: None,
            quic_address: None,
            detail: "mosquitto (eclipse-mosquitto:1.6.15-openssl) as Deployment continuum/mosquitto on node worker, NodePort 31883".into(),
            capabilities: None,
        }],
        testbed: Some(TestbedRecord {
            overlay: vec![
                OverlayRecord {
                    node: "headnode".into(),
                    lighthouse: true,
                    overlay_cidr: "198.19.0.2/24".into(),
                    detail: "started".into(),
                    peers: Vec::new(),
                },
                OverlayRecord {
                    node: "worker".into(),
                    lighthouse: false,
                    overlay_cidr: "198.19.0.3/24".into(),
                    detail: "already running".into(),
                    peers: vec![OverlayPeer {
                        address: "198.19.0.2".into(),
                        reachable: true,
                        detail: "first answer 1.2 ms".into(),
                    }],
                },
            ],
            cluster: Some(ClusterRecord {
                server: "headnode".into(),
                nodes: vec![
                    ClusterNode {
                        name: "headnode".into(),
                        ready: true,
                        internal_ip: "198.19.0.2".into(),
                        taints: vec!["node-role.kubernetes.io/control-plane=true:NoSchedule".into()],
                    },
                    ClusterNode {
                        name: "worker".into(),
                        ready: true,
                        internal_ip: "198.19.0.3".into(),
                        taints: Vec::new(),
                    },
                ],
            }),
        }),
        paths: Vec::new(),
        cell_records: true,
    };
    results.write_manifest(&manifest).expect("manifest");
    let mut throughput = Vec::new();
    for cell in plan.cells() {
        let id = cell.id(&plan);
        let (broker, test) = (&plan.brokers[cell.broker].name, &plan.tests[cell.test]);
        let scenario = &plan.scenarios[cell.scenario].name;
        let row = |status, reason: &str, result: Option<&RunResult>| CellRecord {
            cell: id.clone(),
            broker: broker.clone(),
            scenario: scenario.clone(),
            test: test.kind,
            point: cell.point,
            repetition: cell.repetition,
            status,
            reason: reason.to_string(),
            earlier_failures: 0,
            spec: result.map(|result| result.spec.clone()),
            summary: result.map(Summary::of),
            usage: None,
            generator_limit: None,
            saturation: None,
        };
        let (failed, skipped) = (CellStatus::Failed, CellStatus::Skipped);
        if broker == "emqx" {
            let skip = row(skipped, "not installed (optional)", None);
            results.record(&skip, None, None).expect("record");
            continue;
        }
        if id == FAILED {
            let fail = row(failed, "agent worker lost: connection reset", None);
            results.record(&fail, None, None).expect("record");
            let samples = metrics(&id, broker, 999.0, 999_000_000);
            results.record_metrics(&samples).expect("metrics");
            continue;
        }
        if id == RETRIED {
            let fail = row(failed, "broker did not answer within 120s", None);
            results.record(&fail, None, None).expect("record");
        }
        let (payload, clients) = match cell.point {
            CellPoint::Payload(size) => (Some(size), None),
            CellPoint::Clients(n) => (None, Some(n)),
            CellPoint::Single => (None, None),
        };
        let spec = workload_for(test, payload, clients).expect("workload");
        let mut result = RunResult::empty(&spec, &id.replace('/', "-"));
        result.shards.push(spec.effective_shard());
        if test.kind == TestKind::Burst {
            let rate = [8_000.0, 5_000.0][cell.broker] * (0.9 + 0.1 * f64::from(cell.repetition));
            fill_throughput(&mut result, broker, rate);
            if cell.broker == 1 {
                // The broker's answers by reason code, one count per code.
                result.count_error("puback_refused_quota_exceeded", 3);
                result.count_error("broker_disconnect_server_busy", 1);
                result.count_error("connection_closed", 1);
            }
            throughput.push((id.clone(), Summary::of(&result)));
        } else {
            let payload = payload.map_or(0, |size| size.bytes());
            fill_latency(&mut result, median_us(broker, scenario, payload));
        }
        let ok = row(CellStatus::Ok, "", Some(&result));
        results.record(&ok, Some(&result), None).expect("record");
        let cpu = [10.0, 10.0, 80.0][cell.test];
        let samples = metrics(&id, broker, cpu, 12_000_000);
        results.record_metrics(&samples).expect("metrics");
    }
    throughput
}

/// Three broker samples (cpu - 5, cpu, cpu + 5; RSS up to `rss`) and one node-only sample.
fn metrics(cell: &str, broker: &str, cpu: f64, rss: u64) -> Vec<MetricsRow> {
    let row = |i: u64, process: &str, cpu: f64, rss: u64| MetricsRow {
        cell: cell.into(),
        unix_ns: 1_777_638_896_789_000_000 + i,
        node: "worker".into(),
        node_cpu_percent: 20.0,
        node_memory_used_bytes: 2_000_000_000,
        process: process.into(),
        process_cpu_percent: cpu,
        process_rss_bytes: rss,
    };
    vec![
        row(0, broker, cpu - 5.0, rss - 2_000_000),
        row(1, broker, cpu, rss),
        row(2, broker, cpu + 5.0, rss - 1_000_000),
        row(3, "", 0.0, 0),
    ]
}

/// The rows of the Markdown table whose header starts with `first_columns`, by column name.
fn table(md: &str, first_columns: &str) -> Vec<Vec<(String, String)>> {
    let mut lines = md.lines().skip_while(|l| !l.starts_with(first_columns));
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().replace('\\', ""))
            .collect()
    };
    let header = cells(
        lines
            .next()
            .unwrap_or_else(|| panic!("no table {first_columns}")),
    );
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| header.iter().cloned().zip(cells(l)).collect())
        .collect()
}

fn get<'a>(row: &'a [(String, String)], column: &str) -> &'a str {
    row.iter()
        .find(|(c, _)| c == column)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no column {column}"))
}

/// The leading number of a cell such as `140,000 (139,000-141,000)` or `5.39-1.00`.
fn number(text: &str) -> f64 {
    let lead: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .collect();
    lead.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("no number in {text:?}"))
}

/// The bytes of every file of a report.
fn contents(files: &ReportFiles) -> Vec<Vec<u8>> {
    let all = [&files.markdown, &files.html]
        .into_iter()
        .chain(&files.figures);
    all.map(|p| std::fs::read(p).expect("read")).collect()
}

fn near(shown: f64, expected: f64, tolerance: f64, what: &str) {
    let off = (shown - expected).abs();
    assert!(off <= tolerance, "{what}: {shown}, recorded {expected}");
}

#[test]
fn the_report_shows_what_was_recorded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let throughput = build(dir.path(), PLAN);
    let files = write_report(dir.path()).expect("report");
    let md = std::fs::read_to_string(&files.markdown).expect("report.md");
    let html = std::fs::read_to_string(&files.html).expect("report.html");

    // Every figure is well-formed SVG, as a file and inside the page.
    assert!(files.figures.len() >= 7, "{:?}", files.figures);
    for path in &files.figures {
        let svg = std::fs::read_to_string(path).expect("figure");
        check_svg(&svg).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let inline: Vec<&str> = html
        .split("<svg ")
        .skip(1)
        .map(|rest| rest.split("</svg>").next().unwrap_or(""))
        .collect();
    assert_eq!(inline.len(), files.figures.len());
    for svg in inline {
        check_svg(&format!("<svg {svg}</svg>")).expect("inline SVG");
    }
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href=\"http"));

    // The broker's answers by reason code, summed over the repetitions; other errors are not
    // answers.
    let answers = table(
        &md,
        "| Test | Broker | Scenario | Repetitions | Answers by reason code",
    );
    assert!(!answers.is_empty(), "an answers table");
    for row in &answers {
        assert_eq!(get(row, "Broker"), "rabbitmq", "{row:?}");
        let repetitions: u64 = get(row, "Repetitions").parse().expect("a count");
        assert_eq!(
            get(row, "Answers by reason code (summed)"),
            format!(
                "broker_disconnect_server_busy: {}; puback_refused_quota_exceeded: {}",
                repetitions,
                3 * repetitions
            )
        );
    }

    // Latency: merged medians of both repetitions; the retried cell counts once.
    let rows = table(&md, "| Broker | Scenario | Median (ms)");
    assert_eq!(rows.len(), 4);
    for row in &rows {
        let (broker, scenario) = (get(row, "Broker"), get(row, "Scenario"));
        let expected = median_us(broker, scenario, 0) / 1e3;
        let median = number(get(row, "Median (ms)"));
        near(
            median,
            expected,
            expected * 1e-3,
            &format!("{broker} {scenario} median"),
        );
        near(number(get(row, "IQR (ms)")), 1.0, 0.01, "IQR");
        assert_eq!(
            (get(row, "Samples"), get(row, "Repetitions")),
            ("3600", "2"),
            "{row:?}"
        );
    }

    // Latency vs payload, as the study's tables: median-IQR per scenario.
    let rows = table(&md, "| Payload | Broker |");
    assert_eq!(rows.len(), 6, "3 payloads x 2 brokers");
    for row in &rows {
        let payload: loadgen::size::ByteSize = get(row, "Payload").parse().expect("size");
        for scenario in ["local", "edge"] {
            let cell = get(row, &format!("{scenario} median-IQR (ms)"));
            let expected = median_us(get(row, "Broker"), scenario, payload.bytes()) / 1e3;
            near(number(cell), expected, expected * 1e-3, cell);
            let iqr: f64 = cell
                .rsplit('-')
                .next()
                .and_then(|i| i.parse().ok())
                .expect("IQR");
            // HdrHistogram keeps 3 significant digits: 0.1 % of the value per percentile.
            near(iqr, 1.0, expected * 2e-3 + 0.01, cell);
        }
    }

    // The study's burst: burst aggregate and per-client median side by side, failed
    // repetition left out, medians over the repetitions.
    let rows = table(&md, "| Broker | Scenario | Client pairs | Publish BURST");
    assert_eq!(rows.len(), 8);
    for row in &rows {
        let (broker, scenario) = (get(row, "Broker"), get(row, "Scenario"));
        let prefix = format!("{broker}/{scenario}/2-burst/{}/", get(row, "Client pairs"));
        let cells: Vec<&Summary> = throughput
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .map(|(_, s)| s)
            .collect();
        assert_eq!(get(row, "Repetitions"), cells.len().to_string());
        let rates: [(&str, Rate); 4] = [
            ("Publish BURST aggregate", |s| s.publish_rate.msgs_per_s),
            ("Publish PER-CLIENT median", |s| {
                s.publish_rate_per_client.median_msgs_per_s
            }),
            ("Receive BURST aggregate", |s| s.receive_rate.msgs_per_s),
            ("Receive PER-CLIENT median", |s| {
                s.receive_rate_per_client.median_msgs_per_s
            }),
        ];
        for (column, rate) in rates {
            let values: Vec<f64> = cells.iter().map(|s| rate(s)).collect();
            let expected = controller::stats::median(&values).expect("values");
            let shown = number(get(row, &format!("{column} (msg/s)")));
            near(shown, expected, 1.0, &format!("{prefix} {column}"));
        }
        let aggregate = number(get(row, "Publish BURST aggregate (msg/s)"));
        let per_client = number(get(row, "Publish PER-CLIENT median (msg/s)"));
        assert!(
            aggregate > 50.0 * per_client,
            "pairs overlap: many clients' worth"
        );
    }
    let short = rows.iter().filter(|r| get(r, "Repetitions") == "1").count();
    assert_eq!(short, 1, "only {FAILED} lost a repetition");
    assert!(md.contains("mqtt-stresser"));

    // Failures, retries and skips are counted with their reasons.
    assert!(md.contains("1 cell failed and left out of every figure and table"));
    let deployed = table(&md, "| Broker | Deployed by |");
    assert!(get(&deployed[0], "What runs").contains("eclipse-mosquitto:1.6.15-openssl"));
    let overlay = table(&md, "| Node | Nebula |");
    assert_eq!(
        get(&overlay[1], "Peers reached"),
        "198.19.0.2 first answer 1.2 ms"
    );
    assert_eq!(get(&overlay[0], "Nebula"), "lighthouse");
    let cluster = table(&md, "| k3s node |");
    assert_eq!(
        get(&cluster[0], "Taints"),
        "node-role.kubernetes.io/control-plane=true:NoSchedule"
    );
    let reason = format!("agent worker lost: connection reset: 1 cell ({FAILED})");
    assert!(md.contains(&reason));
    assert!(md.contains("1 cell failed at first and measured on a later try"));
    assert!(md.contains("broker emqx: not installed on worker (optional), skipped"));
    let skipped = table(&md, "| Broker | Scenario | Skipped because |");
    let emqx_local = skipped
        .iter()
        .find(|r| get(r, "Broker") == "emqx" && get(r, "Scenario") == "local")
        .expect("emqx's local cells are in the not-measured table");
    assert_eq!(
        get(emqx_local, "Skipped because"),
        "not installed (optional)"
    );
    assert_eq!(get(emqx_local, "Cells"), "12");

    // Broker CPU and memory per test; the failed cell's samples are not counted.
    let rows = table(&md, "| Broker | Test | Process");
    assert_eq!(rows.len(), 6);
    for row in &rows {
        let cpu = [10.0, 80.0][usize::from(get(row, "Test") == "burst")];
        assert_eq!(number(get(row, "CPU mean (%)")), cpu, "{row:?}");
        assert_eq!(number(get(row, "CPU max (%)")), cpu + 5.0, "{row:?}");
        assert_eq!(get(row, "RSS max (MB)"), "12.0");
    }

    // Emulation: 1.25 ms on each end's egress adds 2.5 ms publisher -> subscriber.
    assert!(md.contains("edge: emulation should add 2.50 ms one way"));
    assert!(md.contains("mosquitto +2.45 ms, rabbitmq +2.60 ms"), "{md}");

    // Beside the study: its Table IV/V figure for the same product, scenario and payload, the
    // added delays over local, and each path's model (the study's four egresses: 5 ms edge).
    let rows = table(&md, "| Payload | Broker | Scenario | Study AMD64");
    assert_eq!(rows.len(), 12, "3 payloads x 2 brokers x 2 scenarios");
    for row in &rows {
        let (broker, scenario) = (get(row, "Broker"), get(row, "Scenario"));
        let payload: loadgen::size::ByteSize = get(row, "Payload").parse().expect("size");
        let ours = median_us(broker, scenario, payload.bytes()) / 1e3;
        near(
            number(get(row, "Continuum median-IQR (ms)")),
            ours,
            ours * 1e-3,
            "ours",
        );
        if scenario == "edge" {
            let added = (median_us(broker, "edge", payload.bytes())
                - median_us(broker, "local", payload.bytes()))
                / 1e3;
            near(
                number(get(row, "Continuum added over local (ms)").trim_start_matches('+')),
                added,
                // Both medians carry HdrHistogram's 0.1 % (3 significant digits).
                ours * 2e-3 + 0.01,
                "added",
            );
            assert_eq!(get(row, "Path model: study (ms)"), "5.00", "{row:?}");
            assert_eq!(get(row, "Path model: Continuum (ms)"), "2.50", "{row:?}");
        }
    }
    let mosquitto_1kb_edge = rows
        .iter()
        .find(|r| {
            get(r, "Broker") == "mosquitto"
                && get(r, "Payload") == "1KB"
                && get(r, "Scenario") == "edge"
        })
        .expect("mosquitto 1KB edge");
    assert_eq!(
        get(mosquitto_1kb_edge, "Study AMD64 median-IQR (ms)"),
        "8.59-2"
    );
    assert_eq!(
        get(mosquitto_1kb_edge, "Study ARM64 median-IQR (ms)"),
        "10.67-1"
    );
    assert_eq!(
        get(mosquitto_1kb_edge, "Study AMD64 added over local (ms)"),
        "+4.65"
    );
    assert!(md.contains("four emulated egresses"));

    // Same folder, same bytes.
    let before = contents(&files);
    let again = write_report(dir.path()).expect("second report");
    assert_eq!(again, files);
    assert!(
        before == contents(&again),
        "the report changed between two calls"
    );

    screenshot(&files.html);
}

#[test]
fn missing_tests_and_metrics_leave_their_sections_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = PLAN.replace("  { kind = \"payload\", loadgen = [\"tester\"] },\n", "");
    let throughput = PLAN
        .lines()
        .find(|l| l.contains("\"burst\""))
        .expect("test");
    let plan = plan.replace(&format!("{throughput}\n"), "");
    build(dir.path(), &plan);
    std::fs::remove_file(dir.path().join("metrics.csv")).expect("metrics.csv");
    // Their records say measured; their results are gone.
    for entry in tests::files_under(&dir.path().join("cells/rabbitmq/edge")).expect("the cells") {
        if entry.file_name().is_some_and(|name| name == "result.json") {
            std::fs::remove_file(&entry).expect("result.json");
        }
    }
    let files = write_report(dir.path()).expect("report");
    let md = std::fs::read_to_string(&files.markdown).expect("report.md");
    assert!(
        md.contains("## Latency\n")
            && !md.contains("## The study's burst")
            && !md.contains("## Latency vs payload")
    );
    assert!(md.contains("No broker samples: metrics.csv is absent"));
    assert!(
        md.contains("cells/rabbitmq/edge/0-latency/-/1/result.json"),
        "unreadable results are named"
    );
    // A cell folder gone whole (a folder copied in part): named from the records' export.
    std::fs::remove_dir_all(dir.path().join("cells/rabbitmq/edge/0-latency/-/2")).expect("cell");
    let md = std::fs::read_to_string(write_report(dir.path()).expect("report").markdown)
        .expect("report.md");
    assert!(
        md.contains(
            "cells/rabbitmq/edge/0-latency/-/2/record.json: missing, though summary.csv lists the cell"
        ),
        "{md}"
    );
    assert!(md.contains("rabbitmq not measured"), "{md}");
    let figure = dir.path().join("figures/burst-2-publish-aggregate.svg");
    assert!(!figure.exists(), "no figure of a test the plan lacks");
    let error = write_report(&dir.path().join("nowhere")).expect_err("no manifest");
    assert!(error.to_string().contains("manifest.json"), "{error}");
}

/// A folder's report is the same read through its cells' records as through `summary.csv`,
/// its export (the way a folder written before records is read): the records hold what the
/// rows hold, the retried cell included.
#[test]
fn records_and_their_export_give_the_same_report() {
    for plan in [PLAN, SUSTAINED_PLAN] {
        let dir = tempfile::tempdir().expect("temp dir");
        if plan == PLAN {
            build(dir.path(), plan);
        } else {
            build_sustained(dir.path(), plan);
        }
        let records: Vec<u8> =
            std::fs::read(write_report(dir.path()).expect("report").markdown).expect("report.md");
        let html = std::fs::read(dir.path().join("report.html")).expect("report.html");
        to_legacy(dir.path());
        let files = write_report(dir.path()).expect("report");
        let exported = std::fs::read(&files.markdown).expect("report.md");
        assert!(
            records == exported,
            "report.md differs:\n{}\n---\n{}",
            String::from_utf8_lossy(&records),
            String::from_utf8_lossy(&exported)
        );
        assert!(html == std::fs::read(&files.html).expect("report.html"));
        let md = String::from_utf8_lossy(&records);
        assert!(
            md.contains("## Latency") || md.contains("## Sustained"),
            "{md}"
        );
    }
}

const CHROMIUM_FLAGS: &str = "--headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --window-size=1200,6000";

/// Renders the page in headless Chromium when it is installed, to look at.
fn screenshot(html: &Path) {
    let chromium = Path::new("/usr/bin/chromium");
    if !chromium.exists() {
        println!(
            "skipping the screenshot: /usr/bin/chromium is not installed (apt-get install chromium)"
        );
        return;
    }
    let profile = tempfile::tempdir().expect("profile dir");
    // A copy of the page (it is self-contained) stays beside the screenshot to look at.
    let page = std::env::temp_dir().join("continuum-report.html");
    std::fs::copy(html, &page).expect("copy report.html");
    let png = std::env::temp_dir().join("continuum-report.png");
    let _ = std::fs::remove_file(&png);
    let mut child = Command::new(chromium)
        .args(CHROMIUM_FLAGS.split(' '))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "chromium wrote no screenshot of {}",
        html.display()
    );
    println!("screenshot: {} of {}", png.display(), page.display());
}

const SUSTAINED_PLAN: &str = r#"
name = "sustained-test"
repetitions = 5
nodes = [
  { name = "tester", agent = "198.18.0.1:7100", roles = ["loadgen", "netem"] },
  { name = "worker", agent = "198.18.0.3:7100", roles = ["broker", "netem"] },
]
brokers = [
  { name = "mosquitto", kind = "native", product = "mosquitto", node = "worker" },
  { name = "rabbitmq", kind = "native", product = "rabbitmq", node = "worker" },
]
scenarios = [{ name = "local" }]
tests = [
  { kind = "throughput", loadgen = ["tester"], clients = [10], duration = "2s", warmup = "1s" },
  { kind = "saturation", loadgen = ["tester"], clients = [10] },
]
"#;

/// The sustained plan's shape with an offered rate and two repetitions (the quickstart's).
const OFFERED: &str = r#"
name = "offered-test"
repetitions = 2
nodes = [
  { name = "tester", agent = "198.18.0.1:7100", roles = ["loadgen", "netem"] },
  { name = "worker", agent = "198.18.0.3:7100", roles = ["broker", "netem"] },
]
brokers = [
  { name = "mosquitto", kind = "native", product = "mosquitto", node = "worker" },
  { name = "rabbitmq", kind = "native", product = "rabbitmq", node = "worker" },
]
scenarios = [{ name = "local" }]
tests = [
  { kind = "throughput", loadgen = ["tester"], clients = [10], duration = "2s", warmup = "1s", rate = 10000 },
  { kind = "saturation", loadgen = ["tester"], clients = [10] },
]
"#;

/// A timed cell of 1 s warm-up and 2 s measured: publishers at `rate`, subscribers keeping up,
/// or from the second half on at 80 % when `falls_behind`.
fn fill_timed(result: &mut RunResult, rate: f64, falls_behind: bool) {
    let window = loadgen::result::MeasuredWindow {
        start_ns: 50_000_000,
        from_ns: 1_050_000_000,
        until_ns: 3_050_000_000,
    };
    result.measured_window = Some(window);
    result.clock_origin_unix_ns = 1_777_638_896_000_000_000;
    let per_bucket = rate / 100.0;
    let mut published = 0u64;
    let mut received_total = 0u64;
    for bucket in 5..305u64 {
        let at = bucket * 10_000_000;
        let receive = if falls_behind && at >= 2_050_000_000 {
            per_bucket * 0.8
        } else {
            per_bucket
        };
        result.publish_series.add(at, per_bucket as u64);
        result.receive_series.add(at + 1_000_000, receive as u64);
        published += per_bucket as u64;
        received_total += receive as u64;
        result
            .latency
            .record(400_000 + bucket * 10)
            .expect("in range");
    }
    let publishers = result.spec.publishers as usize;
    for p in 0..publishers {
        result.published[p] = published / publishers as u64;
        result.delivered_unique[p] = received_total / publishers as u64;
    }
    result.received = received_total;
}

fn search_report(found: u64) -> loadgen::saturation::SaturationReport {
    use loadgen::saturation::{Probe, ProbeOutcome, ProbeVerdict, SaturationReport, SearchEnd};
    let probe = |rate: u64, ok: bool| ProbeOutcome {
        probe: Probe::Offered { rate },
        verdict: if ok {
            ProbeVerdict::Sustained
        } else {
            ProbeVerdict::NotSustained
        },
        publish_msgs_per_s: rate as f64,
        receive_msgs_per_s: if ok { rate as f64 } else { rate as f64 * 0.9 },
        p50_us: if ok { 500.0 } else { 80_000.0 },
        p99_us: if ok { 2_000.0 } else { 250_000.0 },
        reasons: Vec::new(),
        generator_limited: false,
        elapsed_s: 4.0,
    };
    SaturationReport {
        rate: Some(found),
        delivered_msgs_per_s: Some(found as f64),
        failed_rate: Some(found * 105 / 100),
        end: SearchEnd::Converged,
        probes: vec![
            probe(found / 2, true),
            probe(found, true),
            probe(found * 105 / 100, false),
        ],
        elapsed_s: 12.0,
    }
}

/// Writes the folder of a timed throughput and a saturation test: 2 brokers x 5 repetitions;
/// returns the receive rates that count as sustained, by broker.
fn build_sustained(
    dir: &Path,
    plan_text: &str,
) -> std::collections::BTreeMap<&'static str, Vec<f64>> {
    build_sustained_at(dir, plan_text, [10_000.0, 5_000.0])
}

/// [`build_sustained`] with each broker's rate (by position), before the repetition's own
/// +100 msg/s; the first broker's transit latency is 0.3 ms, the second's 0.5 ms.
fn build_sustained_at(
    dir: &Path,
    plan_text: &str,
    rates: [f64; 2],
) -> std::collections::BTreeMap<&'static str, Vec<f64>> {
    let plan = Plan::parse(plan_text, "plan.toml").expect("plan");
    let results = ResultsDir::open(dir).expect("open");
    let manifest = Manifest {
        plan: plan.clone(),
        plan_text: plan_text.to_string(),
        controller_version: "0.1.0".into(),
        started_unix_ms: 1_777_638_896_789,
        nodes: Vec::new(),
        netem: Vec::new(),
        skipped: Vec::new(),
        testbed: None,
        brokers: Vec::new(),
        paths: Vec::new(),
        cell_records: true,
    };
    results.write_manifest(&manifest).expect("manifest");
    let mut counted: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for cell in plan.cells() {
        let id = cell.id(&plan);
        let broker = plan.brokers[cell.broker].name.clone();
        let test = &plan.tests[cell.test];
        let rep = cell.repetition;
        let mut record = CellRecord {
            cell: id.clone(),
            broker: broker.clone(),
            scenario: "local".into(),
            test: test.kind,
            point: cell.point,
            repetition: rep,
            status: CellStatus::Ok,
            reason: String::new(),
            earlier_failures: 0,
            spec: None,
            summary: None,
            usage: None,
            generator_limit: None,
            saturation: None,
        };
        if test.kind == TestKind::Saturation {
            let found = [40_000, 20_000][cell.broker] + u64::from(rep) * 100;
            let report = search_report(found);
            record.saturation = Some(controller::results::SaturationRecord::of(&report));
            results
                .record(&record, None, Some(&report))
                .expect("record");
            continue;
        }
        let spec = workload_for(test, None, Some(10)).expect("workload");
        let mut result = RunResult::empty(&spec, &id.replace('/', "-"));
        result.shards.push(spec.effective_shard());
        let rate = rates[cell.broker] + f64::from(rep) * 100.0;
        // rabbitmq's 3rd repetition falls behind; mosquitto's 4th is loadgen's limit.
        // By position, so a plan may name its brokers otherwise.
        let (first, key) = (cell.broker == 0, ["mosquitto", "rabbitmq"][cell.broker]);
        let falls_behind = !first && rep == 3;
        fill_timed(&mut result, rate, falls_behind);
        result
            .transit_latency
            .record_n([300_000, 500_000][cell.broker], 100)
            .expect("in range");
        let summary = Summary::of(&result);
        record.usage = Some(controller::results::usage::BrokerUsage {
            cpu_percent: 50.0,
            cpu_us_per_delivery: Some(50.0 * 1e4 / rate),
            peak_rss_mb: 12.0,
            samples: 8,
        });
        if first && rep == 4 {
            record.generator_limit = Some("loadgen used 97 % of the 1.0 CPU it may use".into());
        } else if !falls_behind {
            let steady = summary.steadiness.as_ref().expect("timed");
            assert!(steady.steady, "{:?}", steady.reasons);
            counted
                .entry(key)
                .or_default()
                .push(steady.receive_msgs_per_s);
        }
        record.summary = Some(summary);
        results
            .record(&record, Some(&result), None)
            .expect("record");
    }
    counted
}

#[test]
fn sustained_rates_saturation_points_and_comparisons_are_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let counted = build_sustained(dir.path(), SUSTAINED_PLAN);
    let files = write_report(dir.path()).expect("report");
    let md = std::fs::read_to_string(&files.markdown).expect("report.md");
    for path in &files.figures {
        check_svg(&std::fs::read_to_string(path).expect("figure")).expect("well-formed");
    }
    for figure in [
        "throughput-0-sustained.svg",
        "throughput-0-series-b0-s0.svg",
        "saturation-1-rate.svg",
        "saturation-1-latency.svg",
    ] {
        assert!(
            dir.path().join("figures").join(figure).exists(),
            "{figure}: {md}"
        );
    }

    // Sustained: only steady, not generator-limited repetitions count, each reason given.
    let rows = table(
        &md,
        "| Broker | Scenario | Client pairs | SUSTAINED receive",
    );
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let broker = get(row, "Broker");
        assert_eq!(get(row, "Sustained cells"), "4 of 5", "{row:?}");
        let expected = controller::stats::median(&counted[broker]).expect("values");
        near(
            number(get(row, "SUSTAINED receive (msg/s)")),
            expected,
            1.0,
            broker,
        );
        let reason = get(row, "Not counted");
        match broker {
            "mosquitto" => assert!(reason.starts_with("GENERATOR-LIMITED"), "{reason}"),
            _ => assert!(reason.contains("backlog grew"), "{reason}"),
        }
    }
    // The saturation point: the median of the five searches.
    let rows = table(
        &md,
        "| Broker | Scenario | Client pairs | Highest sustained",
    );
    assert_eq!(
        number(get(&rows[0], "Highest sustained offered rate (msg/s)")),
        40_300.0
    );
    assert_eq!(
        number(get(&rows[1], "Highest sustained offered rate (msg/s)")),
        20_300.0
    );
    // Comparisons and findings: 4 vs 4 repetitions, completely separated: exact p = 2/70.
    let rows = table(&md, "| Test | Scenario | Point | Figure");
    let sustained = rows
        .iter()
        .find(|r| get(r, "Figure").starts_with("sustained"))
        .expect("a sustained comparison");
    assert_eq!(get(sustained, "Better"), "mosquitto");
    assert_eq!(get(sustained, "Mann-Whitney p"), "0.029 (exact)");
    assert_eq!(get(sustained, "Verdict"), "differ");
    let findings = md
        .split("## Findings")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a findings section");
    assert!(
        findings
            .contains("local: Sustained throughput at 10 pairs: mosquitto higher than rabbitmq")
            && findings.contains("significant"),
        "{findings}"
    );
    assert!(
        md.find("## Findings") < md.find("## Run"),
        "the report opens with its findings"
    );
}

/// Two brokers that both sustain one offered rate, measured twice each (the quickstart's
/// shape): the report ranks neither by rate, compares latency at that load, says once that
/// two repetitions cannot be tested, and calls no interval 95 %.
#[test]
fn an_offered_rate_sustained_by_both_ranks_nothing_and_two_repetitions_claim_no_95_percent() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Both deliver what was offered (10,000 msg/s; the repetitions add 100 and 200).
    let counted = build_sustained_at(dir.path(), OFFERED, [10_000.0, 10_000.0]);
    assert_eq!(
        (counted["mosquitto"].len(), counted["rabbitmq"].len()),
        (2, 2),
        "both sustained every repetition"
    );
    let md = std::fs::read_to_string(write_report(dir.path()).expect("report").markdown)
        .expect("report.md");
    assert!(!md.contains("95 %"), "no interval is called 95 %: {md}");
    assert!(
        md.contains("10,150 \\[10,100-10,200, 50 %\\]"),
        "two repetitions' range says its coverage: {md}"
    );
    let findings = md
        .split("## Findings")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a findings section");
    assert!(
        !findings.contains("Sustained throughput at") && !findings.contains("msg/s) higher than"),
        "no ranking by a rate both sustained: {findings}"
    );
    assert!(
        findings.contains(
            "local: Offered rate (throughput), 10 pairs at 10,000 msg/s: repetitions that \
             sustained it: mosquitto and rabbitmq in 2 of 2; latency at that load (transit, \
             loadgen's receive cadence included): mosquitto lower than rabbitmq by 40.0 % \
             (0.300 vs 0.500; medians of 2 and 2 repetitions, too few to test)."
        ),
        "{findings}"
    );
    assert_eq!(
        findings.matches("no difference can be significant").count(),
        1,
        "said once: {findings}"
    );
    let comparisons = md
        .split("## Broker comparisons")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a comparisons section");
    assert!(
        !comparisons.contains("no significant difference") && !comparisons.contains('|'),
        "one sentence, not a table of verdicts that could not be otherwise: {comparisons}"
    );
    let saturation = md
        .split("## Saturation point")
        .nth(1)
        .expect("a saturation section");
    assert!(
        saturation.contains("read at most every 1ms while deliveries keep coming"),
        "the latency chart names the receive cadence: {saturation}"
    );
}

/// A chart title longer than its figure is wide wraps to a second line instead of running
/// off both edges; the whole title stays the figure's accessible name.
#[test]
fn long_chart_titles_wrap_inside_the_figure() {
    const LONG: &str = "mosquitto-on-the-second-raspberry-pi-of-the-rack";
    let dir = tempfile::tempdir().expect("temp dir");
    let plan_text = SUSTAINED_PLAN.replacen(
        "{ name = \"mosquitto\", kind",
        &format!("{{ name = \"{LONG}\", kind"),
        1,
    );
    assert!(plan_text.contains(LONG));
    build_sustained(dir.path(), &plan_text);
    write_report(dir.path()).expect("report");
    let path = dir
        .path()
        .join("figures")
        .join("throughput-0-series-b0-s0.svg");
    let text = std::fs::read_to_string(&path).expect("figure");
    let document = roxmltree::Document::parse(&text).expect("well-formed");
    let root = document.root_element();
    let title = format!("{LONG}, local, 10 pairs");
    let accessible = root
        .descendants()
        .find(|n| n.has_tag_name("title"))
        .and_then(|n| n.text());
    assert_eq!(accessible, Some(title.as_str()));
    let width: f64 = root
        .attribute("viewBox")
        .and_then(|b| b.split_whitespace().nth(2))
        .and_then(|w| w.parse().ok())
        .expect("a viewBox width");
    let lines: Vec<&str> = root
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("font-weight") == Some("bold"))
        .filter_map(|n| n.text())
        .collect();
    assert_eq!(lines.join(" "), title, "the title in two lines: {lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        // Bold 13 px glyphs are at most about 0.62 em wide.
        let estimate = line.chars().count() as f64 * 13.0 * 0.62;
        assert!(estimate <= width, "{line:?} is wider than {width} px");
    }
}

/// `controller compare`: the same plan twice, the second time with one broker slower: that
/// broker is worse in B with significance, the other shows no significant difference; a run
/// of another plan matches what it shares and lists the rest; runs that share nothing are
/// refused with what each measured.
#[test]
fn compare_finds_the_broker_that_changed_and_lists_what_does_not_match() {
    use controller::report::compare::{CompareError, write_comparison};
    let (a, b, other, latency_only) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    build_sustained_at(a.path(), SUSTAINED_PLAN, [10_000.0, 5_000.0]);
    // B: rabbitmq delivers a fifth less; mosquitto exactly as in A.
    build_sustained_at(b.path(), SUSTAINED_PLAN, [10_000.0, 4_000.0]);
    let out = tempfile::tempdir().expect("temp dir");
    let files = write_comparison(a.path(), b.path(), out.path()).expect("compared");
    assert_eq!(files.unmatched, 0);
    let md = std::fs::read_to_string(&files.markdown).expect("compare.md");
    let rows = table(&md, "| Broker | Scenario | Test | Point | Figure");
    let row = |broker: &str, figure: &str| {
        rows.iter()
            .find(|r| get(r, "Broker") == broker && get(r, "Figure").starts_with(figure))
            .unwrap_or_else(|| panic!("{broker} {figure}: {md}"))
    };
    // Four sustained repetitions a side (the fifth of each is not counted): 4 vs 4.
    let slower = row("rabbitmq", "sustained");
    assert_eq!(get(slower, "Verdict"), "B worse", "{slower:?}");
    assert_eq!(get(slower, "Mann-Whitney p"), "0.029");
    assert_eq!(get(slower, "Repetitions"), "4 vs 4");
    assert!(
        get(slower, "B / A [interval]").starts_with("0.811 "),
        "{slower:?}"
    );
    let same = row("mosquitto", "sustained");
    assert_eq!(
        get(same, "Verdict"),
        "no significant difference",
        "{same:?}"
    );
    assert!(get(same, "B - A [interval]").starts_with("0 "), "{same:?}");
    let csv = std::fs::read_to_string(&files.csv).expect("compare.csv");
    assert_eq!(csv.lines().count(), 1 + rows.len(), "{csv}");
    assert!(
        md.contains("The two runs ran under the same recorded conditions."),
        "{md}"
    );
    assert!(files.html.exists());

    // Another plan: its saturation figures match, its offered-rate latency and A's
    // sustained rates do not.
    build_sustained_at(other.path(), OFFERED, [10_000.0, 10_000.0]);
    let files = write_comparison(a.path(), other.path(), out.path()).expect("compared");
    let md = std::fs::read_to_string(&files.markdown).expect("compare.md");
    let rows = table(&md, "| Broker | Scenario | Test | Point | Figure");
    assert!(
        rows.iter()
            .all(|r| get(r, "Figure").starts_with("saturation"))
            && rows.len() == 2,
        "{md}"
    );
    assert_eq!(
        get(&rows[0], "Verdict"),
        "not enough repetitions",
        "5 against 2 searches"
    );
    assert_eq!(files.unmatched, 4, "{md}");
    assert!(
        md.contains("Only in A (2):") && md.contains("Only in B (2):"),
        "{md}"
    );
    assert!(md.contains("DIFFERS") && md.contains("repetitions"), "{md}");

    // Nothing in common: refused, saying what each has.
    build(latency_only.path(), PLAN);
    let error = write_comparison(a.path(), latency_only.path(), out.path())
        .expect_err("nothing to compare");
    assert!(
        matches!(error, CompareError::NothingShared { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("share no measured cell"),
        "{error}"
    );
}
