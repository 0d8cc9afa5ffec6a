//! Watching a starting broker's log for the line it prints when its port was taken.
//!
//! Two reasons to watch rather than read the tail once at the end: RabbitMQ logs
//! `eaddrinuse`, stops its MQTT application and keeps its Erlang VM up, so a start would
//! otherwise wait out the whole readiness deadline; and what a broker logs on its way down
//! pushes that line out of any tail read after the stop, so the start was not retried on a
//! fresh port.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// How much of the log one read takes at a time.
const CHUNK: usize = 64 * 1024;

/// Reads a log file incrementally and remembers the first marker seen in it.
#[derive(Debug)]
pub struct LogWatch {
    path: PathBuf,
    markers: &'static [&'static str],
    /// Bytes of the file already scanned.
    scanned: u64,
    /// The end of what was scanned, kept so a marker split between two reads is found.
    carry: Vec<u8>,
    found: Option<&'static str>,
}

impl LogWatch {
    /// Watches `path` (which may not exist yet) for any of `markers`.
    pub fn new(path: &Path, markers: &'static [&'static str]) -> Self {
        Self {
            path: path.to_owned(),
            markers,
            scanned: 0,
            carry: Vec::new(),
            found: None,
        }
    }

    /// Scans what the log gained since the last call; the marker seen, now or before.
    /// A log that cannot be read yet is treated as empty.
    pub fn poll(&mut self) -> Option<&'static str> {
        if self.found.is_some() || self.markers.is_empty() {
            return self.found;
        }
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return None;
        };
        let length = file.metadata().map(|m| m.len()).unwrap_or(0);
        if length < self.scanned {
            // Truncated or replaced: start over.
            self.scanned = 0;
            self.carry.clear();
        }
        if file.seek(SeekFrom::Start(self.scanned)).is_err() {
            return None;
        }
        let longest = self.markers.iter().map(|m| m.len()).max().unwrap_or(0);
        let mut chunk = vec![0u8; CHUNK];
        loop {
            let read = match file.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(read) => read,
            };
            self.scanned += read as u64;
            let mut window = std::mem::take(&mut self.carry);
            window.extend_from_slice(&chunk[..read]);
            if let Some(marker) = self
                .markers
                .iter()
                .find(|m| contains(&window, m.as_bytes()))
            {
                self.found = Some(marker);
                return self.found;
            }
            let keep = longest.saturating_sub(1).min(window.len());
            self.carry = window.split_off(window.len() - keep);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const MARKERS: &[&str] = &["eaddrinuse", "Address already in use"];

    #[test]
    fn a_marker_is_found_in_what_the_log_gained_and_stays_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.log");
        let mut watch = LogWatch::new(&path, MARKERS);
        assert_eq!(watch.poll(), None, "no log yet");
        let mut log = std::fs::File::create(&path).unwrap();
        log.write_all(b"starting\nlisten_error eadd").unwrap();
        assert_eq!(watch.poll(), None);
        // The marker split between two reads is still found.
        log.write_all(b"rinuse\n").unwrap();
        assert_eq!(watch.poll(), Some("eaddrinuse"));
        // Lines written on the way down do not hide it.
        for _ in 0..1000 {
            log.write_all(b"stopping message store\n").unwrap();
        }
        assert_eq!(watch.poll(), Some("eaddrinuse"));
    }

    #[test]
    fn a_long_log_without_a_marker_is_scanned_in_chunks_and_found_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.log");
        let line = "x".repeat(100) + "\n";
        std::fs::write(&path, line.repeat(3 * CHUNK / 100)).unwrap();
        let mut watch = LogWatch::new(&path, MARKERS);
        assert_eq!(watch.poll(), None);
        assert_eq!(watch.scanned, std::fs::metadata(&path).unwrap().len());
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        log.write_all(b"bind: Address already in use\n").unwrap();
        assert_eq!(watch.poll(), Some("Address already in use"));
    }

    #[test]
    fn no_markers_never_match() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.log");
        std::fs::write(&path, "eaddrinuse").unwrap();
        assert_eq!(LogWatch::new(&path, &[]).poll(), None);
    }
}
