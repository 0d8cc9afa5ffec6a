//! The broker's own process over a run's window, when it ran on the host of an instance:
//! what the summary says of the CPU it used and the CPU it waited for. Loadgen finds the
//! process and reads its counters from `/proc`; this module only judges them.

use serde::{Deserialize, Serialize};

use crate::result::RunResult;

/// A single-threaded broker busy this share of the window was the run's limit, percent.
pub const SATURATED_PERCENT: f64 = 90.0;
/// A broker that waited for a CPU this share of its runnable time was held back by the host...
pub const HELD_BACK_WAIT_PERCENT: f64 = 10.0;
/// ...when it was also ready to run (on a CPU or waiting for one) at least this many CPUs on
/// average. Every wake-up waits for a CPU a little (tens of µs on a virtual machine, whose
/// idle CPUs are woken through the hypervisor), so a broker that wakes per message at a low
/// rate shows a high waiting share without lacking CPU: 0.06 CPU busy and 16-44 % waiting for
/// 4,000 QoS 1 messages a second on an idle 2-CPU VM. Three quarters of one CPU, as
/// [`crate::generator::STARVED_FROM_DEMAND_PERCENT`] is for loadgen.
pub const OVERSUBSCRIBED_READY_CPUS: f64 = 0.75;

/// The broker's process over a run's window, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerOnHostSummary {
    /// Its process id.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// Its threads when the run started.
    pub threads: u32,
    /// The window, ms (the instance's: the measured window, or start to last message).
    pub window_ms: f64,
    /// CPUs it kept busy on average over the window.
    pub cpus_used: f64,
    /// Its CPU over the window per message delivered in the window, µs.
    pub cpu_per_delivered_message_us: f64,
    /// Time its threads were ready but waited for a CPU, share of runnable time, percent.
    pub cpu_wait_percent: f64,
    /// One thread busy at least [`SATURATED_PERCENT`] of the window: the broker was the limit.
    pub saturated: bool,
}

impl BrokerOnHostSummary {
    /// CPUs it was ready to run on average (busy, or waiting for a CPU): its busy CPUs over
    /// the share of runnable time it was not waiting.
    pub fn ready_cpus(&self) -> f64 {
        crate::generator::ready_from(self.cpus_used, self.cpu_wait_percent)
    }

    /// It waited for a CPU often and wanted enough CPU that the waiting cost it work (not the
    /// wake-up latency every process on the host pays).
    pub fn held_back_by_host(&self) -> bool {
        self.cpu_wait_percent >= HELD_BACK_WAIT_PERCENT
            && self.ready_cpus() >= OVERSUBSCRIBED_READY_CPUS
    }
}

/// The broker on the host of the first instance that saw it (instances on other hosts each
/// see their own, if any).
pub fn summarise(result: &RunResult) -> Option<BrokerOnHostSummary> {
    let (instance, broker) = result
        .instances
        .iter()
        .find_map(|i| Some((i, i.broker_on_host.as_ref()?)))?;
    let delivered = match result.measured_window {
        // The rate over the window's whole buckets, times the window.
        Some(window) => result
            .receive_series
            .rate_within(window.from_ns, window.until_ns)
            .map_or(0.0, |(rate, _, _)| rate * instance.window_ms / 1e3),
        None => result.received as f64,
    };
    Some(BrokerOnHostSummary {
        pid: broker.pid,
        command: broker.command.clone(),
        threads: broker.threads,
        window_ms: instance.window_ms,
        cpus_used: broker.cpus_used,
        cpu_per_delivered_message_us: if delivered < 1.0 {
            0.0
        } else {
            broker.cpu_ms * 1e3 / delivered
        },
        cpu_wait_percent: broker.cpu_wait_percent,
        saturated: broker.threads == 1 && broker.cpus_used * 100.0 >= SATURATED_PERCENT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker_using(cpus_used: f64, cpu_wait_percent: f64) -> BrokerOnHostSummary {
        BrokerOnHostSummary {
            pid: 1,
            command: "mosquitto".into(),
            threads: 1,
            window_ms: 5000.0,
            cpus_used,
            cpu_per_delivered_message_us: 14.0,
            cpu_wait_percent,
            saturated: false,
        }
    }

    #[test]
    fn a_broker_waiting_on_wake_ups_is_not_called_held_back() {
        // Measured: 0.06 CPU busy, 16 % waiting, at 4,000 QoS 1 messages a second.
        let light = broker_using(0.06, 16.0);
        assert!((light.ready_cpus() - 0.06 / 0.84).abs() < 1e-9);
        assert!(!light.held_back_by_host());
        // Busy most of a CPU and waiting as often: the host took CPU it wanted.
        let busy = broker_using(0.7, 20.0);
        assert!((busy.ready_cpus() - 0.875).abs() < 1e-9);
        assert!(busy.held_back_by_host());
        // Busy but hardly waiting: not held back.
        assert!(!broker_using(0.95, 3.0).held_back_by_host());
        assert!(broker_using(0.0, 100.0).ready_cpus().is_infinite());
    }
}
