//! `continuum-agent`: parse, set up tracing, serve until SIGTERM/SIGINT; or, with
//! `uninstall`, remove what the installers put on the node (`bootstrap uninstall` runs it
//! after stopping the daemon).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use domain::AgentConfig;
use host::program::{self, Threads};

/// How the agent names itself in errors.
const PROGRAM: &str = "continuum-agent";

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
    program::init_tracing("info,rumqttd=off");
    let config = match AgentConfig::load(&args.config) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{PROGRAM}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match program::runtime(PROGRAM, Threads::PerCore) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    if let Some(Command::Uninstall) = args.command {
        return runtime.block_on(uninstall(&config));
    }
    // Its own certificate and CA, in the words `controller pki` uses: a lapse stops every run.
    match proto::pki::expiring_among(
        &[&config.tls.ca, &config.tls.cert],
        proto::pki::EXPIRY_WARNING,
        std::time::SystemTime::now(),
    ) {
        Ok(ending) => ending
            .iter()
            .for_each(|expiring| tracing::warn!("{expiring}")),
        Err(error) => tracing::warn!("certificate expiry not checked: {error}"),
    }
    program::exit_code(PROGRAM, runtime.block_on(agent::server::run(config)))
}

/// Runs both installers' uninstall steps, k3s first (it runs over the overlay).
async fn uninstall(config: &AgentConfig) -> ExitCode {
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
