//! Byte sizes as users write them: `10B`, `1KB`, `10KiB`, `1MB`.
//!
//! `KB`/`MB`/`GB` are decimal (1000), `KiB`/`MiB`/`GiB` binary (1024), as the study's "1 KB,
//! 10 KB, 1 MB" payloads were meant; a bare integer is a number of bytes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes, parsed from and printed as a human unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

/// Why a byte size could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a byte size (expected e.g. 10B, 1KB, 10KiB, 1MB)")]
pub struct ByteSizeError {
    /// The text that was given.
    pub input: String,
}

const UNITS: &[(&str, u64)] = &[
    ("gib", 1 << 30),
    ("mib", 1 << 20),
    ("kib", 1 << 10),
    ("gb", 1_000_000_000),
    ("mb", 1_000_000),
    ("kb", 1_000),
    ("b", 1),
];

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || ByteSizeError {
            input: text.to_string(),
        };
        let lower = text.trim().to_ascii_lowercase();
        let (number, multiplier) = UNITS
            .iter()
            .find_map(|(unit, factor)| lower.strip_suffix(unit).map(|n| (n.trim(), *factor)))
            .unwrap_or((lower.as_str(), 1));
        let value: u64 = number.parse().map_err(|_| error())?;
        value
            .checked_mul(multiplier)
            .map(ByteSize)
            .ok_or_else(error)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (unit, factor) in [
            ("MB", 1_000_000),
            ("KB", 1_000),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if bytes >= factor && bytes.is_multiple_of(factor) {
                return write!(f, "{}{unit}", bytes / factor);
            }
        }
        write!(f, "{bytes}B")
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Bytes(bytes) => Ok(ByteSize(bytes)),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_binary_and_plain_units() {
        assert_eq!("10B".parse(), Ok(ByteSize(10)));
        assert_eq!("1KB".parse(), Ok(ByteSize(1_000)));
        assert_eq!("10 KiB".parse(), Ok(ByteSize(10_240)));
        assert_eq!("1MB".parse(), Ok(ByteSize(1_000_000)));
        assert_eq!("1mib".parse(), Ok(ByteSize(1 << 20)));
        assert_eq!("42".parse(), Ok(ByteSize(42)));
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        assert!("ten".parse::<ByteSize>().is_err());
        assert!("-1KB".parse::<ByteSize>().is_err());
        assert!("99999999999999999999GB".parse::<ByteSize>().is_err());
    }

    #[test]
    fn displays_in_the_unit_it_was_written() {
        assert_eq!(ByteSize(1_000_000).to_string(), "1MB");
        assert_eq!(ByteSize(10_240).to_string(), "10KiB");
        assert_eq!(ByteSize(35).to_string(), "35B");
    }
}
