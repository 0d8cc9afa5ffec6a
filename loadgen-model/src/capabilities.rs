//! What a broker supports, probed before its cells run: a workload that needs what the broker
//! lacks measures an error, so such a cell is skipped with the reason instead.
//!
//! MQTT 5 says much of it in CONNACK (maximum QoS, retain, wildcard and shared subscriptions,
//! topic alias maximum, receive maximum, maximum packet size); what a 3.1.1 broker cannot say
//! is found by a short round trip each (a wildcard subscription that delivers, a shared one,
//! a retained message a later subscription receives, a session kept across a reconnect, an
//! MQTT 5 will held for its delay).

use serde::{Deserialize, Serialize};

use crate::spec::{MqttVersion, TopicFilter, WorkloadSpec};

/// A broker's answers to the probe; `None` where the probe could not tell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// An MQTT 3.1.1 CONNECT was accepted.
    pub mqtt311: bool,
    /// An MQTT 5 CONNECT was accepted.
    pub mqtt5: bool,
    /// Highest QoS the broker accepts (MQTT 5 CONNACK; 2 when it says nothing).
    #[serde(default)]
    pub maximum_qos: Option<u8>,
    /// Retained messages are kept and delivered to a later subscription of their topic.
    #[serde(default)]
    pub retain: Option<bool>,
    /// ... and to a later wildcard subscription that matches it (RabbitMQ 3.10 keeps
    /// retained messages but delivers them to exact subscriptions only).
    #[serde(default)]
    pub retain_to_wildcards: Option<bool>,
    /// Wildcard filters deliver.
    #[serde(default)]
    pub wildcards: Option<bool>,
    /// Shared subscriptions deliver.
    #[serde(default)]
    pub shared_subscriptions: Option<bool>,
    /// MQTT 5 topic aliases the broker accepts from a client (0: none).
    #[serde(default)]
    pub topic_alias_maximum: Option<u16>,
    /// MQTT 5 in-flight QoS 1/2 messages the broker accepts from a client.
    #[serde(default)]
    pub receive_maximum: Option<u16>,
    /// MQTT 5 largest packet the broker accepts, bytes.
    #[serde(default)]
    pub maximum_packet_size: Option<u32>,
    /// A session with clean session (clean start) off was still there when its client came
    /// back: persistent sessions work.
    #[serde(default)]
    pub kept_sessions: Option<bool>,
    /// MQTT 5: the session expiry interval the broker's CONNACK imposed in place of the one
    /// asked, seconds (absent: the broker took the one asked).
    #[serde(default)]
    pub session_expiry_secs: Option<u32>,
    /// MQTT 5: a will with a delay was published after the delay, not at once.
    #[serde(default)]
    pub will_delay: Option<bool>,
    /// How each answer was found, and what failed (one line each).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Capabilities {
    /// Why `spec` cannot run against this broker, when it needs what the broker lacks.
    pub fn lacks(&self, spec: &WorkloadSpec) -> Option<String> {
        let protocol_ok = match spec.broker.protocol {
            MqttVersion::V5 => self.mqtt5,
            MqttVersion::V311 => self.mqtt311,
        };
        if !protocol_ok {
            return Some(format!(
                "needs MQTT {}, which the broker refused (probe)",
                spec.broker.protocol
            ));
        }
        let will_qos = spec.wills.as_ref().map_or(0, |wills| wills.qos.level());
        // MQTT 5's Maximum QoS bounds PUBLISH only: a subscription above it is granted lower.
        let qos = spec.qos.level().max(will_qos);
        if let Some(most) = self.maximum_qos
            && qos > most
        {
            return Some(format!(
                "needs QoS {qos}, the broker allows at most QoS {most} (probe)"
            ));
        }
        let filters: Vec<TopicFilter> = spec
            .topics
            .iter()
            .flat_map(|tree| &tree.subscribe)
            .filter_map(|text| TopicFilter::parse(text).ok())
            .collect();
        let wildcard = |f: &TopicFilter| f.filter().split('/').any(|l| l == "+" || l == "#");
        let late_filter = spec
            .retain
            .as_ref()
            .and_then(|retain| TopicFilter::parse(&retain.filter).ok());
        let will_delayed = spec.wills.as_ref().is_some_and(|w| w.delay.is_some());
        let needs = [
            (
                filters.iter().any(|f| f.group().is_some()),
                self.shared_subscriptions,
                "shared subscriptions",
            ),
            (
                // The will watcher reads every will topic through `#`.
                filters.iter().any(wildcard)
                    || late_filter.as_ref().is_some_and(wildcard)
                    || spec.wills.is_some(),
                self.wildcards,
                "wildcard subscriptions",
            ),
            (
                spec.retain.is_some() || spec.wills.as_ref().is_some_and(|w| w.retain),
                self.retain,
                "retained messages",
            ),
            (
                late_filter.as_ref().is_some_and(wildcard),
                self.retain_to_wildcards,
                "retained messages delivered to wildcard subscriptions",
            ),
            (
                spec.connection.offline.is_some(),
                self.kept_sessions,
                "sessions kept across a reconnect",
            ),
            (will_delayed, self.will_delay, "will delays honoured"),
        ];
        if let (Some(offline), Some(secs)) = (spec.connection.offline, self.session_expiry_secs)
            && offline.gap.as_secs() >= u64::from(secs)
        {
            return Some(format!(
                "needs sessions kept for {}, the broker keeps them {secs} s at most (probe)",
                humantime::format_duration(offline.gap)
            ));
        }
        for (needed, supported, what) in needs {
            if needed && supported == Some(false) {
                return Some(format!(
                    "needs {what}, which the broker did not deliver (probe)"
                ));
            }
        }
        None
    }

    /// One short line: what the broker supports, as the report's broker table shows it.
    pub fn summary(&self) -> String {
        let yes_no = |value: Option<bool>| match value {
            Some(true) => "yes",
            Some(false) => "no",
            None => "?",
        };
        let protocols = match (self.mqtt311, self.mqtt5) {
            (true, true) => "3.1.1 and 5",
            (true, false) => "3.1.1 only",
            (false, true) => "5 only",
            (false, false) => "none",
        };
        let retain = match (self.retain, self.retain_to_wildcards) {
            (Some(true), Some(false)) => "exact subscriptions only",
            (retain, _) => yes_no(retain),
        };
        let mut line = format!(
            "MQTT {protocols}; max QoS {}; retain {retain}; wildcards {}; shared subscriptions {}",
            self.maximum_qos.map_or("?".to_string(), |q| q.to_string()),
            yes_no(self.wildcards),
            yes_no(self.shared_subscriptions)
        );
        if let Some(aliases) = self.topic_alias_maximum {
            line += &format!("; topic aliases {aliases}");
        }
        if let Some(receive) = self.receive_maximum {
            line += &format!("; receive maximum {receive}");
        }
        if let Some(bytes) = self.maximum_packet_size {
            line += &format!("; max packet {bytes} B");
        }
        if self.kept_sessions.is_some() {
            line += &format!("; kept sessions {}", yes_no(self.kept_sessions));
        }
        if let Some(secs) = self.session_expiry_secs {
            line += &format!("; session expiry capped at {secs} s");
        }
        if self.will_delay.is_some() {
            line += &format!("; will delay {}", yes_no(self.will_delay));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Qos;

    fn rabbitmq_310() -> Capabilities {
        Capabilities {
            mqtt311: true,
            mqtt5: false,
            maximum_qos: None,
            retain: Some(true),
            retain_to_wildcards: Some(false),
            wildcards: Some(true),
            shared_subscriptions: Some(false),
            ..Capabilities::default()
        }
    }

    #[test]
    fn a_workload_needing_what_the_broker_lacks_is_named_and_others_pass() {
        let broker = rabbitmq_310();
        let mut spec = crate::presets::latency();
        assert_eq!(broker.lacks(&spec), None, "3.1.1, QoS 1, one topic");
        spec.broker.protocol = MqttVersion::V5;
        assert_eq!(
            broker.lacks(&spec).as_deref(),
            Some("needs MQTT 5, which the broker refused (probe)")
        );
        spec.broker.protocol = MqttVersion::V311;
        spec.publishers = 4;
        spec.topology = crate::spec::Topology::Tree;
        spec.topics = Some(crate::spec::TopicTree {
            pattern: "d/{n}".into(),
            counts: [("n".to_string(), 4)].into(),
            subscribe: vec!["$share/g/d/+".into()],
        });
        assert!(
            broker
                .lacks(&spec)
                .is_some_and(|why| why.starts_with("needs shared subscriptions")),
            "{:?}",
            broker.lacks(&spec)
        );
        let capped = Capabilities {
            maximum_qos: Some(1),
            ..rabbitmq_310()
        };
        spec.topics = None;
        spec.topology = crate::spec::Topology::Shared;
        spec.qos = Qos::ExactlyOnce;
        assert!(
            capped
                .lacks(&spec)
                .is_some_and(|why| why.contains("at most QoS 1"))
        );
        assert_eq!(
            rabbitmq_310().summary(),
            "MQTT 3.1.1 only; max QoS ?; retain exact subscriptions only; wildcards yes; shared subscriptions no"
        );
        spec.qos = Qos::AtLeastOnce;
        spec.publishers = 1;
        spec.retain = Some(crate::spec::Retain {
            late_subscribers: 1,
            filter: "#".into(),
            handling: 0,
            as_published: false,
        });
        assert!(
            broker
                .lacks(&spec)
                .is_some_and(|why| why.contains("delivered to wildcard subscriptions")),
            "{:?}",
            broker.lacks(&spec)
        );
        spec.retain = Some(crate::spec::Retain {
            late_subscribers: 1,
            filter: "shared".into(),
            handling: 0,
            as_published: false,
        });
        assert_eq!(
            broker.lacks(&spec),
            None,
            "an exact late filter gets retained messages"
        );
    }

    #[test]
    fn wills_need_their_qos_a_wildcard_watcher_and_retain_when_retained() {
        let mut spec = crate::presets::latency();
        spec.wills = Some(crate::spec::Wills {
            clients: 4,
            dropped: 1,
            after: std::time::Duration::from_secs(1),
            delay: None,
            qos: Qos::ExactlyOnce,
            retain: true,
        });
        let capped = Capabilities {
            maximum_qos: Some(1),
            ..rabbitmq_310()
        };
        assert_eq!(
            capped.lacks(&spec).as_deref(),
            Some("needs QoS 2, the broker allows at most QoS 1 (probe)")
        );
        let no_wildcards = Capabilities {
            wildcards: Some(false),
            ..rabbitmq_310()
        };
        assert!(
            no_wildcards
                .lacks(&spec)
                .is_some_and(|why| why.starts_with("needs wildcard subscriptions"))
        );
        let no_retain = Capabilities {
            retain: Some(false),
            ..rabbitmq_310()
        };
        assert!(
            no_retain
                .lacks(&spec)
                .is_some_and(|why| why.starts_with("needs retained messages"))
        );
        assert_eq!(rabbitmq_310().lacks(&spec), None);
        if let Some(wills) = spec.wills.as_mut() {
            wills.delay = Some(std::time::Duration::from_secs(2));
        }
        let early = Capabilities {
            will_delay: Some(false),
            ..rabbitmq_310()
        };
        assert!(
            early
                .lacks(&spec)
                .is_some_and(|why| why.starts_with("needs will delays honoured")),
            "{:?}",
            early.lacks(&spec)
        );
    }

    #[test]
    fn an_absence_needs_kept_sessions() {
        let mut spec = crate::presets::latency();
        spec.connection.clean_session = false;
        spec.connection.offline = Some(crate::spec::OfflineGap {
            after: std::time::Duration::from_secs(1),
            gap: std::time::Duration::from_secs(1),
        });
        let forgetful = Capabilities {
            kept_sessions: Some(false),
            ..rabbitmq_310()
        };
        assert!(
            forgetful
                .lacks(&spec)
                .is_some_and(|why| why.starts_with("needs sessions kept across a reconnect"))
        );
        assert_eq!(rabbitmq_310().lacks(&spec), None, "not probed: not refused");
        let capped = Capabilities {
            kept_sessions: Some(true),
            session_expiry_secs: Some(1),
            ..rabbitmq_310()
        };
        assert_eq!(
            capped.lacks(&spec).as_deref(),
            Some("needs sessions kept for 1s, the broker keeps them 1 s at most (probe)")
        );
        assert!(
            Capabilities {
                kept_sessions: Some(true),
                session_expiry_secs: Some(60),
                will_delay: Some(true),
                ..rabbitmq_310()
            }
            .summary()
            .ends_with("; kept sessions yes; session expiry capped at 60 s; will delay yes")
        );
    }
}
