//! The harness's instances: each broker or node a test starts carries
//! [`INSTANCE_MARKER_VAR`] set to its id, so [`instance_marker`] finds the whole tree through
//! `/proc` (the `host` crate holds the sweep, bounded runs and polling, shared with the agent).
//! The variable differs from the agent's own, so a test's sweep never touches an agent's
//! brokers and the other way round.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use host::Marker;

/// Environment variable that tags every process of one broker instance.
pub const INSTANCE_MARKER_VAR: &str = "CONTINUUM_TESTBED_INSTANCE";

/// How often loops in this crate re-check a condition they wait for.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// A fresh id for one broker instance: `ct-<test process pid>-<n>`.
///
/// Unique across the tests of one process and across processes, so it can
/// name an Erlang node and tag processes without two tests ever clashing.
pub fn new_instance_id() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("ct-{}-{n}", std::process::id())
}

/// The marker of instance `id`.
pub fn instance_marker(id: &str) -> Marker {
    Marker::new(INSTANCE_MARKER_VAR, id)
}
