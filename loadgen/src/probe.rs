//! The capability probe ([`Capabilities`]): an MQTT 3.1.1 and an MQTT 5 CONNECT, the MQTT 5
//! CONNACK's properties, then with the best version a round trip each for wildcards, shared
//! subscriptions, retained messages and a session kept across a reconnect, and over MQTT 5 a
//! will with a delay (what a broker does, not only what it says). Every wait is bounded; the
//! probe leaves nothing retained and no session behind.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::capabilities::Capabilities;
use crate::clock::unix_now_ns;
use crate::codec::{Codec, ConnectFields, Incoming, WillFields};
use crate::session::{self, READ_CHUNK, Session};
use crate::spec::{BrokerTarget, MqttVersion, Qos};
use crate::transport::Dialer;

/// How long a delivery the probe waits for may take: generous, since a broker taken for
/// lacking a feature has its cells skipped, and a busy host can be slow; a feature that is
/// missing costs this wait once per broker.
const ROUND_TRIP: Duration = Duration::from_secs(3);
/// Largest packet the probe accepts.
const MAX_PACKET: usize = 1 << 20;
/// The will delay the probe asks for: a will published sooner ignored it.
const WILL_DELAY: Duration = Duration::from_secs(1);

/// Probes the broker at `target` (its protocol field is ignored: both are tried), each
/// connection within `connect_within`. `None` when neither version's CONNECT was accepted
/// (credentials, a broker that is down): nothing is known then.
pub async fn probe(target: &BrokerTarget, connect_within: Duration) -> Option<Capabilities> {
    let dialer = Dialer::new(target).ok()?;
    let probe = Probe {
        dialer,
        target,
        id: format!("continuum-probe-{:08x}", unix_now_ns() & 0xffff_ffff),
        within: connect_within,
    };
    let mut caps = Capabilities::default();
    // Only an answer is a "no": a refusal, or the broker closing the connection on the
    // CONNECT. A timeout or a socket error says nothing, and then nothing is known.
    let answered = |why: &session::ConnectFailure| {
        matches!(
            why,
            session::ConnectFailure::Refused(_) | session::ConnectFailure::Protocol(_)
        )
    };
    match probe.open(MqttVersion::V311, "v4").await {
        Ok(mut session) => {
            caps.mqtt311 = true;
            goodbye(&mut session).await;
        }
        Err(why) if answered(&why) => caps.notes.push(format!("MQTT 3.1.1 CONNECT: {why}")),
        Err(_) => return None,
    }
    match probe.open(MqttVersion::V5, "v5").await {
        Ok(mut session) => {
            caps.mqtt5 = true;
            let limits = session.limits;
            caps.maximum_qos = Some(limits.maximum_qos.unwrap_or(2));
            caps.topic_alias_maximum = Some(limits.topic_alias_maximum.unwrap_or(0));
            caps.receive_maximum = Some(session.receive_maximum.unwrap_or(u16::MAX));
            caps.maximum_packet_size = limits.maximum_packet_size;
            for (said, what) in [
                (limits.retain_available, "Retain Available"),
                (
                    limits.wildcards_available,
                    "Wildcard Subscription Available",
                ),
                (limits.shared_available, "Shared Subscription Available"),
            ] {
                if let Some(said) = said {
                    caps.notes.push(format!("MQTT 5 CONNACK: {what} = {said}"));
                }
            }
            goodbye(&mut session).await;
        }
        Err(why) if answered(&why) => caps.notes.push(format!("MQTT 5 CONNECT: {why}")),
        Err(_) => return None,
    }
    let version = match (caps.mqtt5, caps.mqtt311) {
        (true, _) => MqttVersion::V5,
        (false, true) => MqttVersion::V311,
        (false, false) => return None,
    };
    caps.wildcards = probe
        .delivers(version, "w", "+/w", "a/w", &mut caps.notes)
        .await;
    caps.shared_subscriptions = probe
        .delivers(
            version,
            "s",
            &format!("$share/{}/s", probe.id),
            "s",
            &mut caps.notes,
        )
        .await;
    caps.retain = probe.retains(version, "r", "r", &mut caps.notes).await;
    caps.retain_to_wildcards = probe.retains(version, "q", "+", &mut caps.notes).await;
    (caps.kept_sessions, caps.session_expiry_secs) =
        probe.keeps_sessions(version, &mut caps.notes).await;
    if caps.mqtt5 {
        caps.will_delay = probe.delays_wills(&mut caps.notes).await;
    }
    Some(caps)
}

struct Probe<'a> {
    dialer: Dialer,
    target: &'a BrokerTarget,
    id: String,
    within: Duration,
}

impl Probe<'_> {
    /// The probe's topics live under `continuum-probe/<id>/`.
    fn topic(&self, rest: &str) -> String {
        format!("continuum-probe/{}/{rest}", self.id)
    }

    async fn open(
        &self,
        version: MqttVersion,
        suffix: &str,
    ) -> Result<Session, session::ConnectFailure> {
        self.open_as(version, suffix, true, None).await
    }

    /// [`Self::open`] with clean session (clean start) as `clean`, and a will.
    async fn open_as(
        &self,
        version: MqttVersion,
        suffix: &str,
        clean: bool,
        will: Option<WillFields<'_>>,
    ) -> Result<Session, session::ConnectFailure> {
        let client_id = format!("{}-{suffix}", self.id);
        let fields = ConnectFields {
            client_id: &client_id,
            keep_alive_secs: 30,
            clean_session: clean,
            login: self
                .target
                .username
                .as_deref()
                .map(|user| (user, self.target.password.as_deref().unwrap_or(""))),
            max_packet_size: MAX_PACKET as u32,
            receive_maximum: u16::MAX,
            will,
        };
        session::open(
            &self.dialer,
            Codec::new(version, MAX_PACKET),
            &fields,
            None,
            self.within,
        )
        .await
    }

    /// Whether a subscription to `filter` receives a message published to `topic` (both
    /// below the probe's prefix, a `$share/...` filter's prefix before it); `None` when the
    /// probe could not tell.
    async fn delivers(
        &self,
        version: MqttVersion,
        what: &str,
        filter: &str,
        topic: &str,
        notes: &mut Vec<String>,
    ) -> Option<bool> {
        let filter = match filter.strip_prefix("$share/") {
            Some(shared) => {
                let (group, rest) = shared.split_once('/')?;
                format!("$share/{group}/{}", self.topic(rest))
            }
            None => self.topic(filter),
        };
        let name = match what {
            "w" => "wildcard subscription",
            _ => "shared subscription",
        };
        let mut subscriber = self.open(version, &format!("{what}s")).await.ok()?;
        let mut publisher = self.open(version, &format!("{what}p")).await.ok()?;
        let outcome = async {
            if let Err(refusal) = subscribe(&mut subscriber, &filter).await? {
                notes.push(format!("{name}: {refusal} {filter}"));
                return Some(false);
            }
            let marker = format!("probe-{what}");
            publish(&mut publisher, &self.topic(topic), marker.as_bytes(), false).await?;
            let arrived = wait_for(&mut subscriber, |p| {
                matches!(p, Incoming::Publish { payload, .. } if payload.as_ref() == marker.as_bytes())
            })
            .await;
            if !arrived {
                notes.push(format!("{name}: subscribed, but nothing arrived within {ROUND_TRIP:?}"));
            }
            Some(arrived)
        }
        .await;
        goodbye(&mut subscriber).await;
        goodbye(&mut publisher).await;
        outcome
    }

    /// Whether a message retained on topic `<name>/r` reaches a later subscription to
    /// `<name>/<filter>` (then cleared). A retained message may arrive before the SUBACK
    /// (MQTT 5 §3.8.4): the wait takes either order.
    async fn retains(
        &self,
        version: MqttVersion,
        name: &str,
        filter: &str,
        notes: &mut Vec<String>,
    ) -> Option<bool> {
        let topic = self.topic(&format!("{name}/r"));
        let marker = format!("probe-{name}");
        let mut publisher = self.open(version, &format!("{name}p")).await.ok()?;
        let kept = async {
            publish(&mut publisher, &topic, marker.as_bytes(), true).await?;
            let mut subscriber = self.open(version, &format!("{name}s")).await.ok()?;
            let mut out = BytesMut::new();
            let full_filter = self.topic(&format!("{name}/{filter}"));
            subscriber
                .codec
                .subscribe(7, &full_filter, Qos::AtMostOnce, &mut out)
                .ok()?;
            subscriber.writer.write_all(&out).await.ok()?;
            subscriber.writer.flush().await.ok()?;
            let delivered = wait_for(&mut subscriber, |p| {
                matches!(p, Incoming::Publish { retain: true, payload, .. } if payload.as_ref() == marker.as_bytes())
            })
            .await;
            goodbye(&mut subscriber).await;
            Some(delivered)
        }
        .await;
        // An empty retained message clears the topic, whatever the answer was.
        let _ = publish(&mut publisher, &topic, b"", true).await;
        goodbye(&mut publisher).await;
        if kept == Some(false) {
            notes.push(format!(
                "retained message: a later subscription to {filter:?} got none within {ROUND_TRIP:?}"
            ));
        }
        kept
    }
}

impl Probe<'_> {
    /// Whether a session with clean session off, holding a subscription as the sessions a
    /// workload keeps do, is still there when its client comes back, with the session expiry
    /// an MQTT 5 CONNACK imposed in place of the one asked; the session is ended afterwards by
    /// a clean connection of the same client, whatever happened. (RabbitMQ keeps a session
    /// only while it holds a subscription at QoS 1: its queue.)
    async fn keeps_sessions(
        &self,
        version: MqttVersion,
        notes: &mut Vec<String>,
    ) -> (Option<bool>, Option<u32>) {
        let attempt = async {
            let mut first = self.open_as(version, "k", false, None).await.ok()?;
            let imposed = first.limits.session_expiry_interval;
            // At QoS 1: RabbitMQ keeps a QoS 0 subscription's queue with its connection only.
            let subscribed = subscribe_at(&mut first, &self.topic("k"), Qos::AtLeastOnce).await;
            goodbye(&mut first).await;
            if subscribed != Some(Ok(())) {
                return None;
            }
            let mut again = self.open_as(version, "k", false, None).await.ok()?;
            goodbye(&mut again).await;
            Some((again.session_present, imposed))
        }
        .await;
        // A clean connection of the same client ends whatever session is left.
        if let Ok(mut clean) = self.open_as(version, "k", true, None).await {
            goodbye(&mut clean).await;
        }
        let Some((present, imposed)) = attempt else {
            return (None, None);
        };
        if !present {
            notes.push(
                "persistent session: its client came back to no session (CONNACK session present 0)"
                    .to_string(),
            );
        }
        (Some(present), imposed)
    }

    /// Whether an MQTT 5 will with a delay of [`WILL_DELAY`] is published after the delay
    /// (its client's socket closed without DISCONNECT); `None` when no will came at all.
    async fn delays_wills(&self, notes: &mut Vec<String>) -> Option<bool> {
        let topic = self.topic("wd");
        let mut watcher = self.open(MqttVersion::V5, "wdw").await.ok()?;
        let marker = b"probe-wd";
        let outcome =
            async {
                if subscribe(&mut watcher, &topic).await?.is_err() {
                    return None;
                }
                let will = WillFields {
                    topic: &topic,
                    payload: marker,
                    qos: Qos::AtMostOnce,
                    retain: false,
                    delay_secs: Some(u32::try_from(WILL_DELAY.as_secs()).unwrap_or(1)),
                };
                let client = self
                    .open_as(MqttVersion::V5, "wdc", true, Some(will))
                    .await
                    .ok()?;
                // Closed without DISCONNECT, as a device that dies: the broker owes the will.
                drop(client);
                let dropped = Instant::now();
                let arrived = wait_within(&mut watcher, WILL_DELAY + ROUND_TRIP, |p| {
                matches!(p, Incoming::Publish { payload, .. } if payload.as_ref() == marker)
            })
            .await;
                let after = dropped.elapsed();
                if !arrived {
                    notes.push(format!(
                        "will delay: no will within {:?} of its client's drop",
                        WILL_DELAY + ROUND_TRIP
                    ));
                    return None;
                }
                if after < WILL_DELAY {
                    notes.push(format!(
                        "will delay: a will with a {WILL_DELAY:?} delay came {} ms after the drop",
                        after.as_millis()
                    ));
                }
                Some(after >= WILL_DELAY)
            }
            .await;
        goodbye(&mut watcher).await;
        outcome
    }
}

/// Subscribes to `filter` at QoS 0; false when the SUBACK refused it.
async fn subscribe(session: &mut Session, filter: &str) -> Option<Result<(), String>> {
    subscribe_at(session, filter, Qos::AtMostOnce).await
}

/// [`subscribe`] at `qos`: granted, refused (how), or `None` when no answer came.
async fn subscribe_at(session: &mut Session, filter: &str, qos: Qos) -> Option<Result<(), String>> {
    let mut out = BytesMut::new();
    session.codec.subscribe(7, filter, qos, &mut out).ok()?;
    session.writer.write_all(&out).await.ok()?;
    session.writer.flush().await.ok()?;
    let mut answer = None;
    wait_for(session, |p| match p {
        Incoming::SubAck {
            pkid: 7, refused, ..
        } => {
            answer = Some(if *refused == 0 {
                Ok(())
            } else {
                Err("SUBACK refused".to_string())
            });
            true
        }
        // A broker may end the session instead of answering (ejabberd answers a `$share/`
        // filter with DISCONNECT "shared subscriptions not supported"): also a refusal.
        Incoming::Disconnect(reason) => {
            answer = Some(Err(format!("DISCONNECT ({reason}) refused")));
            true
        }
        _ => false,
    })
    .await;
    answer
}

/// Publishes at QoS 0, then waits for a PINGRESP: the broker handles a connection's packets
/// in order, so by then it has routed (or kept) the message.
async fn publish(session: &mut Session, topic: &str, payload: &[u8], retain: bool) -> Option<()> {
    let template = session
        .codec
        .publish_template(topic, Qos::AtMostOnce, payload.len())
        .ok()?;
    let template = if retain {
        template.retained()
    } else {
        template
    };
    let mut out = BytesMut::new();
    template.write_prefix(0, &mut out);
    out.extend_from_slice(payload);
    session.codec.ping(&mut out).ok()?;
    session.writer.write_all(&out).await.ok()?;
    session.writer.flush().await.ok()?;
    wait_for(session, |p| matches!(p, Incoming::PingResp))
        .await
        .then_some(())
}

/// Reads until a packet `wanted` accepts arrives (true) or [`ROUND_TRIP`] passes (false).
async fn wait_for(session: &mut Session, wanted: impl FnMut(&Incoming) -> bool) -> bool {
    wait_within(session, ROUND_TRIP, wanted).await
}

/// [`wait_for`] for up to `within`.
async fn wait_within(
    session: &mut Session,
    within: Duration,
    mut wanted: impl FnMut(&Incoming) -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    loop {
        while let Ok(Some(packet)) = session.codec.decode(&mut session.read_buffer) {
            if wanted(&packet) {
                return true;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        session.read_buffer.reserve(READ_CHUNK);
        match tokio::time::timeout(left, session.reader.read_buf(&mut session.read_buffer)).await {
            Ok(Ok(read)) if read > 0 => {}
            _ => return false,
        }
    }
}

async fn goodbye(session: &mut Session) {
    let mut out = BytesMut::new();
    if session.codec.disconnect(&mut out).is_ok() {
        let _ = session.writer.write_all(&out).await;
        let _ = session.writer.flush().await;
        let _ = session.writer.shutdown().await;
    }
}
