//! RabbitMQ's own message counters, read with `rabbitmqctl eval`.
//!
//! RabbitMQ 3.10 keeps protocol-level global counters in
//! `rabbit_global_counters`, grouped by labels such as
//! `protocol=amqp091` and `protocol=amqp091,queue_type=rabbit_classic_queue`.
//! [`OVERVIEW_EXPRESSION`] prints each as one line,
//! `counter LABELS NAME VALUE`, which is parsed without guessing at Erlang
//! term syntax.
//!
//! 3.10 has no `protocol=mqtt` label: its MQTT plugin publishes and consumes
//! through an internal AMQP 0-9-1 channel, so MQTT traffic is counted under
//! `protocol=amqp091`. The harness's node has no AMQP client, so there these
//! counters are MQTT traffic only. Verified by experiment (and by
//! `tests/brokers.rs`): 57 QoS 1 publishes from `mosquitto_pub` to a QoS 1
//! subscriber moved received, received_confirm, confirmed, routed, delivered
//! and acknowledged by exactly 57; 100 QoS 0 publishes to a QoS 0 subscriber
//! moved received, routed and delivered by 100; a publish with no subscriber
//! moved received and unroutable_dropped by 1.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};

/// Erlang expression for `rabbitmqctl eval` printing every global counter
/// as `counter LABELS NAME VALUE` (LABELS is `-` when there are none).
pub const OVERVIEW_EXPRESSION: &str = r#"
maps:foreach(
  fun(Labels, Counters) ->
    Key = case [lists:flatten(io_lib:format("~w=~w", [K, V])) || {K, V} <- Labels] of
            [] -> "-";
            Parts -> string:join(Parts, ",")
          end,
    maps:foreach(
      fun(Name, Value) -> io:format("counter ~s ~w ~w~n", [Key, Name, Value]) end,
      Counters)
  end,
  rabbit_global_counters:overview()).
"#;

/// Label set under which 3.10 counts MQTT publishes (see the module docs).
const PROTOCOL: &str = "protocol=amqp091";

/// RabbitMQ's message counters at one moment; totals since the node
/// started. Names are those of `rabbit_global_counters`, under `protocol=amqp091`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitCounters {
    /// `messages_received_total`: messages clients published into the broker
    /// (each MQTT PUBLISH, any QoS), counted on arrival, routed or not.
    pub messages_received: u64,
    /// `messages_received_confirm_total`: the received messages whose
    /// publisher asked for a confirm, i.e. MQTT QoS 1 publishes.
    pub messages_received_confirm: u64,
    /// `messages_confirmed_total`: confirms sent back to publishers; for MQTT
    /// these are the PUBACKs of QoS 1 publishes.
    pub messages_confirmed: u64,
    /// `messages_routed_total`: received messages that reached at least one
    /// queue, i.e. matched at least one MQTT subscription.
    pub messages_routed: u64,
    /// `messages_unroutable_dropped_total`: received messages that matched
    /// no subscription and were discarded.
    pub messages_unroutable_dropped: u64,
    /// `messages_delivered_total`, summed over queue types: messages handed to
    /// consumers, i.e. PUBLISHes sent to MQTT subscribers (QoS 0 and 1).
    pub messages_delivered: u64,
    /// `messages_acknowledged_total`, summed over queue types: deliveries the
    /// consumer acknowledged, i.e. PUBACKs from QoS 1 MQTT subscribers.
    pub messages_acknowledged: u64,
    /// `messages_redelivered_total`, summed over queue types.
    pub messages_redelivered: u64,
    /// Every counter as printed, keyed `"LABELS NAME"`. Gauges such as
    /// `publishers` and `consumers` are here too, but 3.10 does not keep them
    /// right for MQTT connections (they go negative), so do not assert on them.
    pub raw: BTreeMap<String, i64>,
}

impl RabbitCounters {
    /// Parses the output of `rabbitmqctl eval OVERVIEW_EXPRESSION`.
    pub fn parse(output: &str) -> Result<Self> {
        let mut raw = BTreeMap::new();
        for line in output.lines().filter(|line| line.starts_with("counter ")) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, labels, name, value] = fields[..] else {
                bail!("unexpected counter line {line:?}");
            };
            let value: i64 = value
                .parse()
                .with_context(|| format!("counter value in {line:?}"))?;
            raw.insert(format!("{labels} {name}"), value);
        }
        if raw.is_empty() {
            bail!("no counters in rabbitmqctl output: {output:?}");
        }
        let protocol = |name: &str| count(&raw, &format!("{PROTOCOL} {name}"));
        let queues = |name: &str| -> Result<u64> {
            let prefix = format!("{PROTOCOL},queue_type=");
            let suffix = format!(" {name}");
            let mut total = 0u64;
            let mut found = false;
            for (key, value) in &raw {
                if key.starts_with(&prefix) && key.ends_with(&suffix) {
                    total += non_negative(key, *value)?;
                    found = true;
                }
            }
            if !found {
                bail!("no per-queue-type {name} counter in {:?}", raw.keys());
            }
            Ok(total)
        };
        Ok(Self {
            messages_received: protocol("messages_received_total")?,
            messages_received_confirm: protocol("messages_received_confirm_total")?,
            messages_confirmed: protocol("messages_confirmed_total")?,
            messages_routed: protocol("messages_routed_total")?,
            messages_unroutable_dropped: protocol("messages_unroutable_dropped_total")?,
            messages_delivered: queues("messages_delivered_total")?,
            messages_acknowledged: queues("messages_acknowledged_total")?,
            messages_redelivered: queues("messages_redelivered_total")?,
            raw,
        })
    }

    /// True if both readings report the same message traffic (gauges aside).
    pub fn same_traffic(&self, other: &Self) -> bool {
        Self {
            raw: BTreeMap::new(),
            ..self.clone()
        } == Self {
            raw: BTreeMap::new(),
            ..other.clone()
        }
    }
}

fn count(raw: &BTreeMap<String, i64>, key: &str) -> Result<u64> {
    let value = raw
        .get(key)
        .with_context(|| format!("counter {key:?} missing from {:?}", raw.keys()))?;
    non_negative(key, *value)
}

fn non_negative(key: &str, value: i64) -> Result<u64> {
    u64::try_from(value).with_context(|| format!("counter {key:?} is negative: {value}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from a real 3.10.8 node after 57 QoS 1 messages.
    const SAMPLE: &str = "\
counter protocol=amqp091 consumers 1
counter protocol=amqp091 messages_confirmed_total 57
counter protocol=amqp091 messages_received_confirm_total 57
counter protocol=amqp091 messages_received_total 58
counter protocol=amqp091 messages_routed_total 57
counter protocol=amqp091 messages_unroutable_dropped_total 1
counter protocol=amqp091 messages_unroutable_returned_total 0
counter protocol=amqp091 publishers -3
counter protocol=amqp091,queue_type=rabbit_classic_queue messages_acknowledged_total 57
counter protocol=amqp091,queue_type=rabbit_classic_queue messages_delivered_total 57
counter protocol=amqp091,queue_type=rabbit_classic_queue messages_redelivered_total 0
counter protocol=amqp091,queue_type=rabbit_quorum_queue messages_acknowledged_total 0
counter protocol=amqp091,queue_type=rabbit_quorum_queue messages_delivered_total 2
counter protocol=amqp091,queue_type=rabbit_quorum_queue messages_redelivered_total 0
counter queue_type=rabbit_classic_queue,dead_letter_strategy=disabled messages_dead_lettered_expired_total 0
ok
";

    #[test]
    fn the_overview_is_parsed_and_queue_types_are_summed() {
        let counters = RabbitCounters::parse(SAMPLE).unwrap();
        assert_eq!(counters.messages_received, 58);
        assert_eq!(counters.messages_received_confirm, 57);
        assert_eq!(counters.messages_confirmed, 57);
        assert_eq!(counters.messages_routed, 57);
        assert_eq!(counters.messages_unroutable_dropped, 1);
        assert_eq!(counters.messages_delivered, 59);
        assert_eq!(counters.messages_acknowledged, 57);
        assert_eq!(counters.raw["protocol=amqp091 publishers"], -3);
    }

    #[test]
    fn missing_or_malformed_counters_are_errors() {
        assert!(RabbitCounters::parse("ok\n").is_err());
        assert!(RabbitCounters::parse("counter protocol=amqp091 x\n").is_err());
        let without_received = SAMPLE.replace("messages_received_total", "other");
        assert!(RabbitCounters::parse(&without_received).is_err());
    }

    #[test]
    fn gauges_do_not_count_as_traffic() {
        let a = RabbitCounters::parse(SAMPLE).unwrap();
        let b = RabbitCounters::parse(&SAMPLE.replace("publishers -3", "publishers 5")).unwrap();
        assert!(a.same_traffic(&b));
        let c =
            RabbitCounters::parse(&SAMPLE.replace("routed_total 57", "routed_total 58")).unwrap();
        assert!(!a.same_traffic(&c));
    }
}
