//! Merging the results of one run's instances (shards, hosts) into one: both sides are
//! checked first, since either may have been read from a file, then added exactly.

use crate::groups::GroupDeliveries;
use crate::result::{ChurnOutcome, RunResult};
use crate::result_checks::check_merge;

/// Results of different workloads or runs cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot merge results: {0}")]
pub struct MergeError(String);

impl RunResult {
    /// Adds `other`, a result of the same run (another shard or instance), into this one.
    pub fn merge(&mut self, other: &RunResult) -> Result<(), MergeError> {
        // Either side may have been read from a file: nothing below indexes or sums unchecked.
        check_merge(self, other).map_err(MergeError)?;
        if self.run_id != other.run_id || self.spec != other.spec {
            return Err(MergeError(format!(
                "run {} and run {} differ in workload or id",
                self.run_id, other.run_id
            )));
        }
        let overlaps =
            |a: &std::ops::Range<u32>, b: &std::ops::Range<u32>| a.start < b.end && b.start < a.end;
        for mine in &self.shards {
            for theirs in &other.shards {
                if overlaps(&mine.publishers, &theirs.publishers)
                    || overlaps(&mine.subscribers, &theirs.subscribers)
                {
                    return Err(MergeError(format!(
                        "shards {mine:?} and {theirs:?} of run {} overlap: their clients would be counted twice",
                        self.run_id
                    )));
                }
            }
        }
        for histogram in [
            (&mut self.latency, &other.latency),
            (&mut self.transit_latency, &other.transit_latency),
            (&mut self.send_delay, &other.send_delay),
            (&mut self.read_delay, &other.read_delay),
            (&mut self.connect_time, &other.connect_time),
        ] {
            histogram
                .0
                .add(histogram.1)
                .map_err(|e| MergeError(format!("histogram: {e:?}")))?;
        }
        self.latency_intervals
            .merge(&other.latency_intervals)
            .map_err(|e| MergeError(format!("latency intervals: {e}")))?;
        for (mine, theirs) in [
            (&mut self.published, &other.published),
            (&mut self.acknowledged, &other.acknowledged),
            (&mut self.delivered_unique, &other.delivered_unique),
        ] {
            for (a, b) in mine.iter_mut().zip(theirs) {
                *a += b;
            }
        }
        for theirs in &other.groups {
            self.join_group(theirs);
        }
        self.shards.extend(other.shards.iter().cloned());
        self.sent_late_after_end += other.sent_late_after_end;
        self.bytes_written = self.bytes_written.saturating_add(other.bytes_written);
        self.expired = self.expired.saturating_add(other.expired);
        self.most_unacknowledged = self.most_unacknowledged.max(other.most_unacknowledged);
        self.received += other.received;
        self.duplicates += other.duplicates;
        self.out_of_order += other.out_of_order;
        self.publish_series.merge(&other.publish_series);
        self.receive_series.merge(&other.receive_series);
        self.publisher_windows
            .extend_from_slice(&other.publisher_windows);
        self.subscriber_windows
            .extend_from_slice(&other.subscriber_windows);
        for (kind, count) in &other.errors {
            self.count_error(kind, *count);
        }
        self.resources.add(&other.resources);
        self.load_wall_ns = self.load_wall_ns.max(other.load_wall_ns);
        self.interrupted |= other.interrupted;
        self.measured_window = self.measured_window.or(other.measured_window);
        if self.clock_origin_unix_ns == 0 {
            self.clock_origin_unix_ns = other.clock_origin_unix_ns;
        }
        self.instances.extend(other.instances.iter().cloned());
        match (&mut self.churn, &other.churn) {
            (Some(mine), Some(theirs)) => mine.merge(theirs)?,
            (None, Some(theirs)) => self.churn = Some(theirs.clone()),
            (_, None) => {}
        }
        // Only the instance holding every publisher checks retained messages.
        if self.retained.is_none() {
            self.retained = other.retained.clone();
        }
        // Only the instance holding publisher 0 runs the will clients.
        match (&self.wills, &other.wills) {
            (Some(_), Some(_)) => {
                return Err(MergeError(
                    "two instances ran the will clients (only the one holding publisher 0 does)"
                        .to_string(),
                ));
            }
            (None, Some(theirs)) => self.wills = Some(theirs.clone()),
            (_, None) => {}
        }
        match (&mut self.reconnect, &other.reconnect) {
            (Some(mine), Some(theirs)) => mine.merge(theirs).map_err(MergeError)?,
            (None, Some(theirs)) => self.reconnect = Some(theirs.clone()),
            (_, None) => {}
        }
        Ok(())
    }
}

impl RunResult {
    /// Joins another instance's part of a shared subscription: messages both parts hold were
    /// counted in both `delivered_unique`s, so they move to the duplicates.
    fn join_group(&mut self, theirs: &GroupDeliveries) {
        let position = self.groups.iter().position(|g| g.filter == theirs.filter);
        let mine = match position {
            Some(at) => &mut self.groups[at],
            None => {
                self.groups
                    .push(GroupDeliveries::new(theirs.filter, self.spec.publishers));
                self.groups.last_mut().expect("just pushed")
            }
        };
        mine.members.extend_from_slice(&theirs.members);
        mine.members.sort_by_key(|m| m.subscriber);
        mine.duplicates += theirs.duplicates;
        for (publisher, seen) in (0u32..).zip(&theirs.delivered) {
            let again = mine.join(publisher, seen).again;
            if let Some(unique) = self.delivered_unique.get_mut(publisher as usize) {
                *unique = unique.saturating_sub(again);
            }
            self.duplicates += again;
        }
        self.groups.sort_by_key(|g| g.filter);
    }
}

impl ChurnOutcome {
    /// Adds another instance's fleet.
    fn merge(&mut self, other: &ChurnOutcome) -> Result<(), MergeError> {
        self.attempted += other.attempted;
        self.connected += other.connected;
        self.disconnected += other.disconnected;
        self.cancelled += other.cancelled;
        for (kind, count) in &other.failures {
            *self.failures.entry(kind.clone()).or_insert(0) += count;
        }
        self.connect_time
            .add(&other.connect_time)
            .map_err(|e| MergeError(format!("churn histogram: {e:?}")))?;
        // Fleets of several instances overlap in time: their peaks may add up.
        self.most_open += other.most_open;
        self.most_late_ns = self.most_late_ns.max(other.most_late_ns);
        self.first_arrival_ns = self.first_arrival_ns.min(other.first_arrival_ns);
        self.last_arrival_ns = self.last_arrival_ns.max(other.last_arrival_ns);
        Ok(())
    }
}
