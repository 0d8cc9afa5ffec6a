//! `bootstrap`: parse, set up tracing, run, map the outcome to an exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use host::program::{self, Threads};

/// From bare nodes to a Continuum testbed over SSH, and back.
#[derive(Debug, Parser)]
#[command(name = "bootstrap", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    install: InstallArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Installs (or updates) the agents: the default command.
    Install(InstallArgs),
    /// Removes everything bootstrap installed, Nebula and k3s included.
    Uninstall(InstallArgs),
}

#[derive(Debug, Args)]
struct InstallArgs {
    /// The inventory (nodes, SSH, agent binaries).
    inventory: Option<PathBuf>,
    /// Trust host keys of nodes contacted for the first time (changed keys stay refused).
    #[arg(long)]
    accept_new_host_keys: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    program::init_tracing("warn");
    let (uninstall, args) = match cli.command {
        Some(Command::Install(args)) => (false, args),
        Some(Command::Uninstall(args)) => (true, args),
        None => (false, cli.install),
    };
    let Some(inventory) = args.inventory else {
        eprintln!("bootstrap: give the inventory file (see examples/inventory.toml)");
        return ExitCode::from(2);
    };
    let options = bootstrap::Options {
        accept_new_host_keys: args.accept_new_host_keys,
    };
    let runtime = match program::runtime("bootstrap", Threads::PerCore) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let outcome = runtime.block_on(async {
        if uninstall {
            bootstrap::run_uninstall(inventory, &options).await
        } else {
            bootstrap::run_install(inventory, &options).await
        }
    });
    match outcome {
        Ok((text, all_ok)) => {
            print!("{text}");
            if all_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("bootstrap: {error}");
            ExitCode::FAILURE
        }
    }
}
