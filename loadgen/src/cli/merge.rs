//! `loadgen merge`: the raw results of one run's instances combined into one.

use std::path::PathBuf;

use super::CliError;
use crate::result::RunResult;

/// Reads every result file and merges them; the first unreadable or mismatched file fails.
pub(super) fn merge_files(paths: &[PathBuf]) -> Result<RunResult, CliError> {
    let mut merged: Option<RunResult> = None;
    for path in paths {
        let input_error = |problem: String| CliError::Input {
            path: path.display().to_string(),
            problem,
        };
        let text = std::fs::read_to_string(path).map_err(|e| input_error(e.to_string()))?;
        let result: RunResult =
            serde_json::from_str(&text).map_err(|e| input_error(e.to_string()))?;
        match &mut merged {
            None => merged = Some(result),
            Some(total) => total
                .merge(&result)
                .map_err(|e| input_error(e.to_string()))?,
        }
    }
    merged.ok_or_else(|| CliError::Usage("no result files given".to_string()))
}
