//! A test's `transports` sweep (`transports = ["tcp", "quic"]`), unrolled before the plan is
//! checked into one test per transport, in the list's order and in the test's place: one
//! plan measures each transport under every scenario, like any two tests, and the report
//! pairs them (`report/transports.rs`). Each unrolled test keeps the index the file gives it
//! (`unrolled_from`), so errors and the report name tests as the file numbers them, and say
//! the transport of a sweep's run.

use loadgen::spec::Transport;

use super::error::{PlanError, invalid};
use super::types::{Plan, TestEntry};

impl Plan {
    /// The index the plan file gives test `test` (they differ after a sweep).
    pub fn file_test(&self, test: usize) -> usize {
        self.tests
            .get(test)
            .and_then(|entry| entry.unrolled_from)
            .unwrap_or(test)
    }

    /// The transport of test `test` when a sweep of several transports made it.
    pub fn swept_transport(&self, test: usize) -> Option<Transport> {
        let entry = self.tests.get(test)?;
        let from = entry.unrolled_from?;
        let runs = self
            .tests
            .iter()
            .filter(|t| t.unrolled_from == Some(from))
            .count();
        match entry.transports.as_deref() {
            Some([transport]) if runs > 1 => Some(*transport),
            _ => None,
        }
    }

    /// The field of test `test` that chose its transport, as errors name it.
    pub(super) fn transport_field(&self, test: usize) -> &'static str {
        if self.tests[test].transports.is_some() {
            "transports"
        } else {
            "workload.broker.transport"
        }
    }

    /// The plan with every test of several transports unrolled into one test each; refuses
    /// an empty list, a transport twice, a test that also sets `workload.broker.transport`,
    /// and `unrolled_from` written in the file.
    pub(super) fn expand_transports(self) -> Result<Plan, PlanError> {
        if let Some(i) = self.tests.iter().position(|t| t.unrolled_from.is_some()) {
            return Err(invalid(
                format!("tests[{i}].unrolled_from"),
                self.tests[i].unrolled_from.unwrap_or_default(),
                "is the plan's own note of an unrolled transports sweep; a plan does not set it",
            ));
        }
        let mut tests = Vec::with_capacity(self.tests.len());
        let mut unrolled = false;
        for (index, test) in self.tests.iter().enumerate() {
            let Some(transports) = &test.transports else {
                tests.push(test.clone());
                continue;
            };
            check_sweep(index, test, transports)?;
            unrolled |= transports.len() > 1;
            for &transport in transports {
                tests.push(TestEntry {
                    transports: Some(vec![transport]),
                    ..test.clone()
                });
            }
        }
        if unrolled {
            let mut index = 0;
            for (file_index, test) in self.tests.iter().enumerate() {
                let runs = test.transports.as_ref().map_or(1, Vec::len);
                for entry in &mut tests[index..index + runs] {
                    entry.unrolled_from = Some(file_index);
                }
                index += runs;
            }
        }
        Ok(Plan { tests, ..self })
    }

    /// `error` as the file numbers its tests: every `tests[N]` in its path and text renamed,
    /// and the transport said when the field is in a sweep's run.
    pub(super) fn name_unrolled(&self, error: PlanError) -> PlanError {
        let PlanError::Invalid { path, mut field } = error else {
            return error;
        };
        let first = test_indices(&field.path).next().map(|(_, test)| test);
        field.path = self.renumber(&field.path);
        field.problem = self.renumber(&field.problem);
        if let Some(test) = first
            && let Some(transport) = self.swept_transport(test)
        {
            field.problem = format!(
                "{} (its run over {transport}, from tests[{}].transports)",
                field.problem,
                self.file_test(test)
            );
        }
        PlanError::Invalid { path, field }
    }

    /// `text` with each `tests[N]` of an unrolled test renumbered as the file has it.
    fn renumber(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for (digits, test) in test_indices(text) {
            out.push_str(&text[copied..digits.start]);
            out.push_str(&self.file_test(test).to_string());
            copied = digits.end;
        }
        out.push_str(&text[copied..]);
        out
    }
}

/// Each `tests[N]` in `text`: where N's digits are, and N.
fn test_indices(text: &str) -> impl Iterator<Item = (std::ops::Range<usize>, usize)> + '_ {
    const OPEN: &str = "tests[";
    text.match_indices(OPEN).filter_map(move |(at, _)| {
        let start = at + OPEN.len();
        let length = text[start..].find(']')?;
        let digits = start..start + length;
        let test = text[digits.clone()].parse().ok()?;
        Some((digits, test))
    })
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
