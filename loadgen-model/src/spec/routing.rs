//! Who receives whose messages, worked out once per run: a contiguous range of publishers
//! for the fixed topologies, and for a topic tree the publishers whose topics match each
//! subscriber's filter (matched as the broker matches them, prefix included).

use std::ops::Range;
use std::sync::Arc;

use super::{TopicFilter, TopicTree, Topology, WorkloadSpec};

/// Most (publisher, filter) pairs a topic tree is matched over: each subscriber's lookup
/// table holds one slot per publisher, shared by the subscribers of one filter.
pub const MAX_TREE_MATCHES: u64 = 10_000_000;

/// The publishers one subscriber receives from, and where each one's track is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscribed {
    /// A contiguous range of publishers (shared, pairs, fan-out).
    Range(Range<u32>),
    /// The publishers whose topics match the subscriber's filter.
    Matching(Arc<MatchedPublishers>),
}

/// The publishers one filter matches, with a slot per publisher for O(1) lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedPublishers {
    publishers: Vec<u32>,
    slot_of: Vec<u32>,
}

/// `slot_of`'s mark for a publisher the filter does not match.
const UNMATCHED: u32 = u32::MAX;

impl Subscribed {
    /// How many publishers reach the subscriber.
    pub fn len(&self) -> usize {
        match self {
            Subscribed::Range(range) => range.len(),
            Subscribed::Matching(matched) => matched.publishers.len(),
        }
    }

    /// True when no publisher reaches the subscriber.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where `publisher`'s track is kept, when it reaches the subscriber.
    #[inline]
    pub fn slot(&self, publisher: u32) -> Option<usize> {
        match self {
            Subscribed::Range(range) => range
                .contains(&publisher)
                .then(|| (publisher - range.start) as usize),
            Subscribed::Matching(matched) => matched
                .slot_of
                .get(publisher as usize)
                .filter(|slot| **slot != UNMATCHED)
                .map(|slot| *slot as usize),
        }
    }

    /// The publishers, in slot order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match self {
            Subscribed::Range(range) => Box::new(range.clone()),
            Subscribed::Matching(matched) => Box::new(matched.publishers.iter().copied()),
        }
    }
}

/// Who receives whose messages in one workload.
#[derive(Debug, Clone)]
pub struct Routing {
    publishers: u32,
    subscribers: u32,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Fixed(Topology),
    Tree {
        /// Per filter, the publishers it matches.
        matched: Vec<Arc<MatchedPublishers>>,
        /// Per filter, true for a shared subscription (its members are one reader).
        shared: Vec<bool>,
        /// Per filter, the subscribers that take it.
        members: Vec<u32>,
        /// Per publisher, the subscribers that receive it.
        fanout: Vec<u32>,
    },
}

impl Routing {
    /// The routing of `spec`. A topic tree is matched here (at most [`MAX_TREE_MATCHES`]
    /// pairs); a tree that does not check gives an error naming the field.
    pub fn of(spec: &WorkloadSpec) -> Result<Self, super::SpecError> {
        let kind = match (&spec.topology, &spec.topics) {
            (Topology::Tree, Some(tree)) => tree_kind(spec, tree)?,
            (topology, _) => Kind::Fixed(*topology),
        };
        Ok(Routing {
            publishers: spec.publishers,
            subscribers: spec.subscribers,
            kind,
        })
    }

    /// The publishers whose messages subscriber `subscriber` receives.
    pub fn publishers_of(&self, subscriber: u32) -> Subscribed {
        match &self.kind {
            Kind::Fixed(topology) => {
                Subscribed::Range(topology.publishers_of(subscriber, self.publishers))
            }
            Kind::Tree { matched, .. } => {
                let filter = subscriber as usize % matched.len().max(1);
                matched.get(filter).map_or_else(
                    || Subscribed::Range(0..0),
                    |matched| Subscribed::Matching(matched.clone()),
                )
            }
        }
    }

    /// How many subscribers receive each message of `publisher`.
    pub fn fanout_of(&self, publisher: u32) -> u32 {
        match &self.kind {
            Kind::Fixed(topology) => {
                topology.fanout_of(publisher, self.publishers, self.subscribers)
            }
            Kind::Tree { fanout, .. } => fanout.get(publisher as usize).copied().unwrap_or(0),
        }
    }

    /// The shared subscription (its `topics.subscribe` entry) subscriber `subscriber` is a
    /// member of, if any.
    pub fn group_of(&self, subscriber: u32) -> Option<u32> {
        match &self.kind {
            Kind::Fixed(_) => None,
            Kind::Tree { shared, .. } => {
                let filter = subscriber as usize % shared.len().max(1);
                shared
                    .get(filter)
                    .copied()
                    .unwrap_or(false)
                    .then_some(filter as u32)
            }
        }
    }

    /// True when some subscriber reads through a shared subscription.
    pub fn has_groups(&self) -> bool {
        matches!(&self.kind, Kind::Tree { shared, .. } if shared.contains(&true))
    }

    /// Deliveries owed per message of each publisher to the subscribers `subscribers`: one
    /// per subscriber its messages reach, one per group with a member there. `None` when such
    /// a group also has members elsewhere (their shares are not known in advance).
    pub fn owed_to(&self, subscribers: &Range<u32>) -> Option<Vec<u64>> {
        let mut local_group = vec![false; super::MAX_TREE_FILTERS];
        for subscriber in subscribers.clone() {
            if let Some(group) = self.group_of(subscriber) {
                local_group[group as usize] = true;
            }
        }
        let split = (0..self.subscribers).any(|s| {
            !subscribers.contains(&s)
                && self
                    .group_of(s)
                    .is_some_and(|group| local_group[group as usize])
        });
        if split {
            return None;
        }
        let mut owed = vec![0u64; self.publishers as usize];
        let mut group_counted = vec![false; super::MAX_TREE_FILTERS];
        for subscriber in subscribers.clone() {
            if let Some(group) = self.group_of(subscriber) {
                if group_counted[group as usize] {
                    continue;
                }
                group_counted[group as usize] = true;
            }
            for publisher in self.publishers_of(subscriber).iter() {
                owed[publisher as usize] += 1;
            }
        }
        Some(owed)
    }

    /// Deliveries owed when every publisher sends one message (a group counts once).
    pub fn owed_per_round(&self) -> u64 {
        (0..self.publishers)
            .map(|publisher| u64::from(self.fanout_of(publisher)))
            .sum()
    }

    /// (subscriber, publisher) tracks the subscribers keep: each member of a group tracks
    /// every publisher its filter matches, so a group costs as many as it has members.
    pub fn tracks(&self) -> u64 {
        match &self.kind {
            Kind::Fixed(_) => self.owed_per_round(),
            Kind::Tree {
                matched, members, ..
            } => matched
                .iter()
                .zip(members)
                .map(|(matched, members)| matched.publishers.len() as u64 * u64::from(*members))
                .sum(),
        }
    }
}

/// Matches every topic of the tree against every filter, as full topics under the prefix
/// (so the `$` rule applies where the broker applies it).
fn tree_kind(spec: &WorkloadSpec, tree: &TopicTree) -> Result<Kind, super::SpecError> {
    let at = |(path, value, problem): (String, String, String)| super::SpecError {
        path: format!("topics.{path}"),
        value,
        problem,
    };
    let names = tree.names().map_err(at)?;
    let filters = tree.filters().map_err(at)?;
    if !u64::from(spec.publishers).is_multiple_of(names.len()) {
        return Err(super::SpecError {
            path: "publishers".to_string(),
            value: spec.publishers.to_string(),
            problem: format!(
                "topics.pattern names {} topics: publishers are a multiple of them, so every topic has as many",
                names.len()
            ),
        });
    }
    if (spec.subscribers as usize) < filters.len() {
        return Err(super::SpecError {
            path: "subscribers".to_string(),
            value: spec.subscribers.to_string(),
            problem: format!(
                "topics.subscribe has {} filters: at least one subscriber each",
                filters.len()
            ),
        });
    }
    let pairs = u64::from(spec.publishers) * filters.len() as u64;
    if pairs > MAX_TREE_MATCHES {
        return Err(super::SpecError {
            path: "topics.subscribe".to_string(),
            value: format!("{} filters", filters.len()),
            problem: format!(
                "x {} publishers is {pairs} lookups to keep, at most {MAX_TREE_MATCHES}",
                spec.publishers
            ),
        });
    }
    // The run id is one literal level: any stands for it when matching.
    let full = |relative: &str| format!("{}/run/{relative}", spec.topic_prefix);
    let topics: Vec<String> = (0..names.len()).map(|i| full(&names.name(i))).collect();
    let mut matched = Vec::with_capacity(filters.len());
    for (at, filter) in filters.iter().enumerate() {
        let full_filter =
            TopicFilter::parse(&full(filter.filter())).map_err(|problem| super::SpecError {
                path: format!("topics.subscribe[{at}]"),
                value: format!("{:?}", filter.filter()),
                problem,
            })?;
        let topic_matches: Vec<bool> = topics.iter().map(|t| full_filter.matches(t)).collect();
        if !topic_matches.contains(&true) {
            return Err(super::SpecError {
                path: format!("topics.subscribe[{at}]"),
                value: format!("{:?}", filter.filter()),
                problem: format!(
                    "matches none of the {} topics of topics.pattern",
                    names.len()
                ),
            });
        }
        let mut publishers = Vec::new();
        let mut slot_of = vec![UNMATCHED; spec.publishers as usize];
        for publisher in 0..spec.publishers {
            if topic_matches[(u64::from(publisher) % names.len()) as usize] {
                slot_of[publisher as usize] = publishers.len() as u32;
                publishers.push(publisher);
            }
        }
        matched.push(Arc::new(MatchedPublishers {
            publishers,
            slot_of,
        }));
    }
    // Subscriber s reads filter s mod F: the first (subscribers mod F) filters have one more.
    // A shared subscription's members are one reader: each message goes to one of them.
    let shared: Vec<bool> = filters.iter().map(|f| f.group().is_some()).collect();
    let filter_count = matched.len() as u32;
    let mut fanout = vec![0u32; spec.publishers as usize];
    let members: Vec<u32> = (0..filter_count)
        .map(|filter| {
            spec.subscribers / filter_count + u32::from(filter < spec.subscribers % filter_count)
        })
        .collect();
    for ((publishers, shared), members) in matched.iter().zip(&shared).zip(&members) {
        let readers = if *shared { (*members).min(1) } else { *members };
        for &publisher in &publishers.publishers {
            fanout[publisher as usize] += readers;
        }
    }
    Ok(Kind::Tree {
        matched,
        shared,
        members,
        fanout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree_spec(publishers: u32, subscribers: u32, subscribe: &[&str]) -> WorkloadSpec {
        let mut spec = super::super::tests::example();
        spec.publishers = publishers;
        spec.subscribers = subscribers;
        spec.topology = Topology::Tree;
        spec.topics = Some(TopicTree {
            pattern: "site/{site}/device/{device}/temp".to_string(),
            counts: [("site".to_string(), 4), ("device".to_string(), 25)].into(),
            subscribe: subscribe.iter().map(|s| s.to_string()).collect(),
        });
        spec
    }

    #[test]
    fn a_tree_routes_each_topic_to_the_filters_that_match_it() {
        let spec = tree_spec(100, 3, &["site/+/device/+/temp", "site/2/#"]);
        spec.validate().expect("valid");
        let routing = Routing::of(&spec).expect("routes");
        let everything = routing.publishers_of(0);
        assert_eq!(
            everything.iter().collect::<Vec<_>>(),
            (0..100).collect::<Vec<_>>()
        );
        let site_two = routing.publishers_of(1);
        assert_eq!(
            site_two.iter().collect::<Vec<_>>(),
            (50..75).collect::<Vec<_>>()
        );
        assert_eq!((site_two.slot(50), site_two.slot(74)), (Some(0), Some(24)));
        assert_eq!(
            (site_two.slot(49), site_two.slot(75), site_two.slot(1000)),
            (None, None, None)
        );
        // Subscriber 2 reads filter 0 again: site 2's publishers reach three subscribers.
        assert_eq!(routing.publishers_of(2), everything);
        assert_eq!((routing.fanout_of(0), routing.fanout_of(60)), (2, 3));
        assert_eq!(routing.tracks(), 2 * 100 + 25);
        assert_eq!(routing.owed_per_round(), 2 * 100 + 25);
        assert_eq!(
            spec.topic_of("r1", 61),
            "continuum/r1/site/2/device/11/temp"
        );
        assert_eq!(spec.subscription_of("r1", 1), "continuum/r1/site/2/#");
        // Two publishers per topic: publisher 161 publishes where 61 does.
        let doubled = Routing::of(&tree_spec(200, 2, &["site/2/device/11/temp"])).expect("routes");
        assert_eq!(
            doubled.publishers_of(0).iter().collect::<Vec<_>>(),
            [61, 161]
        );
    }

    #[test]
    fn a_shared_group_is_owed_each_message_once() {
        let spec = tree_spec(
            100,
            7,
            &[
                "$share/g/site/+/device/+/temp",
                "site/1/#",
                "$share/h/site/1/#",
            ],
        );
        spec.validate().expect("valid");
        let routing = Routing::of(&spec).expect("routes");
        // Subscribers 0, 3, 6 are g's members, 2 and 5 h's, 1 and 4 read site 1 alone.
        assert_eq!(
            (0..7).map(|s| routing.group_of(s)).collect::<Vec<_>>(),
            [Some(0), None, Some(2), Some(0), None, Some(2), Some(0)]
        );
        assert!(routing.has_groups());
        // Site 0: group g only; site 1: g, h and both plain subscribers.
        assert_eq!((routing.fanout_of(0), routing.fanout_of(30)), (1, 4));
        // Owed once per group, but every member keeps its own tracks.
        assert_eq!(routing.owed_per_round(), 100 + 25 * 3);
        assert_eq!(routing.tracks(), 3 * 100 + 2 * 25 + 2 * 25);
        assert_eq!(
            spec.subscription_of("r", 3),
            "$share/g/continuum/r/site/+/device/+/temp"
        );
        let whole = routing.owed_to(&(0..7)).expect("every member here");
        assert_eq!((whole[0], whole[30]), (1, 4));
        assert_eq!(routing.owed_to(&(0..3)), None, "g has members elsewhere");
    }

    #[test]
    fn fixed_topologies_route_by_range() {
        let mut spec = super::super::tests::example();
        spec.topology = Topology::Shared;
        let routing = Routing::of(&spec).expect("routes");
        assert_eq!(routing.publishers_of(1), Subscribed::Range(0..4));
        assert_eq!(routing.publishers_of(1).slot(3), Some(3));
        assert_eq!(routing.fanout_of(0), 4);
        assert_eq!(spec.subscription_of("r", 2), "continuum/r/shared");
    }

    #[test]
    fn trees_that_cannot_route_are_refused_naming_the_field() {
        let refused = |spec: WorkloadSpec| {
            let error = spec.validate().expect_err("refused");
            (error.path, error.problem)
        };
        let (path, problem) = refused(tree_spec(150, 2, &["#"]));
        assert_eq!(path, "publishers");
        assert!(problem.contains("names 100 topics"), "{problem}");
        let (path, _) = refused(tree_spec(100, 1, &["#", "site/1/#"]));
        assert_eq!(path, "subscribers");
        let (path, problem) = refused(tree_spec(100, 1, &["site/9/#"]));
        assert_eq!(path, "topics.subscribe[0]");
        assert!(
            problem.contains("matches none of the 100 topics"),
            "{problem}"
        );
        let (path, _) = refused(tree_spec(100, 1, &["site/#/temp"]));
        assert_eq!(path, "topics.subscribe[0]");
        let mut untreed = tree_spec(100, 1, &["#"]);
        untreed.topics = None;
        assert_eq!(refused(untreed).0, "topology");
        let mut closed = tree_spec(100, 1, &["site/1/#"]);
        closed.pacing = crate::spec::Pacing::ClosedLoop;
        closed.qos = crate::spec::Qos::AtMostOnce;
        closed.messages_per_publisher = 0;
        closed.duration = Some(std::time::Duration::from_secs(1));
        let (path, problem) = refused(closed);
        assert_eq!(path, "topics.subscribe");
        assert!(
            problem.contains("no filter reads publisher 0's topic"),
            "{problem}"
        );
        let mut stray = tree_spec(100, 1, &["#"]);
        stray.topology = Topology::Shared;
        assert_eq!(refused(stray).0, "topics");
    }
}
