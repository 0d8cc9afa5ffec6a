//! The saturation point: the highest offered rate a broker sustains, found by a bounded search
//! of short timed runs (probes).
//!
//! A probe at an offered rate counts as sustained when its steadiness verdict holds (both
//! halves within 5 %, backlog bounded, at least 99 % of the offered deliveries received) and
//! its p99 latency stays under a bound. The search first measures what a closed loop gets
//! through (an estimate of capacity), starts at half of it and grows by a quarter per probe
//! until a probe fails, then bisects between the highest sustained and the lowest failed rate
//! until they lie within the precision, all within a time budget. A probe in which loadgen
//! itself was the limit ends the search: above it, nothing can be said about the broker.
//!
//! [`Search`] only decides what to run next; the `loadgen saturate` command runs probes
//! locally and the controller runs them on its agents.
//!
//! The settings and their checks are in `settings`, a probe and its verdict in `probe`, the
//! search's decisions and its report in `search`.

mod probe;
mod search;
mod settings;

pub use probe::{Probe, ProbeOutcome, ProbeVerdict, probe_spec};
pub use search::{SaturationReport, Search, SearchEnd};
pub use settings::SearchSettings;
