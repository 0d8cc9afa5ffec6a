//! A broker's message counters read once from its `$SYS` topics: a short session subscribes,
//! takes the first value of each topic (the retained one where the broker retains them, as
//! the mqttv5 broker and aedes-stats do; the next broadcast where it does not, as amqtt and
//! rmqtt), and leaves. A counter is a topic whose payload is the number, or a key of the
//! JSON object a topic carries (rmqtt's `$SYS/brokers/0/metrics`).
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

/// Where a broker keeps one counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SysCounter {
    /// The payload of this topic is the number.
    Topic(String),
    /// The number is at `key` of the JSON object published on `topic`.
    JsonKey {
        /// The topic.
        topic: String,
        /// The key, as the broker spells it (`messages.publish.custom`).
        key: String,
    },
}

impl SysCounter {
    /// Its topic.
    pub fn topic(&self) -> &str {
        match self {
            SysCounter::Topic(topic) | SysCounter::JsonKey { topic, .. } => topic,
        }
    }

    /// Its name in a reading's values: the topic, or `topic key`.
    pub fn name(&self) -> String {
        match self {
            SysCounter::Topic(topic) => topic.clone(),
            SysCounter::JsonKey { topic, key } => format!("{topic} {key}"),
        }
    }

    /// Its value in `payload`, a publish on its topic.
    fn value_in(&self, payload: &str) -> Result<u64> {
        match self {
            SysCounter::Topic(topic) => payload
                .trim()
                .parse()
                .with_context(|| format!("{topic} = {payload:?} is not a count")),
            SysCounter::JsonKey { topic, key } => {
                let object: serde_json::Value = serde_json::from_str(payload)
                    .with_context(|| format!("{topic} is not JSON: {payload:?}"))?;
                object
                    .get(key.as_str())
                    .and_then(serde_json::Value::as_u64)
                    .with_context(|| format!("{topic} has no count at {key:?}"))
            }
        }
    }
}

/// The values of some `$SYS` counters at one reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysSnapshot {
    /// Each counter's value, by [`SysCounter::name`].
    pub values: BTreeMap<String, u64>,
    /// PUBLISHes the reading's session received (the broker counts them as sent).
    pub deliveries: u64,
}

impl SysSnapshot {
    /// Reads `counters` from the broker at `address`: each topic must be retained or
    /// published again within the read deadline.
    pub fn read(address: SocketAddr, counters: &[SysCounter]) -> Result<Self> {
        let client_id = format!("continuum-sys-{}", std::process::id());
        let mut session = MqttConnection::connect(address, &client_id, READ_DEADLINE)
            .context("connecting to read $SYS")?;
        let mut topics: Vec<&str> = counters.iter().map(SysCounter::topic).collect();
        topics.sort_unstable();
        topics.dedup();
        let filters: Vec<(&str, u8)> = topics.iter().map(|topic| (*topic, 0)).collect();
        session.subscribe(&filters)?;
        let started = Instant::now();
        let mut values = BTreeMap::new();
        let mut deliveries = 0;
        while values.len() < counters.len() {
            let left = READ_DEADLINE.saturating_sub(started.elapsed());
            if left.is_zero() {
                bail!("no value for {counters:?} within {READ_DEADLINE:?}; got {values:?}");
            }
            session.set_read_timeout(Some(left))?;
            let publish = session.next_publish().context("waiting for $SYS")?;
            deliveries += 1;
            let text = String::from_utf8_lossy(&publish.payload);
            for counter in counters.iter().filter(|c| c.topic() == publish.topic) {
                values.insert(counter.name(), counter.value_in(&text)?);
            }
        }
        session.disconnect()?;
        Ok(Self { values, deliveries })
    }

    /// The value of `counter` (0 when it was not read).
    pub fn get(&self, counter: &SysCounter) -> u64 {
        self.values
            .get(&counter.name())
            .copied()
            .unwrap_or_default()
    }
}
