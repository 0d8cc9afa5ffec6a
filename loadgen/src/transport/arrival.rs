//! When the newest bytes of a subscriber's connection reached this host's kernel.
//!
//! A subscriber's latency ends when loadgen reads a delivery; on a busy host that read can
//! come milliseconds after the bytes arrived, and the delay is loadgen's, not the broker's.
//! With `SO_TIMESTAMPNS` the kernel stamps each received segment, and a TCP `recvmsg` returns
//! the stamp of the newest one it copied (segments queued while nobody read are merged and
//! keep the newest stamp). So `now - stamp` after a read is how late loadgen read the newest
//! bytes: exact for the last delivery of the read, a lower bound for the others.
//!
//! The stamp sits under TLS and WebSocket too: [`Stamped`] wraps the TCP socket itself.
//!
//! The kernel turns stamping on for the whole host a moment after the first socket asks (a
//! deferred work item): bytes that arrive before then carry no stamp, and a read of them
//! clears the newest stamp rather than leave an older one standing.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The kernel's receive time (Unix ns, this host's wall clock) of the newest bytes read on
/// one connection; 0 until a stamped read.
#[derive(Debug, Default)]
pub struct ArrivalStamp(AtomicU64);

impl ArrivalStamp {
    /// The newest bytes' kernel receive time, Unix ns, if the last read carried one.
    pub fn newest_unix_ns(&self) -> Option<u64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            stamp => Some(stamp),
        }
    }
}

/// A TCP socket (or its read half) whose reads record the kernel's receive stamp.
#[derive(Debug)]
pub struct Stamped<S> {
    socket: S,
    arrival: Arc<ArrivalStamp>,
}

impl<S: AsRef<TcpStream>> Stamped<S> {
    /// Asks the kernel to stamp what `socket` receives; the socket back when it refuses (the
    /// caller then reads without stamps).
    pub fn new(socket: S) -> Result<Self, S> {
        let fd = socket.as_ref().as_raw_fd();
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on an open socket with a c_int option value of the right size.
        let set = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if set != 0 {
            tracing::debug!(
                error = %io::Error::last_os_error(),
                "SO_TIMESTAMPNS refused: this connection's read delay is not measured"
            );
            return Err(socket);
        }
        Ok(Stamped {
            socket,
            arrival: Arc::new(ArrivalStamp::default()),
        })
    }

    /// Where the newest receive stamp is kept.
    pub fn arrival(&self) -> Arc<ArrivalStamp> {
        Arc::clone(&self.arrival)
    }
}

impl<S: AsRef<TcpStream> + Unpin> AsyncRead for Stamped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            // Nothing to read into: the last read's stamp stands.
            return Poll::Ready(Ok(()));
        }
        let stream = this.socket.as_ref();
        loop {
            ready!(stream.poll_read_ready(cx))?;
            // SAFETY: recvmsg only writes into the unfilled part, and only what it reports.
            let unfilled = unsafe { buf.unfilled_mut() };
            match stream.try_io(Interest::READABLE, || {
                receive_stamped(stream.as_raw_fd(), unfilled)
            }) {
                Ok((read, stamp)) => {
                    // SAFETY: recvmsg initialised the first `read` bytes of the unfilled part.
                    unsafe { buf.assume_init(read) };
                    buf.advance(read);
                    this.arrival.0.store(stamp.unwrap_or(0), Ordering::Relaxed);
                    return Poll::Ready(Ok(()));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stamped<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }
}

/// Room for one `SCM_TIMESTAMPNS` control message (a timespec), generously aligned.
const CONTROL_SPACE: usize = 64;

/// One non-blocking `recvmsg` into `buffer`: bytes read and the stamp of the newest of them.
fn receive_stamped(
    fd: std::os::fd::RawFd,
    buffer: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<(usize, Option<u64>)> {
    let mut control = [0u64; CONTROL_SPACE / 8];
    let mut data = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one; the fields set below point at live
    // buffers of the lengths given.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut data;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = CONTROL_SPACE;
    // SAFETY: the msghdr and every buffer it points to outlive the call.
    let read = unsafe { libc::recvmsg(fd, &raw mut message, libc::MSG_DONTWAIT) };
    let read = usize::try_from(read).map_err(|_| io::Error::last_os_error())?;
    Ok((read, stamp_of(&message)))
}

/// The `SCM_TIMESTAMPNS` stamp among the control messages, Unix ns.
fn stamp_of(message: &libc::msghdr) -> Option<u64> {
    // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR walk the control buffer recvmsg filled, within the
    // length it reported; each header is checked before its data is read.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(message);
        while !header.is_null() {
            let (level, kind) = ((*header).cmsg_level, (*header).cmsg_type);
            if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS {
                let at: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::timespec>());
                let seconds = u64::try_from(at.tv_sec).ok()?;
                let nanos = u64::try_from(at.tv_nsec).ok()?;
                return seconds
                    .checked_mul(1_000_000_000)?
                    .checked_add(nanos)
                    .filter(|ns| *ns > 0);
            }
            header = libc::CMSG_NXTHDR(message, header);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_read_late_by_a_sleep_reports_its_bytes_kernel_arrival_before_the_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a listener on loopback");
        let address = listener.local_addr().expect("its address");
        let client = TcpStream::connect(address).await.expect("connected");
        let (mut server, _) = listener.accept().await.expect("accepted");
        let mut reader = Stamped::new(client).expect("stamps allowed");
        let arrival = reader.arrival();
        assert_eq!(arrival.newest_unix_ns(), None, "no read yet");
        let mut got = [0u8; 16];
        // Until the kernel's deferred switch-on, bytes arrive unstamped.
        let mut tries = 0;
        loop {
            server.write_all(b".").await.expect("written");
            reader.read_exact(&mut got[..1]).await.expect("read");
            if arrival.newest_unix_ns().is_some() {
                break;
            }
            tries += 1;
            assert!(tries < 200, "the kernel never stamped a read in 2 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let before_send = crate::clock::unix_now_ns();
        server.write_all(b"hello").await.expect("written");
        let late_by = Duration::from_millis(30);
        tokio::time::sleep(late_by).await;
        let read = reader.read(&mut got).await.expect("read");
        let after_read = crate::clock::unix_now_ns();
        assert_eq!(&got[..read], b"hello");
        let stamp = arrival.newest_unix_ns().expect("the read carried a stamp");
        assert!(
            stamp >= before_send,
            "stamped {stamp} before the send at {before_send}"
        );
        let read_late_ns = after_read - stamp;
        assert!(
            read_late_ns >= late_by.as_nanos() as u64,
            "the read came {read_late_ns} ns after arrival, less than the {late_by:?} slept"
        );

        // Writes pass through, and the peer's close reads as the end.
        reader.write_all(b"back").await.expect("written back");
        let mut echoed = [0u8; 4];
        server.read_exact(&mut echoed).await.expect("read back");
        assert_eq!(&echoed, b"back");
        drop(server);
        assert_eq!(reader.read(&mut got).await.expect("end"), 0);
    }
}
