//! Retained messages: publishers publish with RETAIN, and once publishing has ended, late
//! subscribers connect and must receive exactly the last message of each topic their filter
//! matches (a dashboard that connects late gets the state of the fleet). The run then clears
//! every topic it retained (an empty retained payload) and checks with a fresh subscriber
//! that nothing is left behind on the broker.

use serde::{Deserialize, Serialize};

use super::{SpecError, TopicFilter, Topology, WorkloadSpec};

/// Most late subscribers one run connects.
pub const MAX_LATE_SUBSCRIBERS: u32 = 10_000;

/// Publishers retain their messages; late subscribers check what the broker kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retain {
    /// Subscribers that connect after publishing has ended, each judged on its own.
    pub late_subscribers: u32,
    /// Their filter, below the run's prefix: every topic of the run by default.
    #[serde(default = "every_topic")]
    pub filter: String,
    /// MQTT 5 retain handling of the late subscribers' SUBSCRIBE: 0 the broker sends the
    /// retained messages at every subscribe, 1 only to a new subscription (each late
    /// subscriber then subscribes twice, and the second must bring none), 2 never (none is
    /// owed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub handling: u8,
    /// MQTT 5 retain-as-published on the workload's subscriptions: live deliveries of the
    /// retaining publishers keep RETAIN set; without it the broker must clear it (MQTT
    /// §3.3.1.3), which every run checks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_published: bool,
}

fn is_zero(value: &u8) -> bool {
    *value == 0
}

impl Retain {
    /// SUBSCRIBEs each late subscriber sends: two to see retain handling 1 send nothing for
    /// a subscription that exists.
    pub fn late_subscribes(&self) -> u16 {
        if self.handling == 1 { 2 } else { 1 }
    }

    /// Whether late subscribers are owed the retained messages (not with handling 2).
    pub fn owes_late_subscribers(&self) -> bool {
        self.handling != 2
    }
}

impl WorkloadSpec {
    /// The RETAIN flag a live delivery must carry: set only for retained publishes to a
    /// subscription with retain-as-published (MQTT §3.3.1.3; MQTT 3.1.1 always clears it).
    pub fn live_retain_flag(&self) -> bool {
        self.retain
            .as_ref()
            .is_some_and(|retain| retain.as_published)
    }
}

fn every_topic() -> String {
    "#".to_string()
}

fn invalid(path: &str, value: impl std::fmt::Display, problem: impl Into<String>) -> SpecError {
    SpecError {
        path: path.to_string(),
        value: value.to_string(),
        problem: problem.into(),
    }
}

impl WorkloadSpec {
    /// Publishers whose topic the late subscribers' filter matches (one topic each).
    pub fn retained_publishers(&self) -> Vec<u32> {
        let Some(retain) = &self.retain else {
            return Vec::new();
        };
        let Ok(filter) =
            TopicFilter::parse(&format!("{}/run/{}", self.topic_prefix, retain.filter))
        else {
            return Vec::new();
        };
        (0..self.publishers)
            .filter(|p| filter.matches(&self.topic_of("run", *p)))
            .collect()
    }

    /// The checks of `retain`: a filter that is not shared and matches some topic, one
    /// publisher per topic (else "the last value" of a topic is a race between publishers),
    /// every publisher in one instance or none (the late subscribers run in the instance
    /// holding them all and judge against what it sent), and
    /// no reconnecting subscribers (a SUBSCRIBE again would bring retained copies mid-run).
    pub(super) fn validate_retain(&self) -> Result<(), SpecError> {
        let Some(retain) = &self.retain else {
            return Ok(());
        };
        if retain.late_subscribers == 0 || retain.late_subscribers > MAX_LATE_SUBSCRIBERS {
            return Err(invalid(
                "retain.late_subscribers",
                retain.late_subscribers,
                format!("at least 1 and at most {MAX_LATE_SUBSCRIBERS}"),
            ));
        }
        if retain.handling > 2 {
            return Err(invalid(
                "retain.handling",
                retain.handling,
                "0 (sent at every subscribe), 1 (only to a new subscription) or 2 (never)",
            ));
        }
        let version_5 = self.broker.protocol == super::MqttVersion::V5;
        if retain.handling != 0 && !version_5 {
            return Err(invalid(
                "retain.handling",
                retain.handling,
                "retain handling is an MQTT 5 subscription option: set broker.protocol = \"5\"",
            ));
        }
        if retain.as_published && !version_5 {
            return Err(invalid(
                "retain.as_published",
                true,
                "retain-as-published is an MQTT 5 subscription option: set broker.protocol = \"5\"",
            ));
        }
        if self.payload.bytes() == 0 {
            return Err(invalid(
                "payload",
                self.payload,
                "a retained message with an empty payload deletes its topic's retained message (MQTT §3.3.1.3): retain needs at least 1 B",
            ));
        }
        let filter = TopicFilter::parse(&retain.filter)
            .map_err(|problem| invalid("retain.filter", format!("{:?}", retain.filter), problem))?;
        if filter.group().is_some() {
            return Err(invalid(
                "retain.filter",
                format!("{:?}", retain.filter),
                "a shared subscription gets no retained messages (MQTT 5 §4.8.2)",
            ));
        }
        let one_per_topic = match self.topology {
            Topology::Shared => self.publishers == 1,
            Topology::Pairs | Topology::FanOut => true,
            Topology::Tree => self
                .topics
                .as_ref()
                .and_then(|tree| tree.names().ok())
                .is_some_and(|names| names.len() == u64::from(self.publishers)),
        };
        if !one_per_topic {
            return Err(invalid(
                "retain",
                "(set)",
                format!(
                    "needs one publisher per topic (topology \"{}\" with {} publishers shares topics): \
                     the last value of a shared topic would be a race",
                    self.topology, self.publishers
                ),
            ));
        }
        if self.retained_publishers().is_empty() {
            return Err(invalid(
                "retain.filter",
                format!("{:?}", retain.filter),
                "matches none of the run's topics",
            ));
        }
        if let Some(shard) = &self.shard
            && !shard.publishers.is_empty()
            && shard.publishers != (0..self.publishers)
        {
            return Err(invalid(
                "shard.publishers",
                format!("{:?}", shard.publishers),
                "retain needs every publisher in one instance (or none: the one with all of \
                 them checks): the late subscribers judge against what they sent",
            ));
        }
        if self.connection.reconnect.is_some() {
            return Err(invalid(
                "retain",
                "(set)",
                "not with connection.reconnect: a subscriber subscribing again gets retained copies mid-run",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retained(late: u32, filter: &str) -> WorkloadSpec {
        let mut spec = super::super::tests::example();
        spec.retain = Some(Retain {
            late_subscribers: late,
            filter: filter.to_string(),
            handling: 0,
            as_published: false,
        });
        spec
    }

    #[test]
    fn late_subscribers_expect_the_topics_their_filter_matches() {
        let spec = retained(3, "#");
        spec.validate().expect("valid");
        assert_eq!(spec.retained_publishers(), [0, 1, 2, 3]);
        assert_eq!(retained(1, "p2").retained_publishers(), [2]);
    }

    #[test]
    fn retain_that_cannot_be_judged_is_refused_naming_the_field() {
        let path = |spec: WorkloadSpec| spec.validate().expect_err("refused").path;
        assert_eq!(path(retained(0, "#")), "retain.late_subscribers");
        assert_eq!(path(retained(1, "a/#/b")), "retain.filter");
        assert_eq!(path(retained(1, "$share/g/#")), "retain.filter");
        assert_eq!(path(retained(1, "nothing/here")), "retain.filter");
        let mut shared = retained(1, "#");
        shared.topology = Topology::Shared;
        assert_eq!(path(shared), "retain");
        let mut part = retained(1, "#");
        part.shard = Some(super::super::Shard {
            publishers: 0..2,
            subscribers: 0..4,
        });
        assert_eq!(path(part), "shard.publishers");
        let mut handled = retained(1, "#");
        if let Some(retain) = handled.retain.as_mut() {
            retain.handling = 2;
        }
        assert_eq!(path(handled.clone()), "retain.handling", "MQTT 5 only");
        handled.broker.protocol = super::super::MqttVersion::V5;
        handled.validate().expect("MQTT 5");
        if let Some(retain) = handled.retain.as_mut() {
            retain.handling = 3;
        }
        assert_eq!(path(handled), "retain.handling");
        let mut published = retained(1, "#");
        if let Some(retain) = published.retain.as_mut() {
            retain.as_published = true;
        }
        assert_eq!(path(published), "retain.as_published");
        let mut empty = retained(1, "#");
        empty.broker.protocol = super::super::MqttVersion::V5;
        empty.header_in = crate::header::HeaderPlace::UserProperty;
        empty.payload = crate::size::ByteSize(0);
        assert_eq!(path(empty), "payload");
        let mut subscribing = retained(1, "#");
        subscribing.shard = Some(super::super::Shard {
            publishers: 0..0,
            subscribers: 0..4,
        });
        subscribing
            .validate()
            .expect("an instance without publishers leaves the check to the other");
    }
}
