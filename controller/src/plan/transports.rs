//! A test's `transports` sweep (`transports = ["tcp", "quic"]`), unrolled before the plan is
//! checked into one test per transport, in the list's order and in the test's place: one
//! plan measures each transport under every scenario, interleaved like any two tests, and the
//! report pairs them (`report/transports.rs`). Errors about an unrolled test name the test
//! as the file numbers it, and the transport.

use loadgen::spec::Transport;

use super::error::{PlanError, invalid};
use super::types::{Plan, TestEntry};

/// Where each test of an unrolled plan came from: its index in the file and, when a sweep
/// made it, its transport.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestOrigins(Vec<(usize, Option<Transport>)>);

impl TestOrigins {
    /// `error` with a path into an unrolled test rewritten to the file's test and its
    /// transport said.
    pub fn name(&self, error: PlanError) -> PlanError {
        let PlanError::Invalid { path, mut field } = error else {
            return error;
        };
        let unrolled = field
            .path
            .strip_prefix("tests[")
            .and_then(|rest| rest.split_once(']'))
            .and_then(|(index, rest)| Some((index.parse::<usize>().ok()?, rest.to_string())));
        if let Some((index, rest)) = unrolled
            && let Some(&(file_index, Some(transport))) = self.0.get(index)
        {
            field.path = format!("tests[{file_index}]{rest}");
            field.problem = format!(
                "{} (its run over {transport}, from tests[{file_index}].transports)",
                field.problem
            );
        }
        PlanError::Invalid { path, field }
    }
}

impl Plan {
    /// The plan with every test of several transports unrolled into one test each; refuses
    /// an empty list, a transport twice, and a test that also sets
    /// `workload.broker.transport`.
    pub(super) fn expand_transports(self) -> Result<(Plan, TestOrigins), PlanError> {
        let mut origins = Vec::new();
        let mut tests = Vec::with_capacity(self.tests.len());
        for (index, test) in self.tests.iter().enumerate() {
            let Some(transports) = &test.transports else {
                origins.push((index, None));
                tests.push(test.clone());
                continue;
            };
            check_sweep(index, test, transports)?;
            let unrolled = transports.len() > 1;
            for &transport in transports {
                origins.push((index, unrolled.then_some(transport)));
                tests.push(TestEntry {
                    transports: Some(vec![transport]),
                    ..test.clone()
                });
            }
        }
        Ok((Plan { tests, ..self }, TestOrigins(origins)))
    }
}

fn check_sweep(index: usize, test: &TestEntry, transports: &[Transport]) -> Result<(), PlanError> {
    let path = format!("tests[{index}].transports");
    let shown = || {
        let names: Vec<String> = transports
            .iter()
            .map(|t| format!("{:?}", t.to_string()))
            .collect();
        format!("[{}]", names.join(", "))
    };
    if transports.is_empty() {
        return Err(invalid(
            path,
            "[]",
            "name at least one transport (tcp, websocket, quic)",
        ));
    }
    for (at, transport) in transports.iter().enumerate() {
        if transports[..at].contains(transport) {
            return Err(invalid(
                path,
                shown(),
                format!("{transport} is named twice"),
            ));
        }
    }
    let in_workload = test
        .workload
        .as_ref()
        .and_then(|w| w.get("broker"))
        .and_then(|b| b.as_table())
        .is_some_and(|b| b.contains_key("transport"));
    if in_workload {
        return Err(invalid(
            path,
            shown(),
            format!(
                "tests[{index}].workload.broker.transport sets the transport as well; keep one of the two"
            ),
        ));
    }
    Ok(())
}
