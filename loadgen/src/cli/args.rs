//! The flags: the workload's, the saturation search's and the output's, with the parsers of
//! the values that are not plain numbers or enums.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::size::ByteSize;
use crate::spec::{Coalescing, MqttVersion, Qos, QuicStreams, Topology, Transport};

/// Settings of a saturation search.
#[derive(Debug, Args, Default, Clone)]
pub struct SearchArgs {
    /// Measured window of each probe (default 3s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub probe: Option<Duration>,
    /// Warm-up of each probe (default 1s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub probe_warmup: Option<Duration>,
    /// A probe whose p99 latency exceeds this is not sustained (default 100ms).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub p99_bound: Option<Duration>,
    /// Wall time the whole search may take (default 60s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub budget: Option<Duration>,
    /// The first offered rate, msg/s (default: half of what a closed loop gets through).
    #[arg(long)]
    pub start_rate: Option<u64>,
}

/// Output options.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Print the summary as JSON on stdout (every figure, units in field names).
    #[arg(long, global = true)]
    pub json: bool,
    /// Append one row per run to this CSV file.
    #[arg(long, global = true, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write HdrHistogram percentile files (.hgrm) and the raw result into this folder.
    #[arg(long, global = true, value_name = "DIR")]
    pub hgrm: Option<PathBuf>,
    /// Save the raw, mergeable result (JSON) to this file.
    #[arg(long, global = true, value_name = "FILE")]
    pub result: Option<PathBuf>,
    /// No progress bar, even on a terminal.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

/// Workload flags; each overrides the preset's or the spec file's value.
#[derive(Debug, Args, Default, Clone)]
pub struct WorkloadArgs {
    /// Broker address.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_address)]
    pub broker: Option<(String, u16)>,
    /// MQTT version: 3.1.1 or 5.
    #[arg(long, value_parser = one_of::<MqttVersion>("an MQTT version"))]
    pub protocol: Option<MqttVersion>,
    /// QoS 0, 1 or 2.
    #[arg(long, value_parser = parse_qos)]
    pub qos: Option<Qos>,
    /// MQTT 5: publishers send their topic as a topic alias after each connection's first
    /// message (saving its length on every later one).
    #[arg(long)]
    pub topic_alias: bool,
    /// Where the measurement header travels: in the payload, or (MQTT 5) in a user property,
    /// leaving the payload exactly --payload bytes of zeros (0 B allowed).
    #[arg(long, value_enum)]
    pub header_in: Option<crate::header::HeaderPlace>,
    /// MQTT 5: every publish carries this message expiry interval (whole seconds, e.g. 1s);
    /// with --offline-after/--offline-gap, what the broker held longer is counted expired.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub message_expiry: Option<Duration>,
    /// MQTT 5: the receive maximum clients announce (1-65535): QoS 1/2 deliveries the broker
    /// may have unacknowledged at one subscriber.
    #[arg(long)]
    pub receive_maximum: Option<u16>,
    /// QoS the subscribers subscribe at, when not --qos (lower: a QoS downgrade, each delivery
    /// judged at the lower of the two).
    #[arg(long, value_parser = parse_qos)]
    pub subscriber_qos: Option<Qos>,
    /// Publishers and subscribers both (the throughput test's N).
    #[arg(long)]
    pub clients: Option<u32>,
    /// Publisher connections.
    #[arg(long)]
    pub publishers: Option<u32>,
    /// Subscriber connections.
    #[arg(long)]
    pub subscribers: Option<u32>,
    /// Topic layout: shared, pairs, fan-out, or tree (set by --topics).
    #[arg(long, value_parser = one_of::<Topology>("a topology"))]
    pub topology: Option<Topology>,
    /// A topic tree: topics named by a pattern with {name} placeholders
    /// (e.g. site/{site}/device/{device}/temp); publishers publish to them in turn.
    #[arg(
        long,
        value_name = "PATTERN",
        requires = "subscribe",
        conflicts_with = "topology"
    )]
    pub topics: Option<String>,
    /// How many values a placeholder of --topics takes (e.g. site=4); once per placeholder.
    #[arg(long, value_name = "NAME=COUNT", value_parser = parse_topic_count, requires = "topics")]
    pub topic_count: Vec<(String, u32)>,
    /// A filter subscribers read the tree through (+ and # allowed); subscriber s takes
    /// the (s mod filters)-th; once per filter.
    #[arg(long, value_name = "FILTER", requires = "topics")]
    pub subscribe: Vec<String>,
    /// Publishers retain their messages; this many late subscribers connect once publishing
    /// has ended, each must get the last value of every topic (then the run clears them).
    #[arg(long, value_name = "COUNT")]
    pub retain_late: Option<u32>,
    /// The late subscribers' filter below the run's prefix (default #).
    #[arg(long, value_name = "FILTER", requires = "retain_late")]
    pub retain_filter: Option<String>,
    /// MQTT 5 retain handling of the late subscribers' SUBSCRIBE: 0 at every subscribe, 1
    /// only to a new subscription, 2 never.
    #[arg(long, value_name = "0|1|2", requires = "retain_late")]
    pub retain_handling: Option<u8>,
    /// MQTT 5 retain-as-published on the workload's subscriptions: live deliveries of
    /// retained publishes keep RETAIN set.
    #[arg(long, requires = "retain_late")]
    pub retain_as_published: bool,
    /// Clients that connect with a will beside the workload; a watcher must get the will of
    /// each one dropped (--wills-dropped) once, and none of the others.
    #[arg(long, value_name = "COUNT", requires_all = ["wills_dropped", "wills_after"])]
    pub wills: Option<u32>,
    /// How many of the will clients close their socket without DISCONNECT.
    #[arg(long, value_name = "COUNT", requires = "wills")]
    pub wills_dropped: Option<u32>,
    /// When they drop, from the start (e.g. 2s).
    #[arg(long, value_name = "TIME", value_parser = humantime::parse_duration, requires = "wills")]
    pub wills_after: Option<std::time::Duration>,
    /// MQTT 5 will delay interval (e.g. 2s; needs --protocol 5).
    #[arg(long, value_name = "TIME", value_parser = humantime::parse_duration, requires = "wills")]
    pub will_delay: Option<std::time::Duration>,
    /// The wills' QoS (default 1).
    #[arg(long, value_parser = parse_qos, requires = "wills")]
    pub will_qos: Option<Qos>,
    /// The wills are retained (cleared once checked).
    #[arg(long, requires = "wills")]
    pub will_retain: bool,
    /// Payload size on the wire (e.g. 10B, 1KB, 10KB, 1MB; KiB/MiB for 1024).
    #[arg(long, visible_alias = "size")]
    pub payload: Option<ByteSize>,
    /// Messages per publisher, warm-up included (a counted run).
    #[arg(long, conflicts_with = "duration")]
    pub messages: Option<u64>,
    /// Warm-up excluded from the figures: a number of messages per publisher (counted runs)
    /// or a time such as 2s (timed runs).
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<WarmupArg>,
    /// A timed run: measure for this long after the warm-up (e.g. 10s); sustained rates.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Open loop: one message per publisher every INTERVAL (e.g. 250ms).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with_all = ["burst", "rate", "closed_loop"])]
    pub interval: Option<Duration>,
    /// Open loop at an offered rate: messages per second of all publishers together.
    #[arg(long, value_name = "PER_SECOND", conflicts_with_all = ["burst", "closed_loop"])]
    pub rate: Option<u64>,
    /// Closed loop (timed): each publisher keeps its window full for --duration.
    #[arg(long, conflicts_with = "burst")]
    pub closed_loop: bool,
    /// Burst: as fast as the broker takes them.
    #[arg(long)]
    pub burst: bool,
    /// Runtime threads for the load (0 = half the CPUs this process may use, at least one).
    #[arg(long)]
    pub threads: Option<u16>,
    /// Receive coalescing (QoS 0 subscribers read at most this often while deliveries keep
    /// coming): auto, off, or a cadence such as 500us.
    #[arg(long)]
    pub coalescing: Option<Coalescing>,
    /// QoS 1/2 messages a publisher may have unacknowledged.
    #[arg(long)]
    pub inflight: Option<u16>,
    /// New connections per second while connecting.
    #[arg(long, value_name = "PER_SECOND")]
    pub ramp_up: Option<u32>,
    /// MQTT keep-alive (e.g. 60s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub keep_alive: Option<Duration>,
    /// Deadline for one connection to be set up.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// Deadline for in-flight messages after the last publish.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Stop draining after this long without a delivery.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub drain_idle: Option<Duration>,
    /// Client id prefix.
    #[arg(long)]
    pub client_id_prefix: Option<String>,
    /// First topic level.
    #[arg(long)]
    pub topic_prefix: Option<String>,
    /// Username for CONNECT.
    #[arg(long)]
    pub username: Option<String>,
    /// Password for CONNECT, read from this file (its first line); a password on the command
    /// line would show in every process listing.
    #[arg(long, value_name = "FILE", conflicts_with = "password_env")]
    pub password_file: Option<PathBuf>,
    /// Password for CONNECT, read from this environment variable.
    #[arg(long, value_name = "NAME")]
    pub password_env: Option<String>,
    /// Connect with TLS, trusting this CA certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Keep sessions (clean session off).
    #[arg(long)]
    pub persistent_session: bool,
    /// How MQTT travels: tcp, websocket (wss with --tls-ca), or quic (needs --tls-ca).
    #[arg(long, value_parser = one_of::<Transport>("a transport"))]
    pub transport: Option<Transport>,
    /// Over QUIC, a client connecting again sends CONNECT as 0-RTT data with a ticket of its
    /// own previous connection.
    #[arg(long)]
    pub quic_zero_rtt: bool,
    /// Over QUIC, which streams carry MQTT: single (one for everything), per-topic or
    /// per-publish (PUBLISH on streams of their own, the broker's own streams read).
    #[arg(long, value_parser = one_of::<QuicStreams>("a QUIC stream mode"))]
    pub quic_streams: Option<QuicStreams>,
    /// The WebSocket request path (default /mqtt; RabbitMQ's web-mqtt serves /ws).
    #[arg(long, value_name = "PATH")]
    pub websocket_path: Option<String>,
    /// A churn fleet beside the workload: new connections per second.
    #[arg(long, value_name = "PER_SECOND", requires_all = ["churn_connections", "churn_hold"])]
    pub churn_rate: Option<f64>,
    /// A churn fleet: connections made in all.
    #[arg(long, requires = "churn_rate")]
    pub churn_connections: Option<u64>,
    /// A churn fleet: how long each stays connected (e.g. 2s).
    #[arg(long, value_parser = humantime::parse_duration, requires = "churn_rate")]
    pub churn_hold: Option<Duration>,
    /// Subscribers go offline this long after the start (needs --persistent-session).
    #[arg(long, value_parser = humantime::parse_duration, requires = "offline_gap")]
    pub offline_after: Option<Duration>,
    /// ... and come back to their kept session this much later.
    #[arg(long, value_parser = humantime::parse_duration, requires = "offline_after")]
    pub offline_gap: Option<Duration>,
    /// A lost connection is opened again, trying for this long (e.g. 30s): a reconnect storm.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub reconnect_within: Option<Duration>,
    /// Between two reconnect attempts of one client (default 100ms).
    #[arg(long, value_parser = humantime::parse_duration, requires = "reconnect_within")]
    pub reconnect_retry: Option<Duration>,
    /// Every connection is cut this long after the start, and reconnects (needs
    /// --reconnect-within).
    #[arg(long, value_parser = humantime::parse_duration, requires = "reconnect_within")]
    pub cut_all_at: Option<Duration>,
    /// Each subscriber reads at most this many messages per second (a slow consumer).
    #[arg(long, value_name = "PER_SECOND")]
    pub subscriber_rate_limit: Option<u32>,
}

/// A warm-up given on the command line: a count of messages or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmupArg {
    /// Messages per publisher.
    Messages(u64),
    /// A time.
    Time(Duration),
}

/// `--warmup`: a bare number is messages per publisher, anything else must be a time.
fn parse_warmup(text: &str) -> Result<WarmupArg, String> {
    if let Ok(count) = text.parse::<u64>() {
        return Ok(WarmupArg::Messages(count));
    }
    humantime::parse_duration(text)
        .map(WarmupArg::Time)
        .map_err(|_| format!("{text:?} is neither a number of messages nor a time like 2s"))
}

/// `--broker HOST:PORT`; an IPv6 host may be bracketed (`[::1]:1883`).
fn parse_address(text: &str) -> Result<(String, u16), String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{port:?} is not a port number"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{text:?} has no host"));
    }
    Ok((host.to_string(), port))
}

/// `NAME=COUNT` of --topic-count.
fn parse_topic_count(text: &str) -> Result<(String, u32), String> {
    let (name, count) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=COUNT (e.g. site=4), not {text:?}"))?;
    let count = count
        .parse()
        .map_err(|_| format!("the count of {name:?} is a whole number, not {count:?}"))?;
    Ok((name.to_string(), count))
}

/// A QoS is written as its level, as in a spec file; parsing it as a number keeps every
/// spelling a number may have (`01`, `+1`), which a list of names would not.
fn parse_qos(text: &str) -> Result<Qos, String> {
    let level: u8 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a QoS (0, 1 or 2)"))?;
    Qos::try_from(level)
}

/// A parser for the command-line spellings of `E` (its `ValueEnum` names and aliases) whose
/// error names them on the same line: clap's own error lists them on a second line, which
/// loadgen's one-line errors leave out.
fn one_of<E: ValueEnum + Send + Sync + 'static>(
    what: &'static str,
) -> impl Fn(&str) -> Result<E, String> + Clone + Send + Sync + 'static {
    move |text| {
        E::from_str(text, false).map_err(|_| {
            let names: Vec<String> = E::value_variants()
                .iter()
                .filter_map(ValueEnum::to_possible_value)
                .map(|value| value.get_name().to_string())
                .collect();
            let listed = match names.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            format!("{text:?} is not {what} ({listed})")
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    /// The workload flags of `loadgen latency ARGS`, or clap's error.
    fn latency_flags(args: &[&str]) -> Result<WorkloadArgs, String> {
        let argv = ["loadgen", "latency"].iter().chain(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        let Command::Latency(flags) = cli.command else {
            panic!("parsed as another command: {:?}", cli.command);
        };
        Ok(flags)
    }

    #[test]
    fn enum_flags_take_every_spelling_they_always_took() {
        let protocol = |text| latency_flags(&["--protocol", text]).map(|f| f.protocol);
        for text in ["3.1.1", "311", "4"] {
            assert_eq!(protocol(text), Ok(Some(MqttVersion::V311)), "{text}");
        }
        for text in ["5", "5.0"] {
            assert_eq!(protocol(text), Ok(Some(MqttVersion::V5)), "{text}");
        }
        let topology = |text| latency_flags(&["--topology", text]).map(|f| f.topology);
        assert_eq!(topology("shared"), Ok(Some(Topology::Shared)));
        assert_eq!(topology("pairs"), Ok(Some(Topology::Pairs)));
        assert_eq!(topology("fan-out"), Ok(Some(Topology::FanOut)));
        assert_eq!(topology("fanout"), Ok(Some(Topology::FanOut)));
        let qos = |text| latency_flags(&["--qos", text]).map(|f| f.qos);
        assert_eq!(qos("0"), Ok(Some(Qos::AtMostOnce)));
        assert_eq!(qos("01"), Ok(Some(Qos::AtLeastOnce)));
        assert_eq!(qos("2"), Ok(Some(Qos::ExactlyOnce)));
    }

    #[test]
    fn a_bad_enum_value_is_refused_naming_what_is_accepted_on_one_line() {
        let refused = |args: &[&str]| latency_flags(args).expect_err("must be refused");
        let first_line = |error: String| error.lines().next().unwrap_or_default().to_string();
        assert!(first_line(refused(&["--protocol", "3"])).contains("(3.1.1 or 5)"));
        assert!(first_line(refused(&["--protocol", "V5"])).contains("(3.1.1 or 5)"));
        assert!(
            first_line(refused(&["--topology", "Shared"]))
                .contains("(shared, pairs, fan-out or tree)")
        );
        assert!(first_line(refused(&["--qos", "3"])).contains("QoS must be 0, 1 or 2"));
        assert!(
            first_line(refused(&[
                "--topics",
                "a/{x}",
                "--topic-count",
                "x4",
                "--subscribe",
                "#"
            ]))
            .contains("expected NAME=COUNT")
        );
    }

    #[test]
    fn tree_flags_build_the_tree() {
        let flags = latency_flags(&[
            "--topics",
            "site/{site}/device/{device}",
            "--topic-count",
            "site=4",
            "--topic-count",
            "device=25",
            "--subscribe",
            "site/+/device/+",
            "--subscribe",
            "site/2/#",
            "--publishers",
            "100",
            "--subscribers",
            "2",
        ])
        .expect("parses");
        let mut spec = crate::presets::latency();
        flags.apply(&mut spec);
        assert_eq!(spec.topology, Topology::Tree);
        let tree = spec.topics.as_ref().expect("a tree");
        assert_eq!(tree.counts.get("device"), Some(&25));
        assert_eq!(tree.subscribe, ["site/+/device/+", "site/2/#"]);
        spec.validate().expect("a valid tree");
        assert!(
            latency_flags(&["--topics", "a"]).is_err(),
            "--subscribe is required"
        );
    }
}
