//! The `loadgen` command: presets for the study's three tests, `run SPEC.toml`, and `merge`.
//!
//! Every preset parameter can be overridden by the same flags, so a preset is only a starting
//! point: `loadgen latency --qos 0 --interval 100ms` is still an open-loop latency run.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::engine::{Phase, Status};
use crate::result::RunResult;
use crate::size::ByteSize;
use crate::spec::{Coalescing, MqttVersion, Pacing, Qos, Topology, WorkloadSpec};
use crate::summary::Summary;
use crate::{LoadgenError, output, presets};

/// Command-line arguments of `loadgen`.
#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    version,
    about = "MQTT load generator with true latency and throughput accounting"
)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
    /// Where the figures go.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The study's latency test: 100 publishers, 1 subscriber, 10 B, QoS 1, one message every
    /// 250 ms per publisher (open loop), 20 messages each, the first 2 as warm-up.
    Latency(WorkloadArgs),
    /// The study's latency-vs-payload test: as `latency`, with `--size 1KB|10KB|1MB`.
    Payload(WorkloadArgs),
    /// The study's throughput test: N publishers and N subscribers in pairs, QoS 0, 10 B,
    /// M messages per publisher as fast as the broker takes them (a burst). With --duration
    /// (and --warmup 2s) it is a sustained test instead: closed loop, or open loop at --rate.
    Throughput(WorkloadArgs),
    /// Searches for the highest offered rate the broker sustains: short timed probes (the
    /// throughput preset's clients, or --publishers/--subscribers/--topology), growing from
    /// half what a closed loop gets through, then bisecting, within --budget.
    Saturate {
        /// The workload of every probe.
        #[command(flatten)]
        workload: WorkloadArgs,
        /// How the search runs.
        #[command(flatten)]
        search: SearchArgs,
    },
    /// Runs a workload from a TOML spec file; flags override its fields.
    Run {
        /// The spec file.
        spec: PathBuf,
        /// Overrides.
        #[command(flatten)]
        overrides: WorkloadArgs,
    },
    /// Merges raw results (`--result` files) of one run's instances and prints the figures.
    Merge {
        /// Result files written with `--result`.
        #[arg(required = true)]
        results: Vec<PathBuf>,
    },
}

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

impl SearchArgs {
    /// The settings these flags ask for.
    pub fn settings(&self) -> crate::saturation::SearchSettings {
        let mut settings = crate::saturation::SearchSettings::default();
        set(&mut settings.probe, self.probe);
        set(&mut settings.probe_warmup, self.probe_warmup);
        set(&mut settings.p99_bound, self.p99_bound);
        set(&mut settings.budget, self.budget);
        if self.start_rate.is_some() {
            settings.start_rate = self.start_rate;
        }
        settings
    }
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
    #[arg(long, value_parser = parse_protocol)]
    pub protocol: Option<MqttVersion>,
    /// QoS 0, 1 or 2.
    #[arg(long, value_parser = parse_qos)]
    pub qos: Option<Qos>,
    /// Publishers and subscribers both (the throughput test's N).
    #[arg(long)]
    pub clients: Option<u32>,
    /// Publisher connections.
    #[arg(long)]
    pub publishers: Option<u32>,
    /// Subscriber connections.
    #[arg(long)]
    pub subscribers: Option<u32>,
    /// Topic layout: shared, pairs or fan-out.
    #[arg(long, value_parser = parse_topology)]
    pub topology: Option<Topology>,
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
    /// Receive coalescing: auto, off, or a sleep such as 50us.
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
    /// Password for CONNECT.
    #[arg(long)]
    pub password: Option<String>,
    /// Connect with TLS, trusting this CA certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Keep sessions (clean session off).
    #[arg(long)]
    pub persistent_session: bool,
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

fn parse_warmup(text: &str) -> Result<WarmupArg, String> {
    if let Ok(count) = text.parse::<u64>() {
        return Ok(WarmupArg::Messages(count));
    }
    humantime::parse_duration(text)
        .map(WarmupArg::Time)
        .map_err(|_| format!("{text:?} is neither a number of messages nor a time like 2s"))
}

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

fn parse_protocol(text: &str) -> Result<MqttVersion, String> {
    match text {
        "3.1.1" | "311" | "4" => Ok(MqttVersion::V311),
        "5" | "5.0" => Ok(MqttVersion::V5),
        other => Err(format!("{other:?} is not an MQTT version (3.1.1 or 5)")),
    }
}

fn parse_qos(text: &str) -> Result<Qos, String> {
    let level: u8 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a QoS (0, 1 or 2)"))?;
    Qos::try_from(level)
}

fn parse_topology(text: &str) -> Result<Topology, String> {
    match text {
        "shared" => Ok(Topology::Shared),
        "pairs" => Ok(Topology::Pairs),
        "fan-out" | "fanout" => Ok(Topology::FanOut),
        other => Err(format!(
            "{other:?} is not a topology (shared, pairs, fan-out)"
        )),
    }
}

impl WorkloadArgs {
    /// Applies every given flag to `spec`.
    pub fn apply(&self, spec: &mut WorkloadSpec) {
        if let Some((host, port)) = &self.broker {
            spec.broker.host = host.clone();
            spec.broker.port = *port;
        }
        set(&mut spec.broker.protocol, self.protocol);
        set(&mut spec.qos, self.qos);
        if let Some(clients) = self.clients {
            spec.publishers = clients;
            spec.subscribers = clients;
        }
        set(&mut spec.publishers, self.publishers);
        set(&mut spec.subscribers, self.subscribers);
        set(&mut spec.topology, self.topology);
        set(&mut spec.payload, self.payload);
        if let Some(messages) = self.messages {
            spec.messages_per_publisher = messages;
            spec.duration = None;
            spec.warmup = None;
        }
        if let Some(duration) = self.duration {
            // A timed run: the preset's counts give way, and a burst becomes a closed loop.
            spec.duration = Some(duration);
            spec.messages_per_publisher = 0;
            spec.warmup_messages = 0;
            if spec.pacing == Pacing::Burst {
                spec.pacing = Pacing::ClosedLoop;
            }
        }
        match self.warmup {
            Some(WarmupArg::Messages(count)) => spec.warmup_messages = count,
            Some(WarmupArg::Time(time)) => spec.warmup = Some(time),
            None => {}
        }
        if let Some(interval) = self.interval {
            spec.pacing = Pacing::OpenLoop { interval };
        }
        if let Some(rate) = self.rate {
            spec.pacing = Pacing::Rate { rate };
        }
        if self.closed_loop {
            spec.pacing = Pacing::ClosedLoop;
        }
        if self.burst {
            spec.pacing = Pacing::Burst;
        }
        set(&mut spec.engine.threads, self.threads);
        set(&mut spec.engine.coalescing, self.coalescing);
        set(&mut spec.connection.inflight, self.inflight);
        if self.ramp_up.is_some() {
            spec.connection.ramp_up_per_second = self.ramp_up;
        }
        set(&mut spec.connection.keep_alive, self.keep_alive);
        set(&mut spec.connection.connect_timeout, self.connect_timeout);
        set(&mut spec.drain.timeout, self.drain_timeout);
        set(&mut spec.drain.idle, self.drain_idle);
        set(
            &mut spec.connection.client_id_prefix,
            self.client_id_prefix.clone(),
        );
        set(&mut spec.topic_prefix, self.topic_prefix.clone());
        if self.username.is_some() {
            spec.broker.username = self.username.clone();
        }
        if self.password.is_some() {
            spec.broker.password = self.password.clone();
        }
        if self.tls_ca.is_some() {
            spec.broker.tls_ca_file = self.tls_ca.clone();
        }
        if self.persistent_session {
            spec.connection.clean_session = false;
        }
        if self.subscriber_rate_limit.is_some() {
            spec.subscriber_rate_limit = self.subscriber_rate_limit;
        }
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The run failed.
    #[error(transparent)]
    Run(#[from] LoadgenError),
    /// Writing the figures failed.
    #[error(transparent)]
    Output(#[from] output::OutputError),
    /// A file given on the command line could not be read or parsed.
    #[error("{path}: {problem}")]
    Input {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// A required flag is missing.
    #[error("{0}")]
    Usage(String),
}

/// Builds the spec a command asks for.
pub fn spec_for(command: &Command) -> Result<WorkloadSpec, CliError> {
    let (mut spec, args) = match command {
        Command::Latency(args) => (presets::latency(), args),
        Command::Payload(args) => {
            if args.payload.is_none() {
                return Err(CliError::Usage(
                    "loadgen payload needs --size (e.g. 1KB, 10KB, 1MB)".to_string(),
                ));
            }
            (presets::latency(), args)
        }
        Command::Throughput(args) | Command::Saturate { workload: args, .. } => {
            (presets::throughput(), args)
        }
        Command::Run { spec, overrides } => {
            let text = std::fs::read_to_string(spec).map_err(|e| CliError::Input {
                path: spec.display().to_string(),
                problem: e.to_string(),
            })?;
            let parsed: WorkloadSpec = toml::from_str(&text).map_err(|e| CliError::Input {
                path: spec.display().to_string(),
                problem: e.message().to_string() + &span_note(&text, e.span()),
            })?;
            (parsed, overrides)
        }
        Command::Merge { .. } => {
            return Err(CliError::Usage(
                "merge takes result files, not a workload".to_string(),
            ));
        }
    };
    args.apply(&mut spec);
    spec.validate().map_err(LoadgenError::from)?;
    Ok(spec)
}

fn span_note(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!(" (line {line})")
        }
        None => String::new(),
    }
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Saturate { search, .. } = &cli.command {
        return saturate(&cli, spec_for(&cli.command)?, search.settings()).await;
    }
    let result = match &cli.command {
        Command::Merge { results } => merge_files(results)?,
        command => {
            let spec = spec_for(command)?;
            let cancel = CancellationToken::new();
            spawn_signal_handler(cancel.clone());
            let show_progress =
                !cli.output.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let (status_tx, status_rx) = watch::channel(Status::default());
            let progress = show_progress.then(|| tokio::spawn(progress_bar(status_rx)));
            let outcome = crate::runtime::run_dedicated(
                spec,
                crate::engine::StartBarrier::default(),
                cancel,
                Some(status_tx),
            )
            .await;
            if let Some(progress) = progress {
                let _ = progress.await;
            }
            outcome?
        }
    };
    let summary = Summary::of(&result);
    if cli.output.json {
        println!("{}", output::to_json(&summary)?);
    } else {
        print!("{}", output::render_table(&summary));
    }
    if let Some(path) = &cli.output.csv {
        output::append_csv(path, &summary)?;
    }
    if let Some(dir) = &cli.output.hgrm {
        output::write_histograms(dir, &result)?;
    }
    if let Some(path) = &cli.output.result {
        output::write_result(path, &result)?;
    }
    Ok(())
}

/// Runs a saturation search locally, one probe after the other, printing each as it ends.
async fn saturate(
    cli: &Cli,
    base: WorkloadSpec,
    settings: crate::saturation::SearchSettings,
) -> Result<(), CliError> {
    use crate::saturation::{Search, probe_spec};
    settings
        .validate("")
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let cancel = CancellationToken::new();
    spawn_signal_handler(cancel.clone());
    let mut search = Search::new(settings.clone());
    if !cli.output.json {
        println!(
            "saturation search against {}: {} publishers -> {} subscribers ({}), QoS {}, {} B; probes of {} after {} warm-up, p99 bound {}, budget {}",
            base.broker,
            base.publishers,
            base.subscribers,
            base.topology,
            base.qos.level(),
            base.payload.bytes(),
            humantime::format_duration(settings.probe),
            humantime::format_duration(settings.probe_warmup),
            humantime::format_duration(settings.p99_bound),
            humantime::format_duration(settings.budget),
        );
    }
    while let Some(probe) = search.next_probe() {
        if cancel.is_cancelled() {
            break;
        }
        let spec = probe_spec(&base, probe, &settings);
        let began = std::time::Instant::now();
        let outcome = match crate::runtime::run_dedicated(
            spec,
            crate::engine::StartBarrier::default(),
            cancel.clone(),
            None,
        )
        .await
        {
            Ok(result) => crate::saturation::ProbeOutcome::of(
                probe,
                &Summary::of(&result),
                &settings,
                began.elapsed(),
            ),
            Err(error) => {
                crate::saturation::ProbeOutcome::failed(probe, error.to_string(), began.elapsed())
            }
        };
        if !cli.output.json {
            println!("{}", output::probe_line(&outcome));
        }
        search.record(outcome);
    }
    let report = search.report();
    if cli.output.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .map_err(|e| output::OutputError::Serialize(e.to_string()))?
        );
    } else {
        print!("{}", output::saturation_summary(&report));
    }
    Ok(())
}

fn merge_files(paths: &[PathBuf]) -> Result<RunResult, CliError> {
    let mut merged: Option<RunResult> = None;
    for path in paths {
        let input_error = |problem: String| CliError::Input {
            path: path.display().to_string(),
            problem,
        };
        let text = std::fs::read_to_string(path).map_err(|e| input_error(e.to_string()))?;
        let result: RunResult =
            serde_json::from_str(&text).map_err(|e| input_error(e.to_string()))?;
        match &mut merged {
            None => merged = Some(result),
            Some(total) => total
                .merge(&result)
                .map_err(|e| input_error(e.to_string()))?,
        }
    }
    merged.ok_or_else(|| CliError::Usage("no result files given".to_string()))
}

fn spawn_signal_handler(cancel: CancellationToken) {
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
        eprintln!("loadgen: stopping (the figures will cover what ran)");
        cancel.cancel();
    });
}

async fn progress_bar(mut status: watch::Receiver<Status>) {
    let bar = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} {msg:<12} [{bar:30}] {pos}/{len} published {prefix}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar.enable_steady_tick(Duration::from_millis(120));
    loop {
        let current = *status.borrow_and_update();
        let phase = match current.phase {
            Phase::Preflight => "preflight",
            Phase::Connecting => "connecting",
            Phase::Publishing => "publishing",
            Phase::Draining => "draining",
            Phase::Done => "done",
        };
        bar.set_message(phase);
        bar.set_length(current.planned_publishes);
        bar.set_position(current.progress.published);
        bar.set_prefix(format!(
            "| {} received | {}/{} connected",
            current.progress.received, current.connected.0, current.connected.1
        ));
        if current.phase == Phase::Done || status.changed().await.is_err() {
            break;
        }
    }
    bar.finish_and_clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_presets() {
        let cli = Cli::try_parse_from([
            "loadgen",
            "throughput",
            "--clients",
            "800",
            "--messages",
            "100",
            "--broker",
            "[::1]:1884",
        ])
        .expect("parses");
        let spec = spec_for(&cli.command).expect("valid");
        assert_eq!(
            (
                spec.publishers,
                spec.subscribers,
                spec.messages_per_publisher
            ),
            (800, 800, 100)
        );
        assert_eq!((spec.broker.host.as_str(), spec.broker.port), ("::1", 1884));
    }

    #[test]
    fn bad_input_is_refused_with_the_field_named() {
        let refused = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).expect("parses");
            spec_for(&cli.command)
                .expect_err("must be refused")
                .to_string()
        };
        assert!(refused(&["loadgen", "throughput", "--clients", "0"]).contains("publishers = 0"));
        assert!(
            refused(&["loadgen", "latency", "--interval", "0s"]).contains("pacing.interval = 0s")
        );
        assert!(refused(&["loadgen", "payload", "--size", "300MB"]).contains("256 MB"));
        assert!(refused(&["loadgen", "payload"]).contains("--size"));
        assert!(Cli::try_parse_from(["loadgen", "latency", "--frobnicate"]).is_err());
        assert!(Cli::try_parse_from(["loadgen", "latency", "--qos", "3"]).is_err());
    }
}
