//! How clients connect, how the engine runs, and how long the drain waits.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Pacing, WorkloadSpec};
use crate::size::ByteSize;

/// Connection settings shared by all clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionOptions {
    /// Client ids are `{prefix}-{run id}-p{n}` and `...-s{n}`.
    pub client_id_prefix: String,
    /// MQTT clean session (3.1.1) / clean start (5).
    pub clean_session: bool,
    /// MQTT keep-alive.
    #[serde(with = "humantime_serde")]
    pub keep_alive: Duration,
    /// New connections per second while connecting; unlimited when absent.
    pub ramp_up_per_second: Option<u32>,
    /// Deadline for one connection's TCP + TLS + CONNECT/CONNACK (+ SUBACK).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Unacknowledged QoS 1/2 messages a publisher may have out at once. MQTT 5 brokers
    /// announce their limit (receive maximum) and the lower one applies; MQTT 3.1.1 has no such
    /// negotiation, and Mosquitto 2.0 silently drops incoming QoS 2 messages beyond its own
    /// limit, so the default is Mosquitto's default, 20.
    pub inflight: u16,
    /// Largest MQTT packet accepted from the broker; derived from the payload when absent.
    pub max_packet_size: Option<ByteSize>,
    /// Subscribers go offline once mid-run, as devices do: each disconnects `after` the start
    /// barrier and reconnects to its kept session `gap` later (needs clean_session = false),
    /// while the publishers go on; what the broker kept arrives then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline: Option<OfflineGap>,
    /// What a client does when its connection is lost mid-run (a reconnect storm); without
    /// it, a lost connection ends that client and is counted as an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconnect: Option<super::Reconnect>,
    /// MQTT 5: each publisher's topic travels as a topic alias after the connection's first
    /// message (when the broker's CONNACK allows one), saving its length on every message.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub topic_alias: bool,
    /// MQTT 5: every publish carries this message expiry interval (whole seconds); what a
    /// broker held longer than that for an absent subscriber must not arrive, and is counted
    /// expired, not lost ([`super::expirable_until`]).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub message_expiry: Option<Duration>,
    /// MQTT 5: the receive maximum every client announces in CONNECT: QoS 1/2 deliveries the
    /// broker may have unacknowledged at one subscriber (absent: 65535, MQTT's largest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_maximum: Option<u16>,
}

/// When subscribers are offline: from `after` the start barrier, for `gap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfflineGap {
    /// From the start barrier to the disconnect.
    #[serde(with = "humantime_serde")]
    pub after: Duration,
    /// How long the subscribers stay away.
    #[serde(with = "humantime_serde")]
    pub gap: Duration,
}

/// How long an MQTT 5 broker keeps a session with clean start off after its client left:
/// without a session expiry interval, MQTT 5 ends the session at once, and clean start off
/// would mean nothing.
pub const SESSION_EXPIRY: Duration = Duration::from_secs(3_600);

impl Default for ConnectionOptions {
    fn default() -> Self {
        ConnectionOptions {
            client_id_prefix: "continuum".to_string(),
            clean_session: true,
            keep_alive: Duration::from_secs(60),
            ramp_up_per_second: None,
            connect_timeout: Duration::from_secs(5),
            inflight: 20,
            max_packet_size: None,
            offline: None,
            reconnect: None,
            topic_alias: false,
            message_expiry: None,
            receive_maximum: None,
        }
    }
}

/// How the engine runs: on its own runtime, so that an agent's other work and the load do
/// not share threads, with settings that keep the instrument's cost to the broker low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineOptions {
    /// Runtime threads; 0 chooses: half the CPUs this process may use, at least one (a load
    /// generator beside the broker on one host should not take the broker's cores).
    pub threads: u16,
    /// Receive coalescing.
    pub coalescing: Coalescing,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            threads: 0,
            coalescing: Coalescing::Auto,
        }
    }
}

/// Receive coalescing: a QoS 0 subscriber that has just read deliveries does not read again
/// before the cap has passed (unless its read filled the buffer), so what arrives meanwhile is
/// read in one go. On one host (loopback, veth) every read sends an acknowledgement that
/// releases the data the broker's Nagle held, and the kernel transmits and receives it inside
/// the reader's system call; a subscriber that reads (and acknowledges) every delivery at once
/// gets one delivery per segment and keeps the broker from coalescing its writes. Like a NIC's
/// interrupt moderation, it trades a bounded delay, only while deliveries keep coming, for
/// fewer segments, fewer system calls and fewer wake-ups on both sides: a subscriber that
/// receives less often than once per cap is never delayed. QoS 1/2 subscribers read at once:
/// their acknowledgements free the broker's in-flight window, which a delayed read would hold
/// shut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coalescing {
    /// On for bursts (cap 2 ms), offered rates (cap 1 ms) and closed loops (a cap short
    /// enough that the loop's windows, publishers x in-flight, could still carry 1M msg/s);
    /// off for the open-loop latency tests, whose figure is the delay.
    Auto,
    /// Never: every arrival is read at once.
    Off,
    /// On with this cap, whatever the pacing (at most [`MAX_COALESCING`]).
    Sleep(Duration),
}

/// The coalescing cap `Auto` uses for bursts.
pub const AUTO_COALESCING_BURST: Duration = Duration::from_millis(2);
/// The coalescing cap `Auto` uses for offered rates.
pub const AUTO_COALESCING_RATE: Duration = Duration::from_millis(1);
/// A closed loop's coalescing may not hold its windows back below this rate, msg/s.
pub const CLOSED_LOOP_FLOOR: u64 = 1_000_000;
/// The longest coalescing sleep.
pub const MAX_COALESCING: Duration = Duration::from_millis(5);

impl Coalescing {
    /// The cap this setting gives for `spec`'s pacing, if any.
    pub fn sleep_for(self, spec: &WorkloadSpec) -> Option<Duration> {
        match self {
            Coalescing::Off => None,
            Coalescing::Sleep(sleep) => Some(sleep),
            Coalescing::Auto => match spec.pacing {
                Pacing::Burst => Some(AUTO_COALESCING_BURST),
                Pacing::Rate { .. } => Some(AUTO_COALESCING_RATE),
                Pacing::ClosedLoop => {
                    // The messages in flight over all windows, per µs of sleep, at the floor.
                    let shard = spec.effective_shard();
                    let in_flight =
                        shard.publishers.len() as u64 * u64::from(spec.connection.inflight);
                    let cap = Duration::from_micros(in_flight * 1_000_000 / CLOSED_LOOP_FLOOR);
                    Some(cap.min(AUTO_COALESCING_RATE)).filter(|cap| !cap.is_zero())
                }
                Pacing::OpenLoop { .. } => None,
            },
        }
    }
}

/// How often one subscriber reads at most while deliveries keep coming: the
/// coalescing cap for deliveries at QoS 0 (the effective QoS: nothing to acknowledge), none
/// at QoS 1/2 (see [`Coalescing`]).
impl WorkloadSpec {
    pub fn read_cadence(&self) -> Option<Duration> {
        match self.effective_qos() {
            super::Qos::AtMostOnce => self.engine.coalescing.sleep_for(self),
            super::Qos::AtLeastOnce | super::Qos::ExactlyOnce => None,
        }
    }
}

impl fmt::Display for Coalescing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coalescing::Auto => f.write_str("auto"),
            Coalescing::Off => f.write_str("off"),
            Coalescing::Sleep(sleep) => write!(f, "{}", humantime::format_duration(*sleep)),
        }
    }
}

impl std::str::FromStr for Coalescing {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Coalescing::Auto),
            "off" => Ok(Coalescing::Off),
            other => humantime::parse_duration(other)
                .map(Coalescing::Sleep)
                .map_err(|_| {
                    format!("{other:?} is not \"auto\", \"off\" or a duration like \"50us\"")
                }),
        }
    }
}

impl Serialize for Coalescing {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Coalescing {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The drain phase after the last publish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrainOptions {
    /// Hard deadline for outstanding deliveries and acknowledgements.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Stop early when nothing arrived for this long (messages are then counted lost).
    #[serde(with = "humantime_serde")]
    pub idle: Duration,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            timeout: Duration::from_secs(30),
            idle: Duration::from_secs(2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Qos;

    #[test]
    fn only_qos_0_subscribers_of_throughput_runs_coalesce() {
        let mut burst = crate::presets::throughput();
        assert_eq!(burst.read_cadence(), Some(AUTO_COALESCING_BURST));
        burst.qos = Qos::AtLeastOnce;
        assert_eq!(burst.read_cadence(), None, "acks free the broker's window");

        let mut latency = crate::presets::latency();
        latency.qos = Qos::AtMostOnce;
        assert_eq!(
            latency.read_cadence(),
            None,
            "the latency test's figure is the delay"
        );
        latency.engine.coalescing = Coalescing::Sleep(Duration::from_micros(500));
        assert_eq!(latency.read_cadence(), Some(Duration::from_micros(500)));

        let mut off = crate::presets::throughput();
        off.engine.coalescing = Coalescing::Off;
        assert_eq!(off.read_cadence(), None);
    }
}
