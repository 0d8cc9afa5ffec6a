//! Processes for synchronous callers (the test harness drives `ip`, brokers' control tools
//! and whole nodes from plain threads): a command run with a deadline, its input written and
//! its output read on threads of their own so neither side can block the other.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::Duration;

use crate::poll::{Attempt, poll_until_blocking};

/// How often a wait looks again.
const WAIT_INTERVAL: Duration = Duration::from_millis(25);

/// A bounded run that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command could not be started.
    #[error("spawning {command}: {source}")]
    Spawn {
        /// The command, as `Debug` shows it.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// It ran past its deadline and was killed with its process group.
    #[error("{command} did not finish within {timeout:?}; stdout: {stdout}; stderr: {stderr}")]
    TimedOut {
        /// The command.
        command: String,
        /// The deadline.
        timeout: Duration,
        /// What it printed until then.
        stdout: String,
        /// Its errors until then.
        stderr: String,
    },
    /// Its input could not be written.
    #[error("writing stdin of {command}: {source}")]
    Stdin {
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs `command` to completion, killing it (and its process group) if it takes longer
/// than `timeout`.
///
/// `input`, if given, is written to the child's stdin from a separate thread (so a large
/// input cannot deadlock against the child's output) and stdin is closed afterwards.
/// stdout and stderr are captured.
pub fn run_with_deadline(
    command: &mut Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Output, RunError> {
    let description = format!("{command:?}");
    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout also kills what the command spawned.
        .process_group(0);
    let mut child = command.spawn().map_err(|source| RunError::Spawn {
        command: description.clone(),
        source,
    })?;

    let writer = match (input, child.stdin.take()) {
        (Some(bytes), Some(mut stdin)) => Some(thread::spawn(move || stdin.write_all(&bytes))),
        _ => None,
    };
    let stdout_reader = spawn_reader(child.stdout.take());
    let stderr_reader = spawn_reader(child.stderr.take());

    let status = wait_with_deadline(&mut child, timeout);
    if status.is_none() {
        kill_group_and_reap(&mut child);
    }
    let stdout = join_reader(stdout_reader);
    let stderr = join_reader(stderr_reader);
    let written = writer.map(|handle| {
        handle
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the writing thread panicked")))
    });

    let Some(status) = status else {
        return Err(RunError::TimedOut {
            command: description,
            timeout,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        });
    };
    if let Some(Err(source)) = written {
        return Err(RunError::Stdin {
            command: description,
            source,
        });
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

fn spawn_reader(pipe: Option<impl Read + Send + 'static>) -> Option<thread::JoinHandle<Vec<u8>>> {
    pipe.map(|mut pipe| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            // A read error only truncates what we show; the exit status decides.
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    })
}

fn join_reader(reader: Option<thread::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    reader
        .and_then(|handle| handle.join().ok())
        .unwrap_or_default()
}

/// Waits for `child` to exit for at most `timeout`; `None` if it is still running.
pub fn wait_with_deadline(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    poll_until_blocking(timeout, WAIT_INTERVAL, || match child.try_wait() {
        Ok(Some(status)) => Attempt::Done(status),
        Ok(None) => Attempt::Retry(()),
        // An error from try_wait means the child is no longer ours to wait for.
        Err(_) => Attempt::Stop(()),
    })
    .ok()
}

/// SIGKILLs `child`'s process group (the child must lead its own group) and reaps it.
pub fn kill_group_and_reap(child: &mut Child) {
    crate::marker::kill_group(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_slow_command_is_killed_at_its_deadline() {
        let started = Instant::now();
        let result = run_with_deadline(
            Command::new("sleep").arg("30"),
            None,
            Duration::from_millis(200),
        );
        assert!(
            matches!(result, Err(RunError::TimedOut { .. })),
            "{result:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn input_reaches_the_command_and_output_comes_back() {
        let output = run_with_deadline(
            &mut Command::new("wc"),
            Some(b"a\nb\nc\n".repeat(50_000)),
            Duration::from_secs(10),
        )
        .expect("wc runs");
        assert!(output.status.success());
        let text = String::from_utf8(output.stdout).expect("text");
        assert_eq!(text.split_whitespace().next(), Some("150000"));
    }
}
