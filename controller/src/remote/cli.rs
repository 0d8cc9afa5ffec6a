//! The command line of `controller remote`: its actions ([`RemoteAction`], a clap
//! subcommand) and the caps of a fetch ([`FetchCaps`]), each documented in `--help`.

use std::path::PathBuf;

use loadgen::size::ByteSize;

use super::FetchLimits;

/// One `controller remote` action, as the command line gives it.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum RemoteAction {
    /// Submits a plan; prints the run id.
    Submit {
        /// The plan file.
        plan: PathBuf,
    },
    /// Follows a run until it ends; exits 0 if it finished, 3 if cancelled, 1 if it failed.
    Watch {
        /// The run id.
        run: String,
    },
    /// Lists the service's runs.
    List,
    /// Copies a run's results folder into DIR; stops with an error, keeping what was written
    /// so far, at the caps below (a run's folder is far smaller).
    Fetch {
        /// The run id.
        run: String,
        /// Local folder to write into (created if needed).
        dir: PathBuf,
        #[command(flatten)]
        caps: FetchCaps,
    },
    /// Cancels a run (its netem is cleared and brokers removed); prints its state.
    Cancel {
        /// The run id.
        run: String,
    },
}

/// How much `remote fetch` may write, so a server cannot fill this machine's disk. Sizes are
/// bytes or a unit: 10MB (decimal), 256MiB (binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct FetchCaps {
    /// Most bytes over all the run's files.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    pub max_bytes: ByteSize,
    /// Most bytes of any one file.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub max_file_bytes: ByteSize,
    /// Most files.
    #[arg(long, value_name = "COUNT", default_value_t = FetchLimits::default().files)]
    pub max_files: usize,
}

/// The command line's defaults.
impl Default for FetchCaps {
    fn default() -> Self {
        let limits = FetchLimits::default();
        FetchCaps {
            max_bytes: ByteSize(limits.total_bytes),
            max_file_bytes: ByteSize(limits.file_bytes),
            max_files: limits.files,
        }
    }
}

impl From<FetchCaps> for FetchLimits {
    fn from(caps: FetchCaps) -> Self {
        FetchLimits {
            total_bytes: caps.max_bytes.bytes(),
            file_bytes: caps.max_file_bytes.bytes(),
            files: caps.max_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Remote {
        #[command(subcommand)]
        action: RemoteAction,
    }

    fn parse(args: &[&str]) -> Result<RemoteAction, clap::Error> {
        Remote::try_parse_from(std::iter::once("remote").chain(args.iter().copied()))
            .map(|remote| remote.action)
    }

    fn limits_of(action: RemoteAction) -> FetchLimits {
        match action {
            RemoteAction::Fetch { caps, .. } => caps.into(),
            other => panic!("not a fetch: {other:?}"),
        }
    }

    #[test]
    fn fetch_caps_default_to_the_fetch_limits_and_parse_sizes_and_counts() {
        let plain = parse(&["fetch", "7", "out"]).expect("parses");
        assert_eq!(limits_of(plain), FetchLimits::default());
        let capped = parse(&[
            "fetch",
            "7",
            "out",
            "--max-bytes",
            "10MB",
            "--max-file-bytes",
            "64KiB",
            "--max-files",
            "12",
        ])
        .expect("parses");
        assert_eq!(
            limits_of(capped),
            FetchLimits {
                total_bytes: 10_000_000,
                file_bytes: 64 * 1024,
                files: 12,
            }
        );
        assert_eq!(
            limits_of(parse(&["fetch", "7", "out", "--max-bytes", "5000"]).expect("parses"))
                .total_bytes,
            5000
        );
        for bad in [
            ["--max-bytes", "lots"],
            ["--max-files", "-1"],
            ["--max-file-bytes", "1TB"],
        ] {
            let args = ["fetch", "7", "out", bad[0], bad[1]];
            assert!(parse(&args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn the_caps_are_documented_in_help() {
        let help = parse(&["fetch", "--help"]).expect_err("help").to_string();
        for flag in [
            "--max-bytes",
            "--max-file-bytes",
            "--max-files",
            "1GiB",
            "256MiB",
        ] {
            assert!(help.contains(flag), "{flag} not in:\n{help}");
        }
    }
}
