//! The one seam for the run's own undo tests: where a test makes a phase fail (an error or a
//! panic) and a stand-in for the agents' netem, which this machine's kernel does not have.
//! Everything here exists only in the controller's unit-test build (`cfg(test)`); in every
//! other build [`Faults`] is empty and [`Faults::at`] does nothing.

use super::RunError;

/// A phase of a run where a test can inject a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Writing the manifest right after netem was applied.
    Manifest,
    /// Recording a cell after it ran.
    Cell,
    /// Writing the report.
    Report,
}

/// Injected failures; empty outside the unit tests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    /// Fail at this phase: with an error, or (`true`) with a panic.
    #[cfg(test)]
    pub(crate) fail: Option<(Phase, bool)>,
    /// Stand-in for ApplyNetem/RenewNetem/ClearNetem on every node.
    #[cfg(test)]
    pub(crate) netem: Option<std::sync::Arc<fake::FakeNetem>>,
}

impl Faults {
    /// The injected failure at `phase`, if any: an error to return, or a panic.
    pub(crate) fn at(&self, phase: Phase) -> Result<(), RunError> {
        #[cfg(test)]
        if let Some((at, panics)) = self.fail
            && at == phase
        {
            assert!(!panics, "injected panic at {phase:?}");
            return Err(RunError::Results(crate::results::ResultsError::Io {
                path: format!("(injected at {phase:?})"),
                source: std::io::Error::other("injected fault"),
            }));
        }
        let _ = phase;
        Ok(())
    }

    /// Whether the nodes' netem is the test's stand-in (every node then "can emulate").
    pub(crate) fn fakes_netem(&self) -> bool {
        #[cfg(test)]
        return self.netem.is_some();
        #[cfg(not(test))]
        false
    }
}

#[cfg(test)]
pub(crate) mod fake {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use domain::NetemParams;

    use crate::run::testbed::InForce;

    /// Which nodes hold netem, and what was done to them; the apply on `fail_on` fails.
    #[derive(Debug, Default)]
    pub(crate) struct FakeNetem {
        pub(crate) fail_on: Option<String>,
        /// Renewals on this node fail (its agent went silent).
        pub(crate) renewal_fails_on: Option<String>,
        pub(crate) held: Mutex<BTreeSet<String>>,
        pub(crate) log: Mutex<Vec<String>>,
    }

    impl FakeNetem {
        fn note(&self, line: String) {
            self.log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(line);
        }

        pub(crate) fn apply(&self, node: &str, params: &NetemParams) -> Result<InForce, String> {
            self.note(format!("apply {node}"));
            if self.fail_on.as_deref() == Some(node) {
                return Err(format!("node {node}: injected netem failure"));
            }
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(node.to_string());
            Ok(InForce {
                interface: "fake0".into(),
                read_back: Some(super::super::scenario::asked_record(params)),
            })
        }

        pub(crate) fn renew(&self, node: &str) -> Result<(), String> {
            if self.renewal_fails_on.as_deref() == Some(node) {
                self.note(format!("renewal failed {node}"));
                return Err("injected: no answer".into());
            }
            Ok(())
        }

        pub(crate) fn clear(&self, node: &str) {
            self.note(format!("clear {node}"));
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(node);
        }

        /// Nodes that still hold netem.
        pub(crate) fn held(&self) -> BTreeSet<String> {
            self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }

        pub(crate) fn log(&self) -> Vec<String> {
            self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
    }
}
