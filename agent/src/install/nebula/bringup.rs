//! Bringing Nebula up: the configuration written (0600) and checked by `nebula -test`,
//! Nebula started, the tun device awaited with the overlay address; and, for a Nebula
//! already running, whether its tun still carries that address.

use std::path::Path;
use std::time::Duration;

use super::super::InstallError;
use super::super::system::{private_dir, remove_dir, write_private};
use super::daemon::Supervisor;
use super::plan::Plan;
use super::tun;
use domain::NebulaFiles;
use host::CommandLine;

/// How long `nebula -test` may take.
const CONFIG_TEST_LIMIT: Duration = Duration::from_secs(20);
/// Lines of Nebula's log quoted in errors.
const LOG_LINES: usize = 15;

/// Writes the configuration, has Nebula check it, starts it and waits for the tun device;
/// on any failure stops it again and removes what was written.
pub(super) async fn start(
    supervisor: &mut Supervisor,
    plan: &Plan,
    text: &str,
    binary: &Path,
    files: &NebulaFiles,
) -> Result<u32, InstallError> {
    let result = async {
        private_dir(&supervisor.paths.dir)?;
        write_private(&supervisor.paths.config, text.as_bytes())?;
        test_config(binary, &supervisor.paths.config).await?;
        let pid = supervisor.start(binary).await?;
        tun::wait_up(supervisor, plan, files).await?;
        Ok(pid)
    }
    .await;
    if result.is_err() {
        // Nothing half-installed: the error already quotes the log.
        let _ = supervisor.stop().await;
        let _ = supervisor.remove_unit().await;
        let _ = remove_dir(&supervisor.paths.dir);
    }
    result
}

/// `nebula -test`: Nebula parses the configuration and loads the certificates, and exits.
async fn test_config(binary: &Path, config: &Path) -> Result<(), InstallError> {
    let mut line = CommandLine::new(binary);
    line.args = vec![
        "-test".into(),
        "-config".into(),
        config.display().to_string(),
    ];
    match host::run_bounded(&line, &crate::new_marker("nebula-test"), CONFIG_TEST_LIMIT).await {
        Ok((status, _)) if status.success() => Ok(()),
        Ok((status, output)) => Err(InstallError::Failed(format!(
            "nebula -test refused the configuration ({status}):\n{}",
            last_lines(&output, LOG_LINES)
        ))),
        Err(error) => Err(InstallError::Failed(format!("nebula -test: {error}"))),
    }
}

/// Why the tun device does not carry the plan's address, or None if it does.
pub(super) async fn tun_mismatch(plan: &Plan) -> Option<String> {
    match tun::addresses(&plan.interface).await {
        Ok(Some(found)) if found.contains(&(plan.address, plan.prefix)) => None,
        Ok(Some(found)) => Some(format!("it had {}", tun::describe(&found))),
        Ok(None) => Some("the device was gone".into()),
        Err(error) => Some(error),
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_excerpts_keep_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a", 5), "a");
    }
}
