//! `loadgen merge`: the raw results of one run's instances combined into one.
//!
//! Result files may come from anywhere, so each is read as untrusted input: only a regular
//! file (not a link, a device or a pipe), at most [`MAX_RESULT_FILE_BYTES`], and checked
//! ([`result_checks::check`]) before anything indexes or sums by what it says.

use std::path::{Path, PathBuf};

use super::CliError;
use crate::result::RunResult;
use crate::result_checks::{self, MAX_RESULT_FILE_BYTES};

/// Reads every result file and merges them; the first unreadable or mismatched file fails.
pub(super) fn merge_files(paths: &[PathBuf]) -> Result<RunResult, CliError> {
    let mut merged: Option<RunResult> = None;
    for path in paths {
        let input_error = |problem: String| CliError::Input {
            path: path.display().to_string(),
            problem,
        };
        let result = read_result(path).map_err(input_error)?;
        match &mut merged {
            None => merged = Some(result),
            Some(total) => total
                .merge(&result)
                .map_err(|e| input_error(e.to_string()))?,
        }
    }
    merged.ok_or_else(|| CliError::Usage("no result files given".to_string()))
}

/// One result file, read and checked; the problem in one line (the caller names the file).
fn read_result(path: &Path) -> Result<RunResult, String> {
    let (folder, name) = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => (
            if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            },
            Path::new(name),
        ),
        _ => return Err("not a file name".to_string()),
    };
    let bytes = host::Folder::open(folder)
        .and_then(|folder| folder.read(name, MAX_RESULT_FILE_BYTES))
        .map_err(|error| error.problem())?
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound).to_string())?;
    let result: RunResult = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    result_checks::check(&result).map_err(|e| e.to_string())?;
    Ok(result)
}
