//! Reading a file that someone other than the operator named (a CA file in a submitted
//! spec, a file inside a results folder from elsewhere): only a regular file, only up to a
//! size cap, so `/dev/zero`, a FIFO or a huge file cannot exhaust memory or block a reader.
//!
//! The file is opened with `O_NONBLOCK` (a FIFO without a writer would block the open
//! otherwise; on regular files the flag does nothing), checked with `fstat` on the opened
//! descriptor (no race with a rename), and read to at most `cap + 1` bytes. With
//! [`Links::Refuse`] the last component must not be a symbolic link (`O_NOFOLLOW`).
//!
//! [`CappedReadError`] says exactly what went wrong, for the operator's log; a caller that
//! answers a client should map every variant to one message, so the answer does not tell
//! an existing path from a missing one.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether the last component of the path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Follow it (files the operator configured: a link to a CA in /etc/ssl is normal).
    Follow,
    /// Refuse it (files inside a folder from elsewhere: a link could point anywhere).
    Refuse,
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum CappedReadError {
    /// It could not be opened (missing, not permitted, a symbolic link with
    /// [`Links::Refuse`]).
    #[error("{path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is a directory, a device, a FIFO or a socket.
    #[error("{path}: not a regular file")]
    NotRegular {
        /// The file.
        path: String,
    },
    /// It holds more than the cap.
    #[error("{path}: larger than {cap} bytes")]
    TooLarge {
        /// The file.
        path: String,
        /// The cap in bytes.
        cap: u64,
    },
    /// Reading failed.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The contents of the regular file at `path`, at most `cap` bytes of them; anything else
/// (not regular, larger, unreadable) is an error, found before more than `cap + 1` bytes
/// are read.
pub fn read_capped(path: &Path, cap: u64, links: Links) -> Result<Vec<u8>, CappedReadError> {
    let shown = || path.display().to_string();
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = File::options()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| CappedReadError::Open {
            path: shown(),
            source,
        })?;
    let metadata = file.metadata().map_err(|source| CappedReadError::Read {
        path: shown(),
        source,
    })?;
    if !metadata.is_file() {
        return Err(CappedReadError::NotRegular { path: shown() });
    }
    if metadata.len() > cap {
        return Err(CappedReadError::TooLarge { path: shown(), cap });
    }
    // The size may change after fstat: the read itself is bounded too.
    let mut contents = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(&mut contents)
        .map_err(|source| CappedReadError::Read {
            path: shown(),
            source,
        })?;
    if contents.len() as u64 > cap {
        return Err(CappedReadError::TooLarge { path: shown(), cap });
    }
    Ok(contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_cap_is_read_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, b"0123456789").expect("written");
        assert_eq!(
            read_capped(&path, 10, Links::Refuse).expect("read"),
            b"0123456789"
        );
        let error = read_capped(&path, 9, Links::Follow).expect_err("over the cap");
        assert!(
            matches!(error, CappedReadError::TooLarge { cap: 9, .. }),
            "{error}"
        );
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_without_reading() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("no NUL");
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        // A FIFO without a writer would block a plain open; /dev/zero never ends.
        for path in [Path::new("/dev/zero"), &fifo, dir.path()] {
            let error = read_capped(path, 1 << 20, Links::Follow).expect_err("not regular");
            assert!(
                matches!(error, CappedReadError::NotRegular { .. }),
                "{}: {error}",
                path.display()
            );
        }
    }

    #[test]
    fn links_are_followed_or_refused_as_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").expect("written");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        assert_eq!(
            read_capped(&link, 1, Links::Follow).expect("followed"),
            b"x"
        );
        let error = read_capped(&link, 1, Links::Refuse).expect_err("a link");
        assert!(matches!(error, CappedReadError::Open { .. }), "{error}");
        let missing =
            read_capped(&dir.path().join("missing"), 1, Links::Follow).expect_err("missing");
        assert!(matches!(missing, CappedReadError::Open { .. }), "{missing}");
    }
}
