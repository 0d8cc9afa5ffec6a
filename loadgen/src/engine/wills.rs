//! The will clients of a run ([`crate::spec::Wills`]): a watcher subscribes to their will
//! topics, the clients connect with their wills, `dropped` of them close their socket without
//! DISCONNECT at the drop time (as a dying device does), and the watcher must get each of
//! those wills once; the others then disconnect cleanly, and no will of theirs may come.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::retained::{clear, decode_all, goodbye};
use crate::clock::RunClock;
use crate::codec::{AckKind, Codec, Incoming, WillFields};
use crate::session::{self, READ_CHUNK, Session};
use crate::spec::{WILL_CLOSE_WAIT, WILL_QUIET, Wills, WorkloadSpec};
use crate::transport::Dialer;
use crate::wills::WillOutcome;

/// What one will run needs (owned: it runs on a task of its own beside the workload);
/// `start_ns` is the start barrier on the run clock.
pub(super) struct Fleet {
    pub spec: Arc<WorkloadSpec>,
    pub wills: Wills,
    pub run_id: String,
    pub dialer: Dialer,
    pub codec: Codec,
    pub clock: RunClock,
    pub start_ns: u64,
}

/// Where a will client stands, as the watcher judges its will.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// Connected and not dropped: a will of it is unexpected.
    Open,
    /// Its connection failed: the broker may have taken its CONNECT, so a will of it is
    /// neither owed nor wrong.
    Failed,
    /// Dropped at this time (run clock): its will is owed.
    Dropped { at_ns: u64 },
    /// Its will came.
    Arrived,
}

/// The watcher's tally: each dropped client's first will, copies, and wills not owed.
struct Tally {
    clients: Vec<Client>,
    outcome: WillOutcome,
}

impl Tally {
    /// Judges one will by the client index its payload names, arriving at `now_ns`. A
    /// retained copy (sent from the broker's store to a new subscription) is no live will.
    fn judge(&mut self, payload: &[u8], retained: bool, now_ns: u64) {
        if retained {
            return;
        }
        let index = std::str::from_utf8(payload)
            .ok()
            .and_then(|text| text.parse::<usize>().ok());
        match index.and_then(|i| Some((i, *self.clients.get(i)?))) {
            Some((i, Client::Dropped { at_ns })) => {
                self.clients[i] = Client::Arrived;
                self.outcome.delivered += 1;
                self.outcome.from_drop_ns.push(now_ns.saturating_sub(at_ns));
            }
            Some((_, Client::Arrived)) => self.outcome.duplicates += 1,
            Some((_, Client::Failed)) => {}
            Some((_, Client::Open)) | None => self.outcome.unexpected += 1,
        }
    }
}

impl Fleet {
    /// Runs the watcher and the will clients to the end (or until `cancel`).
    pub(super) async fn run(self, cancel: CancellationToken) -> WillOutcome {
        let outcome = WillOutcome {
            delay_ns: u64::try_from(self.wills.delay_sent().as_nanos()).unwrap_or(u64::MAX),
            ..WillOutcome::default()
        };
        let Some(mut watcher) = self.watch().await else {
            return outcome;
        };
        let mut sessions = self.connect_all(&cancel).await;
        let mut tally = Tally {
            clients: sessions
                .iter()
                .map(|s| {
                    if s.is_some() {
                        Client::Open
                    } else {
                        Client::Failed
                    }
                })
                .collect(),
            outcome,
        };
        tally.outcome.watched = true;
        tally.outcome.connected = sessions.iter().filter(|s| s.is_some()).count() as u32;
        tally.outcome.failed = self.wills.clients - tally.outcome.connected;
        let drop_due_ns = self
            .start_ns
            .saturating_add(crate::clock::saturating_nanos(self.wills.after));
        // Wills that come before the drop are judged too: a client the broker let go.
        let due = self.clock.instant_at(drop_due_ns);
        let held = self
            .watch_until(due, false, &mut sessions, &mut watcher, &mut tally, &cancel)
            .await;
        if held && !cancel.is_cancelled() {
            for (index, session) in sessions
                .iter_mut()
                .enumerate()
                .take(self.wills.dropped as usize)
            {
                // Closing the socket, no DISCONNECT: the broker must publish the will.
                if let Some(session) = session.take() {
                    let now_ns = self.clock.now_ns();
                    drop(session);
                    tally.clients[index] = Client::Dropped { at_ns: now_ns };
                    tally.outcome.dropped += 1;
                    let late = now_ns.saturating_sub(drop_due_ns);
                    tally.outcome.drop_late_ns = tally.outcome.drop_late_ns.max(late);
                }
            }
            let delay = self.wills.delay_sent();
            let deadline = Instant::now() + delay + self.spec.drain.timeout;
            self.watch_until(
                deadline,
                true,
                &mut sessions,
                &mut watcher,
                &mut tally,
                &cancel,
            )
            .await;
        }
        let cancelled = cancel.is_cancelled();
        tally.outcome.disconnected = disconnect_all(&mut sessions, !cancelled).await;
        if !cancelled {
            // A broker that wrongly publishes a clean client's will does so after the delay.
            let quiet_until = Instant::now() + self.wills.delay_sent() + WILL_QUIET;
            self.watch_until(
                quiet_until,
                false,
                &mut sessions,
                &mut watcher,
                &mut tally,
                &cancel,
            )
            .await;
        }
        goodbye(&mut watcher).await;
        let mut outcome = tally.outcome;
        outcome.from_drop_ns.sort_unstable();
        if self.wills.retain && !cancel.is_cancelled() {
            let topics: Vec<String> = (0..self.wills.clients)
                .map(|i| self.spec.will_topic(&self.run_id, i))
                .collect();
            if clear(&self.spec, &self.run_id, &self.dialer, self.codec, &topics).await {
                outcome.cleared = topics.len() as u64;
            }
        }
        outcome
    }

    /// The watcher, subscribed to every will topic of the run; `None` when it could not.
    async fn watch(&self) -> Option<Session> {
        let client_id = format!(
            "{}-{}-will-watcher",
            self.spec.connection.client_id_prefix, self.run_id
        );
        let fields = session::connect_fields(&self.spec, &client_id);
        let filter = format!("{}/#", self.spec.will_topics(&self.run_id));
        // Without retain-as-published whatever the workload asks: a live will must arrive
        // with RETAIN cleared, and one set is a copy from the broker's store.
        session::open(
            &self.dialer,
            self.codec.with_retain_as_published(false),
            &fields,
            Some((&filter, self.wills.qos)),
            self.spec.connection.connect_timeout,
        )
        .await
        .ok()
    }

    /// Every will client, connected with its will, by index; `None` for those that could not.
    async fn connect_all(&self, cancel: &CancellationToken) -> Vec<Option<Session>> {
        let mut connecting = JoinSet::new();
        for index in 0..self.wills.clients {
            let (spec, wills) = (self.spec.clone(), self.wills.clone());
            let (dialer, codec) = (self.dialer.clone(), self.codec);
            let client_id = format!(
                "{}-{}-will{index}",
                spec.connection.client_id_prefix, self.run_id
            );
            let topic = spec.will_topic(&self.run_id, index);
            connecting.spawn(async move {
                let payload = index.to_string();
                let mut fields = session::connect_fields(&spec, &client_id);
                fields.will = Some(WillFields {
                    topic: &topic,
                    payload: payload.as_bytes(),
                    qos: wills.qos,
                    retain: wills.retain,
                    delay_secs: wills.delay_secs(),
                });
                let timeout = spec.connection.connect_timeout;
                let mut session = session::open(&dialer, codec, &fields, None, timeout)
                    .await
                    .ok();
                if let Some(session) = session.as_mut() {
                    // Nothing is read on a will client but a ping's answer: no 64 KiB each.
                    session.read_buffer = BytesMut::new();
                }
                (index as usize, session)
            });
        }
        let mut sessions: Vec<Option<Session>> = Vec::new();
        sessions.resize_with(self.wills.clients as usize, || None);
        loop {
            tokio::select! {
                joined = connecting.join_next() => match joined {
                    Some(Ok((index, session))) => sessions[index] = session,
                    Some(Err(_)) => {}
                    None => break,
                },
                () = cancel.cancelled() => break,
            }
        }
        sessions
    }

    /// Half the keep-alive between pings, as MQTT clients do.
    fn ping_every(&self) -> Duration {
        (self.spec.connection.keep_alive / 2).max(Duration::from_secs(1))
    }

    /// Reads the watcher until `until` (or, when `until_all`, until every owed will came),
    /// judging each will and keeping every connection alive; false when cancelled or the
    /// watcher's connection ended (then `watched` is false: the wills were not all seen).
    async fn watch_until(
        &self,
        until: Instant,
        until_all: bool,
        sessions: &mut [Option<Session>],
        watcher: &mut Session,
        tally: &mut Tally,
        cancel: &CancellationToken,
    ) -> bool {
        let mut pinged = Instant::now();
        while Instant::now() < until {
            if until_all && tally.outcome.delivered >= tally.outcome.dropped {
                return true;
            }
            let next = until.min(Instant::now() + self.ping_every());
            if !self.listen(watcher, tally, next, cancel).await {
                if !cancel.is_cancelled() {
                    tally.outcome.watched = false;
                }
                return false;
            }
            if pinged.elapsed() >= self.ping_every() {
                for session in sessions.iter_mut().flatten() {
                    ping(session).await;
                }
                ping(watcher).await;
                pinged = Instant::now();
            }
        }
        true
    }

    /// Reads the watcher once, waiting until `until` at most, judging each will and
    /// acknowledging it; false when the connection ended or `cancel` came.
    async fn listen(
        &self,
        watcher: &mut Session,
        tally: &mut Tally,
        until: Instant,
        cancel: &CancellationToken,
    ) -> bool {
        watcher.read_buffer.reserve(READ_CHUNK);
        tokio::select! {
            read = watcher.reader.read_buf(&mut watcher.read_buffer) => match read {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            },
            () = tokio::time::sleep_until(until.into()) => return true,
            () = cancel.cancelled() => return false,
        }
        let now_ns = self.clock.now_ns();
        let mut out = BytesMut::new();
        for packet in decode_all(watcher) {
            match packet {
                Incoming::Publish {
                    qos,
                    pkid,
                    payload,
                    retain,
                    ..
                } => {
                    tally.judge(&payload, retain, now_ns);
                    let ack = match qos {
                        1 => Some(AckKind::PubAck),
                        2 => Some(AckKind::PubRec),
                        _ => None,
                    };
                    if let Some(kind) = ack {
                        let _ = watcher.codec.ack(kind, pkid, &mut out);
                    }
                }
                Incoming::PubRel(pkid) => {
                    let _ = watcher.codec.ack(AckKind::PubComp, pkid, &mut out);
                }
                Incoming::Disconnect(_) => return false,
                _ => {}
            }
        }
        out.is_empty()
            || (watcher.writer.write_all(&out).await.is_ok()
                && watcher.writer.flush().await.is_ok())
    }
}

/// Disconnects every client still open, cleanly (its will discarded), and with `wait` lets
/// each read until the broker closes it (at most [`WILL_CLOSE_WAIT`]), so that unread ping
/// answers cannot turn the close into a reset that overtakes the DISCONNECT; how many
/// DISCONNECTs were written.
async fn disconnect_all(sessions: &mut [Option<Session>], wait: bool) -> u32 {
    let mut closing = JoinSet::new();
    for mut session in sessions.iter_mut().filter_map(Option::take) {
        closing.spawn(async move {
            let mut out = BytesMut::new();
            let written = session.codec.disconnect(&mut out).is_ok()
                && session.writer.write_all(&out).await.is_ok()
                && session.writer.flush().await.is_ok();
            let _ = session.writer.shutdown().await;
            if wait {
                let until_closed = async {
                    let mut sink = [0u8; 512];
                    while matches!(session.reader.read(&mut sink).await, Ok(read) if read > 0) {}
                };
                let _ = tokio::time::timeout(WILL_CLOSE_WAIT, until_closed).await;
            }
            written
        });
    }
    let mut disconnected = 0;
    while let Some(joined) = closing.join_next().await {
        disconnected += u32::from(joined.unwrap_or(false));
    }
    disconnected
}

/// Writes a PINGREQ; its answer is left unread until the close (a few bytes per keep-alive).
async fn ping(session: &mut Session) {
    let mut out = BytesMut::new();
    if session.codec.ping(&mut out).is_ok() {
        let _ = session.writer.write_all(&out).await;
        let _ = session.writer.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_will_counts_once_for_its_dropped_client_and_others_are_unexpected() {
        let mut tally = Tally {
            clients: vec![
                Client::Dropped { at_ns: 1_000 },
                Client::Open,
                Client::Dropped { at_ns: 1_500 },
                Client::Failed,
            ],
            outcome: WillOutcome::default(),
        };
        tally.judge(b"0", false, 3_000);
        tally.judge(b"0", false, 3_100);
        tally.judge(b"2", false, 2_000);
        tally.judge(b"1", false, 2_500); // disconnected cleanly: no will owed
        tally.judge(b"9", false, 2_500); // no such client
        tally.judge(b"not a number", false, 2_500);
        tally.judge(b"3", false, 2_500); // could not connect: its will may come
        tally.judge(b"1", true, 2_500); // a stored copy, not a live will
        let outcome = tally.outcome;
        assert_eq!(outcome.delivered, 2);
        assert_eq!(outcome.duplicates, 1);
        assert_eq!(outcome.unexpected, 3);
        assert_eq!(outcome.from_drop_ns, vec![2_000, 500]);
    }
}
