//! [`Folder`]: a folder whose contents are untrusted, read and written beneath it only.
//!
//! A results folder may come from anyone (copied from another machine, unpacked from an
//! archive, left in `/tmp`), and the controller reads and rewrites it as root. So every entry
//! is opened relative to the folder's descriptor, one path step at a time, never through a
//! symbolic link (`O_NOFOLLOW` at each step), never above the folder (`..` is refused), only as
//! a regular file and only up to a stated size. Files are replaced by writing a new file under
//! a unique temporary name in the same folder (`O_CREAT | O_EXCL`, so a planted link is never
//! written through) and renaming it over the old one, which replaces a link instead of
//! following it. Removing is `unlinkat`, which removes a link itself, never its target.
//!
//! Privacy follows the folder: one closed to group and others (mode `0700`) gets `0700`
//! folders and `0600` files beneath it, so a service that keeps its runs' root private keeps
//! every run's results private without each writer knowing.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of files written in a private folder, and otherwise (before the umask).
const PRIVATE_FILE: libc::mode_t = 0o600;
const SHARED_FILE: libc::mode_t = 0o644;
/// Mode of folders created in a private folder, and otherwise (before the umask).
const PRIVATE_FOLDER: u32 = 0o700;
const SHARED_FOLDER: u32 = 0o755;

/// Temporary names are unique per process and write, so two writers never share one.
static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Something in the folder could not be read or written as asked; each variant names the
/// entry as the folder's path joined with the relative one.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// The system refused (permission, missing, disk full, ...).
    #[error("{path}: {source}")]
    Io {
        /// The entry.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The relative path is empty, absolute or has `..`: it would not stay inside the folder.
    #[error("{path}: not a path inside {folder}")]
    Outside {
        /// The entry as named.
        path: String,
        /// The folder.
        folder: String,
    },
    /// A step of the path is a symbolic link, which is never followed here.
    #[error("{path}: is a symbolic link, which is not followed")]
    Link {
        /// The link.
        path: String,
    },
    /// The entry is not of the kind asked for (a folder, a regular file).
    #[error("{path}: is {found}, not {expected}")]
    Kind {
        /// The entry.
        path: String,
        /// What it is.
        found: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    /// A file larger than its reader accepts.
    #[error("{path}: larger than {cap} bytes")]
    TooLarge {
        /// The file.
        path: String,
        /// The most accepted.
        cap: u64,
    },
}

impl FolderError {
    /// What is wrong, without the path: for a caller that names the file itself.
    pub fn problem(&self) -> String {
        match self {
            FolderError::Io { source, .. } => source.to_string(),
            FolderError::Outside { folder, .. } => format!("not a path inside {folder}"),
            FolderError::Link { .. } => "is a symbolic link, which is not followed".to_string(),
            FolderError::Kind {
                found, expected, ..
            } => format!("is {found}, not {expected}"),
            FolderError::TooLarge { cap, .. } => format!("larger than {cap} bytes"),
        }
    }
}

/// For a caller whose errors are `io::Error`s and name the path themselves: the kind of the
/// system's error where there is one, the problem's text otherwise.
impl From<FolderError> for io::Error {
    fn from(error: FolderError) -> io::Error {
        match error {
            FolderError::Io { source, .. } => source,
            other => io::Error::new(io::ErrorKind::InvalidInput, other.problem()),
        }
    }
}

/// Replaces the file at `path` as [`Folder::replace`] does, in the folder above it (which the
/// caller named, and may be reached through links): a link at `path` is replaced, never
/// written through.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), FolderError> {
    let outside = || FolderError::Outside {
        path: path.display().to_string(),
        folder: "a folder".to_string(),
    };
    let name = path
        .file_name()
        .and_then(OsStr::to_str)
        .ok_or_else(outside)?;
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    Folder::open(folder)?.replace(name, bytes)
}

/// A folder opened once; everything beneath it is reached through its descriptor.
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    shown: PathBuf,
    private: bool,
}

fn c_name(name: &OsStr, shown: &Path) -> Result<CString, FolderError> {
    CString::new(name.as_bytes()).map_err(|_| FolderError::Io {
        path: shown.display().to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"),
    })
}

fn io_at(shown: &Path) -> impl FnOnce(io::Error) -> FolderError + '_ {
    move |source| FolderError::Io {
        path: shown.display().to_string(),
        source,
    }
}

/// What a file type is called in errors.
fn kind_name(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a folder"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_fifo() {
        "a pipe"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// `openat(dir, name, flags, mode)` with close-on-exec, as an owned descriptor.
fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a NUL-terminated string; the returned descriptor is ours alone.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOCTTY,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The type of `name` in `dir`, without following it.
fn kind_at(dir: RawFd, name: &CStr) -> Option<libc::mode_t> {
    // SAFETY: `stat` is plain data the call fills; `name` is NUL-terminated.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        (libc::fstatat(dir, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) == 0)
            .then_some(stat.st_mode & libc::S_IFMT)
    }
}

impl Folder {
    /// Opens the folder at `path`. Links in `path` itself are followed: it is the caller's
    /// (the operator's) choice; nothing beneath it is.
    pub fn open(path: &Path) -> Result<Folder, FolderError> {
        let name = CString::new(path.as_os_str().as_bytes()).map_err(|_| FolderError::Io {
            path: path.display().to_string(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"),
        })?;
        let fd = open_at(libc::AT_FDCWD, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(io_at(path))?;
        let mode = File::from(fd.try_clone().map_err(io_at(path))?)
            .metadata()
            .map_err(io_at(path))?
            .mode();
        Ok(Folder {
            fd,
            shown: path.to_path_buf(),
            private: mode & 0o077 == 0,
        })
    }

    /// Creates the folder at `path` (and missing parents) unless it exists, and opens it. A
    /// folder created here is private (`0700`) when the nearest existing folder above it is.
    pub fn create(path: &Path) -> Result<Folder, FolderError> {
        let above = path
            .ancestors()
            .skip(1)
            .find(|p| p.as_os_str().is_empty() || p.is_dir())
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            });
        let private = above
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.mode() & 0o077 == 0);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(if private {
                PRIVATE_FOLDER
            } else {
                SHARED_FOLDER
            })
            .create(path)
            .map_err(io_at(path))?;
        Folder::open(path)
    }

    /// The folder's path, as it was opened.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Whether what is written here is for the owner alone (`0600` files, `0700` folders).
    pub fn is_private(&self) -> bool {
        self.private
    }

    /// The steps of `relative`, refused unless each is a plain name.
    fn steps<'a>(&self, relative: &'a Path) -> Result<Vec<&'a OsStr>, FolderError> {
        let steps: Vec<&OsStr> = relative
            .components()
            .map(|step| match step {
                Component::Normal(name) => Some(name),
                _ => None,
            })
            .collect::<Option<_>>()
            .unwrap_or_default();
        if steps.is_empty() {
            return Err(FolderError::Outside {
                path: relative.display().to_string(),
                folder: self.shown.display().to_string(),
            });
        }
        Ok(steps)
    }

    /// Opens the folder `name` beneath `dir` (creating it when `create`), never through a
    /// link; `None` when it is missing and not created.
    fn step_into(
        &self,
        dir: RawFd,
        name: &OsStr,
        shown: &Path,
        create: bool,
    ) -> Result<Option<OwnedFd>, FolderError> {
        let c = c_name(name, shown)?;
        if create {
            let mode = if self.private {
                PRIVATE_FOLDER
            } else {
                SHARED_FOLDER
            };
            // SAFETY: `c` is NUL-terminated; mkdirat never follows a link at the last step.
            let made = unsafe { libc::mkdirat(dir, c.as_ptr(), mode as libc::mode_t) };
            if made != 0 {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::AlreadyExists {
                    return Err(io_at(shown)(error));
                }
            }
        }
        match open_at(
            dir,
            &c,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(self.classify(dir, &c, shown, error, "a folder")),
        }
    }

    /// Turns a failed open into what the entry really is: a link, another kind, or the error.
    fn classify(
        &self,
        dir: RawFd,
        name: &CStr,
        shown: &Path,
        error: io::Error,
        expected: &'static str,
    ) -> FolderError {
        let path = shown.display().to_string();
        match kind_at(dir, name) {
            Some(libc::S_IFLNK) => FolderError::Link { path },
            Some(libc::S_IFDIR) if expected != "a folder" => FolderError::Kind {
                path,
                found: "a folder",
                expected,
            },
            Some(libc::S_IFREG) if expected == "a folder" => FolderError::Kind {
                path,
                found: "a regular file",
                expected,
            },
            _ => FolderError::Io {
                path,
                source: error,
            },
        }
    }

    /// The folder holding the last step of `steps` (created when `create`), or `None` when
    /// a step is missing.
    fn parent_of(
        &self,
        steps: &[&OsStr],
        create: bool,
    ) -> Result<Option<(Option<OwnedFd>, PathBuf)>, FolderError> {
        let mut shown = self.shown.clone();
        let mut held: Option<OwnedFd> = None;
        for name in &steps[..steps.len() - 1] {
            shown.push(name);
            let dir = held
                .as_ref()
                .map_or(self.fd.as_raw_fd(), |fd| fd.as_raw_fd());
            match self.step_into(dir, name, &shown, create)? {
                Some(fd) => held = Some(fd),
                None => return Ok(None),
            }
        }
        Ok(Some((held, shown)))
    }

    /// The folder `relative` beneath this one, created (with the missing folders above it)
    /// when missing.
    pub fn create_folder(&self, relative: &Path) -> Result<Folder, FolderError> {
        let steps = self.steps(relative)?;
        let mut shown = self.shown.clone();
        let mut held: Option<OwnedFd> = None;
        for name in &steps {
            shown.push(name);
            let dir = held
                .as_ref()
                .map_or(self.fd.as_raw_fd(), |fd| fd.as_raw_fd());
            let fd = self
                .step_into(dir, name, &shown, true)?
                .ok_or_else(|| io_at(&shown)(io::ErrorKind::NotFound.into()))?;
            held = Some(fd);
        }
        let fd = held.ok_or_else(|| io_at(&shown)(io::ErrorKind::NotFound.into()))?;
        Ok(Folder {
            fd,
            shown,
            private: self.private,
        })
    }

    /// The regular file `relative` opened for reading with its size, or `None` when it (or a
    /// folder above it) is missing. A link, a folder, a device or a pipe is an error.
    pub fn open_file(&self, relative: &Path) -> Result<Option<(File, u64)>, FolderError> {
        let steps = self.steps(relative)?;
        let Some((parent, mut shown)) = self.parent_of(&steps, false)? else {
            return Ok(None);
        };
        let last = steps[steps.len() - 1];
        shown.push(last);
        let dir = parent
            .as_ref()
            .map_or(self.fd.as_raw_fd(), |fd| fd.as_raw_fd());
        let c = c_name(last, &shown)?;
        // O_NONBLOCK: opening a pipe must not wait for a writer before its type is checked.
        let fd = match open_at(
            dir,
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(fd) => fd,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(self.classify(dir, &c, &shown, error, "a regular file")),
        };
        let file = File::from(fd);
        let metadata = file.metadata().map_err(io_at(&shown))?;
        if !metadata.file_type().is_file() {
            return Err(FolderError::Kind {
                path: shown.display().to_string(),
                found: kind_name(metadata.file_type()),
                expected: "a regular file",
            });
        }
        Ok(Some((file, metadata.len())))
    }

    /// The regular file `relative` whole, refused when larger than `cap` bytes (also if it
    /// grows past `cap` while read); `None` when it is missing.
    pub fn read(&self, relative: &Path, cap: u64) -> Result<Option<Vec<u8>>, FolderError> {
        let Some((file, size)) = self.open_file(relative)? else {
            return Ok(None);
        };
        let shown = self.shown.join(relative);
        let too_large = || FolderError::TooLarge {
            path: shown.display().to_string(),
            cap,
        };
        if size > cap {
            return Err(too_large());
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(cap + 1)
            .read_to_end(&mut bytes)
            .map_err(io_at(&shown))?;
        if bytes.len() as u64 > cap {
            return Err(too_large());
        }
        Ok(Some(bytes))
    }

    /// Replaces the file `name` (directly in this folder) with `bytes`, whole or not at all
    /// and durably: a new file under a unique temporary name, synced, renamed over `name`,
    /// then the folder synced. A link at `name` is replaced, never written through.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), FolderError> {
        let shown = self.shown.join(name);
        let final_name = c_name(OsStr::new(name), &shown)?;
        if self.steps(Path::new(name))?.len() != 1 {
            return Err(FolderError::Outside {
                path: name.to_string(),
                folder: self.shown.display().to_string(),
            });
        }
        let (temporary, file) = self.create_temporary(name)?;
        let temporary_shown = self.shown.join(temporary.to_string_lossy().as_ref());
        let written = (|| {
            let mut file = file;
            file.write_all(bytes)?;
            file.sync_all()
        })();
        let renamed = written.map_err(io_at(&temporary_shown)).and_then(|()| {
            // SAFETY: both names are NUL-terminated and relative to our folder descriptor.
            let done = unsafe {
                libc::renameat(
                    self.fd.as_raw_fd(),
                    temporary.as_ptr(),
                    self.fd.as_raw_fd(),
                    final_name.as_ptr(),
                )
            };
            if done == 0 {
                Ok(())
            } else {
                Err(io_at(&shown)(io::Error::last_os_error()))
            }
        });
        if renamed.is_err() {
            // SAFETY: removes our own temporary name; a failure leaves a stray file only.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), temporary.as_ptr(), 0) };
        }
        renamed?;
        self.sync()
    }

    /// A new file under a name no one else uses, `.<name>.<pid>-<n>.partial`.
    fn create_temporary(&self, name: &str) -> Result<(CString, File), FolderError> {
        let mode = if self.private {
            PRIVATE_FILE
        } else {
            SHARED_FILE
        };
        loop {
            let n = NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed);
            let temporary = format!(".{name}.{}-{n}.partial", std::process::id());
            let shown = self.shown.join(&temporary);
            let c = c_name(OsStr::new(&temporary), &shown)?;
            match open_at(
                self.fd.as_raw_fd(),
                &c,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                mode,
            ) {
                Ok(fd) => return Ok((c, File::from(fd))),
                // Someone planted this name: take the next one rather than touch theirs.
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(io_at(&shown)(error)),
            }
        }
    }

    /// Appends `bytes` to the regular file `name` (directly in this folder), creating it,
    /// in one write, synced. A link or anything but a regular file at `name` is refused.
    pub fn append(&self, name: &str, bytes: &[u8]) -> Result<(), FolderError> {
        let shown = self.shown.join(name);
        if self.steps(Path::new(name))?.len() != 1 {
            return Err(FolderError::Outside {
                path: name.to_string(),
                folder: self.shown.display().to_string(),
            });
        }
        let c = c_name(OsStr::new(name), &shown)?;
        let mode = if self.private {
            PRIVATE_FILE
        } else {
            SHARED_FILE
        };
        let fd = open_at(
            self.fd.as_raw_fd(),
            &c,
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            mode,
        )
        .map_err(|error| self.classify(self.fd.as_raw_fd(), &c, &shown, error, "a regular file"))?;
        let mut file = File::from(fd);
        let kind = file.metadata().map_err(io_at(&shown))?.file_type();
        if !kind.is_file() {
            return Err(FolderError::Kind {
                path: shown.display().to_string(),
                found: kind_name(kind),
                expected: "a regular file",
            });
        }
        file.write_all(bytes).map_err(io_at(&shown))?;
        file.sync_data().map_err(io_at(&shown))
    }

    /// Removes the entry `name` directly in this folder (a link itself, never its target);
    /// a missing one is not an error.
    pub fn remove(&self, name: &OsStr) -> Result<(), FolderError> {
        let shown = self.shown.join(name);
        let c = c_name(name, &shown)?;
        // SAFETY: `c` is NUL-terminated and relative to our folder descriptor.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::NotFound {
                return Err(io_at(&shown)(error));
            }
        }
        Ok(())
    }

    /// The names of the entries directly in this folder (`.` and `..` excluded), unsorted.
    pub fn names(&self) -> Result<Vec<OsString>, FolderError> {
        let error = || io_at(&self.shown)(io::Error::last_os_error());
        // SAFETY: fdopendir takes over a duplicate of our descriptor, closed by closedir;
        // each dirent is read before the next readdir call.
        unsafe {
            let copy = libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0);
            if copy < 0 {
                return Err(error());
            }
            let stream = libc::fdopendir(copy);
            if stream.is_null() {
                let failed = error();
                libc::close(copy);
                return Err(failed);
            }
            // A duplicate shares the offset: start from the top whatever was read before.
            libc::rewinddir(stream);
            let mut names = Vec::new();
            loop {
                let entry = libc::readdir(stream);
                if entry.is_null() {
                    break;
                }
                let name = CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes();
                if name != b"." && name != b".." {
                    names.push(OsStr::from_bytes(name).to_os_string());
                }
            }
            libc::closedir(stream);
            Ok(names)
        }
    }

    /// Syncs the folder itself, so renames and new entries in it survive a power loss.
    pub fn sync(&self) -> Result<(), FolderError> {
        // SAFETY: fsync on our own descriptor.
        if unsafe { libc::fsync(self.fd.as_raw_fd()) } != 0 {
            return Err(io_at(&self.shown)(io::Error::last_os_error()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    use super::*;

    #[test]
    fn links_beneath_the_folder_are_never_followed_for_reading() {
        let root = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        std::fs::write(outside.path().join("secret"), "s").expect("write");
        std::fs::create_dir(root.path().join("cells")).expect("mkdir");
        symlink(
            outside.path().join("secret"),
            root.path().join("cells/file"),
        )
        .expect("link");
        symlink(outside.path(), root.path().join("away")).expect("link");
        symlink("/dev/zero", root.path().join("zero")).expect("link");
        let folder = Folder::open(root.path()).expect("open");
        for (name, expected) in [
            ("cells/file", "is a symbolic link"),
            ("away/secret", "is a symbolic link"),
            ("zero", "is a symbolic link"),
            ("../x", "not a path inside"),
            ("/etc/passwd", "not a path inside"),
            ("cells", "is a folder, not a regular file"),
        ] {
            let error = folder.read(Path::new(name), 1 << 20).expect_err(name);
            assert!(error.to_string().contains(expected), "{name}: {error}");
        }
        assert!(
            folder
                .read(Path::new("none/x"), 10)
                .expect("missing")
                .is_none()
        );
    }

    #[test]
    fn reads_are_capped_and_only_of_regular_files() {
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::write(root.path().join("big"), vec![b'x'; 100]).expect("write");
        let made = unsafe {
            let name = CString::new(root.path().join("pipe").as_os_str().as_bytes()).unwrap();
            libc::mkfifo(name.as_ptr(), 0o600)
        };
        assert_eq!(made, 0, "mkfifo");
        let folder = Folder::open(root.path()).expect("open");
        let error = folder.read(Path::new("big"), 99).expect_err("too large");
        assert!(
            error.to_string().ends_with("larger than 99 bytes"),
            "{error}"
        );
        assert_eq!(
            folder
                .read(Path::new("big"), 100)
                .expect("fits")
                .map(|b| b.len()),
            Some(100)
        );
        let error = folder.read(Path::new("pipe"), 10).expect_err("a pipe");
        assert!(
            error.to_string().contains("is a pipe, not a regular file"),
            "{error}"
        );
    }

    #[test]
    fn writes_replace_links_instead_of_following_them() {
        let root = tempfile::tempdir().expect("temp dir");
        let outside = tempfile::tempdir().expect("temp dir");
        let target = outside.path().join("target");
        std::fs::write(&target, "keep").expect("write");
        symlink(&target, root.path().join("report.md")).expect("link");
        symlink(&target, root.path().join("summary.csv")).expect("link");
        symlink(outside.path(), root.path().join("figures")).expect("link");
        let folder = Folder::open(root.path()).expect("open");
        folder.replace("report.md", b"new").expect("replaced");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep");
        assert_eq!(
            std::fs::read_to_string(root.path().join("report.md")).expect("read"),
            "new"
        );
        let error = folder.append("summary.csv", b"row\n").expect_err("a link");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        let error = folder
            .create_folder(Path::new("figures"))
            .expect_err("a link");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        folder.remove(OsStr::new("summary.csv")).expect("removed");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep");
        let mut names = folder.names().expect("names");
        names.sort();
        assert_eq!(names, ["figures", "report.md"]);
    }

    #[test]
    fn a_private_folder_gets_private_folders_and_files() {
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let run = Folder::create(&root.path().join("r1")).expect("created");
        assert!(run.is_private());
        let cell = run
            .create_folder(Path::new("cells/a/b"))
            .expect("cell folder");
        cell.replace("result.json", b"{}").expect("written");
        run.append("summary.csv", b"x\n").expect("appended");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").mode() & 0o777;
        assert_eq!(mode(&root.path().join("r1")), 0o700);
        assert_eq!(mode(&root.path().join("r1/cells/a")), 0o700);
        assert_eq!(mode(&root.path().join("r1/cells/a/b/result.json")), 0o600);
        assert_eq!(mode(&root.path().join("r1/summary.csv")), 0o600);
    }
}
