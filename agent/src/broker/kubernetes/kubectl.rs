//! [`Kubectl`]: how the agent talks to the cluster, and [`KubectlError`], why it could not.
//!
//! On a k3s headnode kubectl is `k3s kubectl --kubeconfig <file>` (k3s embeds kubectl, and
//! the k3s installer makes the server write its kubeconfig there). Every call is bounded in
//! time and killed when the bound passes. `run_bounded` in
//! `process.rs` is not used because `apply -f -` needs its manifests on stdin and JSON
//! answers need stdout apart from stderr, where k3s prints its warnings.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::broker::error_code::ErrorCode;

/// How to run kubectl against the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubectl {
    /// The executable: `k3s` (which embeds kubectl) or a `kubectl`.
    pub program: PathBuf,
    /// Arguments before kubectl's own: `kubectl --kubeconfig <file>` for k3s.
    pub leading_args: Vec<String>,
}

impl Default for Kubectl {
    /// `k3s kubectl` with k3s's own default kubeconfig.
    fn default() -> Self {
        Self::k3s("k3s", None)
    }
}

/// What a successful kubectl call printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// Standard output (JSON where `-o json` was asked).
    pub stdout: String,
    /// Standard error (warnings).
    pub stderr: String,
}

/// Why a kubectl call failed.
#[derive(Debug, thiserror::Error)]
pub enum KubectlError {
    /// The executable could not be started (not installed, not executable).
    #[error("cannot run `{command}`: {reason}")]
    NotRunnable {
        /// The command line.
        command: String,
        /// The spawn error.
        reason: String,
    },
    /// kubectl ran and failed; `output` is what it printed (its reason).
    #[error("`{command}` failed ({status}): {}", .output.trim())]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Standard error and output, as printed.
        output: String,
    },
    /// kubectl did not finish within its bound and was killed.
    #[error("`{command}` did not finish within {limit:?}")]
    TimedOut {
        /// The command line.
        command: String,
        /// The bound.
        limit: Duration,
    },
    /// kubectl succeeded but its answer was not what was asked for.
    #[error("`{command}` answered unexpectedly: {reason}")]
    BadAnswer {
        /// The command line.
        command: String,
        /// What is wrong with the answer.
        reason: String,
    },
}

impl KubectlError {
    /// The gRPC code this maps to: kubectl missing is a precondition of the node, anything
    /// else means the cluster did not do what was asked.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotRunnable { .. } => ErrorCode::FailedPrecondition,
            Self::Failed { .. } | Self::TimedOut { .. } => ErrorCode::Unavailable,
            Self::BadAnswer { .. } => ErrorCode::Internal,
        }
    }

    /// True when the API server said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Failed { output, .. } if output.contains("(NotFound)"))
    }

    /// What kubectl printed, or the error itself when it printed nothing.
    pub fn output(&self) -> String {
        match self {
            Self::Failed { output, .. } if !output.trim().is_empty() => output.trim().to_owned(),
            other => other.to_string(),
        }
    }
}

impl Kubectl {
    /// `<k3s> kubectl [--kubeconfig <file>]`.
    pub fn k3s(binary: impl Into<PathBuf>, kubeconfig: Option<&Path>) -> Self {
        let mut leading_args = vec!["kubectl".to_owned()];
        if let Some(file) = kubeconfig {
            leading_args.extend(["--kubeconfig".to_owned(), file.display().to_string()]);
        }
        Self {
            program: binary.into(),
            leading_args,
        }
    }

    /// Runs kubectl with `args`, `stdin` (if any) written to it, for at most `limit`.
    pub async fn run(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        limit: Duration,
    ) -> Result<Output, KubectlError> {
        let command = self.shown(args);
        let mut child = Command::new(&self.program)
            .args(&self.leading_args)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| KubectlError::NotRunnable {
                command: command.clone(),
                reason: e.to_string(),
            })?;
        let input = child.stdin.take();
        let finished = async move {
            if let (Some(mut pipe), Some(text)) = (input, stdin) {
                // A kubectl that exits early closes the pipe; its exit status says why.
                let _ = pipe.write_all(text.as_bytes()).await;
                drop(pipe);
            }
            child.wait_with_output().await
        };
        let output = match tokio::time::timeout(limit, finished).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => {
                return Err(KubectlError::NotRunnable {
                    command,
                    reason: format!("waiting for it: {error}"),
                });
            }
            // Dropping `finished` dropped the child, and kill_on_drop killed it.
            Err(_) => return Err(KubectlError::TimedOut { command, limit }),
        };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if output.status.success() {
            Ok(Output { stdout, stderr })
        } else {
            Err(KubectlError::Failed {
                command,
                status: output.status.to_string(),
                output: format!("{stderr}{stdout}"),
            })
        }
    }

    /// Runs kubectl and parses its standard output as JSON into `T`.
    pub async fn json<T: serde::de::DeserializeOwned>(
        &self,
        args: &[&str],
        limit: Duration,
    ) -> Result<T, KubectlError> {
        let output = self.run(args, None, limit).await?;
        serde_json::from_str(&output.stdout).map_err(|e| KubectlError::BadAnswer {
            command: self.shown(args),
            reason: format!("not the JSON expected: {e}"),
        })
    }

    /// The command line as shown in errors.
    fn shown(&self, args: &[&str]) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.leading_args.iter().cloned())
            .chain(args.iter().map(|arg| (*arg).to_owned()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Kubectl {
        Kubectl {
            program: "/bin/sh".into(),
            leading_args: vec!["-c".into(), script.into(), "kubectl".into()],
        }
    }

    #[tokio::test]
    async fn stdin_reaches_kubectl_and_stdout_stays_apart_from_stderr() {
        let kubectl = shell("cat; echo warning >&2");
        let output = kubectl
            .run(
                &["apply", "-f", "-"],
                Some("kind: X\n"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(output.stdout, "kind: X\n");
        assert_eq!(output.stderr, "warning\n");
    }

    #[tokio::test]
    async fn failures_carry_what_kubectl_printed_and_their_code() {
        let kubectl =
            shell("echo 'Error from server (NotFound): nodes \"x\" not found' >&2; exit 1");
        let error = kubectl
            .run(&["get", "node", "x"], None, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(error.is_not_found(), "{error}");
        assert_eq!(error.code(), ErrorCode::Unavailable);
        assert!(error.output().starts_with("Error from server"), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("`/bin/sh -c echo 'Error from server"),
            "{error}"
        );

        let missing = Kubectl::k3s("/nonexistent/k3s", Some(Path::new("/tmp/kubeconfig")));
        let error = missing
            .run(&["version"], None, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::FailedPrecondition);
        assert!(
            error.to_string().starts_with(
                "cannot run `/nonexistent/k3s kubectl --kubeconfig /tmp/kubeconfig version`"
            ),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_hanging_kubectl_is_cut_off_and_bad_json_is_an_error() {
        let started = std::time::Instant::now();
        let error = shell("sleep 30")
            .run(&["get", "x"], None, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(error, KubectlError::TimedOut { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));

        let error = shell("echo not-json")
            .json::<serde_json::Value>(&["get", "x", "-o", "json"], Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    }
}
