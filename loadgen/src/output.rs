//! Writing a run's figures: a readable table, JSON, a CSV row per run, and HdrHistogram
//! percentile text files.

use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;

use hdrhistogram::Histogram;

use crate::result::RunResult;
use crate::summary::{
    AggregateRate, LatencySummary, PerClientRates, RateKind, Summary, WindowKind,
};

/// A figure could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file or folder could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// The I/O error.
        source: io::Error,
    },
    /// The CSV file has other columns than this version writes.
    #[error("{path}: its header differs from loadgen's columns; write to a new file")]
    CsvHeaderMismatch {
        /// The file.
        path: String,
    },
    /// Serialization failed.
    #[error("serialize: {0}")]
    Serialize(String),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The summary as an aligned text table for a terminal.
pub fn render_table(summary: &Summary) -> String {
    let mut out = String::new();
    let s = summary;
    let pacing = match (s.pacing.as_str(), s.interval_ms, s.offered_rate_msgs_per_s) {
        ("rate", Some(interval), Some(rate)) => format!(
            "open loop at an offered {rate:.0} msg/s (every {interval:.3} ms per publisher, released at most every 0.5 ms)"
        ),
        (_, Some(interval), _) => format!("open loop, every {interval} ms per publisher"),
        ("closed-loop", _, _) => "closed loop (each publisher keeps its window full)".to_string(),
        _ => "burst (as fast as the broker takes them)".to_string(),
    };
    let length = match (s.duration_s, s.warmup_s) {
        (Some(duration), warmup) => format!(
            "measured for {duration} s after a {} s warm-up",
            warmup.unwrap_or(0.0)
        ),
        (None, _) => format!(
            "{} messages per publisher ({} warm-up)",
            s.messages_per_publisher, s.warmup_messages
        ),
    };
    let _ = writeln!(
        out,
        "run {} against {} (MQTT {}, QoS {})",
        s.run_id, s.broker, s.protocol, s.qos
    );
    let _ = writeln!(
        out,
        "  {} publishers -> {} subscribers ({}), {} B payloads, {length}, {pacing}",
        s.publishers, s.subscribers, s.topology, s.payload_bytes,
    );
    let _ = writeln!(out, "  header: {}", s.header);
    if s.interrupted {
        let _ = writeln!(out, "  INTERRUPTED: the figures cover only what ran");
    }
    let _ = writeln!(out, "\nmessages");
    let _ = writeln!(
        out,
        "  published            {:>12}   acknowledged {:>10}",
        s.published, s.acknowledged
    );
    let _ = writeln!(
        out,
        "  expected deliveries  {:>12}   received     {:>10}",
        s.expected_deliveries, s.received
    );
    let lost = match (s.lost, s.lost_percent) {
        (Some(lost), Some(percent)) => format!("{lost} ({percent:.3} %)"),
        _ => "unknown (part of the workload ran elsewhere)".to_string(),
    };
    let _ = writeln!(
        out,
        "  delivered (distinct) {:>12}   lost         {lost}",
        s.delivered_unique
    );
    let _ = writeln!(
        out,
        "  duplicates           {:>12}   out of order {:>10}",
        s.duplicates, s.out_of_order
    );
    if s.most_unacknowledged > 0 {
        let _ = writeln!(
            out,
            "  at a subscriber     up to {} QoS 1/2 deliveries unacknowledged at once (seen in one read; the broker's window is at least that)",
            s.most_unacknowledged
        );
    }
    if s.expired > 0 {
        let _ = writeln!(
            out,
            "  expired              {:>12}   (message expiry ran out while the broker held them for an absent subscriber: not lost)",
            s.expired
        );
    }
    let judged = match s.subscriber_qos {
        Some(subscribed) => format!(
            "published at QoS {}, subscribed at QoS {subscribed}, judged at QoS {}",
            s.qos,
            s.qos.min(subscribed)
        ),
        None => format!("QoS {}", s.qos),
    };
    if s.qos_violations.is_empty() {
        let _ = writeln!(out, "  {judged}: kept");
    } else {
        let _ = writeln!(out, "  QoS VIOLATED: {}", s.qos_violations.join("; "));
    }
    if let Some(bytes) = s.bytes_per_publish {
        let _ = writeln!(
            out,
            "  wire: {bytes:.1} MQTT bytes written by the publishers per message (PUBLISH with \
             its topic{}, and the few packets beside; before TLS or WebSocket framing)",
            if s.errors.contains_key("topic_alias_not_allowed") {
                "; a topic alias was asked for and the broker allows none"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        out,
        "\nlatency (µs)              count      min      p50      p90      p99    p99.9      max     mean      IQR"
    );
    if s.offered_rate_msgs_per_s.is_some() {
        // An open loop: from the intended send time (what a device waiting on its schedule
        // sees), from the actual send (the broker's and the network's part), and the gap.
        latency_row(&mut out, "open loop (vs schedule)", &s.latency);
        latency_row(&mut out, "transit (vs actual send)", &s.transit_latency);
        latency_row(&mut out, "send delay (vs schedule)", &s.send_delay);
    } else {
        latency_row(&mut out, "end-to-end", &s.latency);
    }
    if s.read_delay.count > 0 {
        // Loadgen's own receive side, in every kind of run: from the kernel's stamp.
        latency_row(&mut out, "read delay (vs arrival)", &s.read_delay);
    }
    latency_row(&mut out, "connect", &s.connect_time);
    if let Some(cadence) = s.read_cadence_ms {
        let _ = writeln!(
            out,
            "  (receive coalescing: while deliveries kept coming, each subscriber read at most every {cadence} ms, \
             so end-to-end latency includes up to about two such cycles; --coalescing off reads every delivery at once)"
        );
    }
    if let Some(tail) = &s.latency_tail {
        let _ = writeln!(out, "  {}", tail.note);
    }
    if let Some(storm) = &s.reconnect {
        latency_row(&mut out, "time away", &storm.time_away);
    }
    if let Some(churn) = &s.churn {
        latency_row(&mut out, "churn connect", &churn.connect_time);
        churn_lines(&mut out, churn);
    }
    if let Some(storm) = &s.reconnect {
        reconnect_lines(&mut out, storm);
    }
    for group in &s.shared_groups {
        group_line(&mut out, group);
    }
    if let Some(retained) = &s.retained {
        retained_line(&mut out, retained);
    }
    if let Some(wills) = &s.wills {
        wills_line(&mut out, wills);
    }
    let _ = writeln!(out, "\n{}", rate_kind_line(s));
    let _ = writeln!(
        out,
        "throughput (msg/s)        aggregate  window              per client: min    median       max"
    );
    rate_row(
        &mut out,
        "publish",
        &s.publish_rate,
        &s.publish_rate_per_client,
    );
    rate_row(
        &mut out,
        "receive",
        &s.receive_rate,
        &s.receive_rate_per_client,
    );
    let _ = writeln!(
        out,
        "  (aggregate = all clients together over the window; per client = each client's own rate, \
         the figure mqtt-stresser reported as its median)"
    );
    if let Some(steady) = &s.steadiness {
        let _ = writeln!(
            out,
            "  measured window: receive {:.0} msg/s, halves {:.0} / {:.0}, whole seconds {} .. {}, backlog {} -> {}{}",
            steady.receive_msgs_per_s,
            steady.receive_first_half_msgs_per_s,
            steady.receive_second_half_msgs_per_s,
            steady
                .receive_slowest_second_msgs_per_s
                .map_or("-".to_string(), |r| format!("{r:.0}")),
            steady
                .receive_fastest_second_msgs_per_s
                .map_or("-".to_string(), |r| format!("{r:.0}")),
            steady.backlog_at_start,
            steady.backlog_at_end,
            steady
                .delivered_percent_of_offered
                .map_or(String::new(), |p| format!(
                    ", delivered {p:.2} % of offered"
                ))
        );
        for reason in &steady.reasons {
            let _ = writeln!(out, "  NOT STEADY: {reason}");
        }
    }
    let _ = writeln!(
        out,
        "\nloadgen: {:.0} ms CPU, {:.2} µs CPU per message (publish + delivery), peak RSS {:.1} MB, load wall time {:.0} ms",
        s.loadgen_cpu_ms, s.loadgen_cpu_per_message_us, s.loadgen_peak_rss_mb, s.load_wall_ms
    );
    let g = &s.generator;
    let _ = writeln!(
        out,
        "  busy {:.0} % of its {:.1} CPU (busiest second {:.0} %), waited for a CPU {:.1} % of its runnable time, throttled {:.1} %, host steal {:.1} %, host CPU pressure {}{}",
        g.busy_percent,
        g.cpu_capacity,
        g.peak_busy_percent,
        g.cpu_wait_percent,
        g.throttled_percent,
        g.host_steal_percent,
        g.host_cpu_pressure_percent
            .map_or("not kept (no PSI)".to_string(), |p| format!("{p:.1} %")),
        if g.sent_late_after_end > 0 {
            format!(
                ", {} messages left after the schedule ended",
                g.sent_late_after_end
            )
        } else {
            String::new()
        }
    );
    for reason in &g.reasons {
        let _ = writeln!(
            out,
            "  GENERATOR-LIMITED: {reason}: the figures may show loadgen's limit, not the broker's"
        );
    }
    for warning in &g.warnings {
        let _ = writeln!(out, "  note: {warning}");
    }
    if let Some(broker) = &s.broker_on_host {
        broker_lines(&mut out, broker);
    }
    if !s.errors.is_empty() {
        let errors: Vec<String> = s
            .errors
            .iter()
            .map(|(kind, n)| format!("{kind} x{n}"))
            .collect();
        let _ = writeln!(out, "errors: {}", errors.join(", "));
    }
    out
}

/// The broker's own cost, when it ran on this host: what explains a run that differs from
/// another although loadgen did the same.
fn broker_lines(out: &mut String, broker: &crate::local_broker::BrokerOnHostSummary) {
    let _ = writeln!(
        out,
        "broker on this host: {} (pid {}, {} thread{}): {:.2} CPU over the {:.0} ms window, {:.2} µs CPU per delivered message, waited for a CPU {:.1} % of its runnable time",
        broker.command,
        broker.pid,
        broker.threads,
        if broker.threads == 1 { "" } else { "s" },
        broker.cpus_used,
        broker.window_ms,
        broker.cpu_per_delivered_message_us,
        broker.cpu_wait_percent
    );
    if broker.saturated {
        let _ = writeln!(
            out,
            "  the broker's one thread was busy {:.0} % of the window: this run went as fast as the broker did, so a run that took longer differs by the broker's CPU per message (or its wait for a CPU), not by loadgen",
            broker.cpus_used * 100.0
        );
    }
    if broker.held_back_by_host() {
        let _ = writeln!(
            out,
            "  note: the broker waited for a CPU {:.0} % of its runnable time and was ready to run {:.2} CPU: this host was oversubscribed (loadgen beside it included), so the broker did less than it can",
            broker.cpu_wait_percent,
            broker.ready_cpus()
        );
    } else if broker.cpu_wait_percent >= crate::local_broker::HELD_BACK_WAIT_PERCENT {
        let _ = writeln!(
            out,
            "  note: the broker waited for a CPU {:.0} % of its runnable time, but was ready to run only {:.2} CPU: wake-up latency (part of every delivery's latency on this host), not a shortage of CPU",
            broker.cpu_wait_percent,
            broker.ready_cpus()
        );
    }
}

/// What the rates below are, in one line: never a burst presented as a sustained rate.
fn rate_kind_line(s: &Summary) -> String {
    match s.rate_kind {
        RateKind::Burst => format!(
            "BURST rates: {} messages per publisher as fast as possible, over a {:.0} ms window; \
             queues filling and draining, not a rate the broker sustains",
            s.messages_per_publisher, s.receive_rate.window_ms
        ),
        RateKind::Paced => "PACED rates: they follow the open-loop schedule".to_string(),
        RateKind::Sustained => format!(
            "SUSTAINED rates over the measured {:.1} s window (steady: both halves within 5 %, backlog bounded)",
            s.receive_rate.window_ms / 1e3
        ),
        RateKind::Unsteady => format!(
            "UNSTEADY rates over the measured {:.1} s window: NOT a rate the broker sustained (reasons below)",
            s.receive_rate.window_ms / 1e3
        ),
        RateKind::GeneratorLimited => format!(
            "GENERATOR-LIMITED rates over the measured {:.1} s window: loadgen was the limit, NOT the broker (reasons below)",
            s.receive_rate.window_ms / 1e3
        ),
    }
}

fn latency_row(out: &mut String, name: &str, l: &LatencySummary) {
    let _ = writeln!(
        out,
        "  {name:<22} {:>8} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
        l.count, l.min_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us, l.iqr_us
    );
}

fn rate_row(out: &mut String, name: &str, rate: &AggregateRate, clients: &PerClientRates) {
    let window = match rate.window {
        WindowKind::Measured => format!("measured {:.0} ms", rate.window_ms),
        WindowKind::Steady => format!("steady {:.0} ms", rate.window_ms),
        WindowKind::Full => format!("full {:.0} ms", rate.window_ms),
        WindowKind::None => "none".to_string(),
    };
    let [min, median, max] = clients.spread().map_or(
        ["n/a".to_string(), "n/a".to_string(), "n/a".to_string()],
        |rates| rates.map(|r| format!("{r:.0}")),
    );
    let _ = writeln!(
        out,
        "  {name:<22} {:>10.0}  {window:<18} {min:>11} {median:>9} {max:>9}",
        rate.msgs_per_s
    );
}

/// One probe of a saturation search, as a line.
pub fn probe_line(p: &crate::saturation::ProbeOutcome) -> String {
    use crate::saturation::{Probe, ProbeVerdict};
    let what = match p.probe {
        Probe::Estimate => "closed loop (estimate)".to_string(),
        Probe::Offered { rate } => format!("offered {rate} msg/s"),
    };
    let verdict = match p.verdict {
        ProbeVerdict::Sustained => "SUSTAINED",
        ProbeVerdict::NotSustained => "not sustained",
        ProbeVerdict::GeneratorLimited => "GENERATOR-LIMITED",
        ProbeVerdict::Failed => "FAILED",
        ProbeVerdict::Estimate => "estimate",
    };
    let mut line = format!(
        "  {what:<28} publish {:>9.0}/s receive {:>9.0}/s  p50 {:>8.2} ms p99 {:>8.2} ms  {verdict} ({:.1} s)",
        p.publish_msgs_per_s,
        p.receive_msgs_per_s,
        p.p50_us / 1e3,
        p.p99_us / 1e3,
        p.elapsed_s
    );
    if p.verdict != ProbeVerdict::Sustained
        && p.verdict != ProbeVerdict::Estimate
        && let Some(reason) = p.reasons.first()
    {
        line.push_str(&format!(": {reason}"));
    }
    line
}

/// The outcome of a saturation search in a few lines.
pub fn saturation_summary(report: &crate::saturation::SaturationReport) -> String {
    use crate::saturation::SearchEnd;
    let found = match (report.rate, report.delivered_msgs_per_s) {
        (Some(rate), Some(delivered)) => {
            format!("highest offered rate sustained: {rate} msg/s ({delivered:.0} deliveries/s)")
        }
        (Some(rate), None) => format!("highest offered rate sustained: {rate} msg/s"),
        (None, _) => "no offered rate was sustained".to_string(),
    };
    let bound = report
        .failed_rate
        .map_or(String::new(), |r| format!("; {r} msg/s was not"));
    let end = match report.end {
        SearchEnd::Converged => "converged within the precision",
        SearchEnd::BudgetSpent => "the time budget ran out first",
        SearchEnd::GeneratorLimited => {
            "loadgen reached its own limit: the broker sustained at least this, perhaps more"
        }
        SearchEnd::NothingSustained => "nothing was sustained",
    };
    format!(
        "{found}{bound} ({end}; {} probes in {:.1} s)\n",
        report.probes.len(),
        report.elapsed_s
    )
}

/// The summary as pretty JSON.
pub fn to_json(summary: &Summary) -> Result<String, OutputError> {
    serde_json::to_string_pretty(summary).map_err(|e| OutputError::Serialize(e.to_string()))
}

/// The summary as flat (column, value) pairs: nested fields joined with `_`.
pub fn csv_columns(summary: &Summary) -> Result<Vec<(String, String)>, OutputError> {
    let value = serde_json::to_value(summary).map_err(|e| OutputError::Serialize(e.to_string()))?;
    let mut columns = Vec::new();
    flatten("", &value, &mut columns);
    Ok(columns)
}

fn flatten(prefix: &str, value: &serde_json::Value, columns: &mut Vec<(String, String)>) {
    use serde_json::Value;
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}_{key}")
        }
    };
    match value {
        Value::Object(map) if prefix == "errors" => {
            let text: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
            columns.push((prefix.to_string(), text.join(";")));
        }
        Value::Object(map) => {
            for (key, inner) in map {
                flatten(&join(key), inner, columns);
            }
        }
        Value::Array(items) => {
            let text: Vec<String> = items
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect();
            columns.push((prefix.to_string(), text.join("; ")));
        }
        Value::Null => columns.push((prefix.to_string(), String::new())),
        Value::String(text) => columns.push((prefix.to_string(), text.clone())),
        other => columns.push((prefix.to_string(), other.to_string())),
    }
}

/// `fields` as one CSV line without its line end, quoted where needed (by the csv crate,
/// which the controller's results use too).
fn csv_line<'a>(fields: impl IntoIterator<Item = &'a str>) -> Result<String, OutputError> {
    let problem = |e: &dyn std::fmt::Display| OutputError::Serialize(e.to_string());
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    writer.write_record(fields).map_err(|e| problem(&e))?;
    let bytes = writer.into_inner().map_err(|e| problem(&e))?;
    let mut line = String::from_utf8(bytes).map_err(|e| problem(&e))?;
    line.pop();
    Ok(line)
}

/// Appends one row to `path`, writing the header first when the file is new or empty.
pub fn append_csv(path: &Path, summary: &Summary) -> Result<(), OutputError> {
    let columns = csv_columns(summary)?;
    let header = csv_line(columns.iter().map(|(name, _)| name.as_str()))?;
    let row = csv_line(columns.iter().map(|(_, value)| value.as_str()))?;
    let existing = match fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(io_error(path)(error)),
    };
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_error(path))?;
    match existing.as_deref().and_then(|text| text.lines().next()) {
        Some(first) if first != header => {
            return Err(OutputError::CsvHeaderMismatch {
                path: path.display().to_string(),
            });
        }
        Some(_) => {}
        None => writeln!(file, "{header}").map_err(io_error(path))?,
    }
    writeln!(file, "{row}").map_err(io_error(path))
}

/// A reconnect storm: lost and back, the time until all were back, failures by kind.
fn reconnect_lines(out: &mut String, storm: &crate::summary::ReconnectSummary) {
    let whole = storm.full_reconnection_ms.map_or_else(
        || "not every connection came back".to_string(),
        |ms| format!("all back {ms:.0} ms after the first loss"),
    );
    let _ = writeln!(
        out,
        "\nreconnects: {} connections lost, {} back ({whole}), {} gave up, {} still trying at the end; {} attempts, {} to a kept session, {} QoS 1 messages sent again",
        storm.lost,
        storm.reconnected,
        storm.gave_up,
        storm.interrupted,
        storm.attempts,
        storm.sessions_resumed,
        storm.resent
    );
    if storm.zero_rtt_attempted > 0 {
        let _ = writeln!(
            out,
            "  0-RTT over QUIC: early data of {} of {} connections opened again accepted, {} \
             rejected by the broker",
            storm.zero_rtt_accepted, storm.zero_rtt_attempted, storm.zero_rtt_rejected
        );
    }
    for (kind, count) in &storm.failures {
        let _ = writeln!(out, "  reconnect attempt {kind}: {count}");
    }
}

/// A shared subscription: owed once per group, what reached some member, and the members'
/// shares.
fn group_line(out: &mut String, group: &crate::groups::GroupSummary) {
    let lost = group.lost.map_or_else(
        || "lost unknown (part of the workload)".to_string(),
        |l| format!("{l} lost"),
    );
    let _ = writeln!(
        out,
        "\nshared {}: {} of {} messages reached a member ({lost}, {} duplicates); {} members, \
         distinct messages per member min {} median {} max {} (busiest {:.1} % of the group's)",
        group.subscription,
        group.delivered,
        group.expected,
        group.duplicates,
        group.members,
        group.share_min,
        group.share_median,
        group.share_max,
        group.busiest_percent
    );
}

/// The late subscribers' verdicts on the retained messages, and the clean-up's.
fn retained_line(out: &mut String, r: &crate::retained::RetainedOutcome) {
    let times = match (r.median_all_received_ms(), r.slowest_all_received_ms()) {
        (Some(median), Some(slowest)) => format!(
            "each got all in median {median:.1} ms, slowest {slowest:.1} ms (from connecting)"
        ),
        (Some(median), None) => format!(
            "{} of them got all (median {median:.1} ms from connecting)",
            r.all_received_ns.len()
        ),
        _ => "none got all".to_string(),
    };
    let left = r.left_after_clear.map_or_else(
        || "the clean-up could not be checked".to_string(),
        |left| format!("{left} left retained after"),
    );
    let _ = writeln!(
        out,
        "\nretained: {} late subscribers ({} failed to subscribe), each owed the last value of {} topics: \
         {} current, {} stale, {} missing, {} extra; {times}; {} topics cleared, {left}",
        r.late_subscribers,
        r.failed,
        r.expected_each,
        r.current,
        r.stale,
        r.missing,
        r.extra,
        r.cleared
    );
}

/// The will clients: wills owed, delivered once, missing, copies and wills not owed, and the
/// time from each drop to its will.
fn wills_line(out: &mut String, w: &crate::wills::WillOutcome) {
    if !w.watched {
        let _ = writeln!(
            out,
            "\nwills: the watcher could not subscribe to the will topics; nothing was judged"
        );
        return;
    }
    let times = match (w.from_drop_ms(0.5), w.from_drop_ms(0.99), w.earliest_ms()) {
        (Some(median), Some(p99), Some(earliest)) => format!(
            "from the drop: median {median:.1} ms, p99 {p99:.1} ms, earliest {earliest:.1} ms"
        ),
        _ => "no will arrived".to_string(),
    };
    let delay = if w.delay_ns > 0 {
        format!(
            " (will delay {:.1} s: {} before it)",
            w.delay_ns as f64 / 1e9,
            w.before_delay()
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "\nwills: {} clients connected ({} failed), {} dropped without DISCONNECT ({:.1} ms late at \
         most): {} wills delivered once, {} missing, {} duplicates, {} unexpected (of clean clients \
         or none); {times}{delay}; {} disconnected cleanly",
        w.connected,
        w.failed,
        w.dropped,
        w.drop_late_ns as f64 / 1e6,
        w.delivered,
        w.missing(),
        w.duplicates,
        w.unexpected,
        w.disconnected
    );
}

/// The churn fleet: arrivals asked and achieved, accepted, refused and failed by kind.
fn churn_lines(out: &mut String, churn: &crate::summary::ChurnSummary) {
    let _ = writeln!(
        out,
        "\nchurn: {} arrivals at {} /s asked, {} achieved (latest {:.1} ms behind schedule); {} connected, {} disconnected cleanly, at most {} at once",
        churn.attempted,
        churn.rate_asked,
        churn
            .rate_achieved
            .map_or("-".to_string(), |rate| format!("{rate:.1} /s")),
        churn.most_late_ms,
        churn.connected,
        churn.disconnected,
        churn.most_open
    );
    for (kind, count) in &churn.failures {
        let _ = writeln!(out, "  churn {kind}: {count}");
    }
}

/// Writes `latency.hgrm` (open loop), `transit_latency.hgrm`, `send_delay.hgrm`,
/// `read_delay.hgrm` and `connect_time.hgrm` (HdrHistogram percentile distributions in ms),
/// `latency.hlog` (the open-loop latency per interval, [`crate::interval_log`]) and
/// `result.json` (the raw mergeable result) into `dir`.
pub fn write_histograms(dir: &Path, result: &RunResult) -> Result<(), OutputError> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    for (name, histogram) in [
        ("latency", &result.latency),
        ("transit_latency", &result.transit_latency),
        ("send_delay", &result.send_delay),
        ("read_delay", &result.read_delay),
        ("connect_time", &result.connect_time),
    ] {
        let path = dir.join(format!("{name}.hgrm"));
        // Replaced, not written through: a link planted at the name is not followed.
        host::folder::replace_file(&path, percentile_distribution(histogram, 1e6).as_bytes())
            .map_err(|e| io_error(&path)(e.into()))?;
    }
    let path = dir.join("latency.hlog");
    let log = crate::interval_log::latency_log(result).map_err(OutputError::Serialize)?;
    host::folder::replace_file(&path, log.as_bytes()).map_err(|e| io_error(&path)(e.into()))?;
    write_result(&dir.join("result.json"), result)
}

/// Saves the raw result as JSON (histograms as V2+DEFLATE base64), for merging later.
pub fn write_result(path: &Path, result: &RunResult) -> Result<(), OutputError> {
    let json = serde_json::to_string(result).map_err(|e| OutputError::Serialize(e.to_string()))?;
    host::folder::replace_file(path, json.as_bytes()).map_err(|e| io_error(path)(e.into()))
}

/// HdrHistogram's standard percentile text, values divided by `unit_ratio` (1e6: ns -> ms).
pub fn percentile_distribution(histogram: &Histogram<u64>, unit_ratio: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !histogram.is_empty() {
        for step in histogram.iter_quantiles(5) {
            total += step.count_since_last_iteration();
            let value = step.value_iterated_to() as f64 / unit_ratio;
            let quantile = step.quantile_iterated_to();
            if quantile < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:>12.3} {quantile:>2.12} {total:>10} {:>14.2}",
                    1.0 / (1.0 - quantile)
                );
            } else {
                let _ = writeln!(out, "{value:>12.3} {quantile:>2.12} {total:>10}");
            }
        }
    }
    let mean = if histogram.is_empty() {
        0.0
    } else {
        histogram.mean() / unit_ratio
    };
    let stdev = if histogram.is_empty() {
        0.0
    } else {
        histogram.stdev() / unit_ratio
    };
    let _ = writeln!(
        out,
        "#[Mean    = {mean:>12.3}, StdDeviation   = {stdev:>12.3}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        histogram.max() as f64 / unit_ratio,
        histogram.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        histogram.buckets(),
        histogram.distinct_values()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::new_histogram;

    #[test]
    fn percentile_text_ends_at_the_maximum() {
        let mut histogram = new_histogram();
        for value in 1..=1000u64 {
            histogram.record(value * 1_000).expect("in range");
        }
        let text = percentile_distribution(&histogram, 1e6);
        let last_value_line = text
            .lines()
            .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
            .expect("lines");
        assert!(
            last_value_line.contains("1.000000000000"),
            "{last_value_line}"
        );
        assert!(text.contains("Total count    =         1000"), "{text}");
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        let field = |text: &str| csv_line([text]).expect("a line");
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
