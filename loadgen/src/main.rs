//! `loadgen`: parse, set up tracing, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use host::program::{self, Threads};
use loadgen::cli::{Cli, run};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            // One line that names the problem; the full usage is one `--help` away.
            let rendered = error.render().to_string();
            let first = rendered
                .lines()
                .next()
                .unwrap_or("error: invalid arguments");
            eprintln!(
                "loadgen: {} (see loadgen --help)",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    program::init_tracing("warn");
    // The load runs on a runtime of its own (loadgen::runtime); this one only shows progress.
    let runtime = match program::runtime("loadgen", Threads::One) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    // Two sockets per client pair: 800 pairs exceed the usual soft limit of 1024.
    loadgen::limits::raise_open_file_limit();
    program::exit_code("loadgen", runtime.block_on(run(cli)))
}
