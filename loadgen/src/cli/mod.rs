//! The `loadgen` command: the study's tests as presets ([`crate::presets`]), `run SPEC.toml`,
//! `saturate`, and `merge`.
//!
//! Every preset parameter can be overridden by the same flags, so a preset is only a starting
//! point: `loadgen latency --qos 0 --interval 100ms` is still an open-loop latency run.
//!
//! The flags are declared in `args`, turned into a spec in `apply`; `run` carries out one
//! workload here, `saturate` a search of probes, `merge` combines saved results.

mod apply;
mod args;
mod merge;
mod run;
mod saturate;

pub use apply::spec_for;
pub use args::{OutputArgs, SearchArgs, WarmupArg, WorkloadArgs};

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::summary::Summary;
use crate::{LoadgenError, output};

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
    /// SIGINT or SIGTERM came and the run did not stop within this long; its figures are lost.
    #[error("the run did not stop within {0:?} of SIGINT/SIGTERM; exiting without its figures")]
    NotStopped(std::time::Duration),
}

/// Runs the parsed command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Saturate { search, .. } = &cli.command {
        return saturate::saturate(&cli, spec_for(&cli.command)?, search.settings()).await;
    }
    let result = match &cli.command {
        Command::Merge { results } => merge::merge_files(results)?,
        command => run::run_workload(spec_for(command)?, &cli.output).await?,
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
