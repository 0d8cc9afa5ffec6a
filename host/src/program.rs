//! What every binary's `main` does before its own work: tracing to stderr with a default
//! filter that `RUST_LOG` overrides, a tokio runtime (with a one-line error when it cannot be
//! had), and [`termination`], which completes on SIGTERM or SIGINT (systemd stops services
//! with SIGTERM, a terminal with SIGINT: both mean the same here).

use std::process::ExitCode;

/// Logs to stderr; `default_filter` (e.g. `"warn"`, `"info,rumqttd=off"`) unless `RUST_LOG`
/// is set. Colours only on a terminal: under systemd the journal would keep the escape codes.
pub fn init_tracing(default_filter: &str) {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Which runtime a binary needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One thread: the binary only waits (loadgen's progress; its load has its own runtime).
    One,
    /// One per core: servers and the controller.
    PerCore,
}

/// A runtime for `program`, or the exit code after saying why there is none.
pub fn runtime(program: &str, threads: Threads) -> Result<tokio::runtime::Runtime, ExitCode> {
    let mut builder = match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        Threads::PerCore => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build().map_err(|error| {
        eprintln!("{program}: cannot start the runtime: {error}");
        ExitCode::FAILURE
    })
}

/// Success, or the error on one line prefixed with `program`, and failure.
pub fn exit_code<E: std::fmt::Display>(program: &str, outcome: Result<(), E>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn termination() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "no SIGTERM handler; only SIGINT stops this process");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = terminate => tracing::info!("SIGTERM: shutting down"),
    }
}
