//! The wire as the referee: a packet socket on the loopback interface records every MQTT
//! PUBLISH that enters and leaves a broker, with the kernel's timestamp, so that a test can
//! hold loadgen's latency figures against what the broker did on the wire.
//!
//! The capture reads the IPv4 packets `lo` delivers (a socket bound to one protocol sees each
//! loopback packet once, as it is received, which loopback does within the sender's own
//! transmit call), keeps the TCP segments to and from one port, reassembles each direction of each
//! connection in sequence order and decodes the MQTT 3.1.1 packets in it. A PUBLISH is keyed
//! by the measurement header loadgen puts at the start of its payload (publisher, seq). A
//! segment is stamped when the kernel hands it to `lo`: the moment it is on the wire, which on
//! loopback is also when the other side can read it.
//!
//! Needs CAP_NET_RAW (root). Nothing is sent: the socket only reads.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use loadgen::header::HeaderEncoding;

/// A PUBLISH seen on the wire: which message, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WirePublish {
    /// Loadgen's publisher index, from the payload's header.
    pub publisher: u32,
    /// Its sequence number.
    pub seq: u32,
    /// The header's send stamp as it travelled (truncated to 40 bits in the compact header).
    pub stamp_ns: u64,
    /// When the segment that completed it was handed to `lo`, Unix time in ns.
    pub at_unix_ns: u64,
}

/// What a capture saw of one broker port.
#[derive(Debug, Default)]
pub struct WireRecord {
    /// PUBLISH packets sent to the broker (clients publishing).
    pub into_broker: Vec<WirePublish>,
    /// PUBLISH packets sent by the broker (deliveries to subscribers).
    pub out_of_broker: Vec<WirePublish>,
    /// Segments that did not follow the previous one of their stream (a gap in the capture:
    /// the socket's buffer overflowed). The stream is decoded again from the next segment.
    pub gaps: u64,
}

impl WireRecord {
    /// The first copy of each message the broker sent out, by (publisher, seq).
    pub fn first_out_by_message(&self) -> Vec<WirePublish> {
        let mut first: BTreeMap<(u32, u32), WirePublish> = BTreeMap::new();
        for p in &self.out_of_broker {
            first
                .entry((p.publisher, p.seq))
                .and_modify(|seen| {
                    if p.at_unix_ns < seen.at_unix_ns {
                        *seen = *p;
                    }
                })
                .or_insert(*p);
        }
        first.into_values().collect()
    }

    /// Broker transit, ns, of each message `keep` selects: from its PUBLISH in to the first
    /// PUBLISH out of it.
    pub fn transits_ns_where(&self, keep: impl Fn(&WirePublish) -> bool) -> Vec<u64> {
        let out: BTreeMap<(u32, u32), u64> = self
            .first_out_by_message()
            .into_iter()
            .map(|p| ((p.publisher, p.seq), p.at_unix_ns))
            .collect();
        self.into_broker
            .iter()
            .filter(|p| keep(p))
            .filter_map(|p| out.get(&(p.publisher, p.seq))?.checked_sub(p.at_unix_ns))
            .collect()
    }
}

/// The `q` quantile of sorted values (nearest rank), ns; 0 when there are none.
pub fn quantile_ns(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// [`quantile_ns`] in µs.
pub fn quantile_us(sorted: &[u64], q: f64) -> f64 {
    quantile_ns(sorted, q) as f64 / 1e3
}

/// A running capture of the traffic to and from one TCP port on `lo`.
#[derive(Debug)]
pub struct WireCapture {
    stop: Arc<AtomicBool>,
    reader: JoinHandle<io::Result<WireRecord>>,
}

impl WireCapture {
    /// Starts capturing PUBLISH packets to and from `port`, whose payloads carry `header`.
    pub fn start(port: u16, header: HeaderEncoding) -> io::Result<Self> {
        let socket = PacketSocket::open_loopback()?;
        let stop = Arc::new(AtomicBool::new(false));
        let reader = std::thread::spawn({
            let stop = stop.clone();
            move || read_until_stopped(&socket, port, header, &stop)
        });
        Ok(WireCapture { stop, reader })
    }

    /// Stops and returns what was seen.
    pub fn finish(self) -> io::Result<WireRecord> {
        self.stop.store(true, Ordering::Relaxed);
        self.reader
            .join()
            .map_err(|_| io::Error::other("the capture thread panicked"))?
    }
}

/// One direction of one TCP connection, reassembled.
#[derive(Default)]
struct Stream {
    next_seq: Option<u32>,
    bytes: Vec<u8>,
}

fn read_until_stopped(
    socket: &PacketSocket,
    port: u16,
    header: HeaderEncoding,
    stop: &AtomicBool,
) -> io::Result<WireRecord> {
    let mut record = WireRecord::default();
    let mut streams: BTreeMap<(u16, u16), Stream> = BTreeMap::new();
    let mut buffer = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let Some((len, at_unix_ns)) = socket.receive(&mut buffer)? else {
            continue;
        };
        let Some(segment) = TcpSegment::parse(&buffer[..len]) else {
            continue;
        };
        let into_broker = segment.dst_port == port;
        if !(into_broker || segment.src_port == port) || segment.payload.is_empty() {
            continue;
        }
        let stream = streams
            .entry((segment.src_port, segment.dst_port))
            .or_default();
        let payload = match stream.next_seq {
            None => segment.payload,
            Some(next) => {
                let ahead = segment.seq.wrapping_sub(next) as i32;
                if ahead > 0 {
                    record.gaps += 1;
                    stream.bytes.clear();
                    segment.payload
                } else {
                    // A retransmission overlapping what was seen: keep only what is new.
                    let seen = (-ahead) as usize;
                    if seen >= segment.payload.len() {
                        continue;
                    }
                    &segment.payload[seen..]
                }
            }
        };
        stream.next_seq = Some(segment.seq.wrapping_add(segment.payload.len() as u32));
        stream.bytes.extend_from_slice(payload);
        let side = if into_broker {
            &mut record.into_broker
        } else {
            &mut record.out_of_broker
        };
        decode_publishes(&mut stream.bytes, header, at_unix_ns, side);
    }
    Ok(record)
}

/// Takes every complete MQTT packet off the front of `bytes`, keeping the PUBLISHes.
fn decode_publishes(
    bytes: &mut Vec<u8>,
    header: HeaderEncoding,
    at_unix_ns: u64,
    into: &mut Vec<WirePublish>,
) {
    let mut start = 0;
    while let Some((first, body)) = mqtt_packet(&bytes[start..]) {
        let body_start = start + body.start;
        let body_end = start + body.end;
        if first >> 4 == 3 {
            let body = &bytes[body_start..body_end];
            let qos = (first >> 1) & 3;
            let topic_len = body.get(..2).map_or(usize::MAX, |b| {
                usize::from(u16::from_be_bytes([b[0], b[1]]))
            });
            let payload_at =
                2usize
                    .saturating_add(topic_len)
                    .saturating_add(if qos > 0 { 2 } else { 0 });
            if let Some(decoded) = body.get(payload_at..).and_then(|p| header.decode(p)) {
                into.push(WirePublish {
                    publisher: decoded.publisher,
                    seq: decoded.seq,
                    stamp_ns: decoded.stamp_ns,
                    at_unix_ns,
                });
            }
        }
        start = body_end;
    }
    bytes.drain(..start);
}

/// The first byte and the body's range of the first complete packet in `bytes`.
fn mqtt_packet(bytes: &[u8]) -> Option<(u8, std::ops::Range<usize>)> {
    let first = *bytes.first()?;
    let mut length = 0usize;
    for i in 0..4 {
        let byte = *bytes.get(1 + i)?;
        length |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let start = 2 + i;
            let end = start + length;
            return (bytes.len() >= end).then_some((first, start..end));
        }
    }
    None
}

/// The parts of an IPv4 TCP segment a capture needs.
struct TcpSegment<'a> {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    payload: &'a [u8],
}

impl<'a> TcpSegment<'a> {
    /// From an IPv4 packet (the packet socket's datagram: no link header).
    fn parse(packet: &'a [u8]) -> Option<Self> {
        let version_ihl = *packet.first()?;
        if version_ihl >> 4 != 4 || *packet.get(9)? != 6 {
            return None;
        }
        let ip_header = usize::from(version_ihl & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]));
        let tcp = packet.get(ip_header..total.min(packet.len()))?;
        let data_offset = usize::from(*tcp.get(12)? >> 4) * 4;
        Some(TcpSegment {
            src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
            dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
            seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
            payload: tcp.get(data_offset..)?,
        })
    }
}

/// An AF_PACKET datagram socket bound to `lo`, kernel timestamps on, reads time out so the
/// reader can notice it should stop.
#[derive(Debug)]
struct PacketSocket {
    fd: std::os::fd::OwnedFd,
}

const ETH_P_IP: u16 = 0x0800;

impl PacketSocket {
    fn open_loopback() -> io::Result<Self> {
        use std::os::fd::FromRawFd;
        let protocol = i32::from(ETH_P_IP.to_be());
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, protocol) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let socket = PacketSocket {
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) },
        };
        let name = c"lo";
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a zeroed sockaddr_ll is valid; the fields set are the ones bind reads.
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = ETH_P_IP.to_be();
        address.sll_ifindex = index as i32;
        socket.check(unsafe {
            libc::bind(
                socket.raw(),
                (&raw const address).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        })?;
        socket.set(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &1i32)?;
        socket.set(libc::SOL_SOCKET, libc::SO_RCVBUF, &(16i32 << 20))?;
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        socket.set(libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout)?;
        Ok(socket)
    }

    fn raw(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    fn check(&self, result: i32) -> io::Result<()> {
        if result < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn set<T>(&self, level: i32, name: i32, value: &T) -> io::Result<()> {
        // SAFETY: `value` points at a live T of the size passed.
        self.check(unsafe {
            libc::setsockopt(
                self.raw(),
                level,
                name,
                (value as *const T).cast(),
                std::mem::size_of::<T>() as u32,
            )
        })
    }

    /// The next packet's length and kernel timestamp (Unix ns); `None` on a timeout or for a
    /// packet not addressed to this host.
    fn receive(&self, buffer: &mut [u8]) -> io::Result<Option<(usize, u64)>> {
        // SAFETY: zeroed sockaddr_ll and msghdr are valid; every pointer set below outlives
        // the recvmsg call.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: buffer.len(),
        };
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_name = (&raw mut from).cast();
        message.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        message.msg_iov = &raw mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: as above.
        let len = unsafe { libc::recvmsg(self.raw(), &raw mut message, 0) };
        if len < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(error),
            };
        }
        if from.sll_pkttype != libc::PACKET_HOST {
            return Ok(None);
        }
        // SAFETY: walking the control messages recvmsg filled in, with the libc macros.
        let mut at_unix_ns = None;
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const message);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
                {
                    let stamp: libc::timespec =
                        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                    at_unix_ns = Some(stamp.tv_sec as u64 * 1_000_000_000 + stamp.tv_nsec as u64);
                }
                cmsg = libc::CMSG_NXTHDR(&raw const message, cmsg);
            }
        }
        let at_unix_ns =
            at_unix_ns.ok_or_else(|| io::Error::other("a packet came without its timestamp"))?;
        Ok(Some((len as usize, at_unix_ns)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadgen::header::MessageHeader;

    /// A QoS 1 PUBLISH of `payload` to topic "t" with packet id 7.
    fn publish(payload: &[u8]) -> Vec<u8> {
        let mut body = vec![0, 1, b't', 0, 7];
        body.extend_from_slice(payload);
        let mut packet = vec![0x32, body.len() as u8];
        packet.extend(body);
        packet
    }

    fn payload(publisher: u32, seq: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 10];
        HeaderEncoding::Compact.encode(
            MessageHeader {
                publisher,
                seq,
                stamp_ns: 99,
            },
            &mut bytes,
        );
        bytes
    }

    #[test]
    fn publishes_split_over_segments_are_decoded_once_whole() {
        let mut stream = Vec::new();
        let mut seen = Vec::new();
        let mut bytes = publish(&payload(3, 41));
        bytes.extend(vec![0x40, 2, 0, 7]); // a PUBACK between them
        bytes.extend(publish(&payload(4, 42)));
        let (first, rest) = bytes.split_at(9);
        stream.extend_from_slice(first);
        decode_publishes(&mut stream, HeaderEncoding::Compact, 1_000, &mut seen);
        assert!(seen.is_empty(), "the first PUBLISH is not complete yet");
        stream.extend_from_slice(rest);
        decode_publishes(&mut stream, HeaderEncoding::Compact, 2_000, &mut seen);
        assert_eq!(
            seen.iter()
                .map(|p| (p.publisher, p.seq, p.at_unix_ns))
                .collect::<Vec<_>>(),
            vec![(3, 41, 2_000), (4, 42, 2_000)]
        );
        assert!(stream.is_empty());
    }

    #[test]
    fn transit_pairs_each_message_in_with_its_first_copy_out() {
        let at = |publisher, seq, at_unix_ns| WirePublish {
            publisher,
            seq,
            stamp_ns: 0,
            at_unix_ns,
        };
        let record = WireRecord {
            into_broker: vec![at(1, 1, 100), at(1, 2, 200), at(2, 1, 300)],
            out_of_broker: vec![at(1, 1, 140), at(1, 2, 290), at(1, 2, 250)],
            gaps: 0,
        };
        assert_eq!(record.transits_ns_where(|_| true), vec![40, 50]);
        assert_eq!(record.transits_ns_where(|p| p.seq == 2), vec![50]);
        assert_eq!(quantile_ns(&[10, 20, 30, 40], 0.5), 20);
        assert_eq!(quantile_ns(&[10, 20, 30, 40], 0.99), 40);
    }
}
