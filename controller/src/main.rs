//! `controller`: parse, set up tracing, run the plan or subcommand, map the outcome to an
//! exit code. `terminal.rs` shows a run's events.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use controller::pki_command::{IdentityArg, PkiRequest, create};
use controller::plan::Plan;
use controller::remote::RemoteAction;
use controller::run::{RunOptions, event_channel, run_plan_observed};
use host::program::{self, Threads};
use proto::mtls::Credentials;
use tokio_util::sync::CancellationToken;

mod terminal;

/// Continuum's controller: `controller plan.toml` runs a whole study.
#[derive(Debug, Parser)]
#[command(name = "controller", version, args_conflicts_with_subcommands = true)]
struct Args {
    /// The plan to run (e.g. examples/quickstart.toml).
    plan: Option<PathBuf>,
    /// Continue the run in this results folder, skipping finished cells.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Rebuilds report.html and report.md of a run from its files alone.
    Report(ReportArgs),
    /// Compares two runs' results folders, figure by figure, with significance: B against A.
    Compare(CompareArgs),
    /// Creates the project's CA and the identities of controller, agents and clients.
    Pki(PkiArgs),
    /// Runs the controller as a gRPC service over mTLS: plans submitted with `controller
    /// remote` run one at a time; SIGTERM/SIGINT cancel the running plan (after its undo).
    Serve(ServeArgs),
    /// Drives a `controller serve` from another machine: submit, watch, list, fetch, cancel.
    Remote(RemoteArgs),
}

// The argument structs carry no doc comment: each subcommand's help is its variant's.

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// The run's results folder.
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// The baseline run's results folder (A).
    a: PathBuf,
    /// The candidate run's results folder (B).
    b: PathBuf,
    /// Where compare.md, compare.html and compare.csv go [default:
    /// compare-<A's folder name>-vs-<B's folder name>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct PkiArgs {
    /// Folder for ca.pem/ca.key and <name>.pem/<name>.key (created 0700).
    #[arg(long)]
    dir: PathBuf,
    /// The controller's identity: NAME[=ADDRESS,...].
    #[arg(long, default_value = "controller")]
    controller: IdentityArg,
    /// An agent: NAME=ADDRESS[,ADDRESS...] with the addresses the controller dials.
    #[arg(long = "agent")]
    agents: Vec<IdentityArg>,
    /// A remote client (laptop): NAME.
    #[arg(long = "client")]
    clients: Vec<IdentityArg>,
    /// Replace existing files (new keys).
    #[arg(long)]
    replace: bool,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,
    /// Folder with ca.pem and the identity's <name>.pem and <name>.key.
    #[arg(long, value_name = "DIR")]
    pki: PathBuf,
    /// The service's identity (a controller identity) in that folder.
    #[arg(long, default_value = "controller")]
    identity: String,
    /// What plans may use: a TOML file of `[[nodes]]` tables as in a plan, and optionally
    /// `[[external_brokers]]`, `[ca_files]` (name = path) and the nodes' `[testbed]`.
    #[arg(long, value_name = "FILE")]
    nodes: PathBuf,
    /// Every run writes into DIR/<run id>; submitted plans may not set results_dir.
    #[arg(long, value_name = "DIR", default_value = "results")]
    results: PathBuf,
}

#[derive(Debug, clap::Args)]
struct RemoteArgs {
    /// The service's address, HOST:PORT (a name or address its certificate carries).
    #[arg(long, value_name = "HOST:PORT")]
    addr: String,
    /// Folder with ca.pem and this client's <name>.pem and <name>.key.
    #[arg(long, value_name = "DIR")]
    pki: PathBuf,
    /// This client's identity in that folder (a remote-client identity).
    #[arg(long, value_name = "NAME")]
    identity: String,
    /// The name to check in the service's certificate, when HOST is not among its names.
    #[arg(long, value_name = "NAME")]
    server_name: Option<String>,
    #[command(subcommand)]
    action: RemoteAction,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // rumqttd (the embedded broker) logs an ERROR for every client that disconnects.
    program::init_tracing("warn,rumqttd=off");
    match (args.command, args.plan) {
        (Some(Command::Report(args)), _) => report(&args.dir),
        (Some(Command::Compare(args)), _) => compare(args),
        (Some(Command::Pki(args)), _) => pki(PkiRequest {
            dir: args.dir,
            controller: args.controller,
            agents: args.agents,
            clients: args.clients,
            replace: args.replace,
        }),
        (Some(Command::Serve(args)), _) => serve(args),
        (Some(Command::Remote(args)), _) => remote(args),
        (None, Some(plan)) => run(plan, args.resume),
        (None, None) => {
            eprintln!(
                "controller: give a plan (e.g. controller examples/quickstart.toml) or a subcommand (see --help)"
            );
            ExitCode::from(2)
        }
    }
}

fn report(dir: &Path) -> ExitCode {
    match controller::report::write_report(dir) {
        Ok(files) => {
            println!("{}\n{}", files.html.display(), files.markdown.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("controller report: {error}");
            ExitCode::FAILURE
        }
    }
}

fn compare(args: CompareArgs) -> ExitCode {
    let name = |dir: &Path| {
        dir.file_name()
            .map_or_else(|| "run".to_string(), |n| n.to_string_lossy().into_owned())
    };
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from(format!("compare-{}-vs-{}", name(&args.a), name(&args.b)))
    });
    match controller::report::compare::write_comparison(&args.a, &args.b, &out) {
        Ok(files) => {
            println!(
                "{} figure(s) compared, {} measured in one run only\n{}\n{}\n{}",
                files.matched,
                files.unmatched,
                files.html.display(),
                files.markdown.display(),
                files.csv.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("controller compare: {error}");
            ExitCode::FAILURE
        }
    }
}

fn pki(request: PkiRequest) -> ExitCode {
    match create(&request) {
        Ok(written) => {
            for line in written {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("controller pki: {error}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let config = match controller::serve::ServeConfig::with_nodes_file(
        args.results,
        args.pki.clone(),
        &args.nodes,
    ) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("controller serve: --nodes {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match program::runtime("controller serve", Threads::PerCore) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    program::exit_code(
        "controller serve",
        runtime.block_on(controller::serve::run(
            &args.listen,
            &args.pki,
            &args.identity,
            config,
        )),
    )
}

fn remote(args: RemoteArgs) -> ExitCode {
    let credentials = match Credentials::load(&args.pki, &args.identity) {
        Ok(credentials) => credentials,
        Err(error) => {
            eprintln!("controller remote: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match program::runtime("controller remote", Threads::PerCore) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let server_name = args.server_name.as_deref();
    let outcome = runtime.block_on(controller::remote::run(
        &args.addr,
        server_name,
        &credentials,
        args.action,
    ));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("controller remote: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: PathBuf, resume: Option<PathBuf>) -> ExitCode {
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("controller: {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let plan = match Plan::parse_local(&text, &path.display().to_string()) {
        Ok(plan) => plan,
        Err(error) => {
            eprintln!("controller: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match program::runtime("controller", Threads::PerCore) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let cancel = CancellationToken::new();
        tokio::spawn(stop_on_signal(cancel.clone()));
        let signalled = cancel.clone();
        let (events, shown) = event_channel();
        let display = tokio::spawn(terminal::show_progress(shown));
        let (events, metrics) = match controller::metrics::tap(&plan, events).await {
            Ok(tapped) => tapped,
            Err(error) => {
                eprintln!("controller: {error}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(metrics) = &metrics {
            eprintln!(
                "controller: metrics at http://{}/metrics",
                metrics.address
            );
        }
        let outcome = run_plan_observed(
            &plan,
            &text,
            RunOptions {
                resume,
                folder: None,
            },
            cancel,
            Some(events),
        )
        .await;
        let _ = display.await;
        let code = match outcome {
            Ok(summary) => {
                if let Some(table) = controller::report::glance::table(&summary.dir) {
                    eprintln!(
                        "\ncontroller: the run at a glance (medians over the measured repetitions; the report has spreads and intervals):\n{table}\n"
                    );
                }
                eprintln!(
                    "controller: {} cells measured, {} failed, {} skipped{}; results in {}",
                    summary.measured,
                    summary.failed,
                    summary.skipped,
                    if summary.interrupted {
                        " (interrupted: resume with --resume DIR)"
                    } else {
                        ""
                    },
                    summary.dir.display()
                );
                if summary.interrupted {
                    ExitCode::from(3)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(error) => {
                eprintln!("controller: {error}");
                ExitCode::FAILURE
            }
        };
        if let Some(metrics) = metrics {
            if !metrics.linger().is_zero() && !signalled.is_cancelled() {
                eprintln!(
                    "controller: metrics stay at http://{}/metrics for {} (Ctrl-C ends it)",
                    metrics.address,
                    humantime::format_duration(metrics.linger())
                );
            }
            metrics.finish(&signalled).await;
        }
        code
    })
}

/// SIGINT or SIGTERM: stop after undoing netem and brokers; a second one is not needed.
async fn stop_on_signal(cancel: CancellationToken) {
    host::termination().await;
    eprintln!("controller: stopping: clearing netem and removing brokers");
    cancel.cancel();
}
