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
use crate::spec::{Wills, WorkloadSpec};
use crate::transport::Dialer;
use crate::wills::WillOutcome;

/// How long the watcher listens, after the clean disconnects (and any will delay), for wills
/// that should not come.
const QUIET: Duration = Duration::from_millis(500);

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

/// The watcher's tally: each dropped client's first will, copies, and wills not owed.
struct Tally {
    /// Per client, when it was dropped (run clock), for those dropped.
    dropped_at_ns: Vec<Option<u64>>,
    /// Per client, whether its will arrived.
    arrived: Vec<bool>,
    outcome: WillOutcome,
}

impl Tally {
    /// Judges one will by the client index its payload names, arriving at `now_ns`.
    fn judge(&mut self, payload: &[u8], now_ns: u64) {
        let index = std::str::from_utf8(payload)
            .ok()
            .and_then(|text| text.parse::<usize>().ok());
        let dropped_at = index.and_then(|i| Some((i, self.dropped_at_ns.get(i).copied()??)));
        match dropped_at {
            Some((i, _)) if self.arrived[i] => self.outcome.duplicates += 1,
            Some((i, at_ns)) => {
                self.arrived[i] = true;
                self.outcome.delivered += 1;
                self.outcome.from_drop_ns.push(now_ns.saturating_sub(at_ns));
            }
            None => self.outcome.unexpected += 1,
        }
    }
}

impl Fleet {
    /// Runs the watcher and the will clients to the end (or until `cancel`).
    pub(super) async fn run(self, cancel: CancellationToken) -> WillOutcome {
        let mut outcome = WillOutcome {
            delay_ns: self
                .wills
                .delay
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            ..WillOutcome::default()
        };
        let Some(mut watcher) = self.watch().await else {
            return outcome;
        };
        outcome.watched = true;
        let mut clients = self.connect_all(&cancel).await;
        outcome.connected = clients.iter().filter(|c| c.is_some()).count() as u32;
        outcome.failed = self.wills.clients - outcome.connected;
        let drop_due_ns = self
            .start_ns
            .saturating_add(crate::clock::saturating_nanos(self.wills.after));
        let due = self.clock.instant_at(drop_due_ns);
        if !self
            .hold_until(due, &mut clients, &mut watcher, &cancel)
            .await
        {
            self.disconnect_all(&mut clients).await;
            goodbye(&mut watcher).await;
            return outcome;
        }
        let mut tally = Tally {
            dropped_at_ns: vec![None; clients.len()],
            arrived: vec![false; clients.len()],
            outcome,
        };
        for (index, client) in clients
            .iter_mut()
            .enumerate()
            .take(self.wills.dropped as usize)
        {
            // Closing the socket, no DISCONNECT: the broker must publish the will.
            if let Some(session) = client.take() {
                let now_ns = self.clock.now_ns();
                drop(session);
                tally.dropped_at_ns[index] = Some(now_ns);
                tally.outcome.dropped += 1;
                let late = now_ns.saturating_sub(drop_due_ns);
                tally.outcome.drop_late_ns = tally.outcome.drop_late_ns.max(late);
            }
        }
        let delay = self.wills.delay.unwrap_or_default();
        let deadline = Instant::now() + delay + self.spec.drain.timeout;
        let mut pinged = Instant::now();
        while tally.outcome.delivered < tally.outcome.dropped && Instant::now() < deadline {
            let until = deadline.min(Instant::now() + self.ping_every());
            if cancel.is_cancelled() || !self.listen(&mut watcher, &mut tally, until).await {
                break;
            }
            if pinged.elapsed() >= self.ping_every() {
                self.ping_all(&mut clients, &mut watcher).await;
                pinged = Instant::now();
            }
        }
        tally.outcome.disconnected = self.disconnect_all(&mut clients).await;
        // A broker that wrongly publishes a clean client's will does so after the delay.
        let quiet_until = Instant::now() + delay + QUIET;
        while Instant::now() < quiet_until && !cancel.is_cancelled() {
            let until = quiet_until.min(Instant::now() + self.ping_every());
            if !self.listen(&mut watcher, &mut tally, until).await {
                break;
            }
            ping(&mut watcher).await;
        }
        goodbye(&mut watcher).await;
        let mut outcome = tally.outcome;
        outcome.from_drop_ns.sort_unstable();
        if self.wills.retain {
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
        let filter = format!("{}/{}/will/#", self.spec.topic_prefix, self.run_id);
        session::open(
            &self.dialer,
            self.codec,
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
                let session = session::open(&dialer, codec, &fields, None, timeout).await;
                (index as usize, session.ok())
            });
        }
        let mut clients: Vec<Option<Session>> = Vec::new();
        clients.resize_with(self.wills.clients as usize, || None);
        loop {
            tokio::select! {
                joined = connecting.join_next() => match joined {
                    Some(Ok((index, session))) => clients[index] = session,
                    Some(Err(_)) => {}
                    None => break,
                },
                () = cancel.cancelled() => break,
            }
        }
        clients
    }

    /// Half the keep-alive between pings, as MQTT clients do.
    fn ping_every(&self) -> Duration {
        (self.spec.connection.keep_alive / 2).max(Duration::from_secs(1))
    }

    /// A PINGREQ on every open connection.
    async fn ping_all(&self, clients: &mut [Option<Session>], watcher: &mut Session) {
        for session in clients.iter_mut().flatten().chain(std::iter::once(watcher)) {
            ping(session).await;
        }
    }

    /// Waits until `due`, keeping every connection alive; false when cancelled.
    async fn hold_until(
        &self,
        due: Instant,
        clients: &mut [Option<Session>],
        watcher: &mut Session,
        cancel: &CancellationToken,
    ) -> bool {
        loop {
            let next = (Instant::now() + self.ping_every()).min(due);
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = cancel.cancelled() => return false,
            }
            if Instant::now() >= due {
                return true;
            }
            self.ping_all(clients, watcher).await;
        }
    }

    /// Reads the watcher once, waiting until `until` at most, judging each will and
    /// acknowledging it; false when the connection ended.
    async fn listen(&self, watcher: &mut Session, tally: &mut Tally, until: Instant) -> bool {
        let within = until.saturating_duration_since(Instant::now());
        watcher.read_buffer.reserve(READ_CHUNK);
        let read = tokio::time::timeout(within, watcher.reader.read_buf(&mut watcher.read_buffer));
        match read.await {
            Err(_) => return true,
            Ok(Ok(0) | Err(_)) => return false,
            Ok(Ok(_)) => {}
        }
        let now_ns = self.clock.now_ns();
        let mut out = BytesMut::new();
        for packet in decode_all(watcher) {
            match packet {
                Incoming::Publish {
                    qos, pkid, payload, ..
                } => {
                    tally.judge(&payload, now_ns);
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
        if !out.is_empty()
            && (watcher.writer.write_all(&out).await.is_err()
                || watcher.writer.flush().await.is_err())
        {
            return false;
        }
        true
    }

    /// Disconnects every client still open, cleanly (its will discarded); how many were.
    async fn disconnect_all(&self, clients: &mut [Option<Session>]) -> u32 {
        let mut disconnected = 0;
        for session in clients.iter_mut().filter_map(Option::take) {
            let mut session = session;
            let mut out = BytesMut::new();
            if session.codec.disconnect(&mut out).is_ok()
                && session.writer.write_all(&out).await.is_ok()
                && session.writer.flush().await.is_ok()
            {
                disconnected += 1;
            }
            let _ = session.writer.shutdown().await;
        }
        disconnected
    }
}

/// Writes a PINGREQ; its answer is left unread (a few bytes per keep-alive).
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

    fn tally(clients: usize, dropped: &[(usize, u64)]) -> Tally {
        let mut dropped_at_ns = vec![None; clients];
        for (index, at) in dropped {
            dropped_at_ns[*index] = Some(*at);
        }
        Tally {
            dropped_at_ns,
            arrived: vec![false; clients],
            outcome: WillOutcome::default(),
        }
    }

    #[test]
    fn a_will_counts_once_for_its_dropped_client_and_others_are_unexpected() {
        let mut tally = tally(4, &[(0, 1_000), (2, 1_500)]);
        tally.judge(b"0", 3_000);
        tally.judge(b"0", 3_100);
        tally.judge(b"2", 2_000);
        tally.judge(b"1", 2_500); // disconnected cleanly: no will owed
        tally.judge(b"9", 2_500); // no such client
        tally.judge(b"not a number", 2_500);
        let outcome = tally.outcome;
        assert_eq!(outcome.delivered, 2);
        assert_eq!(outcome.duplicates, 1);
        assert_eq!(outcome.unexpected, 3);
        assert_eq!(outcome.from_drop_ns, vec![2_000, 500]);
    }
}
