//! What a publisher waits for between messages: its release (open loop), a QoS 1/2 permit,
//! or end-to-end credit (a closed loop at QoS 0), with keep-alive pings, the end of a timed
//! run and the stop of the connection or the run handled in one place.
//!
//! The futures a publisher waits on every time (stop, ping, end) are made once and pinned:
//! made per message, their timer entries and wakers cost more than the message.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::{Instant, Sleep};

use super::{Links, PublisherJob, Writer};
use crate::codec::AckKind;
use crate::live::Credit;
use crate::pacer::Release;

/// Why a wait ended without what it waited for.
pub(super) enum Stop {
    /// The connection or the run stopped.
    Stopped,
    /// A timed run's publishing time is over: go on to the drain.
    Ended,
}

/// Why one round of waiting ended.
enum Wake {
    Ready,
    PubRel(u16),
    PingDue,
    CreditTimeout,
    Ended,
    Stop,
}

type StopFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The long-lived futures of one publisher's waits.
pub(super) struct Waits<'a> {
    stop: StopFuture<'a>,
    ping: Pin<Box<Sleep>>,
    ping_every: Duration,
    end: Option<Pin<Box<Sleep>>>,
    /// Closed loop: deliveries given up as lost (they never came within the timeout).
    forgiven: u64,
}

impl<'a> Waits<'a> {
    pub(super) fn new(job: &'a PublisherJob, links: &'a Links<'a>) -> Self {
        let ping_every = (job.keep_alive / 2).max(Duration::from_secs(1));
        let stop: StopFuture<'a> = Box::pin(async move {
            tokio::select! {
                _ = links.reader_done.cancelled() => {}
                _ = job.cancel.cancelled() => {}
            }
        });
        Waits {
            stop,
            ping: Box::pin(tokio::time::sleep(ping_every)),
            ping_every,
            end: job.end_ns.map(|end_ns| {
                Box::pin(tokio::time::sleep_until(Instant::from_std(
                    job.clock.instant_at(end_ns),
                )))
            }),
            forgiven: 0,
        }
    }

    /// Until a flat run's start; `Err` when the run stopped first.
    pub(super) async fn until_start(&mut self, start: std::time::Instant) -> Result<(), Stop> {
        tokio::select! {
            _ = tokio::time::sleep_until(Instant::from_std(start)) => Ok(()),
            _ = &mut self.stop => Err(Stop::Stopped),
        }
    }

    /// Until the pacer released message `seq`.
    pub(super) async fn for_release(
        &mut self,
        release: &Release,
        seq: u64,
        writer: &mut Writer<'_>,
        pubrel_rx: &mut mpsc::Receiver<u16>,
    ) -> Result<(), Stop> {
        while release.released() <= seq {
            writer.flush().await.map_err(|_| Stop::Stopped)?;
            let wake = tokio::select! {
                _ = release.changed() => Wake::Ready,
                Some(pkid) = pubrel_rx.recv() => Wake::PubRel(pkid),
                _ = &mut self.ping => Wake::PingDue,
                _ = &mut self.stop => Wake::Stop,
            };
            self.handle(wake, writer)?;
        }
        Ok(())
    }

    /// Until a QoS 1/2 in-flight slot is free.
    pub(super) async fn for_permit(
        &mut self,
        permits: &Semaphore,
        writer: &mut Writer<'_>,
        pubrel_rx: &mut mpsc::Receiver<u16>,
    ) -> Result<(), Stop> {
        if let Ok(permit) = permits.try_acquire() {
            permit.forget();
            return Ok(());
        }
        loop {
            // Whatever is buffered must reach the broker, or its acknowledgements never come.
            writer.flush().await.map_err(|_| Stop::Stopped)?;
            let wake = tokio::select! {
                permit = permits.acquire() => match permit {
                    Ok(permit) => { permit.forget(); Wake::Ready }
                    Err(_) => Wake::Stop,
                },
                Some(pkid) = pubrel_rx.recv() => Wake::PubRel(pkid),
                _ = &mut self.ping => Wake::PingDue,
                _ = until_end(&mut self.end) => Wake::Ended,
                _ = &mut self.stop => Wake::Stop,
            };
            if let Wake::Ready = wake {
                return Ok(());
            }
            self.handle(wake, writer)?;
        }
    }

    /// Closed loop at QoS 0: until fewer than the window of this publisher's messages are
    /// still owed to its subscribers. Waits until half the window is free, so that a
    /// publisher wakes once per half window, not once per delivery.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn for_credit(
        &mut self,
        credit: &Credit,
        fanout: u32,
        sent: u64,
        job: &PublisherJob,
        writer: &mut Writer<'_>,
        pubrel_rx: &mut mpsc::Receiver<u16>,
    ) -> Result<(), Stop> {
        let fanout = u64::from(fanout.max(1));
        let window = u64::from(job.inflight) * fanout;
        let owed = |forgiven: u64| (sent * fanout).saturating_sub(credit.delivered() + forgiven);
        if owed(self.forgiven) < window {
            return Ok(());
        }
        loop {
            writer.flush().await.map_err(|_| Stop::Stopped)?;
            let target = (sent * fanout).saturating_sub(self.forgiven + window / 2);
            if !credit.wake_when(target) {
                return Ok(());
            }
            let wake = tokio::select! {
                _ = credit.changed() => Wake::Ready,
                _ = tokio::time::sleep(job.credit_timeout) => Wake::CreditTimeout,
                Some(pkid) = pubrel_rx.recv() => Wake::PubRel(pkid),
                _ = &mut self.ping => Wake::PingDue,
                _ = until_end(&mut self.end) => Wake::Ended,
                _ = &mut self.stop => Wake::Stop,
            };
            match wake {
                Wake::CreditTimeout => {
                    let lost = owed(self.forgiven);
                    self.forgiven += lost;
                    writer
                        .written
                        .errors
                        .push(("closed_loop_deliveries_given_up", lost));
                }
                other => self.handle(other, writer)?,
            }
            if owed(self.forgiven) < window {
                return Ok(());
            }
        }
    }

    fn handle(&mut self, wake: Wake, writer: &mut Writer<'_>) -> Result<(), Stop> {
        match wake {
            Wake::Ready | Wake::CreditTimeout => {}
            Wake::PubRel(pkid) => writer.encode_ack(AckKind::PubRel, pkid),
            Wake::PingDue => {
                // The timer is re-armed lazily: writes move the due time without touching it.
                // Saturating: the keep-alive comes from the spec.
                let due = after(writer.last_write, self.ping_every);
                if Instant::now() >= due {
                    writer.encode_ping();
                    self.ping
                        .as_mut()
                        .reset(after(Instant::now(), self.ping_every));
                } else {
                    self.ping.as_mut().reset(due);
                }
            }
            Wake::Ended => return Err(Stop::Ended),
            Wake::Stop => return Err(Stop::Stopped),
        }
        Ok(())
    }
}

/// `from + duration` without the overflow panic of `Instant + Duration`.
fn after(from: Instant, duration: Duration) -> Instant {
    Instant::from_std(crate::clock::deadline_after(from.into_std(), duration))
}

/// After the run's stop, a write the broker does not take (its socket full: a broker frozen
/// or cut off) is given up this long after the stop, so that every run ends.
pub(super) const WRITE_GRACE_AFTER_STOP: Duration = Duration::from_millis(250);
/// What a write given up after the stop fails with.
pub(super) const STUCK: std::io::ErrorKind = std::io::ErrorKind::TimedOut;

/// `write`, or [`STUCK`] once `cancel` fired and [`WRITE_GRACE_AFTER_STOP`] passed. A write
/// that completes at once (the common case) never looks at `cancel`.
pub(super) async fn unless_stuck_after_stop(
    write: impl Future<Output = std::io::Result<()>>,
    cancel: &tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let overdue = async {
        cancel.cancelled().await;
        tokio::time::sleep(WRITE_GRACE_AFTER_STOP).await;
    };
    tokio::select! {
        biased;
        written = write => written,
        () = overdue => Err(STUCK.into()),
    }
}

/// The end of a timed run, or never.
async fn until_end(end: &mut Option<Pin<Box<Sleep>>>) {
    match end {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}
