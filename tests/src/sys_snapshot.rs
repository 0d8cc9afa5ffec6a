//! A broker's message counters read once from its `$SYS` topics: a short session subscribes,
//! takes the first value of each topic (the retained one where the broker retains them, as
//! the mqttv5 broker and aedes-stats do; the next broadcast where it does not, as amqtt),
//! and leaves.
//!
//! The broker recomputes the values on a timer (every second as the agent configures it), so
//! a reading is at most that old: read after the traffic has been quiet for longer. The
//! reader's own deliveries are counted in the broker's "sent" counters; [`SysSnapshot::
//! deliveries`] says how many this reading caused, so a test can bound what it added.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::mqtt_wire::MqttConnection;

/// How long a reading may take.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// The values of some `$SYS` topics at one reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysSnapshot {
    /// Each topic's value.
    pub values: BTreeMap<String, u64>,
    /// PUBLISHes the reading's session received (the broker counts them as sent).
    pub deliveries: u64,
}

impl SysSnapshot {
    /// Reads `topics` from the broker at `address`: each must be a number, retained or
    /// published again within the read deadline.
    pub fn read(address: SocketAddr, topics: &[&str]) -> Result<Self> {
        let client_id = format!("continuum-sys-{}", std::process::id());
        let mut session = MqttConnection::connect(address, &client_id, READ_DEADLINE)
            .context("connecting to read $SYS")?;
        let filters: Vec<(&str, u8)> = topics.iter().map(|topic| (*topic, 0)).collect();
        session.subscribe(&filters)?;
        let started = Instant::now();
        let mut values = BTreeMap::new();
        let mut deliveries = 0;
        while values.len() < topics.len() {
            let left = READ_DEADLINE.saturating_sub(started.elapsed());
            if left.is_zero() {
                bail!("no retained value for {topics:?} within {READ_DEADLINE:?}; got {values:?}");
            }
            session.set_read_timeout(Some(left))?;
            let publish = session.next_publish().context("waiting for $SYS")?;
            deliveries += 1;
            let text = String::from_utf8_lossy(&publish.payload);
            let value: u64 = text
                .trim()
                .parse()
                .with_context(|| format!("{} = {text:?} is not a count", publish.topic))?;
            values.insert(publish.topic, value);
        }
        session.disconnect()?;
        Ok(Self { values, deliveries })
    }

    /// The value of `topic` (0 when it was not read).
    pub fn get(&self, topic: &str) -> u64 {
        self.values.get(topic).copied().unwrap_or_default()
    }
}
