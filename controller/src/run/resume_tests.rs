//! `--resume` accepts the folder of the same plan, passwords and all, and refuses another's.

use super::{RunError, RunOptions, results_folder};
use crate::plan::Plan;
use crate::results::{Manifest, ResultsDir};

fn plan_with(password: &str, repetitions: u32) -> Plan {
    let text = format!(
        "name = \"p\"\nrepetitions = {repetitions}\n\
         nodes = [{{ name = \"n\", agent = \"local\", roles = [\"loadgen\", \"broker\"] }}]\n\
         brokers = [{{ name = \"b\", kind = \"embedded\", node = \"n\" }}]\n\
         scenarios = [{{ name = \"local\" }}]\n\
         [[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\n\
         [tests.workload.broker]\nusername = \"u\"\npassword = \"{password}\"\n"
    );
    Plan::parse(&text, "plan.toml").expect("plan")
}

/// A folder holding `plan`'s manifest, as a run writes it (redacted).
fn folder_of(plan: &Plan) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let results = ResultsDir::open(dir.path()).expect("results folder");
    results
        .write_manifest(&Manifest {
            plan: plan.clone(),
            plan_text: String::new(),
            controller_version: "0.1.0".into(),
            started_unix_ms: 0,
            nodes: Vec::new(),
            netem: Vec::new(),
            skipped: Vec::new(),
            testbed: None,
            brokers: Vec::new(),
            paths: Vec::new(),
            cell_records: true,
        })
        .expect("manifest");
    dir
}

fn resume(plan: &Plan, dir: &std::path::Path) -> Result<std::path::PathBuf, RunError> {
    let options = RunOptions {
        resume: Some(dir.to_path_buf()),
        folder: None,
    };
    results_folder(plan, &options)
}

#[test]
fn a_plan_with_a_password_resumes_its_own_folder() {
    let plan = plan_with("hunter2", 1);
    let dir = folder_of(&plan);
    let manifest = std::fs::read_to_string(dir.path().join("manifest.json")).expect("read");
    assert!(!manifest.contains("hunter2"), "the manifest is redacted");
    let resumed = resume(&plan, dir.path()).expect("the same plan resumes");
    assert_eq!(resumed, dir.path());
    // The password is not part of what the study is: a rotated one still resumes.
    resume(&plan_with("rotated", 1), dir.path()).expect("a new password resumes");
}

#[test]
fn another_plans_folder_is_refused() {
    let dir = folder_of(&plan_with("hunter2", 1));
    let error = resume(&plan_with("hunter2", 2), dir.path()).expect_err("another plan");
    assert!(matches!(error, RunError::ResumeMismatch { .. }), "{error}");
}
