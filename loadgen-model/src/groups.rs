//! Shared subscriptions (`$share/<group>/<filter>`) judged once per group: a message is lost
//! if no member got it and duplicated if two did, so the members' delivery bitmaps are joined
//! (OR) per publisher, within one instance and across instances alike, and what two of them
//! both hold is counted as duplicates.

use serde::{Deserialize, Serialize};

use crate::result::RunResult;
use crate::spec::Routing;

/// One shared subscription's deliveries over every member that reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDeliveries {
    /// The entry of `topics.subscribe` the members subscribed with.
    pub filter: u32,
    /// Distinct messages each member received, by member (global subscriber index).
    pub members: Vec<MemberShare>,
    /// Per publisher (global index), bit `seq` set when some member received (publisher,
    /// seq); empty for a publisher the filter does not match or nobody heard from.
    pub delivered: Vec<Vec<u64>>,
    /// Copies of a message another member (or instance) of the group had already received.
    pub duplicates: u64,
}

/// What one member of a group received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberShare {
    /// The member's global subscriber index.
    pub subscriber: u32,
    /// Distinct messages it received.
    pub delivered: u64,
}

/// What joining one set of deliveries into a group added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Joined {
    /// Messages the group had not received before.
    pub new: u64,
    /// Messages it already had: a second member received them.
    pub again: u64,
}

impl GroupDeliveries {
    /// A group of filter entry `filter` with no deliveries yet, in a workload of `publishers`.
    pub fn new(filter: u32, publishers: u32) -> Self {
        GroupDeliveries {
            filter,
            members: Vec::new(),
            delivered: vec![Vec::new(); publishers as usize],
            duplicates: 0,
        }
    }

    /// Joins `seen`, one publisher's bitmap from a member (or another instance's group),
    /// into the group; what was there already counts as duplicates.
    pub fn join(&mut self, publisher: u32, seen: &[u64]) -> Joined {
        let Some(mine) = self.delivered.get_mut(publisher as usize) else {
            return Joined::default();
        };
        if mine.len() < seen.len() {
            mine.resize(seen.len(), 0);
        }
        let mut joined = Joined::default();
        for (word, theirs) in mine.iter_mut().zip(seen) {
            joined.again += u64::from((*word & theirs).count_ones());
            joined.new += u64::from((!*word & theirs).count_ones());
            *word |= theirs;
        }
        self.duplicates += joined.again;
        joined
    }

    /// Distinct messages the group received.
    pub fn delivered_total(&self) -> u64 {
        self.delivered
            .iter()
            .flatten()
            .map(|word| u64::from(word.count_ones()))
            .sum()
    }

    /// The members' shares of the group's deliveries, smallest first.
    pub fn shares(&self) -> Vec<u64> {
        let mut shares: Vec<u64> = self.members.iter().map(|m| m.delivered).collect();
        shares.sort_unstable();
        shares
    }
}

/// One shared subscription's figures: what the group owed and got, and how the members
/// shared it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// The subscription as written (`$share/<group>/<filter>`, below the run's prefix).
    pub subscription: String,
    /// Members that reported.
    pub members: u32,
    /// Messages published to the topics its filter matches: each owed to the group once.
    pub expected: u64,
    /// Distinct messages some member received.
    pub delivered: u64,
    /// Owed and received by no member; `None` when only part of the workload ran here.
    pub lost: Option<u64>,
    /// Messages a second member (or a member twice) received.
    pub duplicates: u64,
    /// Distinct messages per member: least, median and most.
    pub share_min: u64,
    /// See `share_min`.
    pub share_median: u64,
    /// See `share_min`.
    pub share_max: u64,
    /// The busiest member's share of the group's deliveries, %.
    pub busiest_percent: f64,
}

impl GroupSummary {
    /// The figures of every group in `result`.
    pub fn of_all(result: &RunResult) -> Vec<Self> {
        let Ok(routing) = Routing::of(&result.spec) else {
            return Vec::new();
        };
        let entries = result
            .spec
            .topics
            .as_ref()
            .map(|tree| tree.subscribe.as_slice())
            .unwrap_or_default();
        result
            .groups
            .iter()
            .map(|group| {
                let member = (0..result.spec.subscribers)
                    .find(|s| routing.group_of(*s) == Some(group.filter));
                let expected = member.map_or(0, |member| {
                    routing
                        .publishers_of(member)
                        .iter()
                        .map(|p| result.published.get(p as usize).copied().unwrap_or(0))
                        .sum()
                });
                let delivered = group.delivered_total();
                let shares = group.shares();
                let at = |q: usize| shares.get(q).copied().unwrap_or(0);
                let most = shares.last().copied().unwrap_or(0);
                GroupSummary {
                    subscription: entries
                        .get(group.filter as usize)
                        .cloned()
                        .unwrap_or_default(),
                    members: group.members.len() as u32,
                    expected,
                    delivered,
                    lost: result
                        .covers_whole_workload()
                        .then(|| expected.saturating_sub(delivered)),
                    duplicates: group.duplicates,
                    share_min: at(0),
                    share_median: at(shares.len() / 2),
                    share_max: most,
                    busiest_percent: if delivered == 0 {
                        0.0
                    } else {
                        most as f64 * 100.0 / delivered as f64
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joining_counts_what_a_second_member_also_got_as_duplicates() {
        let mut group = GroupDeliveries::new(0, 2);
        // Member A got seqs 0-3 of publisher 1, member B seqs 2-5 and 64.
        assert_eq!(group.join(1, &[0b1111]), Joined { new: 4, again: 0 });
        assert_eq!(group.join(1, &[0b11_1100, 1]), Joined { new: 3, again: 2 });
        assert_eq!(group.delivered[1], vec![0b11_1111, 1]);
        assert_eq!((group.delivered_total(), group.duplicates), (7, 2));
        assert_eq!(group.join(7, &[1]), Joined::default(), "no such publisher");
    }

    /// A tree of 2 topics read by one shared group of 4 members (and nothing else).
    fn shared_result(shard: std::ops::Range<u32>) -> RunResult {
        let mut spec = crate::presets::throughput();
        spec.publishers = 2;
        spec.subscribers = 4;
        spec.messages_per_publisher = 10;
        spec.topology = crate::spec::Topology::Tree;
        spec.topics = Some(crate::spec::TopicTree {
            pattern: "t/{n}".to_string(),
            counts: [("n".to_string(), 2)].into(),
            subscribe: vec!["$share/g/t/+".to_string()],
        });
        spec.validate().expect("valid");
        let mut result = RunResult::empty(&spec, "groups");
        result.shards.push(crate::spec::Shard {
            publishers: if shard.start == 0 { 0..2 } else { 0..0 },
            subscribers: shard,
        });
        if result.shards[0].publishers == (0..2) {
            result.published = vec![10, 10];
        }
        result
    }

    #[test]
    fn parts_of_a_group_merge_into_one_judgement() {
        // Instance A's members got seqs 0-7 of publisher 0 and all of publisher 1; B's got
        // 6-9 of publisher 0: 6 and 7 reached two members.
        let mut a = shared_result(0..2);
        let mut group = GroupDeliveries::new(0, 2);
        group.join(0, &[0xff]);
        group.join(1, &[0x3ff]);
        group.members = vec![MemberShare {
            subscriber: 0,
            delivered: 18,
        }];
        a.groups.push(group);
        a.delivered_unique = vec![8, 10];
        let mut b = shared_result(2..4);
        let mut group = GroupDeliveries::new(0, 2);
        group.join(0, &[0x3c0]);
        group.members = vec![MemberShare {
            subscriber: 2,
            delivered: 4,
        }];
        b.groups.push(group);
        b.delivered_unique = vec![4, 0];
        a.merge(&b).expect("parts of one run");
        assert!(a.covers_whole_workload());
        assert_eq!(
            a.delivered_unique,
            vec![10, 10],
            "each message once for the group"
        );
        assert_eq!(a.duplicates, 2);
        assert_eq!(a.expected_deliveries(), 20, "owed once per group");
        assert_eq!(a.lost_deliveries(), Some(0));
        let summary = &GroupSummary::of_all(&a)[0];
        assert_eq!(
            (
                summary.members,
                summary.delivered,
                summary.duplicates,
                summary.lost
            ),
            (2, 20, 2, Some(0))
        );
        assert_eq!((summary.share_min, summary.share_max), (4, 18));
        assert!((summary.busiest_percent - 90.0).abs() < 1e-9);
    }

    #[test]
    fn a_group_a_result_cannot_hold_is_refused_naming_it() {
        let mut result = shared_result(0..4);
        let mut group = GroupDeliveries::new(0, 2);
        group.members = vec![MemberShare {
            subscriber: 0,
            delivered: 0,
        }];
        result.groups.push(group.clone());
        crate::result_checks::check(&result).expect("a sound group");
        let refused = |change: &dyn Fn(&mut RunResult)| {
            let mut bad = result.clone();
            change(&mut bad);
            crate::result_checks::check(&bad).expect_err("refused").path
        };
        assert_eq!(refused(&|r| r.groups[0].filter = 1), "groups[0].filter");
        assert_eq!(
            refused(&|r| r.groups.push(group.clone())),
            "groups[1].filter"
        );
        assert_eq!(
            refused(&|r| r.groups[0].delivered.pop().map(drop).unwrap_or(())),
            "groups[0].delivered"
        );
        assert_eq!(
            refused(&|r| r.groups[0].members[0].subscriber = 9),
            "groups[0].members[0].subscriber"
        );
        assert_eq!(
            refused(&|r| r.groups[0].duplicates = u64::MAX),
            "groups[0].duplicates"
        );
    }
}
