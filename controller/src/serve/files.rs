//! Fetch: a run's results folder as a stream of file chunks.
//!
//! The folder is walked once (sorted, so the order is stable); only regular files are sent,
//! symbolic links are skipped so nothing outside the folder leaks, and names that are not
//! UTF-8 are skipped with a warning. Files are read on a blocking thread and sent in chunks
//! of [`CHUNK`] bytes through a small channel, so a slow reader holds back the reading.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use proto::controller::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

/// Bytes per chunk: well under gRPC's default 4 MiB message limit.
pub(crate) const CHUNK: usize = 256 * 1024;

/// Every regular file under `root`, as (path relative to `root` with '/' separators, path).
pub(crate) fn walk(root: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    let mut pending = vec![(String::new(), root.to_path_buf())];
    while let Some((prefix, dir)) = pending.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                tracing::warn!(path = %entry.path().display(), "fetch: skipping a non-UTF-8 name");
                continue;
            };
            let relative = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            // file_type() does not follow symbolic links.
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push((relative, entry.path()));
            } else if kind.is_file() {
                files.push((relative, entry.path()));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Sends every file under `root` as chunks into `out`, stopping early when the receiver is
/// gone. Blocking: run it on a blocking thread.
pub(crate) fn send_folder(root: &Path, out: &mpsc::Sender<Result<pb::FileChunk, Status>>) {
    let files = match walk(root) {
        Ok(files) => files,
        Err(error) => {
            let _ = out.blocking_send(Err(Status::internal(format!(
                "reading the results folder {}: {error}",
                root.display()
            ))));
            return;
        }
    };
    for (relative, path) in files {
        if let Err(error) = send_file(&relative, &path, out) {
            let _ = out.blocking_send(Err(Status::internal(format!("{relative}: {error}"))));
            return;
        }
        if out.is_closed() {
            return;
        }
    }
}

fn send_file(
    relative: &str,
    path: &Path,
    out: &mpsc::Sender<Result<pb::FileChunk, Status>>,
) -> std::io::Result<()> {
    let mut file = fs::File::open(path)?;
    let mut offset = 0u64;
    loop {
        let mut data = vec![0; CHUNK];
        let mut filled = 0;
        while filled < CHUNK {
            let read = file.read(&mut data[filled..])?;
            if read == 0 {
                break;
            }
            filled += read;
        }
        data.truncate(filled);
        // The first chunk goes even when empty, so an empty file exists on the other side.
        if filled == 0 && offset > 0 {
            return Ok(());
        }
        let chunk = pb::FileChunk {
            path: relative.to_string(),
            offset,
            data,
        };
        if out.blocking_send(Ok(chunk)).is_err() {
            return Ok(());
        }
        offset += filled as u64;
        if filled < CHUNK {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_lists_regular_files_sorted_and_skips_symlinks() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        fs::create_dir_all(root.path().join("cells/a"))?;
        fs::write(root.path().join("summary.csv"), "x")?;
        fs::write(root.path().join("cells/a/result.json"), "{}")?;
        let outside = tempfile::tempdir()?;
        fs::write(outside.path().join("secret"), "s")?;
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("leak"))?;
        std::os::unix::fs::symlink(outside.path(), root.path().join("leakdir"))?;
        let names: Vec<String> = walk(root.path())?.into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["cells/a/result.json", "summary.csv"]);
        Ok(())
    }

    #[test]
    fn large_files_go_in_ordered_chunks_and_empty_ones_as_one() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let big: Vec<u8> = (0..CHUNK * 2 + 5).map(|i| (i % 251) as u8).collect();
        fs::write(root.path().join("big"), &big)?;
        fs::write(root.path().join("empty"), "")?;
        let (tx, mut rx) = mpsc::channel(16);
        send_folder(root.path(), &tx);
        drop(tx);
        let mut chunks = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            chunks.push(chunk.map_err(|s| std::io::Error::other(s.to_string()))?);
        }
        let shape: Vec<(&str, u64, usize)> = chunks
            .iter()
            .map(|c| (c.path.as_str(), c.offset, c.data.len()))
            .collect();
        let chunk = CHUNK as u64;
        assert_eq!(
            shape,
            [
                ("big", 0, CHUNK),
                ("big", chunk, CHUNK),
                ("big", 2 * chunk, 5),
                ("empty", 0, 0)
            ]
        );
        let joined: Vec<u8> = chunks[..3].iter().flat_map(|c| c.data.clone()).collect();
        assert_eq!(joined, big);
        Ok(())
    }
}
