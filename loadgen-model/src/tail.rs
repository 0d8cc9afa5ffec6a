//! Whose latency tail it is: the broker's, or loadgen's own lateness.
//!
//! An open loop measures each message from its intended send time, so that a stalled sender
//! cannot hide delay the broker caused. When loadgen itself left late (a busy host woke it
//! late), that same rule blames the broker for the generator: on a 2-core machine with a build
//! beside it, the open-loop p99 was 3.8 ms while Mosquitto's own wire-in to wire-out p99 was
//! 0.15 ms, and the send delay p99 3.2 ms. The transit latency (from the actual send) is the
//! broker's figure then; this verdict says when the open-loop tail is mostly send delay.

use serde::{Deserialize, Serialize};

use crate::percentiles::LatencySummary;

/// The send delay p99 at or above this share of the open-loop p99 explains the tail...
pub const SEND_DELAY_SHARE: f64 = 0.5;
/// ...as does a transit p99 at or below this share of the open-loop p99...
pub const TRANSIT_SHARE: f64 = 0.5;
/// ...when the two p99s also differ by at least this much, µs: the pacer's own precision
/// (it wakes early and spins; tens of µs on a quiet VM) never marks a tail.
pub const TAIL_GAP_FLOOR_US: f64 = 100.0;

/// Whose the open-loop latency tail (p99) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TailOwner {
    /// The broker's (and the network's): loadgen left on time.
    Broker,
    /// Loadgen's: most of the open-loop tail is the time messages left after they were due.
    Loadgen,
}

/// The verdict on an open loop's latency tail, with the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyTail {
    /// Whose it is.
    pub owner: TailOwner,
    /// In words with figures, for the table and the report.
    pub note: String,
}

/// Judges the tail of an open-loop run (`None` without a schedule or without samples).
/// `host_cpu_pressure_percent` names a contended host in the note when it was read.
pub fn judge(
    open_loop: &LatencySummary,
    transit: &LatencySummary,
    send_delay: &LatencySummary,
    host_cpu_pressure_percent: Option<f64>,
) -> Option<LatencyTail> {
    if open_loop.count == 0 || transit.count == 0 || send_delay.count == 0 {
        return None;
    }
    let gap_us = open_loop.p99_us - transit.p99_us;
    let explained = send_delay.p99_us >= SEND_DELAY_SHARE * open_loop.p99_us
        || transit.p99_us <= TRANSIT_SHARE * open_loop.p99_us;
    let figures = format!(
        "send delay p99 {} of {} open-loop p99 (transit p99 {})",
        duration(send_delay.p99_us),
        duration(open_loop.p99_us),
        duration(transit.p99_us)
    );
    let pressure = host_cpu_pressure_percent
        .map(|p| format!("; host CPU pressure {p:.1} % of the window"))
        .unwrap_or_default();
    Some(if explained && gap_us >= TAIL_GAP_FLOOR_US {
        LatencyTail {
            owner: TailOwner::Loadgen,
            note: format!(
                "latency tail is loadgen's: {figures}{pressure}; compare brokers by transit latency"
            ),
        }
    } else {
        LatencyTail {
            owner: TailOwner::Broker,
            note: format!("latency tail is the broker's: {figures}{pressure}"),
        }
    })
}

/// µs below 1 ms, else ms.
fn duration(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.2} ms", us / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p99(us: f64) -> LatencySummary {
        LatencySummary {
            count: 100,
            p99_us: us,
            ..LatencySummary::default()
        }
    }

    #[test]
    fn a_tail_made_of_send_delay_is_loadgens() {
        // The busy-host run: 3.8 ms open loop, 3.2 ms of it send delay.
        let tail = judge(&p99(3_800.0), &p99(410.0), &p99(3_200.0), Some(9.2)).expect("judged");
        assert_eq!(tail.owner, TailOwner::Loadgen);
        assert_eq!(
            tail.note,
            "latency tail is loadgen's: send delay p99 3.20 ms of 3.80 ms open-loop p99 \
             (transit p99 410 µs); host CPU pressure 9.2 % of the window; compare brokers by \
             transit latency"
        );
    }

    #[test]
    fn a_quiet_run_and_a_slow_broker_keep_the_tail_the_brokers() {
        // Quiet loopback: the pacer's tens of µs never mark a tail, whatever the ratio.
        let quiet = judge(&p99(90.0), &p99(40.0), &p99(50.0), None).expect("judged");
        assert_eq!(quiet.owner, TailOwner::Broker);
        // A broker whose own transit is the tail.
        let slow = judge(&p99(12_000.0), &p99(11_500.0), &p99(300.0), None).expect("judged");
        assert_eq!(slow.owner, TailOwner::Broker);
        assert!(
            slow.note.starts_with("latency tail is the broker's"),
            "{}",
            slow.note
        );
    }

    #[test]
    fn a_transit_far_below_the_open_loop_marks_the_tail_even_with_a_modest_send_delay() {
        // Late messages bunch: their send delay p99 is under half, but transit is a tenth.
        let tail = judge(&p99(2_000.0), &p99(200.0), &p99(900.0), None).expect("judged");
        assert_eq!(tail.owner, TailOwner::Loadgen);
    }

    #[test]
    fn runs_without_a_schedule_get_no_verdict() {
        assert_eq!(
            judge(&p99(100.0), &p99(100.0), &LatencySummary::default(), None),
            None
        );
    }
}
