//! Writing fetched files under a folder, trusting nothing the server sends: every path must
//! be relative and made of plain names (no `..`, no `.`, no root, no empty parts), may not
//! go through or onto a symbolic link, and each file's chunks must arrive in order. What is
//! written is capped ([`FetchLimits`]): a server cannot fill the client's disk.

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// A fetched file could not be written, or the server sent something that is refused.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The server sent a path that would leave the target folder or is not a plain
    /// relative path.
    #[error("refusing the path {path:?} from the server: {reason}")]
    UnsafePath {
        /// The path as sent.
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A chunk that does not continue the file being written.
    #[error("{path}: chunk at offset {offset} does not follow the {expected} bytes received")]
    OutOfOrder {
        /// The file.
        path: String,
        /// The chunk's offset.
        offset: u64,
        /// Bytes of that file received so far.
        expected: u64,
    },
    /// The server sent more than a [`FetchLimits`] allows; nothing more is written.
    #[error(
        "{what}: the server sent more than the fetch cap of {limit} {unit}; fetch stopped (copy a folder this large from the server by other means)"
    )]
    OverLimit {
        /// What went over: a file's path, or "the run's folder".
        what: String,
        /// The cap.
        limit: u64,
        /// "bytes" or "files".
        unit: &'static str,
    },
    /// Writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// `root` joined with the server-sent `relative`, if `relative` is a plain relative path of
/// normal names ('/'-separated) that stays under `root`.
pub fn safe_join(root: &Path, relative: &str) -> Result<PathBuf, FetchError> {
    let refuse = |reason| FetchError::UnsafePath {
        path: relative.to_string(),
        reason,
    };
    if relative.is_empty() {
        return Err(refuse("empty path"));
    }
    if relative.contains('\0') {
        return Err(refuse("NUL character"));
    }
    if relative.contains('\\') {
        return Err(refuse("backslash (paths are '/'-separated)"));
    }
    if relative.starts_with('/') {
        return Err(refuse("absolute path"));
    }
    // Path::components() hides empty parts and interior "."; check the raw parts too.
    if relative
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(refuse("empty, '.' or '..' part"));
    }
    let path = Path::new(relative);
    if !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(refuse("not a plain relative path"));
    }
    Ok(root.join(path))
}

/// How much one fetch may write: a results folder is far below these, a server that sends
/// more is refused rather than trusted with the client's disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// Bytes over all files.
    pub total_bytes: u64,
    /// Bytes of one file.
    pub file_bytes: u64,
    /// Files (each costs an inode even when empty).
    pub files: usize,
}

impl Default for FetchLimits {
    /// 1 GiB in all, 256 MiB a file, 1,000,000 files (the planner's 100,000 cells with a
    /// few files each).
    fn default() -> Self {
        FetchLimits {
            total_bytes: 1 << 30,
            file_bytes: 256 << 20,
            files: 1_000_000,
        }
    }
}

/// Writes a stream of chunks under a root folder.
#[derive(Debug)]
pub struct FetchWriter {
    root: PathBuf,
    limits: FetchLimits,
    current: Option<Current>,
    files: usize,
    bytes: u64,
}

#[derive(Debug)]
struct Current {
    relative: String,
    file: fs::File,
    written: u64,
}

impl FetchWriter {
    /// Writes under `root`, creating it if needed, within the default [`FetchLimits`].
    pub fn new(root: &Path) -> Result<Self, FetchError> {
        Self::with_limits(root, FetchLimits::default())
    }

    /// Writes under `root`, creating it if needed, within `limits`.
    pub fn with_limits(root: &Path, limits: FetchLimits) -> Result<Self, FetchError> {
        fs::create_dir_all(root).map_err(|source| FetchError::Io {
            path: root.display().to_string(),
            source,
        })?;
        Ok(FetchWriter {
            root: root.to_path_buf(),
            limits,
            current: None,
            files: 0,
            bytes: 0,
        })
    }

    /// Writes one chunk: offset 0 starts (or truncates) the file, any other offset must
    /// continue the file being written.
    pub fn chunk(&mut self, relative: &str, offset: u64, data: &[u8]) -> Result<(), FetchError> {
        let target = safe_join(&self.root, relative)?;
        let over = |what: String, limit: u64, unit| FetchError::OverLimit { what, limit, unit };
        let len = data.len() as u64;
        if self.bytes.saturating_add(len) > self.limits.total_bytes {
            return Err(over(
                "the run's folder".to_string(),
                self.limits.total_bytes,
                "bytes",
            ));
        }
        if offset == 0 {
            if self.files >= self.limits.files {
                return Err(over(
                    "the run's folder".to_string(),
                    self.limits.files as u64,
                    "files",
                ));
            }
            // Checked again below for later chunks; here so that no empty file is left.
            if len > self.limits.file_bytes {
                return Err(over(relative.to_string(), self.limits.file_bytes, "bytes"));
            }
            self.current = Some(Current {
                relative: relative.to_string(),
                file: self.create(relative, &target)?,
                written: 0,
            });
            self.files += 1;
        }
        let current = match &mut self.current {
            Some(current) if current.relative == relative && current.written == offset => current,
            Some(current) if current.relative == relative => {
                return Err(FetchError::OutOfOrder {
                    path: relative.to_string(),
                    offset,
                    expected: current.written,
                });
            }
            _ => {
                return Err(FetchError::OutOfOrder {
                    path: relative.to_string(),
                    offset,
                    expected: 0,
                });
            }
        };
        if current.written.saturating_add(len) > self.limits.file_bytes {
            return Err(over(relative.to_string(), self.limits.file_bytes, "bytes"));
        }
        current
            .file
            .write_all(data)
            .map_err(|source| FetchError::Io {
                path: target.display().to_string(),
                source,
            })?;
        current.written += len;
        self.bytes += len;
        Ok(())
    }

    /// Files started and bytes written so far.
    pub fn totals(&self) -> (usize, u64) {
        (self.files, self.bytes)
    }

    /// Creates the parents of `target` below the root, refusing to go through a symbolic
    /// link or to write onto one, then creates (truncates) the file.
    fn create(&self, relative: &str, target: &Path) -> Result<fs::File, FetchError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| FetchError::Io { path, source }
        };
        let mut at = self.root.clone();
        let parts: Vec<&str> = relative.split('/').collect();
        let (leaf, parents) = parts.split_last().ok_or(FetchError::UnsafePath {
            path: relative.to_string(),
            reason: "empty path",
        })?;
        for part in parents {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(FetchError::UnsafePath {
                        path: relative.to_string(),
                        reason: "goes through a symbolic link",
                    });
                }
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    fs::create_dir(&at).map_err(io(&at))?;
                }
                Err(error) => return Err(io(&at)(error)),
            }
        }
        at.push(leaf);
        if fs::symlink_metadata(&at).is_ok_and(|meta| meta.file_type().is_symlink()) {
            return Err(FetchError::UnsafePath {
                path: relative.to_string(),
                reason: "would write onto a symbolic link",
            });
        }
        fs::File::create(target).map_err(io(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_relative_paths_are_joined() -> Result<(), FetchError> {
        let root = Path::new("/tmp/out");
        assert_eq!(
            safe_join(root, "report.html")?,
            Path::new("/tmp/out/report.html")
        );
        assert_eq!(
            safe_join(root, "cells/embedded/local/0-latency/-/1/result.json")?,
            Path::new("/tmp/out/cells/embedded/local/0-latency/-/1/result.json")
        );
        assert_eq!(safe_join(root, "a..b/..c")?, Path::new("/tmp/out/a..b/..c"));
        Ok(())
    }

    #[test]
    fn paths_that_escape_or_are_not_plain_are_refused() {
        let root = Path::new("/tmp/out");
        for bad in [
            "",
            "/etc/passwd",
            "//etc/passwd",
            "..",
            "../x",
            "a/../../x",
            "a/..",
            "./x",
            "a/./b",
            "a//b",
            "a/",
            ".",
            "a\\..\\..\\x",
            "a\0b",
        ] {
            assert!(
                matches!(safe_join(root, bad), Err(FetchError::UnsafePath { .. })),
                "{bad:?} was accepted"
            );
        }
    }

    /// Caps small enough to reach: each refusal is one line, comes before the chunk that
    /// would go over is written, and what was within the caps stays written.
    #[test]
    fn writer_stops_at_each_cap_before_writing_over_it() -> Result<(), Box<dyn std::error::Error>> {
        let limits = FetchLimits {
            total_bytes: 10,
            file_bytes: 6,
            files: 3,
        };
        let root = tempfile::tempdir()?;

        // One file over its cap: the chunk that would cross it is not written.
        let mut writer = FetchWriter::with_limits(root.path(), limits)?;
        writer.chunk("a", 0, b"1234")?;
        writer.chunk("a", 4, b"56")?;
        let error = writer.chunk("a", 6, b"7").expect_err("over the file cap");
        assert_eq!(
            error.to_string(),
            "a: the server sent more than the fetch cap of 6 bytes; fetch stopped (copy a folder this large from the server by other means)"
        );
        assert_eq!(fs::read(root.path().join("a"))?, b"123456");

        // Over the total, each file within its cap.
        writer.chunk("b", 0, b"1234")?;
        let error = writer.chunk("b", 4, b"x").expect_err("over the total cap");
        assert!(
            error.to_string().starts_with(
                "the run's folder: the server sent more than the fetch cap of 10 bytes"
            ),
            "{error}"
        );
        assert_eq!(fs::read(root.path().join("b"))?, b"1234");
        assert_eq!(writer.totals(), (2, 10));

        // Too many files, even empty ones: the one over the cap is not created.
        let mut writer = FetchWriter::with_limits(root.path(), limits)?;
        for name in ["e1", "e2", "e3"] {
            writer.chunk(name, 0, b"")?;
        }
        let error = writer.chunk("e4", 0, b"").expect_err("over the file count");
        assert!(
            error.to_string().contains("fetch cap of 3 files"),
            "{error}"
        );
        assert!(!root.path().join("e4").exists());

        // A chunk larger than any cap is refused without overflow.
        let huge = vec![0u8; 11];
        let mut writer = FetchWriter::with_limits(root.path(), limits)?;
        assert!(matches!(
            writer.chunk("c", 0, &huge),
            Err(FetchError::OverLimit { .. })
        ));
        assert!(!root.path().join("c").exists());
        let mut writer = FetchWriter::with_limits(root.path(), limits)?;
        assert!(matches!(
            writer.chunk("d", 0, &huge[..7]),
            Err(FetchError::OverLimit { .. })
        ));
        assert!(!root.path().join("d").exists());
        Ok(())
    }

    #[test]
    fn writer_refuses_escapes_symlinks_and_disorder() -> Result<(), Box<dyn std::error::Error>> {
        let outside = tempfile::tempdir()?;
        let root = tempfile::tempdir()?;
        let mut writer = FetchWriter::new(root.path())?;
        writer.chunk("cells/a/result.json", 0, b"{")?;
        writer.chunk("cells/a/result.json", 1, b"}")?;
        assert_eq!(fs::read(root.path().join("cells/a/result.json"))?, b"{}");
        assert!(writer.chunk("../escape", 0, b"x").is_err());
        assert!(writer.chunk("cells/a/result.json", 5, b"x").is_err());
        assert!(writer.chunk("other", 3, b"x").is_err());
        std::os::unix::fs::symlink(outside.path(), root.path().join("link"))?;
        assert!(writer.chunk("link/file", 0, b"x").is_err());
        std::os::unix::fs::symlink(outside.path().join("f"), root.path().join("leaf"))?;
        assert!(writer.chunk("leaf", 0, b"x").is_err());
        assert_eq!(fs::read_dir(outside.path())?.count(), 0);
        assert_eq!(writer.totals(), (1, 2));
        Ok(())
    }
}
