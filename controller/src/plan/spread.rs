//! How a test's load is spread over its loadgen nodes: which publishers and subscribers
//! (global indices, loadgen's [`Shard`]) each node runs.
//!
//! `even` (the default) gives each node a contiguous block of the publishers and one of the
//! subscribers, in proportion to its weight (`weights`, equal when absent), by the largest
//! remainder so the blocks differ from the exact shares by less than one client; with equal
//! publishers and subscribers (pairs), publisher `i` and subscriber `i` land on the same
//! node. `split` is the study-style two-node mode: every publisher on the first node, every
//! subscriber on the second, so each message crosses from one to the other.

use std::ops::Range;

use loadgen::spec::Shard;

// The enum is the plan tree's (`types.rs`); named here too, where its readers look for it.
use super::types::{Spread, TestEntry};

/// Most loadgen nodes one test may name.
pub const MAX_LOADGEN_NODES: usize = 256;
/// Highest weight of one loadgen node.
pub const MAX_WEIGHT: u32 = 1_000;

/// One node's part of a test's load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: String,
    pub shard: Shard,
}

impl TestEntry {
    /// Each loadgen node's part of a workload of `publishers` and `subscribers`, in the
    /// order of `loadgen`; a node left with no client is left out.
    pub fn placements(&self, publishers: u32, subscribers: u32) -> Vec<Placement> {
        let shards: Vec<Shard> = match self.spread.unwrap_or_default() {
            Spread::Split => vec![
                Shard {
                    publishers: 0..publishers,
                    subscribers: 0..0,
                },
                Shard {
                    publishers: 0..0,
                    subscribers: 0..subscribers,
                },
            ],
            Spread::Even => {
                let weights = self
                    .weights
                    .clone()
                    .unwrap_or_else(|| vec![1; self.loadgen.len()]);
                blocks(publishers, &weights)
                    .into_iter()
                    .zip(blocks(subscribers, &weights))
                    .map(|(publishers, subscribers)| Shard {
                        publishers,
                        subscribers,
                    })
                    .collect()
            }
        };
        self.loadgen
            .iter()
            .zip(shards)
            .filter(|(_, shard)| !shard.publishers.is_empty() || !shard.subscribers.is_empty())
            .map(|(node, shard)| Placement {
                node: node.clone(),
                shard,
            })
            .collect()
    }

    /// The nodes that run publisher 0 and subscriber 0 (the path a message is modelled on).
    pub fn first_clients_nodes(
        &self,
        publishers: u32,
        subscribers: u32,
    ) -> Option<(String, String)> {
        let placements = self.placements(publishers, subscribers);
        let holding = |pick: fn(&Shard) -> &Range<u32>| {
            placements
                .iter()
                .find(|p| pick(&p.shard).contains(&0))
                .map(|p| p.node.clone())
        };
        Some((holding(|s| &s.publishers)?, holding(|s| &s.subscribers)?))
    }
}

/// `count` clients in contiguous blocks, one per weight, each within one of its exact
/// share: the floors first, then one more for the largest remainders (the earlier node on a
/// tie).
fn blocks(count: u32, weights: &[u32]) -> Vec<Range<u32>> {
    let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    if total == 0 {
        return weights.iter().map(|_| 0..0).collect();
    }
    let exact: Vec<(u64, u64)> = weights
        .iter()
        .map(|w| {
            let scaled = u64::from(count) * u64::from(*w);
            (scaled / total, scaled % total)
        })
        .collect();
    let mut sizes: Vec<u64> = exact.iter().map(|(floor, _)| *floor).collect();
    let short = u64::from(count) - sizes.iter().sum::<u64>();
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by(|a, b| exact[*b].1.cmp(&exact[*a].1).then(a.cmp(b)));
    for index in by_remainder.into_iter().take(short as usize) {
        sizes[index] += 1;
    }
    let mut start = 0u32;
    sizes
        .into_iter()
        .map(|size| {
            // The sizes add up to `count`, a u32.
            let end = start + size as u32;
            let block = start..end;
            start = end;
            block
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::TestKind;

    fn test(loadgen: &[&str], spread: Option<Spread>, weights: Option<Vec<u32>>) -> TestEntry {
        let mut text = format!(
            "kind = \"latency\"\nloadgen = {:?}\n",
            loadgen.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        );
        if let Some(spread) = spread {
            text += &format!("spread = \"{}\"\n", spread.as_str());
        }
        if let Some(weights) = weights {
            text += &format!("weights = {weights:?}\n");
        }
        let entry: TestEntry = toml::from_str(&text).unwrap();
        assert_eq!(entry.kind, TestKind::Latency);
        entry
    }

    fn ranges(placements: &[Placement]) -> Vec<(&str, Range<u32>, Range<u32>)> {
        placements
            .iter()
            .map(|p| {
                (
                    p.node.as_str(),
                    p.shard.publishers.clone(),
                    p.shard.subscribers.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn even_blocks_cover_every_client_once_within_one_of_the_share() {
        for count in [0u32, 1, 2, 7, 100, 101, 10_000] {
            for weights in [
                vec![1],
                vec![1, 1, 1],
                vec![3, 1],
                vec![1, 2, 3, 4],
                vec![5; 7],
            ] {
                let blocks = blocks(count, &weights);
                assert_eq!(blocks.len(), weights.len());
                let mut next = 0;
                let total: u32 = weights.iter().sum();
                for (block, weight) in blocks.iter().zip(&weights) {
                    assert_eq!(block.start, next, "contiguous: {blocks:?}");
                    next = block.end;
                    let share = f64::from(count) * f64::from(*weight) / f64::from(total);
                    assert!(
                        (f64::from(block.len() as u32) - share).abs() < 1.0,
                        "{count} over {weights:?}: {blocks:?}"
                    );
                }
                assert_eq!(next, count, "{count} over {weights:?}: {blocks:?}");
            }
        }
    }

    #[test]
    fn the_study_latency_test_over_three_nodes() {
        let entry = test(&["a", "b", "c"], None, None);
        assert_eq!(
            ranges(&entry.placements(100, 1)),
            vec![
                ("a", 0..34, 0..1),
                ("b", 34..67, 1..1),
                ("c", 67..100, 1..1)
            ]
        );
        assert_eq!(
            entry.first_clients_nodes(100, 1),
            Some(("a".into(), "a".into()))
        );
    }

    #[test]
    fn weights_share_pairs_and_keep_each_pair_on_one_node() {
        let entry = test(&["big", "small"], None, Some(vec![3, 1]));
        assert_eq!(
            ranges(&entry.placements(100, 100)),
            vec![("big", 0..75, 0..75), ("small", 75..100, 75..100)]
        );
    }

    #[test]
    fn split_puts_publishers_first_and_subscribers_second() {
        let entry = test(&["tester", "headnode"], Some(Spread::Split), None);
        assert_eq!(
            ranges(&entry.placements(20, 1)),
            vec![("tester", 0..20, 0..0), ("headnode", 0..0, 0..1)]
        );
        assert_eq!(
            entry.first_clients_nodes(20, 1),
            Some(("tester".into(), "headnode".into()))
        );
    }

    #[test]
    fn a_node_left_without_clients_runs_nothing() {
        let entry = test(&["a", "b", "c"], None, None);
        assert_eq!(ranges(&entry.placements(1, 1)), vec![("a", 0..1, 0..1)]);
        let weighted = test(&["light", "heavy"], None, Some(vec![1, 3]));
        assert_eq!(
            weighted.first_clients_nodes(1, 1),
            Some(("heavy".into(), "heavy".into()))
        );
    }
}
