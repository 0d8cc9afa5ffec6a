//! The shell side of bootstrap: short POSIX scripts run on a node over [`Ssh`] to read what
//! is there (architecture, init system, file hashes, folders, the running agent), to put
//! files in place atomically, and to start or stop the agent.

use std::collections::{BTreeSet, HashMap};

use crate::layout::{self, ForeignPath, RemoteFile};
use crate::ssh::{Ssh, SshError, quote};

/// What a node has now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// `uname -m`, normalised to the inventory's names.
    pub arch: String,
    /// systemd is PID 1 and the login shares its network namespace (a node in a network
    /// namespace of a systemd host must not get host units).
    pub systemd: bool,
    /// SHA-256 of each managed file that exists.
    pub hashes: HashMap<String, String>,
    /// Managed folders that exist.
    pub dirs: BTreeSet<String>,
    /// The record of a previous install: what bootstrap put there (only paths bootstrap
    /// installs; see [`layout::recorded_file`]).
    pub record: Record,
    /// Entries of the record that name something bootstrap never installs: left alone.
    pub refused: Vec<ForeignPath>,
    /// The agent runs (unit active, or the PID file's process is the agent).
    pub agent_running: bool,
}

/// Bootstrap's record on a node: the files it wrote and the folders it created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Files written.
    pub files: BTreeSet<String>,
    /// Folders created (removed on uninstall, deepest first).
    pub dirs: BTreeSet<String>,
}

impl Record {
    /// The record's text form, one `file PATH` or `dir PATH` per line.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for file in &self.files {
            text.push_str(&format!("file {file}\n"));
        }
        for dir in &self.dirs {
            text.push_str(&format!("dir {dir}\n"));
        }
        text
    }
}

/// Reads the node's facts for the given files.
pub async fn facts(ssh: &Ssh, files: &[RemoteFile]) -> Result<Facts, SshError> {
    let paths: Vec<String> = files.iter().map(|f| quote(f.path)).collect();
    let dirs: Vec<String> = layout::DIRS.iter().map(|d| quote(d)).collect();
    let script = format!(
        r#"echo "arch $(uname -m)"
if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && [ -d /run/systemd/system ] && [ "$(readlink /proc/1/ns/net)" = "$(readlink /proc/$$/ns/net)" ]; then echo "init systemd"; else echo "init other"; fi
for f in {paths}; do if [ -f "$f" ]; then echo "hash $(sha256sum "$f" | cut -d' ' -f1) $f"; fi; done
for d in {dirs}; do if [ -d "$d" ]; then echo "dir $d"; fi; done
if [ -f {record} ]; then sed 's/^/record /' {record}; fi
if [ -d /run/systemd/system ] && systemctl is-active --quiet {unit} 2>/dev/null; then echo running; fi
pid=$(cat {pid} 2>/dev/null || true)
if [ -n "$pid" ] && [ "$(readlink /proc/$pid/exe 2>/dev/null)" = {binary} ]; then echo running; fi
"#,
        paths = paths.join(" "),
        dirs = dirs.join(" "),
        record = layout::RECORD,
        unit = layout::UNIT_NAME,
        pid = layout::PID_FILE,
        binary = layout::AGENT_BINARY,
    );
    let facts = parse_facts(&ssh.run("reading the node", &script, b"").await?);
    for refused in &facts.refused {
        tracing::warn!("{refused}");
    }
    Ok(facts)
}

/// Parses the output of the facts script.
pub fn parse_facts(output: &str) -> Facts {
    let mut facts = Facts::default();
    for line in output.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "arch" => facts.arch = normalise_arch(rest.trim()).to_string(),
            "init" => facts.systemd = rest.trim() == "systemd",
            "hash" => {
                if let Some((hash, path)) = rest.split_once(' ') {
                    facts.hashes.insert(path.to_string(), hash.to_string());
                }
            }
            "dir" => {
                facts.dirs.insert(rest.to_string());
            }
            // The record is on the node: a path in it that is not bootstrap's is kept out
            // of the record, so no later step removes or re-records it.
            "record" => match rest.split_once(' ') {
                Some(("file", path)) => match layout::recorded_file(path) {
                    Ok(()) => {
                        facts.record.files.insert(path.to_string());
                    }
                    Err(refused) => facts.refused.push(refused),
                },
                Some(("dir", path)) => match layout::recorded_dir(path) {
                    Ok(()) => {
                        facts.record.dirs.insert(path.to_string());
                    }
                    Err(refused) => facts.refused.push(refused),
                },
                _ => {}
            },
            "running" => facts.agent_running = true,
            _ => {}
        }
    }
    facts
}

/// `uname -m` in the inventory's words.
pub fn normalise_arch(uname: &str) -> &str {
    match uname {
        "arm64" => "aarch64",
        "armv7l" | "armv7" | "armhf" => "armv7",
        "amd64" => "x86_64",
        other => other,
    }
}

/// Creates the missing managed folders (0755; the TLS one 0700).
pub async fn create_dirs(ssh: &Ssh, dirs: &[&str]) -> Result<(), SshError> {
    if dirs.is_empty() {
        return Ok(());
    }
    let mut script = String::new();
    for dir in dirs {
        let mode = if dir.ends_with("/tls") || dir.ends_with("/nebula") {
            "0700"
        } else {
            "0755"
        };
        script.push_str(&format!("mkdir -p -m {mode} {}\n", quote(dir)));
    }
    ssh.run("creating folders", &script, b"").await.map(drop)
}

/// Writes `file` atomically (a temporary beside it, then rename) with its mode.
pub async fn upload(ssh: &Ssh, file: &RemoteFile) -> Result<(), SshError> {
    let path = quote(file.path);
    let temporary = quote(&format!("{}.bootstrap-new", file.path));
    let script = format!(
        "umask 077\ncat > {temporary}\nchmod {mode:o} {temporary}\nmv -f {temporary} {path}\n",
        mode = file.mode
    );
    ssh.run(&format!("writing {}", file.path), &script, &file.content)
        .await
        .map(drop)
}

/// Removes files an earlier run wrote that are no longer wanted; only files bootstrap
/// installs (a path that is not one is named in a warning and left in place).
pub async fn remove_files(ssh: &Ssh, paths: &[&String]) -> Result<(), SshError> {
    let mut words = Vec::new();
    for path in paths {
        match layout::recorded_file(path) {
            Ok(()) => words.push(quote(path)),
            Err(refused) => tracing::warn!("{refused}"),
        }
    }
    if words.is_empty() {
        return Ok(());
    }
    let script = format!("rm -f -- {}\n", words.join(" "));
    ssh.run("removing files no longer wanted", &script, b"")
        .await
        .map(drop)
}

/// Writes the record.
pub async fn write_record(ssh: &Ssh, record: &Record) -> Result<(), SshError> {
    let script = format!("umask 077\ncat > {}\n", quote(layout::RECORD));
    ssh.run(
        "writing the install record",
        &script,
        record.to_text().as_bytes(),
    )
    .await
    .map(drop)
}

/// (Re)starts the agent: through systemd where it is PID 1, otherwise detached with
/// `setsid` (its own session, output to the log file, PID in the PID file).
pub async fn restart_agent(ssh: &Ssh, systemd: bool) -> Result<(), SshError> {
    let script = if systemd {
        format!(
            "systemctl daemon-reload\nsystemctl enable {unit}\nsystemctl restart {unit}\n",
            unit = layout::UNIT_NAME
        )
    } else {
        format!(
            "{stop}cd /\nsetsid {binary} --config {config} >> {log} 2>&1 < /dev/null &\necho $! > {pid}\n",
            stop = stop_detached_script(),
            binary = layout::AGENT_BINARY,
            config = layout::AGENT_CONFIG,
            log = layout::LOG_FILE,
            pid = layout::PID_FILE,
        )
    };
    ssh.run("starting the agent", &script, b"").await.map(drop)
}

/// Stops a detached agent: SIGTERM (it clears netem, stops its brokers, k3s and Nebula),
/// up to 240 s as the unit's TimeoutStopSec, then SIGKILL.
pub fn stop_detached_script() -> String {
    format!(
        r#"pid=$(cat {pid} 2>/dev/null || true)
if [ -n "$pid" ] && [ "$(readlink /proc/$pid/exe 2>/dev/null | sed 's/ (deleted)$//')" = {binary} ]; then
  kill -TERM "$pid" 2>/dev/null || true
  n=0; while [ -d /proc/$pid ] && [ $n -lt 2400 ]; do sleep 0.1; n=$((n+1)); done
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -f {pid}
"#,
        pid = layout::PID_FILE,
        binary = layout::AGENT_BINARY,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_read_from_the_script_output() {
        let facts = parse_facts(
            "arch arm64\ninit other\nhash abc /etc/continuum/agent.toml\ndir /etc/continuum\n\
             record file /etc/continuum/agent.toml\nrecord dir /etc/continuum\nrunning\n",
        );
        assert_eq!(facts.arch, "aarch64");
        assert!(!facts.systemd && facts.agent_running);
        assert_eq!(facts.hashes["/etc/continuum/agent.toml"], "abc");
        assert!(facts.dirs.contains("/etc/continuum"));
        assert!(facts.record.files.contains("/etc/continuum/agent.toml"));
        assert_eq!(
            parse_facts(
                &facts
                    .record
                    .to_text()
                    .lines()
                    .map(|l| format!("record {l}\n"))
                    .collect::<String>()
            )
            .record,
            facts.record
        );
    }

    /// The record is read from the node: what it lists beyond bootstrap's files and folders
    /// stays out of the record (so neither install nor uninstall touches it) and is named.
    #[test]
    fn foreign_record_entries_are_refused_when_read() {
        let facts = parse_facts(
            "record file /etc/continuum/agent.toml\nrecord file /etc/shadow\n\
             record file /etc/continuum/../shadow\nrecord file relative\n\
             record dir /etc/continuum\nrecord dir /etc\n",
        );
        assert_eq!(
            facts.record.files.iter().collect::<Vec<_>>(),
            ["/etc/continuum/agent.toml"]
        );
        assert_eq!(
            facts.record.dirs.iter().collect::<Vec<_>>(),
            ["/etc/continuum"]
        );
        let refused: Vec<&str> = facts.refused.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            refused,
            [
                "/etc/shadow",
                "/etc/continuum/../shadow",
                "relative",
                "/etc"
            ]
        );
    }
}
