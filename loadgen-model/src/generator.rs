//! Whether loadgen itself was the limit of a run: an instrument that cannot keep up measures
//! itself, not the broker.
//!
//! Judged per instance from what the kernel says it spent ([`crate::result::InstanceLoad`]):
//! its CPU near its capacity (threads, affinity, quota) limits it whatever the pacing. Its
//! threads kept waiting for a CPU (the machine was oversubscribed: a busy broker beside it,
//! another job) or its cgroup's quota throttling it limit a burst or a closed loop directly;
//! an open-loop run that still kept its schedule (no message left after the end, send delay
//! p99 within 2 ms) was not held back, and gets a warning instead. Falling behind a schedule
//! alone is not the generator's fault: a broker that stops reading holds the publishers back
//! through TCP just the same.

use serde::{Deserialize, Serialize};

use crate::result::RunResult;

/// CPU share of its capacity above which an instance counts as saturated, percent.
pub const BUSY_LIMIT_PERCENT: f64 = 90.0;
/// Share of runnable time spent waiting for a CPU above which an instance was starved...
pub const WAIT_LIMIT_PERCENT: f64 = 25.0;
/// ...when it was also ready to run (busy or waiting) at least this share of its capacity.
/// Every wake-up waits for a CPU a little (about 15 µs on a virtual machine, whose idle CPUs
/// must be woken through the hypervisor), so a lightly loaded generator that wakes often shows
/// a high waiting share without lacking CPU: 25 % busy and 37 % waiting, on an idle 2-CPU VM.
pub const STARVED_FROM_DEMAND_PERCENT: f64 = 75.0;
/// Share of the window its quota throttled it above which it was held back.
pub const THROTTLE_LIMIT_PERCENT: f64 = 5.0;
/// An open-loop run whose send delay p99 stays within this kept its schedule.
pub const SCHEDULE_KEPT_NS: u64 = 2_000_000;
/// Host CPU pressure (PSI "some": some task waited for a CPU) above this share of the window
/// means other work contended with loadgen: a wait for a CPU is then named as contention, not
/// as wake-up latency, whatever loadgen's own busy share.
pub const PRESSURE_NOTE_PERCENT: f64 = 5.0;
/// An open loop whose send delay p99 reaches this left late enough for contention to matter.
pub const LATE_SEND_P99_NS: u64 = 500_000;
/// Steal (the hypervisor ran someone else) above this share of the host's CPU time is named:
/// the run's rates and tails are that host's under contention, not only the broker's.
pub const STEAL_NOTE_PERCENT: f64 = 2.0;

/// The verdict on the generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneratorCheck {
    /// Some instance was, or may have been, the limit.
    pub limited: bool,
    /// Why, in words with figures (empty when not limited).
    pub reasons: Vec<String>,
    /// What held it back without costing the run (an open loop that kept its schedule).
    pub warnings: Vec<String>,
    /// Highest CPU share of its capacity of any instance over the window, percent.
    pub busy_percent: f64,
    /// Highest such share over any 1-s stretch, percent.
    pub peak_busy_percent: f64,
    /// Highest share of runnable time spent waiting for a CPU, percent.
    pub cpu_wait_percent: f64,
    /// Highest share of the window throttled by a CPU quota, percent.
    pub throttled_percent: f64,
    /// Highest steal of any instance's host over the window, percent of its CPU time.
    #[serde(default)]
    pub host_steal_percent: f64,
    /// Highest CPU pressure of any instance's host over the window (PSI "some"), percent;
    /// `None` where no host keeps PSI.
    #[serde(default)]
    pub host_cpu_pressure_percent: Option<f64>,
    /// Highest CPU pressure of any instance's own cgroup (v2), percent.
    #[serde(default)]
    pub cgroup_cpu_pressure_percent: Option<f64>,
    /// CPU the instances could use together, CPUs.
    pub cpu_capacity: f64,
    /// Open loop: messages that left after the schedule's end although due before it.
    pub sent_late_after_end: u64,
}

/// Judges the generator of a (possibly merged) result.
pub fn check(result: &RunResult) -> GeneratorCheck {
    let mut reasons = Vec::new();
    let mut warnings = Vec::new();
    // Notes that follow the held-back warnings: wake-up latency, steal.
    let mut later_notes = Vec::new();
    let kept_schedule = result.spec.pacing.is_open_loop()
        && result.sent_late_after_end == 0
        && (result.send_delay.is_empty()
            || result.send_delay.value_at_quantile(0.99) <= SCHEDULE_KEPT_NS);
    let mut held_back = |reason: String| {
        if kept_schedule {
            warnings.push(format!("{reason}, but kept its schedule"));
        } else {
            reasons.push(reason);
        }
    };
    let most = |f: fn(&crate::result::InstanceLoad) -> f64| {
        result.instances.iter().map(f).fold(0.0, f64::max)
    };
    let several = result.instances.len() > 1;
    let sent_late = result.spec.pacing.is_open_loop()
        && !result.send_delay.is_empty()
        && result.send_delay.value_at_quantile(0.99) >= LATE_SEND_P99_NS;
    for (n, instance) in result.instances.iter().enumerate() {
        let who = instance_name(n, instance, several);
        let contended = instance
            .host_cpu_pressure_percent
            .or(instance.cgroup_cpu_pressure_percent)
            .filter(|pressure| *pressure >= PRESSURE_NOTE_PERCENT);
        if instance.cpu_wait_percent >= WAIT_LIMIT_PERCENT {
            let demand = ready_from(instance.busy_percent, instance.cpu_wait_percent);
            if demand >= STARVED_FROM_DEMAND_PERCENT {
                held_back(format!(
                    "{who}waited for a CPU {:.0} % of the time it was ready to run, and was ready {demand:.0} % of its capacity (the machine was oversubscribed)",
                    instance.cpu_wait_percent
                ));
            } else if let Some(pressure) = contended {
                later_notes.push(format!(
                    "{who}waited for a CPU {:.0} % of the time it was ready to run while its host was contended (CPU pressure {pressure:.1} % of the window): other work on the host made loadgen late{}",
                    instance.cpu_wait_percent,
                    send_delay_clause(result, sent_late)
                ));
            } else {
                later_notes.push(format!(
                    "{who}waited for a CPU {:.0} % of the time it was ready to run, but was ready only {demand:.0} % of its capacity: wake-up latency, not a shortage of CPU",
                    instance.cpu_wait_percent
                ));
            }
        }
        if let (Some(pressure), true) = (contended, sent_late)
            && instance.cpu_wait_percent < WAIT_LIMIT_PERCENT
        {
            later_notes.push(format!(
                "{who}ran on a contended host (CPU pressure {pressure:.1} % of the window) and messages left late{}",
                send_delay_clause(result, true)
            ));
        }
        if instance.host_steal_percent >= STEAL_NOTE_PERCENT {
            // Not loadgen's limit alone: a broker on that host lost the same CPUs.
            later_notes.push(format!(
                "{who}ran on a virtual machine whose hypervisor gave {:.1} % of its CPU time to others (steal): loadgen, and a broker on that host, ran slower and woke later than the machine can, so rates and latency tails are this host's under contention",
                instance.host_steal_percent
            ));
        }
        if instance.throttled_percent >= THROTTLE_LIMIT_PERCENT {
            held_back(format!(
                "{who}was throttled by its cgroup's CPU quota {:.0} % of the time",
                instance.throttled_percent
            ));
        }
    }
    for (n, instance) in result.instances.iter().enumerate() {
        let who = instance_name(n, instance, several);
        let capacity = f64::from(instance.cpu_capacity_milli) / 1000.0;
        if instance.busy_percent >= BUSY_LIMIT_PERCENT
            || instance.peak_busy_percent >= BUSY_LIMIT_PERCENT
        {
            reasons.push(format!(
                "{who}used {:.0} % of the {capacity:.1} CPU it may use ({:.0} % at its busiest second)",
                instance.busy_percent, instance.peak_busy_percent
            ));
        }
    }
    warnings.extend(later_notes);
    GeneratorCheck {
        limited: !reasons.is_empty(),
        reasons,
        warnings,
        busy_percent: most(|i| i.busy_percent),
        peak_busy_percent: most(|i| i.peak_busy_percent),
        cpu_wait_percent: most(|i| i.cpu_wait_percent),
        throttled_percent: most(|i| i.throttled_percent),
        host_steal_percent: most(|i| i.host_steal_percent),
        host_cpu_pressure_percent: most_of(result, |i| i.host_cpu_pressure_percent),
        cgroup_cpu_pressure_percent: most_of(result, |i| i.cgroup_cpu_pressure_percent),
        cpu_capacity: result
            .instances
            .iter()
            .map(|i| f64::from(i.cpu_capacity_milli) / 1000.0)
            .sum(),
        sent_late_after_end: result.sent_late_after_end,
    }
}

/// The highest of a figure some instances may lack; `None` when none has it.
fn most_of(
    result: &RunResult,
    figure: fn(&crate::result::InstanceLoad) -> Option<f64>,
) -> Option<f64> {
    result.instances.iter().filter_map(figure).reduce(f64::max)
}

/// ", send delay p99 1.20 ms" for an open loop that left late, else nothing.
fn send_delay_clause(result: &RunResult, sent_late: bool) -> String {
    if sent_late {
        format!(
            " (send delay p99 {:.2} ms)",
            result.send_delay.value_at_quantile(0.99) as f64 / 1e6
        )
    } else {
        String::new()
    }
}

/// How much a process was ready to run (on a CPU, or waiting for one), in the unit `busy` is
/// given in: its busy share over the share of its runnable time it was not waiting.
pub(crate) fn ready_from(busy: f64, cpu_wait_percent: f64) -> f64 {
    let running_share = 1.0 - cpu_wait_percent / 100.0;
    if running_share <= 0.0 {
        f64::INFINITY
    } else {
        busy / running_share
    }
}

/// How a reason names an instance: by its node when a controller named it, else by number
/// when there are several.
fn instance_name(n: usize, instance: &crate::result::InstanceLoad, several: bool) -> String {
    match (&instance.node, several) {
        (Some(node), _) => format!("loadgen on {node} "),
        (None, true) => format!("loadgen instance {} ", n + 1),
        (None, false) => "loadgen ".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::InstanceLoad;

    fn instance(busy: f64, wait: f64, throttled: f64) -> InstanceLoad {
        InstanceLoad {
            node: None,
            shard: crate::spec::Shard {
                publishers: 0..1,
                subscribers: 0..1,
            },
            cpu_capacity_milli: 1000,
            window_ms: 1000.0,
            busy_percent: busy,
            peak_busy_percent: busy,
            cpu_wait_percent: wait,
            throttled_percent: throttled,
            host_steal_percent: 0.0,
            host_cpu_pressure_percent: None,
            cgroup_cpu_pressure_percent: None,
            broker_on_host: None,
        }
    }

    #[test]
    fn each_limit_is_named_and_an_idle_generator_is_not_limited() {
        let spec = crate::presets::throughput();
        let mut result = RunResult::empty(&spec, "g");
        result.instances.push(instance(30.0, 2.0, 0.0));
        assert!(!check(&result).limited);
        // Often woken, seldom busy: waiting, but not for want of a CPU.
        result.instances[0] = instance(25.0, 37.0, 0.0);
        let verdict = check(&result);
        assert!(!verdict.limited, "{:?}", verdict.reasons);
        assert!(
            verdict.warnings[0].contains("wake-up latency"),
            "{:?}",
            verdict.warnings
        );
        result.instances[0] = instance(30.0, 2.0, 0.0);
        result.instances.push(instance(97.0, 40.0, 20.0));
        let verdict = check(&result);
        assert!(verdict.limited);
        let text = verdict.reasons.join(" | ");
        assert!(text.contains("instance 2 used 97 %"), "{text}");
        assert!(text.contains("waited for a CPU 40 %"), "{text}");
        assert!(text.contains("throttled"), "{text}");
        assert_eq!(verdict.busy_percent, 97.0);
        assert_eq!(verdict.cpu_capacity, 2.0);
    }

    #[test]
    fn steal_on_the_host_is_named_but_does_not_make_loadgen_the_limit() {
        let spec = crate::presets::latency();
        let mut result = RunResult::empty(&spec, "g");
        let mut stolen = instance(20.0, 5.0, 0.0);
        stolen.host_steal_percent = 18.4;
        result.instances.push(stolen);
        let verdict = check(&result);
        assert!(!verdict.limited, "{:?}", verdict.reasons);
        assert_eq!(verdict.host_steal_percent, 18.4);
        assert_eq!(verdict.warnings.len(), 1, "{:?}", verdict.warnings);
        assert!(
            verdict.warnings[0].contains("18.4 % of its CPU time to others (steal)"),
            "{}",
            verdict.warnings[0]
        );
        // Under the threshold: counted, not named.
        result.instances[0].host_steal_percent = 1.0;
        assert!(check(&result).warnings.is_empty());
    }

    #[test]
    fn waiting_on_a_contended_host_is_named_contention_not_wake_up_latency() {
        let spec = crate::presets::latency();
        let mut result = RunResult::empty(&spec, "g");
        // The busy-host run: ready only 29 % of its capacity, waiting 71 %.
        let mut contended = instance(8.4, 71.0, 0.0);
        contended.host_cpu_pressure_percent = Some(9.6);
        result.instances.push(contended);
        result.send_delay.record_n(3_200_000, 20).expect("in range");
        result.send_delay.record_n(30_000, 980).expect("in range");
        let verdict = check(&result);
        assert!(!verdict.limited, "{:?}", verdict.reasons);
        assert_eq!(verdict.host_cpu_pressure_percent, Some(9.6));
        let text = verdict.warnings.join(" | ");
        assert!(
            text.contains("while its host was contended (CPU pressure 9.6 %"),
            "{text}"
        );
        assert!(text.contains("send delay p99 3.20 ms"), "{text}");
        assert!(!text.contains("wake-up latency"), "{text}");
        // The same waiting on a quiet host is wake-up latency, as before.
        result.instances[0].host_cpu_pressure_percent = Some(0.4);
        let text = check(&result).warnings.join(" | ");
        assert!(text.contains("wake-up latency"), "{text}");
        // Contention that made messages late is named even when loadgen hardly waited.
        result.instances[0] = instance(8.4, 3.0, 0.0);
        result.instances[0].host_cpu_pressure_percent = Some(12.0);
        let text = check(&result).warnings.join(" | ");
        assert!(
            text.contains("ran on a contended host (CPU pressure 12.0 %"),
            "{text}"
        );
    }

    #[test]
    fn an_open_loop_that_kept_its_schedule_is_warned_not_limited() {
        let mut spec = crate::presets::latency();
        spec.pacing = crate::spec::Pacing::Rate { rate: 5_000 };
        let mut result = RunResult::empty(&spec, "g");
        result.instances.push(instance(40.0, 52.0, 0.0));
        result.send_delay.record(80_000).expect("in range");
        let verdict = check(&result);
        assert!(!verdict.limited, "{:?}", verdict.reasons);
        assert!(
            verdict.warnings[0].contains("kept its schedule"),
            "{:?}",
            verdict.warnings
        );
        // Late messages mean it did not keep up.
        result.sent_late_after_end = 12;
        assert!(check(&result).limited);
    }
}
