//! `controller`: parse, set up tracing, run the subcommand, map the outcome to an exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use controller::pki_command::{IdentityArg, PkiRequest, create};

/// Continuum's controller.
#[derive(Debug, Parser)]
#[command(name = "controller", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Creates the project's CA and the identities of controller, agents and clients.
    Pki {
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
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Pki {
            dir,
            controller,
            agents,
            clients,
            replace,
        } => {
            let request = PkiRequest {
                dir,
                controller,
                agents,
                clients,
                replace,
            };
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
    }
}
