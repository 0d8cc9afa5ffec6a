//! netem's `TCA_OPTIONS`: the bytes the kernel takes and reports, encoded as iproute2 does.
//!
//! Unlike most qdiscs, netem's `TCA_OPTIONS` is not a list of attributes: it starts with a
//! fixed `struct tc_netem_qopt` (six native-endian `u32`: latency, limit, loss, gap, duplicate,
//! jitter), followed by `TCA_NETEM_*` attributes (`include/uapi/linux/pkt_sched.h`).
//!
//! The encoding matches `tc` of iproute2 6.1 byte for byte (see `testdata/`):
//! - latency and jitter go into `tc_netem_qopt` in psched ticks. `tc` converts with the
//!   factors in `/proc/net/psched`; every kernel since 2.6.31 prints the same constants there
//!   (1 tick = 64 ns), so they are fixed here rather than read. `TCA_NETEM_LATENCY64` and
//!   `TCA_NETEM_JITTER64` (nanoseconds; what iproute2 >= 6.9 always sends) are only added for
//!   values ticks cannot hold, which [`NetemParams`] never produces.
//! - loss is a probability scaled so that `u32::MAX` is 100 %, rounded to nearest as `tc` does.
//! - a rate goes into `TCA_NETEM_RATE` (bytes/s); from 2^32 bytes/s on, `TCA_NETEM_RATE64`
//!   carries it and `TCA_NETEM_RATE` holds `u32::MAX`, as both `tc` and the kernel do.
//! - the Gilbert-Elliott loss model goes into a nested `TCA_NETEM_LOSS` holding
//!   `NETEM_LOSS_GE` (`struct tc_netem_gemodel`: p, r, h, k1 on the same 32-bit scale), before
//!   the rate, as `tc ... loss gemodel` sends it. The kernel keeps `h`, the chance of *no* loss
//!   in the bad state (`tc` takes `1-h`), and `k1`, the chance of loss in the good state.

use std::time::Duration;

use thiserror::Error;

use domain::netem::{DEFAULT_LIMIT, GilbertElliott, NetemParams, ParamsError};

/// Length of `struct tc_netem_qopt`.
const QOPT_LEN: usize = 24;
/// Length of an attribute header (`struct nlattr`).
const NLA_HDR: usize = 4;
/// Nanoseconds per psched tick (`PSCHED_SHIFT` = 6).
const NS_PER_TICK: u64 = 64;

// TCA_NETEM_* attribute types.
const CORR: u16 = 1;
const DELAY_DIST: u16 = 2;
const REORDER: u16 = 3;
const CORRUPT: u16 = 4;
const LOSS: u16 = 5;
const RATE: u16 = 6;
const ECN: u16 = 7;
const RATE64: u16 = 8;
const LATENCY64: u16 = 10;
const JITTER64: u16 = 11;
const SLOT: u16 = 12;
/// `struct tc_netem_rate`: rate, packet_overhead, cell_size, cell_overhead.
const RATE_LEN: usize = 16;
/// Marks an attribute whose payload is attributes (`NLA_F_NESTED`).
const NESTED: u16 = 0x8000;
// NETEM_LOSS_* attribute types inside TCA_NETEM_LOSS.
const LOSS_GI: u16 = 1;
const LOSS_GE: u16 = 2;
/// `struct tc_netem_gemodel`: p, r, h, k1.
const GE_LEN: usize = 16;

/// The Gilbert-Elliott model as the kernel holds it: four chances on the 32-bit scale where
/// `u32::MAX` is certainty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeModel {
    /// Good to bad, per packet.
    pub p: u32,
    /// Bad to good, per packet.
    pub r: u32,
    /// No loss in the bad state.
    pub h: u32,
    /// Loss in the good state.
    pub k1: u32,
}

/// netem settings in the units the kernel holds them: what is really applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetemOptions {
    /// Delay in nanoseconds; a whole number of 64 ns ticks when set from [`NetemParams`].
    pub latency_ns: u64,
    /// Jitter in nanoseconds, like `latency_ns`.
    pub jitter_ns: u64,
    /// Queue limit in packets.
    pub limit: u32,
    /// Loss probability, `u32::MAX` meaning 100 %.
    pub loss: u32,
    /// Rate limit in bytes per second; 0 means none.
    pub rate: u64,
    /// Losses in bursts instead of at random (`loss` is then 0).
    pub gilbert_elliott: Option<GeModel>,
}

/// Why bytes read back from the kernel are not netem options this crate understands.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Shorter than `struct tc_netem_qopt`.
    #[error("netem options are {len} bytes, shorter than tc_netem_qopt ({QOPT_LEN})")]
    TooShort {
        /// Length received.
        len: usize,
    },
    /// An attribute header runs past the end or claims an impossible length.
    #[error("malformed netem attribute at byte {offset}")]
    Malformed {
        /// Offset of the attribute within the options.
        offset: usize,
    },
    /// A known attribute whose payload is shorter than its struct.
    #[error("netem attribute {kind} has {len} bytes, too short")]
    AttributeTooShort {
        /// `TCA_NETEM_*` type.
        kind: u16,
        /// Payload length received.
        len: usize,
    },
    /// The qdisc uses a netem feature Continuum does not set (duplication, reordering,
    /// corruption, correlation, ECN, a loss model, slots, rate overheads): reported rather
    /// than ignored, so a read-back never claims less impairment than there is.
    #[error("the qdisc uses netem {feature}, which Continuum does not model")]
    Unsupported {
        /// The feature found.
        feature: &'static str,
    },
}

impl NetemOptions {
    /// Validates `params` and converts them to what the kernel will hold: delays truncated to
    /// whole 64 ns ticks, loss rounded to the kernel's 32-bit scale, the default limit filled in.
    pub fn from_params(params: &NetemParams) -> Result<Self, ParamsError> {
        params.validate()?;
        Ok(Self {
            latency_ns: whole_ticks(params.delay),
            jitter_ns: whole_ticks(params.jitter),
            limit: params.limit_packets.unwrap_or(DEFAULT_LIMIT),
            loss: chance(params.loss_percent),
            rate: params.rate_bytes_per_sec.unwrap_or(0),
            gilbert_elliott: params.gilbert_elliott.map(|model| GeModel {
                p: chance(model.p_percent),
                r: chance(model.r_percent),
                h: u32::MAX - chance(model.bad_loss_percent),
                k1: chance(model.good_loss_percent),
            }),
        })
    }

    /// The same settings as [`NetemParams`], in user units (exactly what the kernel applies).
    pub fn to_params(&self) -> NetemParams {
        NetemParams {
            delay: Duration::from_nanos(self.latency_ns),
            jitter: Duration::from_nanos(self.jitter_ns),
            loss_percent: percent(self.loss),
            rate_bytes_per_sec: (self.rate > 0).then_some(self.rate),
            limit_packets: Some(self.limit),
            gilbert_elliott: self.gilbert_elliott.map(|model| GilbertElliott {
                p_percent: percent(model.p),
                r_percent: percent(model.r),
                bad_loss_percent: percent(u32::MAX - model.h),
                good_loss_percent: percent(model.k1),
            }),
        }
    }

    /// The `TCA_OPTIONS` payload, byte-identical to what `tc qdisc add ... netem` sends.
    pub fn encode(&self) -> Vec<u8> {
        let (latency_ticks, latency_exact) = ticks(self.latency_ns);
        let (jitter_ticks, jitter_exact) = ticks(self.jitter_ns);
        let mut out = Vec::with_capacity(QOPT_LEN + 48);
        // gap and duplicate (4th and 5th fields) stay zero.
        for field in [latency_ticks, self.limit, self.loss, 0, 0, jitter_ticks] {
            out.extend_from_slice(&field.to_ne_bytes());
        }
        if !latency_exact {
            push_attr(&mut out, LATENCY64, &self.latency_ns.to_ne_bytes());
        }
        if !jitter_exact {
            push_attr(&mut out, JITTER64, &self.jitter_ns.to_ne_bytes());
        }
        if let Some(model) = &self.gilbert_elliott {
            let mut ge = Vec::with_capacity(GE_LEN);
            for chance in [model.p, model.r, model.h, model.k1] {
                ge.extend_from_slice(&chance.to_ne_bytes());
            }
            let mut nested = Vec::with_capacity(NLA_HDR + GE_LEN);
            push_attr(&mut nested, LOSS_GE, &ge);
            push_attr(&mut out, LOSS | NESTED, &nested);
        }
        if self.rate > 0 {
            let rate32 = match u32::try_from(self.rate) {
                Ok(rate) => rate,
                Err(_) => {
                    push_attr(&mut out, RATE64, &self.rate.to_ne_bytes());
                    u32::MAX
                }
            };
            let mut rate = [0u8; RATE_LEN];
            rate[..4].copy_from_slice(&rate32.to_ne_bytes());
            push_attr(&mut out, RATE, &rate);
        }
        out
    }

    /// Reads a `TCA_OPTIONS` payload, as `tc` sends it or as the kernel dumps it (the kernel
    /// adds 64-bit latency/jitter, zeroed correlation/reorder/corruption and a PRNG seed).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let qopt = bytes
            .get(..QOPT_LEN)
            .ok_or(DecodeError::TooShort { len: bytes.len() })?;
        let field = |i: usize| {
            u32::from_ne_bytes([
                qopt[4 * i],
                qopt[4 * i + 1],
                qopt[4 * i + 2],
                qopt[4 * i + 3],
            ])
        };
        let [latency, limit, loss, gap, duplicate, jitter] = [0, 1, 2, 3, 4, 5].map(field);
        if duplicate != 0 {
            return Err(DecodeError::Unsupported {
                feature: "duplication",
            });
        }
        if gap != 0 {
            return Err(DecodeError::Unsupported {
                feature: "reordering (gap)",
            });
        }
        let mut options = Self {
            latency_ns: u64::from(latency) * NS_PER_TICK,
            jitter_ns: u64::from(jitter) * NS_PER_TICK,
            limit,
            loss,
            rate: 0,
            gilbert_elliott: None,
        };
        let mut rate64 = None;
        let attributes = Attributes {
            rest: &bytes[QOPT_LEN..],
            offset: QOPT_LEN,
        };
        for attr in attributes {
            let (kind, payload) = attr?;
            match kind {
                // Kernel-held values are s64; a negative one behaves as zero.
                LATENCY64 => {
                    options.latency_ns =
                        u64::try_from(i64::from_ne_bytes(array(kind, payload)?)).unwrap_or(0)
                }
                JITTER64 => {
                    options.jitter_ns =
                        u64::try_from(i64::from_ne_bytes(array(kind, payload)?)).unwrap_or(0)
                }
                RATE64 => rate64 = Some(u64::from_ne_bytes(array(kind, payload)?)),
                RATE => {
                    let rate: [u8; RATE_LEN] = array(kind, payload)?;
                    if rate[4..].iter().any(|b| *b != 0) {
                        return Err(DecodeError::Unsupported {
                            feature: "rate overheads",
                        });
                    }
                    options.rate =
                        u64::from(u32::from_ne_bytes([rate[0], rate[1], rate[2], rate[3]]));
                }
                LOSS if payload.iter().any(|b| *b != 0) => {
                    options.gilbert_elliott = Some(loss_model(payload, offset_of(bytes, payload))?);
                }
                CORR | REORDER | CORRUPT | ECN if payload.iter().any(|b| *b != 0) => {
                    return Err(DecodeError::Unsupported {
                        feature: feature_name(kind),
                    });
                }
                DELAY_DIST | SLOT => {
                    return Err(DecodeError::Unsupported {
                        feature: feature_name(kind),
                    });
                }
                // Zeroed structs the kernel always dumps, padding, the PRNG seed, and
                // attributes of newer kernels that change nothing unless set.
                _ => {}
            }
        }
        if let Some(rate) = rate64 {
            options.rate = options.rate.max(rate);
        }
        Ok(options)
    }
}

/// A percentage as the kernel's 32-bit chance, rounded as `tc` does (ties to even, like C's
/// rint()). In range after validation; `as` saturates anyway.
fn chance(percent: f64) -> u32 {
    ((percent / 100.0) * f64::from(u32::MAX)).round_ties_even() as u32
}

/// A 32-bit chance as a percentage.
fn percent(chance: u32) -> f64 {
    f64::from(chance) / f64::from(u32::MAX) * 100.0
}

/// Where `part` (a slice of `whole`) starts in it, for error offsets.
fn offset_of(whole: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize)
}

/// The loss model nested in `TCA_NETEM_LOSS`: Gilbert-Elliott is read, the 4-state model
/// (`NETEM_LOSS_GI`, which Continuum never sets) reported.
fn loss_model(payload: &[u8], offset: usize) -> Result<GeModel, DecodeError> {
    let mut model = None;
    for attr in (Attributes {
        rest: payload,
        offset,
    }) {
        let (kind, inner) = attr?;
        match kind {
            LOSS_GE => {
                let ge: [u8; GE_LEN] = array(kind, inner)?;
                let field = |i: usize| {
                    u32::from_ne_bytes([ge[4 * i], ge[4 * i + 1], ge[4 * i + 2], ge[4 * i + 3]])
                };
                model = Some(GeModel {
                    p: field(0),
                    r: field(1),
                    h: field(2),
                    k1: field(3),
                });
            }
            LOSS_GI => {
                return Err(DecodeError::Unsupported {
                    feature: "the 4-state loss model",
                });
            }
            _ => {}
        }
    }
    model.ok_or(DecodeError::Unsupported {
        feature: "a loss model",
    })
}

/// Truncates to whole ticks: for every whole-microsecond value (all that `tc` accepts) this is
/// `tc`'s `usec * 15.625` truncated, and it is idempotent on values already in ticks.
fn whole_ticks(d: Duration) -> u64 {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    ns / NS_PER_TICK * NS_PER_TICK
}

/// Ticks for `tc_netem_qopt` (saturating, as the kernel's dump does) and whether they hold
/// the value exactly.
fn ticks(ns: u64) -> (u32, bool) {
    match u32::try_from(ns / NS_PER_TICK) {
        Ok(t) => (t, ns.is_multiple_of(NS_PER_TICK)),
        Err(_) => (u32::MAX, false),
    }
}

fn push_attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = u16::try_from(NLA_HDR + payload.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len().next_multiple_of(4), 0);
}

fn array<const N: usize>(kind: u16, payload: &[u8]) -> Result<[u8; N], DecodeError> {
    payload
        .get(..N)
        .and_then(|p| p.try_into().ok())
        .ok_or(DecodeError::AttributeTooShort {
            kind,
            len: payload.len(),
        })
}

fn feature_name(kind: u16) -> &'static str {
    match kind {
        CORR => "correlation",
        DELAY_DIST => "a delay distribution",
        REORDER => "reordering",
        CORRUPT => "corruption",
        ECN => "ECN marking",
        LOSS => "a loss model",
        _ => "slotting",
    }
}

/// Iterates over `(type, payload)` of the attributes after `tc_netem_qopt`.
struct Attributes<'a> {
    rest: &'a [u8],
    offset: usize,
}

impl<'a> Iterator for Attributes<'a> {
    type Item = Result<(u16, &'a [u8]), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let header = match self.rest.get(..NLA_HDR) {
            Some(h) => h,
            None => return Some(Err(self.fail())),
        };
        let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        // The top two bits of the type are the nested/byte-order flags.
        let kind = u16::from_ne_bytes([header[2], header[3]]) & 0x3fff;
        let payload = match self.rest.get(NLA_HDR..len) {
            Some(p) if len >= NLA_HDR => p,
            _ => return Some(Err(self.fail())),
        };
        let advance = len.next_multiple_of(4).min(self.rest.len());
        self.rest = &self.rest[advance..];
        self.offset += advance;
        Some(Ok((kind, payload)))
    }
}

impl Attributes<'_> {
    fn fail(&mut self) -> DecodeError {
        let err = DecodeError::Malformed {
            offset: self.offset,
        };
        self.rest = &[];
        err
    }
}

#[cfg(test)]
mod tests {
    use super::super::vectors::{self, TcRequest};
    use super::*;

    #[test]
    fn options_are_byte_identical_to_tc() {
        let requests = vectors::requests();
        assert!(requests.len() >= 20, "vectors missing: {}", requests.len());
        for TcRequest {
            name,
            verb,
            args,
            options,
            ..
        } in &requests
        {
            let params = vectors::params(name);
            let ours = NetemOptions::from_params(&params).expect("valid").encode();
            assert_eq!(&ours, options, "{name} ({verb} {args}): ours {ours:02x?}");
        }
    }

    #[test]
    fn decoding_tc_bytes_gives_back_the_params_and_bytes() {
        for TcRequest { name, options, .. } in &vectors::requests() {
            let decoded = NetemOptions::decode(options).expect(name);
            let asked = NetemOptions::from_params(&vectors::params(name)).expect("valid");
            assert_eq!(decoded, asked, "{name}");
            // Through user units and back: the same kernel form and the same bytes.
            let again = NetemOptions::from_params(&decoded.to_params()).expect("valid");
            assert_eq!(again, decoded, "{name}");
            assert_eq!(&again.encode(), options, "{name}");
        }
    }

    #[test]
    fn study_values_in_kernel_units() {
        let edge = NetemOptions::from_params(&vectors::params("edge_side")).expect("valid");
        // 1250 us * 15.625 ticks/us = 19531.25 -> 19531 ticks of 64 ns.
        assert_eq!(edge.latency_ns, 19531 * 64);
        assert_eq!(edge.jitter_ns, 3906 * 64);
        assert_eq!(edge.loss, 858_993);
        let p = edge.to_params();
        assert_eq!(p.delay, Duration::from_nanos(1_249_984));
        // The kernel's scale has steps of 100 / 2^32 %.
        assert!(
            (p.loss_percent - 0.02).abs() < 100.0 / 2f64.powi(32),
            "{}",
            p.loss_percent
        );
    }

    #[test]
    fn kernel_dump_with_extra_attributes_decodes() {
        // As netem_dump() writes it: qopt, LATENCY64, JITTER64, zeroed CORR/REORDER/CORRUPT,
        // RATE, then PAD and PRNG_SEED.
        let asked = NetemOptions::from_params(&vectors::params("cloud_side")).expect("valid");
        let mut dump = asked.encode();
        push_attr(
            &mut dump,
            LATENCY64,
            &(asked.latency_ns as i64).to_ne_bytes(),
        );
        push_attr(&mut dump, JITTER64, &(asked.jitter_ns as i64).to_ne_bytes());
        push_attr(&mut dump, CORR, &[0; 12]);
        push_attr(&mut dump, REORDER, &[0; 8]);
        push_attr(&mut dump, CORRUPT, &[0; 8]);
        push_attr(&mut dump, RATE, &[0; RATE_LEN]);
        push_attr(&mut dump, 9, &[]);
        push_attr(&mut dump, 14, &0x1234_5678_9abc_u64.to_ne_bytes());
        assert_eq!(NetemOptions::decode(&dump), Ok(asked));
    }

    #[test]
    fn gilbert_elliott_holds_h_as_the_chance_of_no_loss_in_the_bad_state() {
        let options = NetemOptions::from_params(&vectors::params("edge_gemodel")).expect("valid");
        let model = options.gilbert_elliott.expect("a model");
        assert_eq!(options.loss, 0, "no random loss beside the model");
        // tc's 1-h of 70 % is kept as h = 30 %; 1-k of 0.1 % as k1 itself.
        assert_eq!(model.h, u32::MAX - chance(70.0));
        assert_eq!(model.h, 0x4ccc_cccd);
        assert_eq!(model.k1, 0x0041_8937);
        let back = options.to_params().gilbert_elliott.expect("a model");
        assert!((back.bad_loss_percent - 70.0).abs() < 1e-7, "{back:?}");
        // A kernel dump: the nested attribute after the zeroed structs it always adds.
        let mut dump = NetemOptions {
            gilbert_elliott: None,
            ..options
        }
        .encode();
        push_attr(&mut dump, CORR, &[0; 12]);
        let mut nested = Vec::new();
        let ge: Vec<u8> = [model.p, model.r, model.h, model.k1]
            .iter()
            .flat_map(|c| c.to_ne_bytes())
            .collect();
        push_attr(&mut nested, LOSS_GE, &ge);
        push_attr(&mut dump, LOSS | NESTED, &nested);
        assert_eq!(NetemOptions::decode(&dump), Ok(options));
    }

    #[test]
    fn values_ticks_cannot_hold_travel_in_64_bit_attributes() {
        let odd = NetemOptions {
            latency_ns: 1_000_001,
            jitter_ns: 3,
            limit: 1000,
            loss: 0,
            rate: 0,
            gilbert_elliott: None,
        };
        let bytes = odd.encode();
        assert_eq!(bytes.len(), QOPT_LEN + 2 * 12);
        assert_eq!(NetemOptions::decode(&bytes), Ok(odd));
        let big_rate = NetemOptions {
            rate: 5_000_000_000,
            ..odd
        };
        assert_eq!(NetemOptions::decode(&big_rate.encode()), Ok(big_rate));
    }

    #[test]
    fn features_continuum_does_not_set_are_reported() {
        let base = NetemOptions::from_params(&vectors::params("delay"))
            .expect("valid")
            .encode();
        let mut dup = base.clone();
        dup[16] = 1;
        assert_eq!(
            NetemOptions::decode(&dup),
            Err(DecodeError::Unsupported {
                feature: "duplication"
            })
        );
        let mut corr = base.clone();
        push_attr(&mut corr, CORR, &[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            NetemOptions::decode(&corr),
            Err(DecodeError::Unsupported {
                feature: "correlation"
            })
        );
        // netem's 4-state model: a loss model, but not the one Continuum sets.
        let mut four_states = base.clone();
        let mut nested = Vec::new();
        push_attr(&mut nested, LOSS_GI, &[1; 20]);
        push_attr(&mut four_states, LOSS | NESTED, &nested);
        assert_eq!(
            NetemOptions::decode(&four_states),
            Err(DecodeError::Unsupported {
                feature: "the 4-state loss model"
            })
        );
        let mut slot = base.clone();
        push_attr(&mut slot, SLOT, &[0; 8]);
        assert!(matches!(
            NetemOptions::decode(&slot),
            Err(DecodeError::Unsupported { .. })
        ));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert_eq!(
            NetemOptions::decode(&[0; 10]),
            Err(DecodeError::TooShort { len: 10 })
        );
        let base = NetemOptions::from_params(&vectors::params("delay"))
            .expect("valid")
            .encode();
        let mut cut = base.clone();
        cut.extend_from_slice(&[12, 0, 10]);
        assert_eq!(
            NetemOptions::decode(&cut),
            Err(DecodeError::Malformed { offset: QOPT_LEN })
        );
        let mut long = base.clone();
        long.extend_from_slice(&[200, 0, 10, 0, 1, 2, 3, 4]);
        assert_eq!(
            NetemOptions::decode(&long),
            Err(DecodeError::Malformed { offset: QOPT_LEN })
        );
        let mut short = base;
        push_attr(&mut short, LATENCY64, &[1, 2, 3, 4]);
        assert_eq!(
            NetemOptions::decode(&short),
            Err(DecodeError::AttributeTooShort {
                kind: LATENCY64,
                len: 4
            })
        );
    }
}
