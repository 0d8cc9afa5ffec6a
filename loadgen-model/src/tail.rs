//! Whose latency tail it is: the broker's, or loadgen's own lateness.
//!
//! An open loop measures each message from its intended send time, so that a stalled sender
//! cannot hide delay the broker caused. When loadgen itself left late (a busy host woke it
//! late), that same rule blames the broker for the generator: on a 2-core machine with a build
//! beside it, the open-loop p99 was 3.8 ms while Mosquitto's own wire-in to wire-out p99 was
//! 0.15 ms, and the send delay p99 3.2 ms. The transit latency (from the actual send) is the
//! broker's figure then; this verdict says when the open-loop tail is mostly loadgen's own.
//!
//! Loadgen is late on two sides: it sends after the message was due (the send delay), and it
//! reads a delivery after it reached the host (the read delay, from the kernel's receive
//! stamp). Beside a CPU hog both happen: the transit latency then holds the late reads and is
//! as long as the open loop's, so only the read delay tells the broker's tail from loadgen's.

use serde::{Deserialize, Serialize};

use crate::percentiles::LatencySummary;

/// The send delay (or read delay) p99 at or above this share of the open-loop p99 explains
/// the tail: at least 1 % of messages were that late by loadgen's doing alone...
pub const SEND_DELAY_SHARE: f64 = 0.5;
/// ...as does a transit p99 at or below this share of the open-loop p99...
pub const TRANSIT_SHARE: f64 = 0.5;
/// ...when the lateness, or the gap between the open-loop and transit p99s, is at least this
/// much, µs: the pacer's own precision (it wakes early and spins; tens of µs on a quiet VM)
/// and a prompt read never mark a tail.
pub const TAIL_GAP_FLOOR_US: f64 = 100.0;

/// The latency figures of an open loop that the verdict weighs.
#[derive(Debug, Clone, Default)]
pub struct TailFigures {
    /// From the intended send time.
    pub open_loop: LatencySummary,
    /// From the actual send time.
    pub transit: LatencySummary,
    /// How late messages left.
    pub send_delay: LatencySummary,
    /// How late loadgen read deliveries after they reached its host (empty without stamps).
    pub read_delay: LatencySummary,
}

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
pub fn judge(figures: &TailFigures, host_cpu_pressure_percent: Option<f64>) -> Option<LatencyTail> {
    let TailFigures {
        open_loop,
        transit,
        send_delay,
        read_delay,
    } = figures;
    if open_loop.count == 0 || transit.count == 0 || send_delay.count == 0 {
        return None;
    }
    let read_late_us = (read_delay.count > 0).then_some(read_delay.p99_us);
    let own_lateness_explains = |late_us: f64| {
        late_us >= SEND_DELAY_SHARE * open_loop.p99_us && late_us >= TAIL_GAP_FLOOR_US
    };
    let transit_explains = transit.p99_us <= TRANSIT_SHARE * open_loop.p99_us
        && open_loop.p99_us - transit.p99_us >= TAIL_GAP_FLOOR_US;
    let loadgens = own_lateness_explains(send_delay.p99_us)
        || read_late_us.is_some_and(own_lateness_explains)
        || transit_explains;
    let read = read_late_us
        .map(|us| format!(" and read delay p99 {}", duration(us)))
        .unwrap_or_default();
    let figures = format!(
        "send delay p99 {}{read} of {} open-loop p99 (transit p99 {})",
        duration(send_delay.p99_us),
        duration(open_loop.p99_us),
        duration(transit.p99_us)
    );
    let pressure = host_cpu_pressure_percent
        .map(|p| format!("; host CPU pressure {p:.1} % of the window"))
        .unwrap_or_default();
    // Late reads are inside the transit latency too: then no figure of this run is the
    // broker's alone.
    let transit_holds_late_reads = read_late_us
        .is_some_and(|us| us >= SEND_DELAY_SHARE * transit.p99_us && us >= TAIL_GAP_FLOOR_US);
    let advice = if transit_holds_late_reads {
        "loadgen's late reads are part of the transit latency too"
    } else {
        "compare brokers by transit latency"
    };
    Some(if loadgens {
        LatencyTail {
            owner: TailOwner::Loadgen,
            note: format!("latency tail is loadgen's: {figures}{pressure}; {advice}"),
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

    /// Open-loop, transit, send delay and (when stamped) read delay p99s, µs.
    fn figures(open_loop: f64, transit: f64, send_delay: f64, read: Option<f64>) -> TailFigures {
        TailFigures {
            open_loop: p99(open_loop),
            transit: p99(transit),
            send_delay: p99(send_delay),
            read_delay: read.map(p99).unwrap_or_default(),
        }
    }

    #[test]
    fn a_tail_made_of_send_delay_is_loadgens() {
        // The busy-host run: 3.8 ms open loop, 3.2 ms of it send delay.
        let tail = judge(&figures(3_800.0, 410.0, 3_200.0, None), Some(9.2)).expect("judged");
        assert_eq!(tail.owner, TailOwner::Loadgen);
        assert_eq!(
            tail.note,
            "latency tail is loadgen's: send delay p99 3.20 ms of 3.80 ms open-loop p99 \
             (transit p99 410 µs); host CPU pressure 9.2 % of the window; compare brokers by \
             transit latency"
        );
    }

    #[test]
    fn late_on_both_sides_the_tail_is_loadgens_and_the_transit_is_not_offered_as_the_brokers() {
        // A CI run beside a CPU hog: the broker's own wire transit p99 was 0.17 ms, but
        // loadgen sent late and read late, so transit was nearly the open loop's.
        let tail = judge(
            &figures(4_920.0, 4_850.0, 3_860.0, Some(4_600.0)),
            Some(16.1),
        )
        .expect("judged");
        assert_eq!(tail.owner, TailOwner::Loadgen);
        assert_eq!(
            tail.note,
            "latency tail is loadgen's: send delay p99 3.86 ms and read delay p99 4.60 ms of \
             4.92 ms open-loop p99 (transit p99 4.85 ms); host CPU pressure 16.1 % of the \
             window; loadgen's late reads are part of the transit latency too"
        );
        // Late reads alone, messages sent on time.
        let reads = judge(&figures(5_000.0, 4_900.0, 60.0, Some(4_500.0)), None).expect("judged");
        assert_eq!(reads.owner, TailOwner::Loadgen, "{}", reads.note);
    }

    #[test]
    fn a_quiet_run_and_a_slow_broker_keep_the_tail_the_brokers() {
        // Quiet loopback: the pacer's tens of µs never mark a tail, whatever the ratio.
        let quiet = judge(&figures(90.0, 40.0, 50.0, Some(30.0)), None).expect("judged");
        assert_eq!(quiet.owner, TailOwner::Broker);
        // A broker whose own transit is the tail, read promptly.
        for read in [None, Some(40.0)] {
            let slow = judge(&figures(12_000.0, 11_500.0, 300.0, read), None).expect("judged");
            assert_eq!(slow.owner, TailOwner::Broker);
            assert!(
                slow.note.starts_with("latency tail is the broker's"),
                "{}",
                slow.note
            );
        }
    }

    #[test]
    fn a_transit_far_below_the_open_loop_marks_the_tail_even_with_a_modest_send_delay() {
        // Late messages bunch: their send delay p99 is under half, but transit is a tenth.
        let tail = judge(&figures(2_000.0, 200.0, 900.0, None), None).expect("judged");
        assert_eq!(tail.owner, TailOwner::Loadgen);
    }

    #[test]
    fn runs_without_a_schedule_get_no_verdict() {
        let unscheduled = TailFigures {
            send_delay: LatencySummary::default(),
            ..figures(100.0, 100.0, 0.0, None)
        };
        assert_eq!(judge(&unscheduled, None), None);
    }
}
