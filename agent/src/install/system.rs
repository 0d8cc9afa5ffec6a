//! What both installers need from the node, written once: `systemctl` and `journalctl`
//! calls, ExecStart quoting, finding an executable, atomic writes of private files, and
//! removals that accept "already gone".

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::InstallError;
use crate::new_marker;
use host::{CommandLine, run_bounded};

/// How long one `systemctl` or `journalctl` call may take (a `stop` waits for the unit).
const SYSTEMCTL_LIMIT: Duration = Duration::from_secs(60);

/// Runs `systemctl args`; its output, or a failure quoting it. `is-active` exits non-zero
/// for an inactive unit, so its output is returned whatever the status.
pub(super) async fn systemctl(args: &[&str]) -> Result<String, InstallError> {
    let mut line = CommandLine::new("systemctl");
    line.args = args.iter().map(|a| (*a).to_string()).collect();
    let shown = format!("systemctl {}", args.join(" "));
    let (status, output) = run_bounded(&line, &new_marker("systemctl"), SYSTEMCTL_LIMIT)
        .await
        .map_err(|e| InstallError::Failed(format!("{shown}: {e}")))?;
    if status.success() || args.first() == Some(&"is-active") {
        Ok(output)
    } else {
        Err(InstallError::Failed(format!(
            "{shown}: {status}: {}",
            output.trim()
        )))
    }
}

/// The last `lines` lines `unit` logged, for error messages.
pub(super) async fn journal_tail(unit: &str, lines: usize) -> String {
    let mut line = CommandLine::new("journalctl");
    let count = lines.to_string();
    line.args = [
        "--unit",
        unit,
        "--lines",
        &count,
        "--no-pager",
        "--output",
        "cat",
    ]
    .map(String::from)
    .to_vec();
    match run_bounded(&line, &new_marker("journalctl"), SYSTEMCTL_LIMIT).await {
        Ok((_, output)) => output,
        Err(error) => format!("(no journal: {error})"),
    }
}

/// One word of an ExecStart line, always double-quoted: inside quotes systemd takes blanks
/// and quotes literally once C-escaped, `%%` and `$$` keep specifiers and variables from
/// being expanded, and a word in quotes is never split. Quoting every word is what
/// systemd.service(5) documents; leaving "plain" words bare saves nothing.
pub(super) fn systemd_quote(word: &str) -> String {
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('"');
    for c in word.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '%' => quoted.push_str("%%"),
            '$' => quoted.push_str("$$"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// True when `configured` is a bare name (looked up on PATH) rather than a path.
pub(super) fn is_bare_name(configured: &Path) -> bool {
    !configured.as_os_str().as_bytes().contains(&b'/')
}

/// The executable `configured` names, as an absolute path (a unit's ExecStart needs one):
/// a bare name is looked up on PATH, a path must be an executable file.
pub(super) fn find_executable(configured: &Path) -> Option<PathBuf> {
    let found = if is_bare_name(configured) {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(configured))
            .find(|candidate| is_executable(candidate))
    } else {
        Some(configured.to_path_buf()).filter(|path| is_executable(path))
    }?;
    std::path::absolute(&found).ok()
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Writes `bytes` to `path` with `mode` from the first byte (never briefly readable by
/// others), through a temporary file beside it and a rename, so a crash or a reader sees
/// the old file or the new one, never half of one.
pub(super) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = PathBuf::from(temporary);
    let written = (|| {
        remove_if_present(&temporary)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temporary)?;
        // The umask may have taken bits away; set exactly what was asked.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        InstallError::Failed(format!("writing {}: {e}", path.display()))
    })
}

/// [`write_atomic`] with mode 0600: configurations that name keys, tokens, PID records.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), InstallError> {
    write_atomic(path, bytes, 0o600)
}

/// Creates `dir` (and its parents) and makes it private to the agent's user.
pub(super) fn private_dir(dir: &Path) -> Result<(), InstallError> {
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| InstallError::Failed(format!("creating {}: {e}", dir.display())))
}

/// Removes a file; false if it was not there.
pub(super) fn remove_file(path: &Path) -> Result<bool, InstallError> {
    remove_if_present(path)
        .map_err(|e| InstallError::Failed(format!("removing {}: {e}", path.display())))
}

/// Removes a folder and everything in it; false if it was not there.
pub(super) fn remove_dir(path: &Path) -> Result<bool, InstallError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(InstallError::Failed(format!(
            "removing {}: {e}",
            path.display()
        ))),
    }
}

fn remove_if_present(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// systemd itself must accept `unit` (`systemd-analyze verify`: the unit is checked, not
/// started). Skipped where systemd-analyze is missing, except in CI, which installs it.
#[cfg(test)]
pub(super) fn assert_systemd_accepts(unit: &Path) {
    const ANALYZE: &str = "/usr/bin/systemd-analyze";
    ::tests::skip_unless_installed!(ANALYZE);
    let mut verify = std::process::Command::new(ANALYZE);
    verify.arg("verify").arg(unit);
    let output = ::host::blocking::run_with_deadline(&mut verify, None, Duration::from_secs(30))
        .expect("systemd-analyze runs");
    let complaints = String::from_utf8_lossy(&output.stderr);
    let name = unit
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    assert!(
        output.status.success(),
        "systemd-analyze verify failed: {complaints}"
    );
    assert!(
        !complaints.contains(&name),
        "systemd complains about {name}: {complaints}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_words_are_quoted_for_systemd() {
        assert_eq!(systemd_quote("plain"), "\"plain\"");
        assert_eq!(systemd_quote("50%$x\"\\"), "\"50%%$$x\\\"\\\\\"");
        assert_eq!(systemd_quote("a b\nc"), "\"a b\\nc\"");
    }

    #[test]
    fn executables_are_found_by_path_or_on_path() {
        assert_eq!(
            find_executable(Path::new("/bin/sh")),
            Some(PathBuf::from("/bin/sh"))
        );
        let on_path = find_executable(Path::new("sh")).expect("sh is on PATH");
        assert!(on_path.is_absolute(), "{}", on_path.display());
        assert_eq!(find_executable(Path::new("/nonexistent/k3s")), None);
        assert_eq!(find_executable(Path::new("/etc")), None, "not a file");
        assert!(is_bare_name(Path::new("k3s")) && !is_bare_name(Path::new("./k3s")));
    }

    #[test]
    fn private_files_are_replaced_whole_with_mode_0600() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("config.yml");
        std::fs::write(&path, "old").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write_private(&path, b"new").expect("written");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        write_atomic(&path, b"unit", 0o644).expect("written");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["config.yml"], "no temporary file left");
        assert!(remove_file(&path).expect("removed"));
        assert!(!remove_file(&path).expect("already gone is fine"));
        let sub = dir.path().join("sub/deeper");
        private_dir(&sub).expect("made");
        assert!(remove_dir(&dir.path().join("sub")).expect("removed"));
        assert!(!remove_dir(&dir.path().join("sub")).expect("already gone is fine"));
    }
}
