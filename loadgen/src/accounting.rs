//! Per-(publisher, sequence) accounting at one subscriber: first deliveries, duplicates and
//! reordering, judged later against the QoS.

use crate::spec::Subscribed;

/// What one received message was, for this subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The first copy of this (publisher, seq); `out_of_order` when a later seq of the same
    /// publisher arrived before it.
    First {
        /// Arrived after a higher sequence number of its publisher.
        out_of_order: bool,
    },
    /// A copy of a message already received.
    Duplicate,
    /// A header this subscriber cannot place: an unknown publisher or a sequence beyond the
    /// workload (another run's traffic, or corruption).
    Foreign,
}

#[derive(Debug, Clone)]
struct PublisherTrack {
    seen: Vec<u64>,
    highest: Option<u32>,
    unique: u64,
}

/// Tracks which messages of its publishers one subscriber has received.
#[derive(Debug, Clone)]
pub struct DeliveryTracker {
    publishers: Subscribed,
    messages_per_publisher: u64,
    tracks: Vec<Option<PublisherTrack>>,
    duplicates: u64,
    out_of_order: u64,
    foreign: u64,
}

impl DeliveryTracker {
    /// A tracker for messages of `publishers`, each sending at most `messages_per_publisher`
    /// (a bound: the bitmaps grow with the sequence numbers actually seen, so a timed run
    /// whose count is not known in advance costs only what it sends).
    pub fn new(publishers: Subscribed, messages_per_publisher: u64) -> Self {
        let count = publishers.len();
        DeliveryTracker {
            publishers,
            messages_per_publisher,
            tracks: vec![None; count],
            duplicates: 0,
            out_of_order: 0,
            foreign: 0,
        }
    }

    /// Accounts one received message.
    pub fn record(&mut self, publisher: u32, seq: u32) -> Delivery {
        let slot = match self.publishers.slot(publisher) {
            Some(slot) if u64::from(seq) < self.messages_per_publisher => slot,
            _ => {
                self.foreign += 1;
                return Delivery::Foreign;
            }
        };
        let words = usize::try_from(self.messages_per_publisher.div_ceil(64)).unwrap_or(usize::MAX);
        let track = self.tracks[slot].get_or_insert_with(|| PublisherTrack {
            seen: Vec::new(),
            highest: None,
            unique: 0,
        });
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if word >= track.seen.len() {
            // Doubling keeps the growth amortised; never past what the workload can number.
            let grown = (word + 1).max(track.seen.len() * 2).max(16).min(words);
            track.seen.resize(grown, 0);
        }
        if track.seen[word] & bit != 0 {
            self.duplicates += 1;
            return Delivery::Duplicate;
        }
        track.seen[word] |= bit;
        track.unique += 1;
        let out_of_order = track.highest.is_some_and(|highest| seq < highest);
        if out_of_order {
            self.out_of_order += 1;
        } else {
            track.highest = Some(seq);
        }
        Delivery::First { out_of_order }
    }

    /// Distinct messages received per publisher, as (global publisher index, count).
    pub fn unique_by_publisher(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.tracks
            .iter()
            .zip(self.publishers.iter())
            .filter_map(|(track, publisher)| track.as_ref().map(|t| (publisher, t.unique)))
    }

    /// Per publisher heard from: its global index, the bitmap of sequence numbers received,
    /// and how many.
    pub fn seen_by_publisher(&self) -> impl Iterator<Item = (u32, &[u64], u64)> + '_ {
        self.tracks
            .iter()
            .zip(self.publishers.iter())
            .filter_map(|(track, publisher)| {
                track
                    .as_ref()
                    .map(|t| (publisher, t.seen.as_slice(), t.unique))
            })
    }

    /// How many of `publisher`'s messages numbered `seqs` this subscriber never received
    /// (all of them for a publisher it does not read: none of those were owed).
    pub fn unseen(&self, publisher: u32, seqs: std::ops::Range<u64>) -> u64 {
        let Some(slot) = self.publishers.slot(publisher) else {
            return 0;
        };
        let seqs = seqs.start..seqs.end.min(self.messages_per_publisher);
        let Some(track) = &self.tracks[slot] else {
            return seqs.end.saturating_sub(seqs.start);
        };
        seqs.filter(|&seq| {
            let word = usize::try_from(seq / 64).unwrap_or(usize::MAX);
            track
                .seen
                .get(word)
                .is_none_or(|bits| bits & (1u64 << (seq % 64)) == 0)
        })
        .count() as u64
    }

    /// Per publisher heard from: its global index and the highest sequence received so far.
    pub fn highest_by_publisher(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.tracks
            .iter()
            .zip(self.publishers.iter())
            .filter_map(|(track, publisher)| {
                track
                    .as_ref()
                    .and_then(|t| t.highest)
                    .map(|highest| (publisher, highest))
            })
    }

    /// Copies of already-received messages.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// First deliveries that came after a higher sequence of their publisher.
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Messages that belong to no publisher of this workload.
    pub fn foreign(&self) -> u64 {
        self.foreign
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_deliveries_are_all_first_and_counted() {
        let mut tracker = DeliveryTracker::new(Subscribed::Range(0..2), 100);
        for seq in 0..100 {
            assert_eq!(
                tracker.record(0, seq),
                Delivery::First {
                    out_of_order: false
                }
            );
        }
        assert_eq!(
            tracker.unique_by_publisher().collect::<Vec<_>>(),
            vec![(0, 100)]
        );
        assert_eq!((tracker.duplicates(), tracker.out_of_order()), (0, 0));
    }

    #[test]
    fn injected_duplicates_and_reordering_are_detected() {
        let mut tracker = DeliveryTracker::new(Subscribed::Range(10..12), 8);
        tracker.record(11, 0);
        tracker.record(11, 2);
        assert_eq!(
            tracker.record(11, 1),
            Delivery::First { out_of_order: true }
        );
        assert_eq!(tracker.record(11, 2), Delivery::Duplicate);
        assert_eq!(tracker.record(11, 0), Delivery::Duplicate);
        assert_eq!(
            tracker.record(11, 3),
            Delivery::First {
                out_of_order: false
            }
        );
        assert_eq!((tracker.duplicates(), tracker.out_of_order()), (2, 1));
        assert_eq!(
            tracker.unique_by_publisher().collect::<Vec<_>>(),
            vec![(11, 4)]
        );
    }

    #[test]
    fn unseen_counts_the_gaps_of_a_range_and_nothing_of_strangers() {
        let mut tracker = DeliveryTracker::new(Subscribed::Range(0..2), 200);
        for seq in (0..150).filter(|seq| !(40..50).contains(seq)) {
            tracker.record(0, seq);
        }
        assert_eq!(tracker.unseen(0, 30..60), 10);
        assert_eq!(
            tracker.unseen(0, 140..300),
            50,
            "beyond the bitmap, capped at 200"
        );
        assert_eq!(tracker.unseen(1, 0..5), 5, "a publisher never heard from");
        assert_eq!(
            tracker.unseen(7, 0..5),
            0,
            "not this subscriber's publisher"
        );
    }

    #[test]
    fn strangers_are_foreign_not_counted() {
        let mut tracker = DeliveryTracker::new(Subscribed::Range(0..1), 8);
        assert_eq!(tracker.record(1, 0), Delivery::Foreign);
        assert_eq!(tracker.record(0, 8), Delivery::Foreign);
        assert_eq!(tracker.foreign(), 2);
        assert_eq!(tracker.unique_by_publisher().count(), 0);
    }
}
