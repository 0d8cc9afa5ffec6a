//! The checks a spec must pass before it runs; each failure names the TOML path, the value
//! and the problem.

use std::fmt;
use std::time::Duration;

use super::{Churn, MAX_CHURN_CONNECTIONS, MAX_CHURN_RATE, MqttVersion, Reconnect};
use super::{
    Coalescing, MAX_COALESCING, MAX_DURATION, MAX_RATE, MQTT_MAX_REMAINING_LENGTH, Pacing, Qos,
    Routing, Topology, Transport, WorkloadSpec,
};
use crate::header::HeaderEncoding;
use crate::size::ByteSize;

/// A spec field with a bad value: names the TOML path (e.g. `pacing.interval`), the value
/// and the problem.
pub type SpecError = domain::FieldError;

/// Most publishers, and most subscribers, one workload has (over all its instances): each
/// costs a connection, a task and its buffers.
pub const MAX_CLIENTS: u32 = 100_000;
/// Longest inline CA (`broker.tls_ca_pem`), as long as the longest CA file loadgen reads:
/// a bundle of a few hundred certificates.
pub const MAX_CA_PEM: u64 = 1024 * 1024;
/// Most (subscriber, publisher) delivery tracks a workload keeps: a subscriber of the shared
/// topic tracks every publisher, so this bounds subscribers x publishers there.
pub const MAX_DELIVERY_TRACKS: u64 = 10_000_000;
/// Most payload bytes all clients may hold at once (payload x clients), 8 GiB.
pub const MAX_PAYLOAD_BYTES_HELD: u64 = 8 << 30;
/// Most bits of delivery bitmaps a counted or rate-paced workload can need (tracks x planned
/// messages), 4 GiB of memory.
pub const MAX_TRACKED_MESSAGES: u64 = 32 << 30;

fn invalid(path: &str, value: impl fmt::Display, problem: impl Into<String>) -> SpecError {
    SpecError {
        path: path.to_string(),
        value: value.to_string(),
        problem: problem.into(),
    }
}

/// The bound of one duration field: refused above `bound`, naming the field and the value.
fn at_most(path: &str, value: Duration, bound: Duration) -> Result<(), SpecError> {
    if value > bound {
        return Err(invalid(
            path,
            humantime::format_duration(value),
            format!("at most {}", humantime::format_duration(bound)),
        ));
    }
    Ok(())
}

impl WorkloadSpec {
    /// Checks every field; the first problem found is returned with its TOML path.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_given(false)
    }

    /// [`validate`](Self::validate) for a spec whose broker's CA is supplied when it runs (the
    /// controller sends the CA of a QUIC listener an agent deployed with a certificate of its
    /// own making), or a result's spec, which records no inline CA: QUIC without a CA in the
    /// spec is accepted here.
    pub fn validate_with_ca_supplied(&self) -> Result<(), SpecError> {
        self.validate_given(true)
    }

    fn validate_given(&self, ca_supplied: bool) -> Result<(), SpecError> {
        self.validate_duration_bounds()?;
        if self.broker.host.trim().is_empty() {
            return Err(invalid("broker.host", "\"\"", "a broker host is required"));
        }
        if self.broker.port == 0 {
            return Err(invalid("broker.port", 0, "port 0 is not a broker port"));
        }
        if self.broker.password.is_some() && self.broker.username.is_none() {
            return Err(invalid(
                "broker.password",
                "(set)",
                "a password needs broker.username",
            ));
        }
        if let Some(path) = &self.broker.websocket_path {
            if self.broker.transport != Transport::WebSocket {
                return Err(invalid(
                    "broker.websocket_path",
                    format!("{path:?}"),
                    "only with broker.transport = \"websocket\"",
                ));
            }
            if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(
                    "broker.websocket_path",
                    format!("{path:?}"),
                    "a request path starts with / and has no spaces",
                ));
            }
        }
        if self.broker.quic_zero_rtt && self.broker.transport != Transport::Quic {
            return Err(invalid(
                "broker.quic_zero_rtt",
                true,
                "only with broker.transport = \"quic\"",
            ));
        }
        if !self.broker.quic_streams.is_single() && self.broker.transport != Transport::Quic {
            return Err(invalid(
                "broker.quic_streams",
                format!("{:?}", self.broker.quic_streams.to_string()),
                "only with broker.transport = \"quic\"",
            ));
        }
        if !self.broker.quic_streams.is_single() && self.connection.topic_alias {
            return Err(invalid(
                "connection.topic_alias",
                true,
                format!(
                    "not with broker.quic_streams = {:?}: an alias set on one stream may reach \
                     the broker after a PUBLISH that uses it on another",
                    self.broker.quic_streams.to_string()
                ),
            ));
        }
        // Both publish to many topics from one client and read the broker's order of one
        // connection's packets (a PINGREQ answered after the PUBLISHes before it), which
        // streams of their own do not keep.
        let scenario = match (&self.retain, &self.wills) {
            (Some(_), _) => Some("retain"),
            (None, Some(_)) => Some("wills"),
            (None, None) => None,
        };
        if let Some(scenario) = scenario.filter(|_| !self.broker.quic_streams.is_single()) {
            return Err(invalid(
                "broker.quic_streams",
                format!("{:?}", self.broker.quic_streams.to_string()),
                format!(
                    "not with {scenario}: its checks rely on the broker handling one \
                     connection's packets in order, which PUBLISH on streams of their own does \
                     not keep; use \"single\""
                ),
            ));
        }
        if self.broker.quic_zero_rtt && self.connection.reconnect.is_none() {
            return Err(invalid(
                "broker.quic_zero_rtt",
                true,
                "0-RTT is used and counted when clients connect again: set connection.reconnect",
            ));
        }
        if self.broker.tls_ca_file.is_some() && self.broker.tls_ca_pem.is_some() {
            return Err(invalid(
                "broker.tls_ca_pem",
                "(set)",
                "give the CA once: tls_ca_file or tls_ca_pem",
            ));
        }
        if let Some(pem) = &self.broker.tls_ca_pem
            && pem.len() as u64 > MAX_CA_PEM
        {
            return Err(invalid(
                "broker.tls_ca_pem",
                format!("({} bytes)", pem.len()),
                format!("at most {MAX_CA_PEM} bytes"),
            ));
        }
        if self.broker.transport == Transport::Quic && !self.broker.has_ca() && !ca_supplied {
            return Err(invalid(
                "broker.transport",
                "\"quic\"",
                "QUIC is always TLS 1.3: set broker.tls_ca_file to the CA that signed the broker's certificate",
            ));
        }
        if let Some(churn) = &self.churn {
            validate_churn(churn, self)?;
        }
        if self.publishers == 0 {
            return Err(invalid("publishers", 0, "at least one publisher is needed"));
        }
        for (path, count) in [
            ("publishers", self.publishers),
            ("subscribers", self.subscribers),
        ] {
            if count > MAX_CLIENTS {
                return Err(invalid(
                    path,
                    count,
                    format!("at most {MAX_CLIENTS} per workload (spread over agents with a shard)"),
                ));
            }
        }
        match self.topology {
            Topology::Pairs if self.subscribers != self.publishers => {
                return Err(invalid(
                    "subscribers",
                    self.subscribers,
                    format!(
                        "topology \"pairs\" needs as many subscribers as publishers ({})",
                        self.publishers
                    ),
                ));
            }
            Topology::FanOut
                if !self.subscribers.is_multiple_of(self.publishers) || self.subscribers == 0 =>
            {
                return Err(invalid(
                    "subscribers",
                    self.subscribers,
                    format!(
                        "topology \"fan-out\" needs a non-zero multiple of publishers ({})",
                        self.publishers
                    ),
                ));
            }
            _ => {}
        }
        match (self.topology, &self.topics) {
            (Topology::Tree, None) => {
                return Err(invalid(
                    "topology",
                    "\"tree\"",
                    "a topic tree needs [topics]: pattern, counts and subscribe",
                ));
            }
            (Topology::Tree, Some(_)) => {}
            (topology, Some(_)) => {
                return Err(invalid(
                    "topics",
                    "(set)",
                    format!("only with topology = \"tree\", not \"{topology}\""),
                ));
            }
            (_, None) => {}
        }
        if self.topic_prefix.is_empty() || self.topic_prefix.contains(['+', '#']) {
            return Err(invalid(
                "topic_prefix",
                format!("{:?}", self.topic_prefix),
                "must be a non-empty topic without wildcards",
            ));
        }
        let payload = self.payload.bytes();
        if self.header_in.is_property() && self.broker.protocol != MqttVersion::V5 {
            return Err(invalid(
                "header_in",
                "\"user-property\"",
                "a user property is MQTT 5: set broker.protocol = \"5\"",
            ));
        }
        // In a user property the header is the full one, whatever the payload (even none).
        let encoding = if self.header_in.is_property() {
            Some(HeaderEncoding::Full)
        } else {
            HeaderEncoding::for_payload(payload)
        };
        let encoding = encoding.ok_or_else(|| {
            invalid(
                "payload",
                self.payload,
                format!(
                    "too small for the measurement header (at least {} B)",
                    HeaderEncoding::SMALLEST_PAYLOAD
                ),
            )
        })?;
        // Topic, packet id and properties take a little room; 1 KiB is generous.
        if payload + 1024 > MQTT_MAX_REMAINING_LENGTH {
            return Err(invalid(
                "payload",
                self.payload,
                format!("over MQTT's packet limit of {MQTT_MAX_REMAINING_LENGTH} bytes (256 MB)"),
            ));
        }
        self.validate_length(encoding)?;
        self.validate_memory()?;
        self.validate_unread_topics()?;
        self.validate_retain()?;
        self.validate_wills()?;
        if u64::from(self.publishers) > encoding.max_publishers() {
            return Err(invalid(
                "publishers",
                self.publishers,
                format!(
                    "a {payload} B payload carries the {encoding} header, which numbers at most {} publishers",
                    encoding.max_publishers()
                ),
            ));
        }
        self.validate_connection()?;
        super::expiry::validate_message_expiry(self)?;
        self.validate_engine()?;
        if self.drain.timeout.is_zero() {
            return Err(invalid("drain.timeout", "0s", "must be above zero"));
        }
        if self.subscriber_rate_limit == Some(0) {
            return Err(invalid(
                "subscriber_rate_limit",
                0,
                "must be above zero when set",
            ));
        }
        if let Some(shard) = &self.shard
            && self.pacing == Pacing::ClosedLoop
            && self.qos == Qos::AtMostOnce
            && (shard.publishers != (0..self.publishers)
                || shard.subscribers != (0..self.subscribers))
        {
            return Err(invalid(
                "pacing.mode",
                "\"closed-loop\"",
                "a closed loop at QoS 0 counts its window end to end, so one instance must run every publisher and subscriber (use QoS 1 or an offered rate to split the load)",
            ));
        }
        if let Some(shard) = &self.shard {
            if shard.publishers.end > self.publishers
                || shard.publishers.start > shard.publishers.end
            {
                return Err(invalid(
                    "shard.publishers",
                    format!("{:?}", shard.publishers),
                    format!("must lie within 0..{}", self.publishers),
                ));
            }
            if shard.subscribers.end > self.subscribers
                || shard.subscribers.start > shard.subscribers.end
            {
                return Err(invalid(
                    "shard.subscribers",
                    format!("{:?}", shard.subscribers),
                    format!("must lie within 0..{}", self.subscribers),
                ));
            }
        }
        if let Some(run_id) = &self.run_id
            && (run_id.is_empty()
                || !run_id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(invalid(
                "run_id",
                format!("{run_id:?}"),
                "use letters, digits and '-' only",
            ));
        }
        Ok(())
    }

    /// Every duration that schedules work is bounded above before anything else is checked,
    /// so a value such as `18446744073709551615s` is refused naming its own path (not a
    /// combination it spoils), and the engine's deadline arithmetic stays far from overflow.
    /// [`MAX_DURATION`] (an hour, the longest timed run) bounds them all, except:
    /// `connection.keep_alive`, which MQTT carries in 16 bits (65535 s), and
    /// `engine.coalescing`, a read cadence of at most [`MAX_COALESCING`].
    fn validate_duration_bounds(&self) -> Result<(), SpecError> {
        let connection = &self.connection;
        let mut bounded: Vec<(&str, Duration)> = vec![
            ("connection.connect_timeout", connection.connect_timeout),
            ("drain.timeout", self.drain.timeout),
            ("drain.idle", self.drain.idle),
        ];
        if let Pacing::OpenLoop { interval } = self.pacing {
            bounded.push(("pacing.interval", interval));
        }
        bounded.extend(self.duration.map(|d| ("duration", d)));
        bounded.extend(self.warmup.map(|d| ("warmup", d)));
        if let Some(offline) = connection.offline {
            bounded.push(("connection.offline.after", offline.after));
            bounded.push(("connection.offline.gap", offline.gap));
        }
        if let Some(reconnect) = &connection.reconnect {
            bounded.push(("connection.reconnect.within", reconnect.within));
            bounded.push(("connection.reconnect.retry", reconnect.retry));
            bounded.extend(
                reconnect
                    .cut_all_at
                    .map(|at| ("connection.reconnect.cut_all_at", at)),
            );
        }
        bounded.extend(self.churn.as_ref().map(|churn| ("churn.hold", churn.hold)));
        for (path, value) in bounded {
            at_most(path, value, MAX_DURATION)?;
        }
        if let Some(most) = connection.receive_maximum {
            if self.broker.protocol != MqttVersion::V5 {
                return Err(invalid(
                    "connection.receive_maximum",
                    most,
                    "a receive maximum is an MQTT 5 property: set broker.protocol = \"5\"",
                ));
            }
            if most == 0 {
                return Err(invalid(
                    "connection.receive_maximum",
                    0,
                    "MQTT 5 allows 1 to 65535",
                ));
            }
        }
        if connection.topic_alias && self.broker.protocol != MqttVersion::V5 {
            return Err(invalid(
                "connection.topic_alias",
                true,
                "a topic alias is an MQTT 5 property: set broker.protocol = \"5\"",
            ));
        }
        if connection.keep_alive.as_secs() > u64::from(u16::MAX) {
            return Err(invalid(
                "connection.keep_alive",
                humantime::format_duration(connection.keep_alive),
                "MQTT allows at most 65535 s",
            ));
        }
        if let Coalescing::Sleep(sleep) = self.engine.coalescing {
            at_most("engine.coalescing", sleep, MAX_COALESCING)?;
        }
        Ok(())
    }

    /// Counted or timed, and a pacing that fits: the combinations a run can honestly carry out.
    fn validate_length(&self, encoding: HeaderEncoding) -> Result<(), SpecError> {
        let payload = self.payload.bytes();
        match self.pacing {
            Pacing::OpenLoop { interval } if interval.is_zero() => {
                return Err(invalid(
                    "pacing.interval",
                    "0s",
                    "open loop needs an interval above zero (use mode = \"burst\" for as fast as possible)",
                ));
            }
            Pacing::Rate { rate: 0 } => {
                return Err(invalid(
                    "pacing.rate",
                    0,
                    "an offered rate must be above zero (use mode = \"closed-loop\" for as fast as the broker takes them)",
                ));
            }
            Pacing::Rate { rate } if rate > MAX_RATE => {
                return Err(invalid(
                    "pacing.rate",
                    rate,
                    format!("at most {MAX_RATE} messages/s"),
                ));
            }
            _ => {}
        }
        match self.duration {
            None => {
                if self.warmup.is_some() {
                    return Err(invalid(
                        "warmup",
                        humantime::format_duration(self.warmup.unwrap_or_default()),
                        "a warm-up time needs a duration (counted runs use warmup_messages)",
                    ));
                }
                if self.pacing == Pacing::ClosedLoop {
                    return Err(invalid(
                        "pacing.mode",
                        "\"closed-loop\"",
                        "a closed loop runs for a duration: set duration (and warmup)",
                    ));
                }
                if self.messages_per_publisher == 0 {
                    return Err(invalid(
                        "messages_per_publisher",
                        0,
                        "at least one message is needed (or a duration for a timed run)",
                    ));
                }
                if self.warmup_messages >= self.messages_per_publisher {
                    return Err(invalid(
                        "warmup_messages",
                        self.warmup_messages,
                        format!(
                            "must be fewer than messages_per_publisher ({})",
                            self.messages_per_publisher
                        ),
                    ));
                }
            }
            Some(duration) => {
                if duration.is_zero() {
                    return Err(invalid("duration", "0s", "must be above zero"));
                }
                if self.pacing == Pacing::Burst {
                    return Err(invalid(
                        "pacing.mode",
                        "\"burst\"",
                        "a burst is counted (messages_per_publisher); for a duration use mode = \"closed-loop\" or \"rate\"",
                    ));
                }
                if self.messages_per_publisher != 0 {
                    return Err(invalid(
                        "messages_per_publisher",
                        self.messages_per_publisher,
                        "a timed run (duration) sends as many as its pacing allows: leave it out",
                    ));
                }
                if self.warmup_messages != 0 {
                    return Err(invalid(
                        "warmup_messages",
                        self.warmup_messages,
                        "a timed run's warm-up is a time: use warmup = \"2s\"",
                    ));
                }
            }
        }
        let most = encoding.max_messages_per_publisher();
        if let Some(planned) = self.planned_messages_per_publisher()
            && planned > most
        {
            let (path, value) = if self.duration.is_some() {
                (
                    "duration",
                    humantime::format_duration(self.run_time()).to_string(),
                )
            } else {
                ("messages_per_publisher", planned.to_string())
            };
            return Err(invalid(
                path,
                value,
                format!(
                    "{planned} messages per publisher; a {payload} B payload carries the {encoding} header, which numbers at most {most}"
                ),
            ));
        }
        Ok(())
    }

    /// A closed loop at QoS 0 paces each publisher by its deliveries: in a tree, a topic no
    /// filter reads would stall its publisher's window for good.
    fn validate_unread_topics(&self) -> Result<(), SpecError> {
        if self.topology != Topology::Tree
            || self.pacing != Pacing::ClosedLoop
            || self.qos != Qos::AtMostOnce
        {
            return Ok(());
        }
        let routing = Routing::of(self)?;
        match (0..self.publishers).find(|p| routing.fanout_of(*p) == 0) {
            Some(unread) => Err(invalid(
                "topics.subscribe",
                format!("{:?}", self.topics.as_ref().map(|t| &t.subscribe)),
                format!(
                    "a closed loop at QoS 0 paces each publisher by its deliveries, and no filter reads publisher {unread}'s topic {:?}",
                    self.topic_of("<run>", unread)
                ),
            )),
            None => Ok(()),
        }
    }

    /// What the workload would hold in memory, bounded before anything is allocated: all
    /// products in u64 (the counts are u32, so they cannot overflow).
    fn validate_memory(&self) -> Result<(), SpecError> {
        let clients = u64::from(self.publishers) + u64::from(self.subscribers);
        let held = self.payload.bytes().saturating_mul(clients);
        if held > MAX_PAYLOAD_BYTES_HELD {
            return Err(invalid(
                "payload",
                self.payload,
                format!(
                    "x {clients} clients is {} held at once; at most {}",
                    ByteSize(held),
                    ByteSize(MAX_PAYLOAD_BYTES_HELD)
                ),
            ));
        }
        let tracks = match self.topology {
            Topology::Shared => u64::from(self.subscribers) * u64::from(self.publishers),
            Topology::Pairs | Topology::FanOut => u64::from(self.subscribers),
            Topology::Tree => Routing::of(self)?.tracks(),
        };
        if tracks > MAX_DELIVERY_TRACKS && self.topology == Topology::Tree {
            return Err(invalid(
                "subscribers",
                self.subscribers,
                format!(
                    "x the publishers each one's filter matches is {tracks} tracks, at most {MAX_DELIVERY_TRACKS}"
                ),
            ));
        }
        if tracks > MAX_DELIVERY_TRACKS {
            return Err(invalid(
                "subscribers",
                self.subscribers,
                format!(
                    "each of them tracks all {} publishers of the shared topic: {tracks} tracks, at most {MAX_DELIVERY_TRACKS}",
                    self.publishers
                ),
            ));
        }
        if let Some(planned) = self.planned_messages_per_publisher()
            && tracks.saturating_mul(planned) > MAX_TRACKED_MESSAGES
        {
            let path = if self.duration.is_some() {
                "duration"
            } else {
                "messages_per_publisher"
            };
            return Err(invalid(
                path,
                planned,
                format!(
                    "messages per publisher over {tracks} subscriber tracks would need more than {} of delivery bitmaps",
                    ByteSize(MAX_TRACKED_MESSAGES / 8)
                ),
            ));
        }
        Ok(())
    }

    fn validate_engine(&self) -> Result<(), SpecError> {
        if let Coalescing::Sleep(sleep) = self.engine.coalescing
            && (sleep.is_zero() || sleep > MAX_COALESCING)
        {
            return Err(invalid(
                "engine.coalescing",
                humantime::format_duration(sleep),
                format!(
                    "must lie between 1us and {} (or be \"off\")",
                    humantime::format_duration(MAX_COALESCING)
                ),
            ));
        }
        if self.engine.threads > 1024 {
            return Err(invalid(
                "engine.threads",
                self.engine.threads,
                "at most 1024",
            ));
        }
        Ok(())
    }

    fn validate_connection(&self) -> Result<(), SpecError> {
        let connection = &self.connection;
        if connection.connect_timeout.is_zero() {
            return Err(invalid(
                "connection.connect_timeout",
                "0s",
                "must be above zero",
            ));
        }
        if connection.inflight == 0 {
            return Err(invalid(
                "connection.inflight",
                0,
                "at least one message must be allowed in flight",
            ));
        }
        if let Some(offline) = connection.offline {
            if connection.clean_session {
                return Err(invalid(
                    "connection.offline",
                    humantime::format_duration(offline.gap),
                    "needs connection.clean_session = false: a clean session is gone when its client leaves",
                ));
            }
            if offline.gap.is_zero() {
                return Err(invalid(
                    "connection.offline.gap",
                    "0s",
                    "must be above zero",
                ));
            }
            if self.subscribers == 0 {
                return Err(invalid(
                    "connection.offline",
                    humantime::format_duration(offline.gap),
                    "takes subscribers offline, and the workload has none",
                ));
            }
        }
        if let Some(reconnect) = &connection.reconnect {
            validate_reconnect(reconnect, self)?;
        }
        if connection.ramp_up_per_second == Some(0) {
            return Err(invalid(
                "connection.ramp_up_per_second",
                0,
                "must be above zero when set (omit it for no ramp-up)",
            ));
        }
        // The ramp schedules connections as a duration does: this instance's clients at this
        // rate must connect within the longest run.
        if let Some(rate) = connection.ramp_up_per_second {
            let clients = match &self.shard {
                Some(shard) => shard.publishers.len() as u64 + shard.subscribers.len() as u64,
                None => u64::from(self.publishers) + u64::from(self.subscribers),
            };
            let seconds = clients.div_ceil(u64::from(rate));
            if seconds > MAX_DURATION.as_secs() {
                return Err(invalid(
                    "connection.ramp_up_per_second",
                    rate,
                    format!(
                        "{clients} clients would take {} to connect, over {}",
                        humantime::format_duration(Duration::from_secs(seconds)),
                        humantime::format_duration(MAX_DURATION)
                    ),
                ));
            }
        }
        // A header property travels in every delivery too.
        let property = if self.header_in.is_property() {
            crate::header::PROPERTY_OVERHEAD as u64
        } else {
            0
        };
        if let Some(limit) = connection.max_packet_size
            && limit.bytes() < self.payload.bytes() + property
        {
            let with = if property > 0 {
                format!(" and its {property} B header property")
            } else {
                String::new()
            };
            return Err(invalid(
                "connection.max_packet_size",
                limit,
                format!("smaller than the payload ({}){with}", self.payload),
            ));
        }
        Ok(())
    }
}

/// A reconnect policy's times, and what it cannot be combined with.
fn validate_reconnect(reconnect: &Reconnect, spec: &WorkloadSpec) -> Result<(), SpecError> {
    let shown = |d: Duration| humantime::format_duration(d).to_string();
    if reconnect.within.is_zero() || reconnect.within > MAX_DURATION {
        return Err(invalid(
            "connection.reconnect.within",
            shown(reconnect.within),
            format!("above 0 and at most {}", shown(MAX_DURATION)),
        ));
    }
    if reconnect.retry.is_zero() || reconnect.retry > reconnect.within {
        return Err(invalid(
            "connection.reconnect.retry",
            shown(reconnect.retry),
            format!(
                "above 0 and at most connection.reconnect.within ({})",
                shown(reconnect.within)
            ),
        ));
    }
    if let Some(at) = reconnect.cut_all_at
        && (at.is_zero() || at > MAX_DURATION)
    {
        return Err(invalid(
            "connection.reconnect.cut_all_at",
            shown(at),
            format!(
                "after the start: above 0 and at most {}",
                shown(MAX_DURATION)
            ),
        ));
    }
    if spec.qos == Qos::ExactlyOnce {
        return Err(invalid(
            "connection.reconnect",
            shown(reconnect.within),
            "is measured at QoS 0 and 1: resuming a QoS 2 exchange (PUBREL again) is not built",
        ));
    }
    if spec.connection.offline.is_some() {
        return Err(invalid(
            "connection.reconnect",
            shown(reconnect.within),
            "and connection.offline: one disruption per run, so its losses have one cause",
        ));
    }
    Ok(())
}

/// A churn fleet's rate, count and hold.
fn validate_churn(churn: &Churn, spec: &WorkloadSpec) -> Result<(), SpecError> {
    if !churn.rate.is_finite() || churn.rate <= 0.0 || churn.rate > MAX_CHURN_RATE {
        return Err(invalid(
            "churn.rate",
            churn.rate,
            format!("new connections per second: above 0 and at most {MAX_CHURN_RATE}"),
        ));
    }
    if churn.connections == 0 || churn.connections > MAX_CHURN_CONNECTIONS {
        return Err(invalid(
            "churn.connections",
            churn.connections,
            format!("at least 1 and at most {MAX_CHURN_CONNECTIONS}"),
        ));
    }
    if churn.hold > MAX_DURATION {
        return Err(invalid(
            "churn.hold",
            humantime::format_duration(churn.hold),
            format!("at most {}", humantime::format_duration(MAX_DURATION)),
        ));
    }
    if churn.span() > MAX_DURATION {
        return Err(invalid(
            "churn.connections",
            churn.connections,
            format!(
                "at {} per second and a hold of {}, the churn would last {}, over {}",
                churn.rate,
                humantime::format_duration(churn.hold),
                humantime::format_duration(Duration::from_secs(churn.span().as_secs())),
                humantime::format_duration(MAX_DURATION)
            ),
        ));
    }
    let open = churn.most_open_at_once() + u64::from(spec.publishers) + u64::from(spec.subscribers);
    if open > MAX_CHURN_CONNECTIONS {
        return Err(invalid(
            "churn.hold",
            humantime::format_duration(churn.hold),
            format!("would hold {open} connections open at once"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::size::ByteSize;
    use crate::spec::tests::example;
    use crate::spec::{QuicStreams, Shard};

    #[test]
    fn quic_stream_modes_are_for_quic_and_read_by_name() {
        let mut spec = example();
        spec.broker.quic_streams = QuicStreams::PerTopic;
        let tcp = spec.validate().expect_err("not over TCP");
        assert_eq!(
            tcp.to_string(),
            "broker.quic_streams = \"per_topic\": only with broker.transport = \"quic\""
        );
        spec.broker.transport = Transport::Quic;
        spec.broker.tls_ca_file = Some("/ca.pem".into());
        spec.validate().expect("per topic over QUIC");
        spec.broker.protocol = MqttVersion::V5;
        spec.connection.topic_alias = true;
        let alias = spec.validate().expect_err("aliases need one stream");
        assert!(
            alias.to_string().starts_with(
                "connection.topic_alias = true: not with broker.quic_streams = \"per_topic\""
            ),
            "{alias}"
        );
        spec.connection.topic_alias = false;
        spec.retain = Some(crate::spec::Retain {
            late_subscribers: 1,
            filter: "shared".into(),
            handling: 0,
            as_published: false,
        });
        let retained = spec.validate().expect_err("retained needs one stream");
        assert!(
            retained
                .to_string()
                .starts_with("broker.quic_streams = \"per_topic\": not with retain:"),
            "{retained}"
        );
        spec.retain = None;
        let read: crate::spec::BrokerTarget = serde_json::from_value(serde_json::json!({
            "host": "broker", "port": 14567, "transport": "quic",
            "tls_ca_file": "/ca.pem", "quic_streams": "per_publish",
        }))
        .expect("a stream mode by name");
        assert_eq!(read.quic_streams, QuicStreams::PerPublish);
        let written = serde_json::to_value(&spec.broker).expect("written");
        assert_eq!(written["quic_streams"], "per_topic");
        spec.broker.quic_streams = QuicStreams::Single;
        let written = serde_json::to_value(&spec.broker).expect("written");
        assert!(
            written.get("quic_streams").is_none(),
            "the default is not written"
        );
    }

    #[test]
    fn zero_rtt_is_for_quic_reconnects() {
        let mut spec = example();
        spec.broker.quic_zero_rtt = true;
        let tcp = spec.validate().expect_err("not over TCP");
        assert_eq!(
            tcp.to_string(),
            "broker.quic_zero_rtt = true: only with broker.transport = \"quic\""
        );
        spec.broker.transport = Transport::Quic;
        spec.broker.tls_ca_file = Some("/ca.pem".into());
        let once = spec.validate().expect_err("nothing reconnects");
        assert!(once.problem.contains("set connection.reconnect"), "{once}");
        spec.connection.reconnect = Some(crate::spec::Reconnect {
            within: Duration::from_secs(20),
            retry: Duration::from_millis(100),
            cut_all_at: None,
        });
        assert_eq!(spec.validate(), Ok(()));
    }

    #[test]
    fn quic_needs_a_ca_once_unless_the_run_supplies_it() {
        let mut quic = example();
        quic.broker.transport = Transport::Quic;
        let error = quic.validate().expect_err("no CA");
        assert_eq!(error.path, "broker.transport");
        assert_eq!(quic.validate_with_ca_supplied(), Ok(()));
        quic.broker.tls_ca_pem = Some("-----BEGIN CERTIFICATE-----".into());
        assert_eq!(quic.validate(), Ok(()));
        quic.broker.tls_ca_file = Some("/ca.pem".into());
        let twice = quic.validate().expect_err("two CAs");
        assert_eq!(
            twice.to_string(),
            "broker.tls_ca_pem = (set): give the CA once: tls_ca_file or tls_ca_pem"
        );
        quic.broker.tls_ca_file = None;
        quic.broker.tls_ca_pem = Some("A".repeat(MAX_CA_PEM as usize + 1));
        let long = quic.validate().expect_err("too long");
        assert_eq!(long.path, "broker.tls_ca_pem");
        // Never written: a results folder holds no CA made for one deployment.
        quic.broker.tls_ca_pem = Some("-----BEGIN CERTIFICATE-----".into());
        let json = serde_json::to_string(&quic).expect("serialises");
        assert!(!json.contains("BEGIN CERTIFICATE"), "{json}");
    }

    #[test]
    fn bad_values_name_their_path_and_value() {
        type Mutation = Box<dyn Fn(&mut WorkloadSpec)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|s| s.publishers = 0), "publishers = 0"),
            (
                Box::new(|s| s.connection.topic_alias = true),
                "connection.topic_alias = true: a topic alias is an MQTT 5 property",
            ),
            (
                Box::new(|s| {
                    s.pacing = Pacing::OpenLoop {
                        interval: Duration::ZERO,
                    }
                }),
                "pacing.interval = 0s",
            ),
            (
                Box::new(|s| s.payload = ByteSize(300_000_000)),
                "payload = 300MB",
            ),
            (Box::new(|s| s.payload = ByteSize(9)), "payload = 9B"),
            (Box::new(|s| s.subscribers = 3), "subscribers = 3"),
            (Box::new(|s| s.warmup_messages = 10), "warmup_messages = 10"),
            (
                Box::new(|s| s.connection.inflight = 0),
                "connection.inflight = 0",
            ),
            (
                Box::new(|s| {
                    s.shard = Some(Shard {
                        publishers: 0..9,
                        subscribers: 0..1,
                    })
                }),
                "shard.publishers = 0..9",
            ),
            (
                Box::new(|s| {
                    s.connection.offline = Some(crate::spec::OfflineGap {
                        after: Duration::from_secs(1),
                        gap: Duration::from_secs(2),
                    })
                }),
                "connection.offline = 2s: needs connection.clean_session = false",
            ),
            (
                Box::new(|s| {
                    s.connection.reconnect = Some(Reconnect {
                        within: Duration::ZERO,
                        retry: Duration::from_millis(100),
                        cut_all_at: None,
                    })
                }),
                "connection.reconnect.within = 0s: above 0",
            ),
            (
                Box::new(|s| {
                    s.connection.reconnect = Some(Reconnect {
                        within: Duration::from_secs(5),
                        retry: Duration::from_millis(100),
                        cut_all_at: Some(Duration::ZERO),
                    })
                }),
                "connection.reconnect.cut_all_at = 0s: after the start",
            ),
            (
                Box::new(|s| {
                    s.qos = Qos::ExactlyOnce;
                    s.connection.reconnect = Some(Reconnect {
                        within: Duration::from_secs(5),
                        retry: Duration::from_millis(100),
                        cut_all_at: None,
                    })
                }),
                "connection.reconnect = 5s: is measured at QoS 0 and 1",
            ),
            (
                Box::new(|s| {
                    s.churn = Some(Churn {
                        rate: 0.0,
                        connections: 10,
                        hold: Duration::from_secs(1),
                    })
                }),
                "churn.rate = 0: new connections per second",
            ),
            (
                Box::new(|s| {
                    s.topology = Topology::Shared;
                    s.publishers = 10_000;
                    s.subscribers = 1;
                    s.payload = ByteSize(16);
                    s.connection.ramp_up_per_second = Some(2);
                }),
                "connection.ramp_up_per_second = 2: 10001 clients would take 1h 23m 21s to connect",
            ),
            (
                Box::new(|s| s.broker.websocket_path = Some("/mqtt".into())),
                "broker.websocket_path = \"/mqtt\": only with broker.transport = \"websocket\"",
            ),
            (
                Box::new(|s| {
                    s.broker.transport = Transport::WebSocket;
                    s.broker.websocket_path = Some("mqtt".into());
                }),
                "broker.websocket_path = \"mqtt\": a request path starts with /",
            ),
        ];
        for (mutate, expected) in cases {
            let mut spec = example();
            mutate(&mut spec);
            let error = spec.validate().expect_err(expected);
            assert!(
                error.to_string().starts_with(expected),
                "{error} should start with {expected}"
            );
        }
    }

    /// Every duration that schedules work, set to u64::MAX seconds in a spec that is valid
    /// otherwise (and read from TOML, as a spec file or a plan's workload table gives it), is
    /// refused naming its own path and the value, without a panic.
    #[test]
    fn every_duration_at_u64_max_seconds_is_refused_naming_its_path() {
        const MAX: &str = "\"18446744073709551615s\"";
        // Top-level keys first, then each case's fields (keys, then tables), the broker last.
        let base = "publishers = 1\nsubscribers = 1\nqos = 1\npayload = \"16B\"\n";
        let broker = "[broker]\nhost = \"127.0.0.1\"\nport = 1883\n";
        let counted = "messages_per_publisher = 10\n";
        let timed = "duration = \"1s\"\n";
        let open_loop = "[pacing]\nmode = \"open-loop\"\ninterval = \"1s\"\n";
        let rate = "[pacing]\nmode = \"rate\"\nrate = 10\n";
        let cases: Vec<(&str, String)> = vec![
            (
                "pacing.interval",
                format!("{counted}[pacing]\nmode = \"open-loop\"\ninterval = {MAX}\n"),
            ),
            ("duration", format!("duration = {MAX}\n{rate}")),
            ("warmup", format!("{timed}warmup = {MAX}\n{rate}")),
            (
                "drain.timeout",
                format!("{counted}{open_loop}[drain]\ntimeout = {MAX}\n"),
            ),
            (
                "drain.idle",
                format!("{counted}{open_loop}[drain]\nidle = {MAX}\n"),
            ),
            (
                "connection.keep_alive",
                format!("{counted}{open_loop}[connection]\nkeep_alive = {MAX}\n"),
            ),
            (
                "connection.connect_timeout",
                format!("{counted}{open_loop}[connection]\nconnect_timeout = {MAX}\n"),
            ),
            (
                "connection.offline.after",
                format!(
                    "{counted}{open_loop}[connection]\nclean_session = false\noffline = {{ after = {MAX}, gap = \"1s\" }}\n"
                ),
            ),
            (
                "connection.offline.gap",
                format!(
                    "{counted}{open_loop}[connection]\nclean_session = false\noffline = {{ after = \"1s\", gap = {MAX} }}\n"
                ),
            ),
            (
                "connection.reconnect.within",
                format!(
                    "{counted}{open_loop}[connection]\nreconnect = {{ within = {MAX}, retry = \"1ms\" }}\n"
                ),
            ),
            (
                "connection.reconnect.retry",
                format!(
                    "{counted}{open_loop}[connection]\nreconnect = {{ within = \"5s\", retry = {MAX} }}\n"
                ),
            ),
            (
                "connection.reconnect.cut_all_at",
                format!(
                    "{counted}{open_loop}[connection]\nreconnect = {{ within = \"5s\", cut_all_at = {MAX} }}\n"
                ),
            ),
            (
                "engine.coalescing",
                format!("{counted}{open_loop}[engine]\ncoalescing = {MAX}\n"),
            ),
            (
                "churn.hold",
                format!(
                    "{counted}{open_loop}[churn]\nrate = 10.0\nconnections = 10\nhold = {MAX}\n"
                ),
            ),
        ];
        for (path, fields) in cases {
            let text = format!("{base}{fields}{broker}");
            // The same spec with the field at a millisecond is valid: the bound is what refuses.
            let sane = text.replace("18446744073709551615s", "1ms");
            WorkloadSpec::from_toml(&sane).unwrap_or_else(|e| panic!("{path}: {e}\n{sane}"));
            let spec: WorkloadSpec = toml::from_str(&text).expect(path);
            let error = spec.validate().expect_err(path);
            assert_eq!(error.path, path, "{error}");
            assert!(
                error.to_string().starts_with(&format!("{path} = ")),
                "{error}"
            );
            assert!(
                error.value.contains("584542046090y")
                    || error.value.contains("18446744073709551615"),
                "the value is named: {error}"
            );
        }
    }

    /// A churn so slow that its arrivals do not fit a `Duration` is refused, not a panic.
    #[test]
    fn a_churn_rate_near_zero_is_refused_without_a_panic() {
        let mut spec = example();
        spec.churn = Some(Churn {
            rate: 1e-300,
            connections: 10,
            hold: Duration::from_secs(1),
        });
        let error = spec.validate().expect_err("too slow");
        assert_eq!(error.path, "churn.connections", "{error}");
    }

    #[test]
    fn compact_header_limits_are_enforced() {
        let mut spec = example();
        spec.topology = Topology::Shared;
        spec.publishers = 70_000;
        assert_eq!(spec.validate().expect_err("too many").path, "publishers");
        spec.payload = ByteSize(16);
        spec.validate()
            .expect("the full header numbers 2^32 publishers");
    }

    /// Counts that would make loadgen allocate gigabytes (or abort) are refused first, each
    /// naming its field.
    #[test]
    fn sizes_that_would_exhaust_memory_are_refused_with_their_field() {
        let refused = |mutate: &dyn Fn(&mut WorkloadSpec)| {
            let mut spec = example();
            mutate(&mut spec);
            spec.validate().expect_err("refused")
        };
        let error = refused(&|s| {
            s.publishers = 4_000_000_000;
            s.subscribers = 4_000_000_000;
        });
        assert_eq!(error.path, "publishers", "{error}");
        let error = refused(&|s| {
            s.topology = Topology::Shared;
            s.publishers = 100_000;
            s.subscribers = 1_000;
        });
        assert_eq!(error.path, "subscribers", "{error}");
        assert!(error.problem.contains("tracks"), "{error}");
        let error = refused(&|s| {
            s.topology = Topology::Pairs;
            s.payload = ByteSize(200_000_000);
            s.publishers = 100;
            s.subscribers = 100;
        });
        assert_eq!(error.path, "payload", "{error}");
        let error = refused(&|s| {
            s.topology = Topology::Shared;
            s.payload = ByteSize(1_000);
            s.publishers = 10_000;
            s.subscribers = 1_000;
            s.messages_per_publisher = 1 << 30;
            s.warmup_messages = 0;
        });
        assert_eq!(error.path, "messages_per_publisher", "{error}");
    }
}
