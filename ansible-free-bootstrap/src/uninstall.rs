//! `bootstrap uninstall inventory.toml`: on every node, stop the agent (which clears netem
//! and stops its brokers), let it remove what its installers put there (Nebula, k3s), then
//! remove exactly what bootstrap's record lists: its files, the agent's state folder and the
//! folders bootstrap created. Nodes are independent: one unreachable node is reported and
//! the others are still cleaned.

use futures_util::future::join_all;

use crate::inventory::{Loaded, Node};
use crate::layout::{self, ForeignPath};
use crate::remote::{self, Record};
use crate::ssh::{Ssh, SshError, quote};
use crate::state::State;
use crate::{BootstrapError, Options};

/// How long one node's uninstall may take (agent stop, k3s and Nebula teardown).
const UNINSTALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// What uninstall did on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The node had no record: bootstrap had installed nothing there.
    NothingInstalled,
    /// Removed, with what the agent's own uninstall said.
    Removed {
        /// Files and folders removed.
        removed: usize,
        /// Warnings on recorded paths left in place (not bootstrap's), then what the node's
        /// uninstall said (the agent's, for Nebula and k3s), one line each.
        installers: String,
    },
    /// Could not reach or clean the node.
    Failed(String),
}

/// Uninstalls from every node.
pub async fn uninstall(
    loaded: &Loaded,
    options: &Options,
) -> Result<Vec<(Node, Removal)>, BootstrapError> {
    let state = State::new(loaded.state_dir.clone());
    let connections: Vec<(Node, Ssh)> = loaded
        .nodes
        .iter()
        .map(|node| {
            let ssh = Ssh::new(
                node,
                &loaded.inventory.ssh,
                state.ssh_dir(),
                options.accept_new_host_keys,
            );
            (node.clone(), ssh)
        })
        .collect();
    if !state.ssh_dir().is_dir() {
        std::fs::create_dir_all(state.ssh_dir()).map_err(|source| {
            crate::state::StateError::Io {
                what: "creating",
                path: state.ssh_dir().display().to_string(),
                source,
            }
        })?;
    }
    let results = join_all(connections.iter().map(|(node, ssh)| async move {
        let removal = match remove(ssh).await {
            Ok(removal) => removal,
            Err(error) => Removal::Failed(error.to_string()),
        };
        ssh.close().await;
        (node.clone(), removal)
    }))
    .await;
    Ok(results)
}

async fn remove(ssh: &Ssh) -> Result<Removal, SshError> {
    let facts = remote::facts(ssh, &[]).await?;
    if facts.record.files.is_empty() && facts.record.dirs.is_empty() {
        return Ok(Removal::NothingInstalled);
    }
    let plan = removal_script(&facts.record, facts.systemd);
    // Stopping the agent and k3s may take minutes on a small node.
    let output = ssh
        .run_within("removing the agent", &plan.script, b"", UNINSTALL_LIMIT)
        .await?;
    // `facts` already kept foreign paths out of the record (and warned); they are named
    // again here so the report says what was left in place.
    let mut said: Vec<String> = facts
        .refused
        .iter()
        .chain(&plan.refused)
        .map(|refused| format!("warning: {refused}"))
        .collect();
    if !output.trim().is_empty() {
        said.push(output.trim().to_string());
    }
    Ok(Removal::Removed {
        removed: plan.removed,
        installers: said.join("\n"),
    })
}

/// The root shell script that removes what `record` lists, and what it leaves alone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RemovalScript {
    /// The script: every value in it is a constant of [`layout`] or a quoted word.
    script: String,
    /// Recorded paths bootstrap never installs: not in the script.
    refused: Vec<ForeignPath>,
    /// Recorded files and folders the script removes.
    removed: usize,
}

/// Builds the removal script for a node's record. The record comes from the node, so each
/// path in it is checked against what bootstrap installs ([`layout::recorded_file`],
/// [`layout::recorded_dir`]) and quoted; a file is removed only while none of bootstrap's
/// folders above it is a link.
fn removal_script(record: &Record, systemd: bool) -> RemovalScript {
    let mut refused = Vec::new();
    let files: Vec<&String> = record
        .files
        .iter()
        .filter(|file| match layout::recorded_file(file) {
            Ok(()) => true,
            Err(foreign) => {
                refused.push(foreign);
                false
            }
        })
        .collect();
    let mut dirs: Vec<&String> = record
        .dirs
        .iter()
        .filter(|dir| match layout::recorded_dir(dir) {
            Ok(()) => true,
            Err(foreign) => {
                refused.push(foreign);
                false
            }
        })
        .collect();
    let mut script = String::new();
    if systemd {
        script.push_str(&format!(
            "systemctl disable --now {} 2>/dev/null || true\n",
            quote(layout::UNIT_NAME)
        ));
    }
    script.push_str(&remote::stop_detached_script());
    // The agent's own uninstall removes what its installers made (units, configs, k3s data).
    // If it fails, nothing else is removed: the record and the binary stay for a retry.
    script.push_str(&format!(
        "if [ -x {binary} ]; then\n\
         if ! RUST_LOG=warn {binary} --config {config} uninstall 2>&1; then\n\
         echo 'the agent could not remove Nebula/k3s (above); nothing else was removed and the agent is stopped: fix it and run bootstrap uninstall again'\n\
         exit 3\nfi\nfi\n",
        binary = quote(layout::AGENT_BINARY),
        config = quote(layout::AGENT_CONFIG),
    ));
    for file in &files {
        let above = layout::own_dirs_above(file);
        if above.is_empty() {
            script.push_str(&format!("rm -f -- {}\n", quote(file)));
        } else {
            let links: Vec<String> = above
                .iter()
                .map(|dir| format!("[ -L {} ]", quote(dir)))
                .collect();
            script.push_str(&format!(
                "if {links}; then echo {kept}; else rm -f -- {file}; fi\n",
                links = links.join(" || "),
                kept = quote(&format!("kept {file}: a folder above it is a link")),
                file = quote(file),
            ));
        }
    }
    script.push_str(&format!("rm -f -- {}\n", quote(layout::RECORD)));
    if record.dirs.contains(layout::STATE_DIR) {
        script.push_str(&format!("rm -rf -- {}\n", quote(layout::STATE_DIR)));
    }
    // Deepest first; a folder someone else put files in stays, and is named.
    dirs.sort_by_key(|dir| std::cmp::Reverse(dir.len()));
    for dir in &dirs {
        script.push_str(&format!(
            "if [ -d {d} ]; then rmdir -- {d} 2>/dev/null || echo {kept}; fi\n",
            d = quote(dir),
            kept = quote(&format!(
                "kept {dir}: it holds files bootstrap did not write"
            )),
        ));
    }
    if systemd {
        script.push_str("systemctl daemon-reload\n");
    }
    RemovalScript {
        script,
        refused,
        removed: files.len() + dirs.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `printf %s WORD` through `sh`: what the shell makes of the quoted word.
    fn through_sh(word: &str) -> String {
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {word}"))
            .output()
            .expect("sh runs");
        assert!(output.status.success(), "sh refused {word}");
        String::from_utf8(output.stdout).expect("UTF-8")
    }

    #[test]
    fn hostile_values_are_one_inert_shell_word() {
        for (value, quoted) in [
            ("a b", "'a b'"),
            ("it's", r"'it'\''s'"),
            ("'", r"''\'''"),
            ("$(touch /tmp/x)", "'$(touch /tmp/x)'"),
            ("`id`", "'`id`'"),
            ("a\nrm -rf /", "'a\nrm -rf /'"),
            ("-rf", "'-rf'"),
            ("--no-preserve-root", "'--no-preserve-root'"),
            ("x'; reboot; '", r"'x'\''; reboot; '\'''"),
            ("$HOME \\ \" *", "'$HOME \\ \" *'"),
        ] {
            assert_eq!(quote(value), quoted, "quoting {value:?}");
            assert_eq!(through_sh(&quote(value)), value, "sh reading {quoted}");
        }
    }

    fn record(files: &[&str], dirs: &[&str]) -> Record {
        Record {
            files: files.iter().map(|file| file.to_string()).collect(),
            dirs: dirs.iter().map(|dir| dir.to_string()).collect(),
        }
    }

    #[test]
    fn a_hostile_record_gets_quoted_words_and_no_foreign_path() {
        let foreign_files = [
            "/etc/shadow",
            "../../etc/shadow",
            "etc/continuum/agent.toml",
            "/etc/continuum/../shadow",
            "/etc/continuum/tls/../../shadow",
            "/etc/continuum/./agent.toml",
            "/etc/continuum//agent.toml",
            "/etc/continuum/",
            "/etc/continuum/a\nrm -rf /",
            "/usr/local/bin/sudo",
            "/etc/systemd/system/sshd.service",
            "/var/lib/continuum-agent/../../../etc/shadow",
            "/proc/self/root/etc/shadow",
            "-rf",
        ];
        let foreign_dirs = [
            "/etc",
            "/",
            "/etc/continuum/..",
            "/etc/continuum/tls/x",
            "tmp",
        ];
        let hostile_name = "/etc/continuum/x'$(reboot)`id`; rm -rf ~ #";
        let mut files = vec![
            layout::AGENT_BINARY,
            layout::AGENT_CONFIG,
            "/etc/continuum/tls/agent.key",
            hostile_name,
        ];
        files.extend(foreign_files);
        let mut dirs = vec!["/etc/continuum", "/etc/continuum/tls", layout::STATE_DIR];
        dirs.extend(foreign_dirs);
        let plan = removal_script(&record(&files, &dirs), true);

        let mut refused: Vec<&str> = plan.refused.iter().map(|r| r.path.as_str()).collect();
        refused.sort_unstable();
        let mut expected: Vec<&str> = foreign_files.iter().chain(&foreign_dirs).copied().collect();
        expected.sort_unstable();
        assert_eq!(refused, expected);
        assert_eq!(plan.removed, 4 + 3);
        for refused in &plan.refused {
            let warning = refused.to_string();
            assert!(
                warning.contains(&format!("{:?}", refused.path)),
                "the warning names the path: {warning}"
            );
        }

        let lines: Vec<&str> = plan.script.lines().collect();
        for line in [
            "rm -f -- '/usr/local/bin/continuum-agent'",
            "if [ -L '/etc/continuum' ]; then echo 'kept /etc/continuum/agent.toml: a folder \
             above it is a link'; else rm -f -- '/etc/continuum/agent.toml'; fi",
            "if [ -L '/etc/continuum' ] || [ -L '/etc/continuum/tls' ]; then echo 'kept \
             /etc/continuum/tls/agent.key: a folder above it is a link'; else rm -f -- \
             '/etc/continuum/tls/agent.key'; fi",
            r"if [ -L '/etc/continuum' ]; then echo 'kept /etc/continuum/x'\''$(reboot)`id`; rm -rf ~ #: a folder above it is a link'; else rm -f -- '/etc/continuum/x'\''$(reboot)`id`; rm -rf ~ #'; fi",
            "rm -f -- '/var/lib/continuum-agent/bootstrap.record'",
            "rm -rf -- '/var/lib/continuum-agent'",
            "if [ -d '/etc/continuum/tls' ]; then rmdir -- '/etc/continuum/tls' 2>/dev/null || \
             echo 'kept /etc/continuum/tls: it holds files bootstrap did not write'; fi",
            "if [ -d '/etc/continuum' ]; then rmdir -- '/etc/continuum' 2>/dev/null || \
             echo 'kept /etc/continuum: it holds files bootstrap did not write'; fi",
        ] {
            assert!(lines.contains(&line), "{line}\nnot in:\n{}", plan.script);
        }
        let removing: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|line| line.contains("rm ") || line.contains("rmdir"))
            .collect();
        for path in [
            "/etc/shadow",
            "sudo",
            "sshd",
            "/proc",
            "'/etc'",
            "'/'",
            "'tmp'",
            "-rf'",
        ] {
            assert!(
                removing.iter().all(|line| !line.contains(path)),
                "{path} reaches the script:\n{}",
                plan.script
            );
        }
        // The whole script parses: no quote left open by a hostile value.
        let status = std::process::Command::new("sh")
            .arg("-n")
            .arg("-c")
            .arg(&plan.script)
            .status()
            .expect("sh runs");
        assert!(status.success(), "sh -n refused:\n{}", plan.script);
    }

    /// The files bootstrap writes on a node are all removed, with nothing refused.
    #[test]
    fn an_honest_record_is_removed_whole() {
        let files = [
            "/etc/continuum/tls/ca.pem",
            "/etc/continuum/tls/agent.pem",
            "/etc/continuum/tls/agent.key",
            "/etc/continuum/nebula/ca.crt",
            "/etc/continuum/nebula/host.crt",
            "/etc/continuum/nebula/host.key",
            layout::K3S_BINARY,
            layout::AGENT_CONFIG,
            layout::AGENT_UNIT,
            layout::AGENT_BINARY,
            layout::PID_FILE,
            layout::LOG_FILE,
        ];
        let plan = removal_script(&record(&files, &layout::DIRS), false);
        assert_eq!(plan.refused, Vec::new());
        assert_eq!(plan.removed, files.len() + layout::DIRS.len());
        for file in files {
            assert!(
                plan.script.contains(&format!("rm -f -- {}", quote(file))),
                "{file} is not removed:\n{}",
                plan.script
            );
        }
        assert!(!plan.script.contains("systemctl"));
    }
}
