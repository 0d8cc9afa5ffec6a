//! Retained messages, checked once publishing has ended: late subscribers each must get the
//! last value of every topic their filter matches, once; then the run clears every topic it
//! retained and a fresh subscriber to all of them checks that nothing was left behind.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::prepare::Run;
use crate::codec::{AckKind, Codec, Incoming};
use crate::retained::RetainedOutcome;
use crate::session::{self, READ_CHUNK, Session};
use crate::spec::{Qos, WorkloadSpec};
use crate::transport::Dialer;

/// What one late subscriber found.
#[derive(Debug, Default)]
struct Found {
    current: u64,
    stale: u64,
    missing: u64,
    extra: u64,
    all_received_ns: Option<u64>,
}

impl Found {
    /// Judges one message, (publisher, seq) when it was retained and readable, against the
    /// owed topics' last values (`owed` is in publisher order); true when it is the first
    /// for an owed topic.
    fn judge(
        &mut self,
        message: Option<(u32, u32)>,
        owed: &[(u32, Option<u32>)],
        got: &mut [bool],
    ) -> bool {
        let owed_last = message.and_then(|(publisher, seq)| {
            let at = owed.binary_search_by_key(&publisher, |(p, _)| *p).ok()?;
            owed[at].1.map(|last| (publisher, seq, last))
        });
        match owed_last {
            Some((publisher, seq, last)) if !got[publisher as usize] => {
                got[publisher as usize] = true;
                if seq == last {
                    self.current += 1;
                } else {
                    self.stale += 1;
                }
                true
            }
            _ => {
                self.extra += 1;
                false
            }
        }
    }
}

/// Runs the late subscribers, then the clean-up and its check. `published` is per global
/// publisher (this instance holds them all: validation sees to it).
pub(super) async fn check(run: &Run<'_>, published: &[u64]) -> RetainedOutcome {
    let spec = run.spec;
    let Some(retain) = &spec.retain else {
        return RetainedOutcome::default();
    };
    // A publisher's last message is the one the broker keeps: its seq is the count sent - 1.
    let owed: Vec<(u32, Option<u32>)> = spec
        .retained_publishers()
        .into_iter()
        .map(|p| {
            let sent = published.get(p as usize).copied().unwrap_or(0);
            (
                p,
                sent.checked_sub(1)
                    .and_then(|last| u32::try_from(last).ok()),
            )
        })
        .collect();
    let filter = format!("{}/{}/{}", spec.topic_prefix, run.run_id, retain.filter);
    let mut late = JoinSet::new();
    for index in 0..retain.late_subscribers {
        let client_id = format!(
            "{}-{}-late{index}",
            spec.connection.client_id_prefix, run.run_id
        );
        let (dialer, codec, spec) = (run.dialer.clone(), run.codec, spec.clone());
        let (filter, owed) = (filter.clone(), owed.clone());
        late.spawn(async move {
            late_subscriber(&spec, dialer, codec, &client_id, &filter, &owed).await
        });
    }
    let mut outcome = RetainedOutcome {
        expected_each: if retain.owes_late_subscribers() {
            owed.iter().filter(|(_, last)| last.is_some()).count() as u64
        } else {
            0
        },
        ..RetainedOutcome::default()
    };
    while let Some(joined) = late.join_next().await {
        match joined {
            Ok(Some(found)) => {
                outcome.late_subscribers += 1;
                outcome.current += found.current;
                outcome.stale += found.stale;
                outcome.missing += found.missing;
                outcome.extra += found.extra;
                outcome.all_received_ns.extend(found.all_received_ns);
            }
            Ok(None) | Err(_) => outcome.failed += 1,
        }
    }
    outcome.all_received_ns.sort_unstable();
    let topics: Vec<String> = (0..spec.publishers)
        .map(|p| spec.topic_of(&run.run_id, p))
        .collect();
    if clear(spec, &run.run_id, &run.dialer, run.codec, &topics).await {
        outcome.cleared = topics.len() as u64;
        // Checked through the late subscribers' filter, and only when it was seen to carry
        // retained messages: a broker that delivers none to it would show 0 left regardless
        // (so not with retain handling 2 either).
        if outcome.current + outcome.stale > 0 {
            outcome.left_after_clear = still_retained(run, &filter).await;
        }
    }
    outcome
}

/// One late subscriber: connects, subscribes (twice with retain handling 1: the second must
/// bring nothing), and judges each retained message against the last value its topic was
/// sent (with retain handling 2, none is owed and any is extra); `None` when it could not
/// connect or subscribe.
async fn late_subscriber(
    spec: &WorkloadSpec,
    dialer: crate::transport::Dialer,
    codec: crate::codec::Codec,
    client_id: &str,
    filter: &str,
    owed: &[(u32, Option<u32>)],
) -> Option<Found> {
    let began = Instant::now();
    let fields = session::connect_fields(spec, client_id);
    // QoS 1 at most: a retained message is checked, not measured.
    let qos = spec.qos.min(Qos::AtLeastOnce);
    let mut session = session::open(
        &dialer,
        codec,
        &fields,
        None,
        spec.connection.connect_timeout,
    )
    .await
    .ok()?;
    // Subscribed here rather than by `open`: retained messages may come before the SUBACK
    // (MQTT 5 §3.8.4), and every one counts.
    let (handling, subscribes) = spec
        .retain
        .as_ref()
        .map_or((0, 1), |retain| (retain.handling, retain.late_subscribes()));
    for pkid in 1..=subscribes {
        subscribe(&mut session, pkid, filter, qos, handling).await?;
    }
    let mut subacks = 0u16;
    let header = spec.header_encoding();
    let expected = if handling == 2 {
        0
    } else {
        owed.iter().filter(|(_, last)| last.is_some()).count()
    };
    let mut got = vec![false; spec.publishers as usize];
    let mut found = Found::default();
    let mut distinct = 0usize;
    let deadline = Instant::now() + spec.drain.timeout;
    let mut out = BytesMut::new();
    // Until every owed message came and every SUBSCRIBE was answered: what a SUBSCRIBE
    // brings comes before its SUBACK.
    while (distinct < expected || subacks < subscribes) && Instant::now() < deadline {
        for packet in decode_all(&mut session) {
            let (qos, pkid, payload, retain, property) = match packet {
                Incoming::Publish {
                    qos,
                    pkid,
                    payload,
                    retain,
                    header,
                } => (qos, pkid, payload, retain, header),
                Incoming::SubAck { refused, .. } if refused > 0 => {
                    goodbye(&mut session).await;
                    return None;
                }
                Incoming::SubAck { .. } => {
                    subacks += 1;
                    continue;
                }
                _ => continue,
            };
            if qos == 1 {
                let _ = session.codec.ack(AckKind::PubAck, pkid, &mut out);
            }
            let bytes = match &property {
                Some(bytes) => Some(&bytes[..]),
                None => (!spec.header_in.is_property()).then_some(&payload[..]),
            };
            let message = bytes
                .and_then(|bytes| header.decode(bytes))
                .map(|h| (h.publisher, h.seq));
            if found.judge(message.filter(|_| retain), owed, &mut got) {
                distinct += 1;
            }
        }
        if !out.is_empty() {
            let _ = session.writer.write_all(&out).await;
            let _ = session.writer.flush().await;
            out.clear();
        }
        if distinct == expected && found.all_received_ns.is_none() && expected > 0 {
            found.all_received_ns = Some(began.elapsed().as_nanos() as u64);
        }
        if distinct == expected && subacks == subscribes {
            break;
        }
        if !read_within(&mut session, spec.drain.idle).await {
            break;
        }
    }
    // Copies that follow the last owed message are extras too: wait one short quiet spell.
    let all_came = distinct == expected && subacks == subscribes;
    if all_came && read_within(&mut session, QUIET).await {
        found.extra += decode_all(&mut session)
            .iter()
            .filter(|p| matches!(p, Incoming::Publish { .. }))
            .count() as u64;
    }
    found.missing = (expected - distinct) as u64;
    goodbye(&mut session).await;
    Some(found)
}

/// Writes a SUBSCRIBE with retain handling `handling`; its SUBACK is read with whatever the
/// broker sends around it.
async fn subscribe(
    session: &mut Session,
    pkid: u16,
    filter: &str,
    qos: Qos,
    handling: u8,
) -> Option<()> {
    let mut out = BytesMut::new();
    session
        .codec
        .subscribe_handling(pkid, filter, qos, handling, &mut out)
        .ok()?;
    session.writer.write_all(&out).await.ok()?;
    session.writer.flush().await.ok()
}

/// How long a subscriber listens for what should not come.
const QUIET: Duration = Duration::from_millis(300);

/// Every complete packet in the session's buffer.
pub(super) fn decode_all(session: &mut Session) -> Vec<Incoming> {
    let mut packets = Vec::new();
    while let Ok(Some(packet)) = session.codec.decode(&mut session.read_buffer) {
        packets.push(packet);
    }
    packets
}

/// Reads once, waiting at most `within`; false when nothing came or the connection ended.
async fn read_within(session: &mut Session, within: Duration) -> bool {
    session.read_buffer.reserve(READ_CHUNK);
    matches!(
        tokio::time::timeout(within, session.reader.read_buf(&mut session.read_buffer)).await,
        Ok(Ok(read)) if read > 0
    )
}

/// Publishes an empty retained message to every topic (QoS 0), then waits for the answer to
/// a PINGREQ: the broker handles one connection's packets in order, so by then it has
/// cleared them all. False when it could not.
pub(super) async fn clear(
    spec: &WorkloadSpec,
    run_id: &str,
    dialer: &Dialer,
    codec: Codec,
    topics: &[String],
) -> bool {
    let client_id = format!("{}-{run_id}-clear", spec.connection.client_id_prefix);
    let fields = session::connect_fields(spec, &client_id);
    let Ok(mut session) = session::open(
        dialer,
        codec,
        &fields,
        None,
        spec.connection.connect_timeout,
    )
    .await
    else {
        return false;
    };
    let mut out = BytesMut::new();
    for topic in topics {
        let Ok(template) = codec.publish_template(topic, Qos::AtMostOnce, 0) else {
            return false;
        };
        template.retained().write_prefix(0, &mut out);
    }
    if session.codec.ping(&mut out).is_err()
        || session.writer.write_all(&out).await.is_err()
        || session.writer.flush().await.is_err()
    {
        return false;
    }
    let deadline = Instant::now() + spec.drain.timeout;
    let mut answered = false;
    while !answered && Instant::now() < deadline {
        if !read_within(&mut session, spec.drain.timeout).await {
            break;
        }
        answered = decode_all(&mut session)
            .iter()
            .any(|p| matches!(p, Incoming::PingResp));
    }
    goodbye(&mut session).await;
    answered
}

/// Retained messages a fresh subscriber to `filter` gets; `None` when it could not subscribe.
async fn still_retained(run: &Run<'_>, filter: &str) -> Option<u64> {
    let spec = run.spec;
    let client_id = format!("{}-{}-left", spec.connection.client_id_prefix, run.run_id);
    let fields = session::connect_fields(spec, &client_id);
    let mut session = session::open(
        &run.dialer,
        run.codec,
        &fields,
        None,
        spec.connection.connect_timeout,
    )
    .await
    .ok()?;
    subscribe(&mut session, 1, filter, Qos::AtMostOnce, 0).await?;
    let mut left = 0;
    let deadline = Instant::now() + spec.drain.timeout;
    loop {
        let packets = decode_all(&mut session);
        if packets
            .iter()
            .any(|p| matches!(p, Incoming::SubAck { refused, .. } if *refused > 0))
        {
            goodbye(&mut session).await;
            return None;
        }
        left += packets
            .iter()
            .filter(|p| matches!(p, Incoming::Publish { retain: true, .. }))
            .count() as u64;
        if Instant::now() >= deadline || !read_within(&mut session, QUIET).await {
            break;
        }
    }
    goodbye(&mut session).await;
    Some(left)
}

pub(super) async fn goodbye(session: &mut Session) {
    let mut out = BytesMut::new();
    if session.codec.disconnect(&mut out).is_ok() {
        let _ = session.writer.write_all(&out).await;
        let _ = session.writer.flush().await;
        let _ = session.writer.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_retained_message_is_current_stale_or_extra() {
        // Publishers 0 and 2 are owed (last seqs 9 and 4); publisher 1 sent nothing.
        let owed = [(0, Some(9)), (1, None), (2, Some(4))];
        let mut got = vec![false; 3];
        let mut found = Found::default();
        assert!(found.judge(Some((0, 9)), &owed, &mut got));
        assert!(
            found.judge(Some((2, 3)), &owed, &mut got),
            "stale, but the topic's first"
        );
        assert!(!found.judge(Some((0, 9)), &owed, &mut got), "a second copy");
        assert!(
            !found.judge(Some((1, 0)), &owed, &mut got),
            "nothing owed there"
        );
        assert!(
            !found.judge(Some((7, 0)), &owed, &mut got),
            "not a publisher of the run"
        );
        assert!(!found.judge(None, &owed, &mut got), "live, or unreadable");
        assert_eq!((found.current, found.stale, found.extra), (1, 1, 4));
    }
}
