//! Reading one file of a results folder in place: a regular file, never a link, up to a cap.
//! Below both the CSV code and the folder's writer, which read through it.

use std::fs::File;
use std::io::Read as _;
use std::path::Path;

use host::{Folder, FolderError};

use super::ResultsError;

/// The folder holding `path` (`.` for a bare name) and the name in it.
fn split(path: &Path) -> Result<(&Path, &Path), ResultsError> {
    let name = path.file_name().ok_or_else(|| ResultsError::Format {
        path: path.display().to_string(),
        problem: "not a file name".to_string(),
    })?;
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Ok((folder, Path::new(name)))
}

/// The file at `path`, opened for reading if it is a regular file (not a link) of at most
/// `cap` bytes, limited to `cap` bytes; `None` when it is missing. The folder above it is
/// the caller's and may be reached through links; the file itself may not.
pub(crate) fn open_in_place(
    path: &Path,
    cap: u64,
) -> Result<Option<std::io::Take<File>>, ResultsError> {
    let (folder, name) = split(path)?;
    // A folder that cannot be opened is named by the file looked for in it.
    let folder = Folder::open(folder).map_err(|error| ResultsError::Io {
        path: path.display().to_string(),
        source: error.into(),
    })?;
    let Some((file, size)) = folder.open_file(name)? else {
        return Ok(None);
    };
    if size > cap {
        return Err(FolderError::TooLarge {
            path: path.display().to_string(),
            cap,
        }
        .into());
    }
    Ok(Some(file.take(cap)))
}

/// The file at `path` whole, as [`open_in_place`] opens it; a missing file is an error.
pub(crate) fn read_in_place(path: &Path, cap: u64) -> Result<String, ResultsError> {
    let mut text = String::new();
    open_in_place(path, cap)?
        .ok_or_else(|| ResultsError::Io {
            path: path.display().to_string(),
            source: std::io::ErrorKind::NotFound.into(),
        })?
        .read_to_string(&mut text)
        .map_err(|source| ResultsError::Io {
            path: path.display().to_string(),
            source,
        })?;
    Ok(text)
}
