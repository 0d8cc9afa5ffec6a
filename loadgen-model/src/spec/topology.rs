//! Who publishes to whom: the topic layout, the share of the workload one instance runs,
//! and the topics themselves.

use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{TopicFilter, WorkloadSpec};

/// How publishers' topics reach subscribers. On the command line `fan-out` may also be
/// written `fanout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", value(rename_all = "kebab-case"))]
pub enum Topology {
    /// Every publisher publishes to one topic that every subscriber reads (the study's latency
    /// tests: 100 publishers, 1 subscriber).
    #[default]
    Shared,
    /// Publisher i publishes to its own topic, read by subscriber i only (the study's throughput
    /// test); needs as many subscribers as publishers.
    Pairs,
    /// Each publisher has its own topic, read by an equal group of subscribers (subscriber j
    /// reads publisher j mod P); subscribers must be a multiple of publishers.
    #[cfg_attr(feature = "clap", value(alias = "fanout"))]
    FanOut,
    /// Publishers publish into a topic tree that subscribers read through filters with
    /// wildcards (the spec's `topics`): who receives what comes from matching them.
    Tree,
}

impl Topology {
    /// The publishers whose messages subscriber `subscriber` receives (a tree's come from
    /// its filters: see [`Routing`](super::Routing); none here).
    pub fn publishers_of(self, subscriber: u32, publishers: u32) -> Range<u32> {
        match self {
            Topology::Tree => 0..0,
            Topology::Shared => 0..publishers,
            Topology::Pairs | Topology::FanOut => {
                let publisher = subscriber % publishers.max(1);
                publisher..publisher + 1
            }
        }
    }

    /// How many subscribers receive each message of `publisher` (a tree's: see
    /// [`Routing`](super::Routing); none here).
    pub fn fanout_of(self, publisher: u32, publishers: u32, subscribers: u32) -> u32 {
        match self {
            Topology::Tree => 0,
            Topology::Shared => subscribers,
            Topology::Pairs | Topology::FanOut => {
                let full_groups = subscribers / publishers.max(1);
                let remainder = subscribers % publishers.max(1);
                full_groups + u32::from(publisher < remainder)
            }
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Topology::Shared => "shared",
            Topology::Pairs => "pairs",
            Topology::FanOut => "fan-out",
            Topology::Tree => "tree",
        })
    }
}

/// The publishers and subscribers (global indices) one instance runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// Global publisher indices run here.
    pub publishers: Range<u32>,
    /// Global subscriber indices run here.
    pub subscribers: Range<u32>,
}

impl WorkloadSpec {
    /// The shard this instance runs: the explicit one, or everything.
    pub fn effective_shard(&self) -> Shard {
        self.shard.clone().unwrap_or(Shard {
            publishers: 0..self.publishers,
            subscribers: 0..self.subscribers,
        })
    }

    /// The topic publisher `publisher` publishes to, under the run's unique prefix.
    pub fn topic_of(&self, run_id: &str, publisher: u32) -> String {
        match self.topology {
            Topology::Shared => format!("{}/{run_id}/shared", self.topic_prefix),
            Topology::Pairs | Topology::FanOut => {
                format!("{}/{run_id}/p{publisher}", self.topic_prefix)
            }
            Topology::Tree => {
                let name = self
                    .topics
                    .as_ref()
                    .and_then(|tree| tree.names().ok())
                    .map(|names| names.name(u64::from(publisher)))
                    .unwrap_or_default();
                format!("{}/{run_id}/{name}", self.topic_prefix)
            }
        }
    }

    /// The filter subscriber `subscriber` subscribes with, under the run's unique prefix: its
    /// publishers' topic, or in a tree filter `subscriber mod filters`.
    pub fn subscription_of(&self, run_id: &str, subscriber: u32) -> String {
        match (&self.topology, &self.topics) {
            (Topology::Tree, Some(tree)) if !tree.subscribe.is_empty() => {
                let entry = &tree.subscribe[subscriber as usize % tree.subscribe.len()];
                // A shared subscription's $share/<group>/ goes before the prefix.
                match TopicFilter::parse(entry) {
                    Ok(shared) if shared.group().is_some() => format!(
                        "$share/{}/{}/{run_id}/{}",
                        shared.group().unwrap_or_default(),
                        self.topic_prefix,
                        shared.filter()
                    ),
                    _ => format!("{}/{run_id}/{entry}", self.topic_prefix),
                }
            }
            _ => self.topic_of(
                run_id,
                self.topology
                    .publishers_of(subscriber, self.publishers)
                    .start,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_route_as_documented() {
        assert_eq!(Topology::Shared.publishers_of(3, 100), 0..100);
        assert_eq!(Topology::Pairs.publishers_of(7, 10), 7..8);
        assert_eq!(Topology::FanOut.publishers_of(7, 5), 2..3);
        assert_eq!(Topology::Shared.fanout_of(0, 100, 3), 3);
        assert_eq!(Topology::FanOut.fanout_of(1, 5, 20), 4);
        assert_eq!(Topology::Pairs.fanout_of(9, 10, 10), 1);
    }
}
