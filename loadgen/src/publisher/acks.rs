//! The reading half of a publisher: the broker's acknowledgements, and the drain that waits
//! for the last of them.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Links, PublisherJob, Stopped, Writer};
use crate::codec::{AckKind, Codec, Incoming};
use crate::spec::Qos;
use crate::transport::ReadHalf;

/// After DISCONNECT, how long to wait for the broker to close the socket...
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// ...and after the run's stop, when nothing more is owed: a broker that does not close
/// (frozen, cut off) must not hold the run past its stop.
const CLOSE_GRACE_STOPPED: Duration = Duration::from_millis(100);

/// Drain: waits until the broker acknowledged every QoS 1/2 message, or the deadline.
pub(super) async fn await_acknowledgements(
    job: &PublisherJob,
    writer: &mut Writer<'_>,
    pubrel_rx: &mut mpsc::Receiver<u16>,
    links: &Links<'_>,
) -> Result<(), Stopped> {
    if job.qos == Qos::AtMostOnce {
        return Ok(());
    }
    let deadline = ack_deadline(job.drain_timeout);
    let window = u32::try_from(links.window).unwrap_or(u32::MAX);
    loop {
        writer.flush().await?;
        if links.permits.available_permits() == links.window {
            return Ok(());
        }
        tokio::select! {
            all = links.permits.acquire_many(window) => {
                drop(all);
                return Ok(());
            }
            Some(pkid) = pubrel_rx.recv() => writer.encode_ack(AckKind::PubRel, pkid),
            _ = tokio::time::sleep_until(deadline) => {
                let missing = links.window - links.permits.available_permits();
                writer.written.errors.push(("ack_timeout", missing as u64));
                return Err(Stopped);
            }
            _ = links.reader_done.cancelled() => return Err(Stopped),
            _ = job.cancel.cancelled() => return Err(Stopped),
        }
    }
}

/// When the drain gives up on acknowledgements: `drain_timeout` from now, saturating (the
/// timeout comes from the spec, and `Instant + Duration` panics on overflow).
fn ack_deadline(drain_timeout: Duration) -> Instant {
    Instant::from_std(crate::clock::deadline_after(
        std::time::Instant::now(),
        drain_timeout,
    ))
}

pub(super) async fn read_loop(
    mut source: ReadHalf,
    mut buffer: BytesMut,
    codec: Codec,
    pubrel_tx: mpsc::Sender<u16>,
    links: &Links<'_>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Vec<(&'static str, u64)> {
    let mut errors = Vec::new();
    let mut close_by: Option<Instant> = None;
    let lost = async {
        match links.lost {
            Some(lost) => lost.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(lost);
    loop {
        buffer.reserve(4096);
        let read = tokio::select! {
            read = source.read_buf(&mut buffer) => read,
            () = &mut lost => break,
            _ = links.writer_done.cancelled(), if close_by.is_none() => {
                let grace = if cancel.is_cancelled() { CLOSE_GRACE_STOPPED } else { CLOSE_GRACE };
                close_by = Some(Instant::now() + grace);
                continue;
            }
            _ = tokio::time::sleep_until(close_by.unwrap_or_else(Instant::now)), if close_by.is_some() => break,
        };
        let writer_finished = links.writer_done.is_cancelled();
        match read {
            Ok(0) => {
                if !writer_finished && !links.connection_lost() {
                    errors.push(("connection_closed", 1));
                }
                break;
            }
            Err(error) => {
                if !writer_finished && !links.connection_lost() {
                    errors.push((crate::transport::read_failure(&error), 1));
                }
                break;
            }
            Ok(_) => {}
        }
        match handle_acks(&codec, &mut buffer, &pubrel_tx, links, &mut errors).await {
            Ok(()) => {}
            Err("broker_disconnected") if links.connection_lost() => break,
            Err(kind) => {
                errors.push((kind, 1));
                break;
            }
        }
    }
    links.reader_done.cancel();
    errors
}

/// Ends the exchange of `pkid`: no longer kept for a resend, its window slot free.
fn settle(links: &Links<'_>, pkid: u16) {
    if let Some(unacked) = links.unacked {
        let mut unacked = unacked.lock().unwrap_or_else(PoisonError::into_inner);
        // Acknowledged in order (MQTT asks it of QoS 1); searched if not.
        match unacked.iter().position(|message| message.pkid == pkid) {
            Some(0) => {
                unacked.pop_front();
            }
            Some(at) => {
                unacked.remove(at);
            }
            None => {}
        }
    }
    links.permits.add_permits(1);
}

async fn handle_acks(
    codec: &Codec,
    buffer: &mut BytesMut,
    pubrel_tx: &mpsc::Sender<u16>,
    links: &Links<'_>,
    refusals: &mut Vec<(&'static str, u64)>,
) -> Result<(), &'static str> {
    loop {
        match codec.decode(buffer) {
            Ok(None) => return Ok(()),
            Ok(Some(Incoming::PubAck(pkid) | Incoming::PubComp(pkid))) => {
                settle(links, pkid);
                links.acknowledged.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Some(Incoming::PubRefused { pkid, refusal })) => {
                // The exchange is over and the message will reach no one: its window slot is
                // free, and the broker's reason is counted (the deliveries it owed count as
                // lost).
                settle(links, pkid);
                match refusals.iter_mut().find(|(name, _)| *name == refusal) {
                    Some((_, count)) => *count += 1,
                    None => refusals.push((refusal, 1)),
                }
            }
            Ok(Some(Incoming::PubRec(pkid))) => {
                // The writer may be gone at shutdown; then nobody needs the PUBREL.
                let _ = pubrel_tx.send(pkid).await;
            }
            Ok(Some(Incoming::Disconnect(reason))) => {
                // The broker's answer, by its reason code, beside the lost connection.
                refusals.push((reason, 1));
                return Err("broker_disconnected");
            }
            Ok(Some(_)) => {}
            Err(_) => return Err("protocol_error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_timeout_of_u64_max_seconds_gives_a_far_deadline_not_a_panic() {
        let before = Instant::now();
        let deadline = ack_deadline(Duration::from_secs(u64::MAX));
        assert!(deadline > before + Duration::from_secs(86_400 * 365));
        let near = ack_deadline(Duration::from_secs(2));
        assert!(near >= before + Duration::from_secs(2) && near < deadline);
    }
}
