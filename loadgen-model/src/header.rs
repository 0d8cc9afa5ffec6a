//! The binary measurement header at the start of every payload.
//!
//! Payloads of 16 B and more carry the full header: publisher id (u32), sequence number (u32)
//! and send time in ns on the run clock (u64), big-endian. Smaller payloads (the study's 10 B)
//! carry the compact 10-byte header: publisher id (u16), sequence (u24) and the low 40 bits of
//! the send time; a receiver restores the full time from its own clock, which is unambiguous
//! while latency stays under 2^39 ns (about 9 minutes). Payloads under 10 B are refused: there
//! is no honest way to time them. The padding after the header is zeros.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where the header travels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", value(rename_all = "kebab-case"))]
pub enum HeaderPlace {
    /// At the start of the payload (MQTT 3.1.1 and 5).
    #[default]
    Payload,
    /// MQTT 5: in the user property "continuum-header" (the full header as 32 hex digits),
    /// the payload exactly --payload bytes of zeros, down to none; 53 more bytes per PUBLISH.
    UserProperty,
}

impl HeaderPlace {
    /// Whether the header travels in a user property.
    pub fn is_property(self) -> bool {
        self == HeaderPlace::UserProperty
    }
}

/// The user property's name.
pub const HEADER_PROPERTY: &str = "continuum-header";
/// The user property's value: the full header as lowercase hex.
pub const PROPERTY_HEX_LEN: usize = 32;
/// Bytes the user property adds to a PUBLISH: its identifier, the name and the value, each
/// string with its two-byte length.
pub const PROPERTY_OVERHEAD: usize = 1 + 2 + HEADER_PROPERTY.len() + 2 + PROPERTY_HEX_LEN;

/// Writes the full header `bytes` as the property's hex value into `out` (32 bytes).
pub fn property_hex(bytes: &[u8; 16], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
}

/// Reads the property's hex value back into the full header's bytes; `None` unless it is
/// exactly 32 hex digits.
pub fn from_property_hex(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != PROPERTY_HEX_LEN {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bytes)
}

/// Which header a payload carries; fixed by the payload size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeaderEncoding {
    /// 16 bytes: u32 publisher, u32 sequence, u64 ns.
    Full,
    /// 10 bytes: u16 publisher, u24 sequence, low 40 bits of ns.
    Compact,
}

/// The fields a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// Global publisher index.
    pub publisher: u32,
    /// Per-publisher sequence number, from 0.
    pub seq: u32,
    /// Send time in ns on the run clock (open loop: the intended time), possibly truncated to
    /// the encoding's width.
    pub stamp_ns: u64,
}

const COMPACT_STAMP_BITS: u32 = 40;
const COMPACT_STAMP_MASK: u64 = (1 << COMPACT_STAMP_BITS) - 1;

impl HeaderEncoding {
    /// The smallest payload that can carry a header.
    pub const SMALLEST_PAYLOAD: u64 = 10;

    /// The header a payload of `bytes` carries, or `None` if it is too small for any.
    pub fn for_payload(bytes: u64) -> Option<Self> {
        match bytes {
            16.. => Some(HeaderEncoding::Full),
            10..16 => Some(HeaderEncoding::Compact),
            _ => None,
        }
    }

    /// Bytes the header occupies.
    pub fn len(self) -> usize {
        match self {
            HeaderEncoding::Full => 16,
            HeaderEncoding::Compact => 10,
        }
    }

    /// Always false: a header is never empty (for clippy's `len` convention).
    pub fn is_empty(self) -> bool {
        false
    }

    /// How many publishers the header can number.
    pub fn max_publishers(self) -> u64 {
        match self {
            HeaderEncoding::Full => 1 << 32,
            HeaderEncoding::Compact => 1 << 16,
        }
    }

    /// How many messages per publisher the header can number.
    pub fn max_messages_per_publisher(self) -> u64 {
        match self {
            HeaderEncoding::Full => 1 << 32,
            HeaderEncoding::Compact => 1 << 24,
        }
    }

    /// Writes the header into the start of `out`, which must be at least [`Self::len`] long.
    pub fn encode(self, header: MessageHeader, out: &mut [u8]) {
        match self {
            HeaderEncoding::Full => {
                out[0..4].copy_from_slice(&header.publisher.to_be_bytes());
                out[4..8].copy_from_slice(&header.seq.to_be_bytes());
                out[8..16].copy_from_slice(&header.stamp_ns.to_be_bytes());
            }
            HeaderEncoding::Compact => {
                out[0..2].copy_from_slice(&(header.publisher as u16).to_be_bytes());
                out[2..5].copy_from_slice(&header.seq.to_be_bytes()[1..4]);
                out[5..10]
                    .copy_from_slice(&(header.stamp_ns & COMPACT_STAMP_MASK).to_be_bytes()[3..8]);
            }
        }
    }

    /// Reads a header; `None` when the payload is too short to hold one.
    pub fn decode(self, payload: &[u8]) -> Option<MessageHeader> {
        match self {
            HeaderEncoding::Full => {
                let bytes: &[u8; 16] = payload.get(..16)?.try_into().ok()?;
                Some(MessageHeader {
                    publisher: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
                    seq: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
                    stamp_ns: u64::from_be_bytes([
                        bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14],
                        bytes[15],
                    ]),
                })
            }
            HeaderEncoding::Compact => {
                let b: &[u8; 10] = payload.get(..10)?.try_into().ok()?;
                Some(MessageHeader {
                    publisher: u32::from(u16::from_be_bytes([b[0], b[1]])),
                    seq: u32::from_be_bytes([0, b[2], b[3], b[4]]),
                    stamp_ns: u64::from_be_bytes([0, 0, 0, b[5], b[6], b[7], b[8], b[9]]),
                })
            }
        }
    }

    /// Latency from a decoded stamp to `received_ns` (same run clock). `None` when the message
    /// appears to arrive before it was sent (a clock-offset error between hosts).
    pub fn latency_ns(self, stamp_ns: u64, received_ns: u64) -> Option<u64> {
        match self {
            HeaderEncoding::Full => received_ns.checked_sub(stamp_ns),
            HeaderEncoding::Compact => {
                let elapsed = received_ns.wrapping_sub(stamp_ns) & COMPACT_STAMP_MASK;
                // The upper half of the ring means the stamp lies in the future.
                (elapsed < 1 << (COMPACT_STAMP_BITS - 1)).then_some(elapsed)
            }
        }
    }
}

impl fmt::Display for HeaderEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderEncoding::Full => f.write_str("full 16-byte"),
            HeaderEncoding::Compact => f.write_str("compact 10-byte"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_header_round_trips() {
        let header = MessageHeader {
            publisher: 70_000,
            seq: 5_000_000,
            stamp_ns: 123_456_789_012_345,
        };
        let mut payload = [0u8; 32];
        HeaderEncoding::Full.encode(header, &mut payload);
        assert_eq!(HeaderEncoding::Full.decode(&payload), Some(header));
    }

    #[test]
    fn compact_header_round_trips_and_restores_time_across_the_wrap() {
        let sent = (1u64 << 40) - 1_000; // just before the 40-bit stamp wraps
        let header = MessageHeader {
            publisher: 65_535,
            seq: (1 << 24) - 1,
            stamp_ns: sent,
        };
        let mut payload = [0u8; 10];
        HeaderEncoding::Compact.encode(header, &mut payload);
        let decoded = HeaderEncoding::Compact.decode(&payload).expect("fits");
        assert_eq!((decoded.publisher, decoded.seq), (65_535, (1 << 24) - 1));
        // Received 5 µs later, after the wrap.
        assert_eq!(
            HeaderEncoding::Compact.latency_ns(decoded.stamp_ns, sent + 5_000),
            Some(5_000)
        );
    }

    #[test]
    fn negative_latency_is_reported_not_wrapped() {
        assert_eq!(HeaderEncoding::Full.latency_ns(2_000, 1_000), None);
        assert_eq!(HeaderEncoding::Compact.latency_ns(2_000, 1_000), None);
    }

    #[test]
    fn payload_size_chooses_the_encoding() {
        assert_eq!(HeaderEncoding::for_payload(9), None);
        assert_eq!(
            HeaderEncoding::for_payload(10),
            Some(HeaderEncoding::Compact)
        );
        assert_eq!(
            HeaderEncoding::for_payload(15),
            Some(HeaderEncoding::Compact)
        );
        assert_eq!(HeaderEncoding::for_payload(16), Some(HeaderEncoding::Full));
        assert_eq!(HeaderEncoding::Full.decode(&[0u8; 15]), None);
    }

    #[test]
    fn the_property_value_is_the_full_header_in_hex_and_back() {
        let header = MessageHeader {
            publisher: 0xdead_beef,
            seq: 7,
            stamp_ns: 0x0123_4567_89ab_cdef,
        };
        let mut bytes = [0u8; 16];
        HeaderEncoding::Full.encode(header, &mut bytes);
        let mut text = [0u8; PROPERTY_HEX_LEN];
        property_hex(&bytes, &mut text);
        let text = std::str::from_utf8(&text).expect("hex is text");
        assert_eq!(text, "deadbeef000000070123456789abcdef");
        let back = from_property_hex(text).expect("reads back");
        assert_eq!(HeaderEncoding::Full.decode(&back), Some(header));
        assert_eq!(from_property_hex("xy"), None);
        assert_eq!(from_property_hex(&"g".repeat(32)), None);
        assert_eq!(PROPERTY_OVERHEAD, 53);
    }
}
