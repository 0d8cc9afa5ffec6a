//! Histograms in results and on the wire: HdrHistogram V2 + DEFLATE, base64 in JSON. Compact
//! and readable by every HdrHistogram implementation.
//!
//! Decoding never trusts the input: hdrhistogram's own deserializer sizes its buffers from the
//! lengths and bounds the bytes declare, so 40 crafted bytes could make it allocate 4 GiB.
//! [`from_bytes`] first reads the V2 header (inflating a compressed one with a cap), insists
//! on the project-wide bounds ([`HISTOGRAM_HIGHEST_NS`], [`HISTOGRAM_SIGFIG`]) and on a payload
//! no longer than such a histogram can need, and only then deserializes.

use std::borrow::Cow;
use std::io::Read;

use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{
    Deserializer as HdrDeserializer, Serializer as _, V2DeflateSerializer,
};
use serde::{Deserialize, Deserializer, Serializer};

use crate::result::{HISTOGRAM_HIGHEST_NS, HISTOGRAM_SIGFIG, new_histogram};

/// The first four bytes of an uncompressed V2 histogram (base cookie 0x1c849303 with the
/// 8-byte word-size bits 0x10, as HdrHistogram writes and hdrhistogram reads it).
const V2_COOKIE: u32 = 0x1c84_9313;
/// The first four bytes of a DEFLATE-compressed V2 histogram.
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// cookie, payload length, normalizing offset, digits (4 bytes each), low, high (8 each),
/// conversion ratio (8).
const V2_HEADER_LEN: usize = 40;
/// A counter's longest encoding in the payload (zig-zag LEB128 of an i64).
const MAX_COUNTER_BYTES: usize = 9;

/// Why bytes are not a histogram Continuum can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// A V2 histogram, but with other bounds than the project-wide ones, so it cannot merge.
    #[error(
        "bounds {low}..={high} at {sigfig} digits; Continuum's histograms have \
         1..={HISTOGRAM_HIGHEST_NS} ns at {HISTOGRAM_SIGFIG} digits"
    )]
    Bounds {
        /// Lowest discernible value declared.
        low: u64,
        /// Highest trackable value declared.
        high: u64,
        /// Significant digits declared.
        sigfig: u32,
    },
    /// Not V2 bytes, truncated, or declaring more than such a histogram can hold.
    #[error("{0}")]
    Malformed(String),
}

/// Encodes a histogram as V2+DEFLATE bytes.
pub fn to_bytes(histogram: &Histogram<u64>) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(histogram, &mut bytes)
        .map_err(|e| format!("{e:?}"))?;
    Ok(bytes)
}

/// The longest payload a histogram with the project-wide bounds can have.
fn max_payload_len() -> usize {
    new_histogram().distinct_values() * MAX_COUNTER_BYTES
}

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// The uncompressed V2 bytes of `bytes`, inflated with a cap if they are compressed.
fn plain_v2(bytes: &[u8]) -> Result<Cow<'_, [u8]>, HistogramError> {
    let malformed = |text: String| HistogramError::Malformed(text);
    let cap = V2_HEADER_LEN + max_payload_len();
    match be_u32(bytes, 0) {
        Some(V2_COOKIE) => Ok(Cow::Borrowed(bytes)),
        Some(V2_COMPRESSED_COOKIE) => {
            let declared = be_u32(bytes, 4)
                .ok_or_else(|| malformed("truncated compressed header".into()))?
                as usize;
            let body = bytes.get(8..8 + declared).ok_or_else(|| {
                malformed(format!("declares {declared} compressed bytes, has fewer"))
            })?;
            let mut plain = Vec::new();
            flate2::read::ZlibDecoder::new(body)
                .take(cap as u64 + 1)
                .read_to_end(&mut plain)
                .map_err(|e| malformed(format!("not DEFLATE data: {e}")))?;
            if plain.len() > cap {
                return Err(malformed(format!("inflates to more than {cap} bytes")));
            }
            Ok(Cow::Owned(plain))
        }
        Some(other) => Err(malformed(format!(
            "cookie {other:#010x} is not HdrHistogram V2"
        ))),
        None => Err(malformed("shorter than a cookie".to_owned())),
    }
}

/// Checks the V2 header of `plain` against the project-wide bounds and its length.
fn check_header(plain: &[u8]) -> Result<(), HistogramError> {
    if be_u32(plain, 0) != Some(V2_COOKIE) || plain.len() < V2_HEADER_LEN {
        return Err(HistogramError::Malformed(
            "not an uncompressed V2 histogram inside".to_owned(),
        ));
    }
    let payload_len = be_u32(plain, 4).unwrap_or(u32::MAX) as usize;
    let sigfig = be_u32(plain, 12).unwrap_or(0);
    let low = be_u64(plain, 16).unwrap_or(0);
    let high = be_u64(plain, 24).unwrap_or(0);
    if low != 1 || high != HISTOGRAM_HIGHEST_NS || sigfig != u32::from(HISTOGRAM_SIGFIG) {
        return Err(HistogramError::Bounds { low, high, sigfig });
    }
    let max = max_payload_len();
    if payload_len > max || payload_len > plain.len() - V2_HEADER_LEN {
        return Err(HistogramError::Malformed(format!(
            "declares a {payload_len}-byte payload; it has {} and such a histogram needs at \
             most {max}",
            plain.len() - V2_HEADER_LEN
        )));
    }
    Ok(())
}

/// Decodes V2 (optionally DEFLATE) bytes of a histogram with the project-wide bounds.
pub fn from_bytes(bytes: &[u8]) -> Result<Histogram<u64>, HistogramError> {
    let plain = plain_v2(bytes)?;
    check_header(&plain)?;
    HdrDeserializer::new()
        .deserialize(&mut std::io::Cursor::new(&plain[..]))
        .map_err(|e| HistogramError::Malformed(format!("{e:?}")))
}

/// serde: serialize as base64 text.
pub fn serialize<S: Serializer>(
    histogram: &Histogram<u64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let bytes = to_bytes(histogram).map_err(serde::ser::Error::custom)?;
    serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// serde: deserialize from base64 text.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Histogram<u64>, D::Error> {
    let text = String::deserialize(deserializer)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(serde::de::Error::custom)?;
    from_bytes(&bytes).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(payload_len: u32, low: u64, high: u64, sigfig: u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend(V2_COOKIE.to_be_bytes());
        bytes.extend(payload_len.to_be_bytes());
        bytes.extend(0u32.to_be_bytes());
        bytes.extend(sigfig.to_be_bytes());
        bytes.extend(low.to_be_bytes());
        bytes.extend(high.to_be_bytes());
        bytes.extend(1f64.to_be_bytes());
        bytes
    }

    #[test]
    fn a_histogram_round_trips_and_keeps_its_counts() {
        let mut histogram = new_histogram();
        for value in [1, 1_000, 1_000_000, HISTOGRAM_HIGHEST_NS] {
            histogram.record(value).expect("in bounds");
        }
        let decoded = from_bytes(&to_bytes(&histogram).expect("encodes")).expect("decodes");
        assert_eq!(decoded, histogram);
    }

    /// 40 bytes that declare a 4 GiB payload, or bounds that would size a huge counts array,
    /// are refused before anything is allocated (the process would abort otherwise).
    #[test]
    fn crafted_headers_are_refused_before_allocating() {
        let huge = header(u32::MAX, 1, HISTOGRAM_HIGHEST_NS, 3);
        assert!(
            from_bytes(&huge)
                .unwrap_err()
                .to_string()
                .contains("payload")
        );
        let wide = header(0, 1, u64::MAX / 2, 5);
        assert!(matches!(
            from_bytes(&wide),
            Err(HistogramError::Bounds { .. })
        ));
        let mut compressed = Vec::new();
        compressed.extend(V2_COMPRESSED_COOKIE.to_be_bytes());
        compressed.extend(u32::MAX.to_be_bytes());
        assert!(
            from_bytes(&compressed)
                .unwrap_err()
                .to_string()
                .contains("compressed")
        );
        assert!(from_bytes(b"ab").is_err());
        assert!(
            from_bytes(&[0u8; 40])
                .unwrap_err()
                .to_string()
                .contains("cookie")
        );
    }

    #[test]
    fn a_compression_bomb_is_cut_at_the_cap() {
        use std::io::Write;
        let mut inner = header(0, 1, HISTOGRAM_HIGHEST_NS, 3);
        inner.resize(inner.len() + 64 * 1024 * 1024, 0);
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&inner).expect("compresses");
        let body = encoder.finish().expect("compresses");
        let mut bytes = Vec::new();
        bytes.extend(V2_COMPRESSED_COOKIE.to_be_bytes());
        bytes.extend((body.len() as u32).to_be_bytes());
        bytes.extend(body);
        let error = from_bytes(&bytes).unwrap_err().to_string();
        assert!(error.contains("inflates to more than"), "{error}");
    }
}
