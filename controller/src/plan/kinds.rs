//! The test kinds and what each one is: what it sweeps, how its load is bounded in time and
//! what its cells are compared by. Validation, the cells, the run and the report ask these
//! traits instead of naming kinds, so a new kind is an entry in `test_kinds!` with its traits
//! here, its preset (`presets.rs`) and, when no section shows its traits yet, a report section.

use loadgen::suite::SuiteScenario;
use serde::{Deserialize, Serialize};

/// Declares [`TestKind`] and its [`TestKind::ALL`] from one list, so no kind can be left
/// out of the sentences and checks that go through every kind.
macro_rules! test_kinds {
    ($($(#[doc = $doc:literal])* $kind:ident,)+) => {
        /// What a test measures.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum TestKind {
            $($(#[doc = $doc])* $kind,)+
        }

        impl TestKind {
            /// Every kind, in the order plans and reports list them.
            pub const ALL: &'static [TestKind] = &[$(TestKind::$kind,)+];
        }
    };
}

test_kinds! {
    /// Latency offset: 100 publishers -> 1 subscriber, 10 B, QoS 1, every 250 ms.
    Latency,
    /// Latency vs payload: as latency, for each payload size.
    Payload,
    /// Sustained throughput vs clients: N pairs, QoS 0, 10 B, for `duration` after a
    /// `warmup`, closed loop or at an offered `rate`; judged steady or not.
    Throughput,
    /// The study's throughput test, kept for comparison: N pairs, QoS 0, 10 B, `messages`
    /// per publisher as fast as possible. Its figures are burst figures, never sustained.
    Burst,
    /// The saturation point: for each client count, a search for the highest offered rate
    /// the broker sustains (settings in `[tests.search]`).
    Saturation,
    /// A workload of the plan's own: every field from `[tests.workload]` (loadgen's
    /// SPEC.toml), no preset, one cell per broker, scenario and repetition.
    Custom,
    /// The Open MQTT Benchmark Suite's point to point: N publishers -> N subscribers, a topic
    /// per pair, 1 msg/s each, QoS 1, 16 B, N = 50,000 x `scale`.
    P2p,
    /// The suite's fan-out: 5 publishers at 50 msg/s -> 1,000 x `scale` subscribers of all
    /// five topics.
    FanOut,
    /// The suite's fan-in: 50,000 x `scale` publishers at 1 msg/s, a topic each, -> 500 x
    /// `scale` members of one MQTT 5 shared subscription.
    FanInShared,
    /// The suite's connections: 1,000,000 x `scale` clients arriving at 5,000/s and staying
    /// through the measured window, beside one publisher -> subscriber pair.
    Connections,
}

/// What a test sweeps: one cell per point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// One point (`-`).
    Single,
    /// Payload sizes (`payloads`).
    Payloads,
    /// Client pairs (`clients`).
    Clients,
}

/// How a test's load is bounded in time, and so which of `messages`, `warmup`, `duration`,
/// `rate` and `search` it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// A number of messages per publisher, warmed up by a number of messages.
    Counted,
    /// A measured time after a warm-up time, closed loop or at an offered `rate`.
    Timed,
    /// A search of probes, each timed as `[tests.search]` says.
    Searched,
    /// As the plan's `[tests.workload]` says, counted or timed: the kind takes none of the
    /// shorthands.
    AsWritten,
}

/// The figure a test's cells are compared by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measures {
    /// Latency (transit, or open loop where a result predates transit).
    Latency,
    /// The receive rate of a sustained load.
    SustainedRate,
    /// A burst's rate: reported, never ranked as sustained.
    BurstRate,
    /// The highest offered rate sustained.
    SaturationRate,
    /// Whatever the plan's own workload measures: shown, not ranked.
    AsWritten,
    /// The Open MQTT Benchmark Suite's figures (messages in and out per second, average and
    /// p99 latency, the broker's CPU and memory) beside Continuum's accounting: shown in the
    /// suite's layout, not ranked.
    SuiteFigures,
}

impl TestKind {
    /// As written in plans, ids and `summary.csv`.
    pub fn name(self) -> &'static str {
        match self {
            TestKind::Latency => "latency",
            TestKind::Payload => "payload",
            TestKind::Throughput => "throughput",
            TestKind::Burst => "burst",
            TestKind::Saturation => "saturation",
            TestKind::Custom => "custom",
            TestKind::P2p => "p2p",
            TestKind::FanOut => "fan-out",
            TestKind::FanInShared => "fan-in-shared",
            TestKind::Connections => "connections",
        }
    }

    /// The Open MQTT Benchmark Suite's scenario the kind runs, if it is one; such a kind
    /// takes `scale`.
    pub fn suite_scenario(self) -> Option<SuiteScenario> {
        match self {
            TestKind::P2p => Some(SuiteScenario::PointToPoint),
            TestKind::FanOut => Some(SuiteScenario::FanOut),
            TestKind::FanInShared => Some(SuiteScenario::FanInShared),
            TestKind::Connections => Some(SuiteScenario::Connections),
            _ => None,
        }
    }

    /// What it sweeps.
    pub fn sweep(self) -> Sweep {
        match self {
            TestKind::Latency | TestKind::Custom => Sweep::Single,
            TestKind::P2p | TestKind::FanOut | TestKind::FanInShared | TestKind::Connections => {
                Sweep::Single
            }
            TestKind::Payload => Sweep::Payloads,
            TestKind::Throughput | TestKind::Burst | TestKind::Saturation => Sweep::Clients,
        }
    }

    /// How its load is bounded in time.
    pub fn timing(self) -> Timing {
        match self {
            TestKind::Latency | TestKind::Payload | TestKind::Burst => Timing::Counted,
            TestKind::Throughput
            | TestKind::P2p
            | TestKind::FanOut
            | TestKind::FanInShared
            | TestKind::Connections => Timing::Timed,
            TestKind::Saturation => Timing::Searched,
            TestKind::Custom => Timing::AsWritten,
        }
    }

    /// What its cells are compared by.
    pub fn measures(self) -> Measures {
        match self {
            TestKind::Latency | TestKind::Payload => Measures::Latency,
            TestKind::Throughput => Measures::SustainedRate,
            TestKind::Burst => Measures::BurstRate,
            TestKind::Saturation => Measures::SaturationRate,
            TestKind::Custom => Measures::AsWritten,
            TestKind::P2p | TestKind::FanOut | TestKind::FanInShared | TestKind::Connections => {
                Measures::SuiteFigures
            }
        }
    }

    /// True for a kind whose `[tests.workload]` sets the whole workload, with no preset
    /// behind it.
    pub fn writes_whole_workload(self) -> bool {
        self.timing() == Timing::AsWritten
    }

    /// True for the kinds that sweep client pairs.
    pub fn sweeps_clients(self) -> bool {
        self.sweep() == Sweep::Clients
    }
}

/// The names of the kinds with a trait, in [`TestKind::ALL`]'s order.
pub fn kind_names(having: impl Fn(TestKind) -> bool) -> Vec<&'static str> {
    TestKind::ALL
        .iter()
        .copied()
        .filter(|kind| having(*kind))
        .map(TestKind::name)
        .collect()
}

/// Names as a sentence lists them: `a`, `a and b`, `a, b and c`.
pub fn sentence(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The kinds with a trait, named as a sentence does: `"the payload test"`, `"the throughput,
/// burst and saturation tests"`.
pub fn kinds_named(having: impl Fn(TestKind) -> bool) -> String {
    let names = kind_names(having);
    match names.len() {
        0 => "no test".to_string(),
        1 => format!("the {} test", names[0]),
        _ => format!("the {} tests", sentence(&names)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_reads_back_from_its_name() {
        for (at, &kind) in TestKind::ALL.iter().enumerate() {
            assert!(!TestKind::ALL[..at].contains(&kind), "{kind:?} twice");
            let written = format!("kind = \"{}\"", kind.name());
            #[derive(Deserialize)]
            struct Entry {
                kind: TestKind,
            }
            let entry: Entry = toml::from_str(&written).expect("a kind's name parses");
            assert_eq!(entry.kind, kind);
        }
    }

    #[test]
    fn kinds_are_named_as_a_sentence() {
        assert_eq!(
            kinds_named(|k| k.sweep() == Sweep::Payloads),
            "the payload test"
        );
        assert_eq!(
            kinds_named(TestKind::sweeps_clients),
            "the throughput, burst and saturation tests"
        );
        assert_eq!(kinds_named(|_| false), "no test");
    }
}
