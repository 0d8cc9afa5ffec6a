//! `continuum-agent`: parse, set up tracing, serve until SIGTERM/SIGINT; or, with
//! `uninstall`, remove what the installers put on the node (`bootstrap uninstall` runs it
//! after stopping the daemon).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The Continuum agent: the daemon on every testbed node.
#[derive(Debug, Parser)]
#[command(name = "continuum-agent", version)]
struct Args {
    /// The agent's configuration file.
    #[arg(long, default_value = "/etc/continuum/agent.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Removes k3s and Nebula as the installers set them up, stopping what a daemon left running.
    Uninstall,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // rumqttd (the embedded broker) logs an ERROR for every client that disconnects.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rumqttd=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = match agent::config::AgentConfig::load(&args.config) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("continuum-agent: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("continuum-agent: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(Command::Uninstall) = args.command {
        return runtime.block_on(uninstall(&config));
    }
    match runtime.block_on(agent::server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("continuum-agent: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs both installers' uninstall steps, k3s first (it runs over the overlay).
async fn uninstall(config: &agent::config::AgentConfig) -> ExitCode {
    let mut failed = false;
    match agent::install::k3s::K3s::new(config).uninstall().await {
        Ok(status) => println!("k3s: {}", status.detail),
        Err(error) => {
            failed = true;
            println!("k3s: {error}");
        }
    }
    match agent::install::nebula::Nebula::new(config)
        .uninstall()
        .await
    {
        Ok(status) => println!("nebula: {}", status.detail),
        Err(error) => {
            failed = true;
            println!("nebula: {error}");
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
