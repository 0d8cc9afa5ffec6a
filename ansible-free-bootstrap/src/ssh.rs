//! Talking to a node through the system's `ssh`: key authentication only (BatchMode, no
//! password prompt), the user's known_hosts honoured (new host keys are accepted only with
//! `--accept-new-host-keys`), one multiplexed connection per node reused by every command.
//! ssh's failures are sorted into the few a user can act on.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::inventory::{Node, SshDefaults};

/// How long one remote command may take (a file upload of an agent binary included).
pub const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// A node reached over SSH.
#[derive(Debug, Clone)]
pub struct Ssh {
    node: String,
    destination: String,
    options: Vec<String>,
    /// Run commands through `sudo -n` (the login user is not root).
    sudo: bool,
}

/// Why a command on a node failed.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// No TCP connection (refused, timed out, no route, unknown host).
    #[error("node {node}: cannot reach {destination} over SSH: {detail}")]
    Unreachable {
        /// The node.
        node: String,
        /// user@host.
        destination: String,
        /// ssh's message.
        detail: String,
    },
    /// The key was refused.
    #[error(
        "node {node}: {destination} refused the SSH key ({detail}); check [ssh] key / the node's authorized_keys"
    )]
    Auth {
        /// The node.
        node: String,
        /// user@host.
        destination: String,
        /// ssh's message.
        detail: String,
    },
    /// The host key is unknown or has changed.
    #[error(
        "node {node}: host key of {destination} not trusted ({detail}); on first contact run with --accept-new-host-keys"
    )]
    HostKey {
        /// The node.
        node: String,
        /// user@host.
        destination: String,
        /// ssh's message.
        detail: String,
    },
    /// ssh itself could not be run, or the command ran too long.
    #[error("node {node}: {detail}")]
    Local {
        /// The node.
        node: String,
        /// What happened.
        detail: String,
    },
    /// The remote command failed.
    #[error("node {node}: `{what}` failed ({status}): {output}")]
    Remote {
        /// The node.
        node: String,
        /// What the command was for.
        what: String,
        /// Its exit status.
        status: String,
        /// Its stderr and stdout.
        output: String,
    },
}

impl Ssh {
    /// SSH to `node` with the inventory's defaults; control sockets go in `control_dir`.
    pub fn new(
        node: &Node,
        defaults: &SshDefaults,
        control_dir: PathBuf,
        accept_new_host_keys: bool,
    ) -> Self {
        let mut options = vec![
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            format!(
                "ConnectTimeout={}",
                defaults.connect_timeout.as_secs().max(1)
            ),
            "-o".into(),
            format!(
                "StrictHostKeyChecking={}",
                if accept_new_host_keys {
                    "accept-new"
                } else {
                    "yes"
                }
            ),
            "-o".into(),
            "ControlMaster=auto".into(),
            "-o".into(),
            format!("ControlPath={}/%C", control_dir.display()),
            "-o".into(),
            "ControlPersist=60".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
            // A node that stops answering mid-command fails the command within ~30 s.
            "-o".into(),
            "ServerAliveInterval=5".into(),
            "-o".into(),
            "ServerAliveCountMax=6".into(),
            "-p".into(),
            node.port.to_string(),
        ];
        if let Some(key) = &defaults.key {
            options.extend(["-i".into(), key.display().to_string()]);
            options.extend(["-o".into(), "IdentitiesOnly=yes".into()]);
        }
        if let Some(known_hosts) = &defaults.known_hosts {
            options.extend([
                "-o".into(),
                format!("UserKnownHostsFile={}", known_hosts.display()),
            ]);
        }
        Ssh {
            node: node.name.clone(),
            destination: format!("{}@{}", node.user, node.host),
            options,
            sudo: node.user != "root",
        }
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Runs `script` with `sh -e` on the node, feeding `input` on stdin, within
    /// [`COMMAND_LIMIT`]; returns stdout.
    pub async fn run(&self, what: &str, script: &str, input: &[u8]) -> Result<String, SshError> {
        self.run_within(what, script, input, COMMAND_LIMIT).await
    }

    /// [`Ssh::run`] with a limit of its own (uninstall waits for daemons to stop).
    pub async fn run_within(
        &self,
        what: &str,
        script: &str,
        input: &[u8],
        limit: Duration,
    ) -> Result<String, SshError> {
        let shell = if self.sudo {
            "sudo -n sh -e -c "
        } else {
            "sh -e -c "
        };
        let remote = format!("{shell}{}", quote(script));
        let mut child = Command::new("ssh")
            .args(&self.options)
            .arg("--")
            .arg(&self.destination)
            .arg(remote)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SshError::Local {
                node: self.node.clone(),
                detail: format!("cannot run ssh: {e} (install openssh-client)"),
            })?;
        let stdin = child.stdin.take();
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input closes the pipe early: not an error.
                let _ = stdin.write_all(input).await;
            }
        };
        // The upload is inside the limit too: a stalled node cannot hang bootstrap.
        let work = async {
            let ((), output) = tokio::join!(feed, child.wait_with_output());
            output
        };
        let output = tokio::time::timeout(limit, work)
            .await
            .map_err(|_| SshError::Local {
                node: self.node.clone(),
                detail: format!("`{what}` did not finish within {limit:?}"),
            })?
            .map_err(|e| SshError::Local {
                node: self.node.clone(),
                detail: format!("waiting for ssh: {e}"),
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if output.status.success() {
            return Ok(stdout);
        }
        // 255 is ssh's own failure; anything else is the remote command's exit status.
        if output.status.code() == Some(255) {
            return Err(self.classify(stderr));
        }
        Err(SshError::Remote {
            node: self.node.clone(),
            what: what.to_string(),
            status: output.status.to_string(),
            output: format!("{stderr} {}", stdout.trim()).trim().to_string(),
        })
    }

    fn classify(&self, stderr: String) -> SshError {
        let (node, destination, detail) = (self.node.clone(), self.destination.clone(), stderr);
        if detail.contains("Permission denied") || detail.contains("Too many authentication") {
            SshError::Auth {
                node,
                destination,
                detail,
            }
        } else if detail.contains("Host key verification failed")
            || detail.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
            || detail.contains("No ED25519 host key is known")
        {
            SshError::HostKey {
                node,
                destination,
                detail,
            }
        } else {
            SshError::Unreachable {
                node,
                destination,
                detail,
            }
        }
    }

    /// Closes the shared connection (best effort).
    pub async fn close(&self) {
        let _ = Command::new("ssh")
            .args(&self.options)
            .args(["-O", "exit", "--"])
            .arg(&self.destination)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
}

/// `text` as one single-quoted shell word.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote("x 'y' $z")))
            .output()
            .expect("sh runs");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "x 'y' $z");
    }
}
