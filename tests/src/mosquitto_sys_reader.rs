//! The background connection that follows one Mosquitto's `$SYS` tree and
//! lets tests wait for complete or settled updates.
//!
//! What the figures mean, and how the reader's own traffic is subtracted, is
//! in [`crate::mosquitto_sys`]; this module only moves messages from the
//! socket into a [`ReaderState`] and waits on it with deadlines.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::mosquitto_sys::{MosquittoCounters, ReaderState, TOPICS};
use crate::mqtt_wire::MqttConnection;

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<ReaderState>,
    updated: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ReaderState> {
        // A poisoned lock only means a reader thread panicked mid-record;
        // the counters it holds are still the best information there is.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// The background connection that follows one broker's `$SYS` tree.
#[derive(Debug)]
pub(crate) struct SysTreeReader {
    shared: Arc<Shared>,
    socket: TcpStream,
    thread: Option<JoinHandle<()>>,
}

impl SysTreeReader {
    /// Connects to the broker at `addr` and subscribes to the counter topics.
    pub(crate) fn connect(addr: SocketAddr, instance_id: &str) -> Result<Self> {
        let timeout = Duration::from_secs(5);
        let mut connection = MqttConnection::connect(
            addr,
            &format!("continuum-sys-reader-{instance_id}"),
            timeout,
        )?;
        let filters: Vec<(&str, u8)> = TOPICS.iter().map(|topic| (*topic, 0)).collect();
        connection.subscribe(&filters)?;
        connection.set_read_timeout(None)?;
        let socket = connection.socket_handle()?;
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name(format!("sys-{instance_id}"))
            .spawn(move || read_updates(connection, &thread_shared))
            .context("spawning the $SYS reader thread")?;
        Ok(Self {
            shared,
            socket,
            thread: Some(thread),
        })
    }

    /// The most recent complete update, waiting up to `timeout` for the
    /// first one that carries every counter.
    pub(crate) fn latest(&self, timeout: Duration) -> Result<MosquittoCounters> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        loop {
            if let Some(Ok(counters)) = &state.latest {
                return Ok(*counters);
            }
            state = self.wait(state, deadline)?;
        }
    }

    /// Every completed update so far with the Unix time (ns) its uptime arrived.
    pub(crate) fn history(&self) -> Vec<(u64, MosquittoCounters)> {
        self.shared.lock().history.clone()
    }

    /// Waits for two consecutive updates, both completed after this call,
    /// that report the same traffic; returns the later one.
    pub(crate) fn settled(&self, timeout: Duration) -> Result<MosquittoCounters> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        let mut seen = state.completed;
        let mut previous: Option<MosquittoCounters> = None;
        loop {
            state = self.wait(state, deadline)?;
            if state.completed == seen {
                continue;
            }
            seen = state.completed;
            let current = match &state.latest {
                Some(Ok(counters)) => *counters,
                Some(Err(error)) => bail!("a $SYS update could not be read: {error}"),
                None => continue,
            };
            if previous.is_some_and(|previous| previous.same_traffic(&current)) {
                return Ok(current);
            }
            previous = Some(current);
        }
    }

    /// Blocks until the reader records something or `deadline` passes.
    fn wait<'a>(
        &self,
        state: MutexGuard<'a, ReaderState>,
        deadline: Instant,
    ) -> Result<MutexGuard<'a, ReaderState>> {
        if let Some(failure) = &state.failure {
            bail!("the $SYS reader stopped: {failure}");
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            let last = match &state.latest {
                Some(Err(error)) => error.clone(),
                Some(Ok(_)) => "updates kept changing".to_owned(),
                None => "no $SYS update completed".to_owned(),
            };
            bail!("timed out waiting for $SYS ({last})");
        }
        let (state, _) = self
            .shared
            .updated
            .wait_timeout(state, remaining)
            .unwrap_or_else(|poison| poison.into_inner());
        Ok(state)
    }
}

fn read_updates(mut connection: MqttConnection, shared: &Shared) {
    loop {
        let next = connection.next_publish();
        let mut state = shared.lock();
        match next {
            Ok(publish) => state.record(publish),
            Err(error) => {
                state.failure = Some(format!("{error:#}"));
                shared.updated.notify_all();
                return;
            }
        }
        shared.updated.notify_all();
    }
}

impl Drop for SysTreeReader {
    fn drop(&mut self) {
        // Unblocks the reader thread's read; it then records the failure and exits.
        let _ = self.socket.shutdown(Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
