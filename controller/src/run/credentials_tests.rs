//! A plan whose password sources were never read is refused before anything is written or
//! dialled, naming the field, instead of connecting without the password.

use tokio_util::sync::CancellationToken;

use super::{RunError, RunOptions, run_plan};
use crate::plan::Plan;

#[tokio::test]
async fn a_password_file_never_read_is_refused_before_the_run_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = "name = \"p\"\n\
         nodes = [{ name = \"n\", agent = \"local\", roles = [\"loadgen\", \"broker\"] }]\n\
         brokers = [{ name = \"b\", kind = \"embedded\", node = \"n\" }]\n\
         scenarios = [{ name = \"local\" }]\n\
         [[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\n\
         [tests.workload.broker]\nusername = \"u\"\npassword_file = \"/run/secrets/broker\"\n";
    let plan = Plan::parse(text, "plan.toml").expect("valid: validation reads no file");
    let folder = dir.path().join("run");
    let options = RunOptions {
        resume: None,
        folder: Some(folder.clone()),
    };
    let error = run_plan(&plan, text, options, CancellationToken::new())
        .await
        .expect_err("refused");
    assert!(
        matches!(&error, RunError::Plan(problem)
            if problem.starts_with("tests[0].workload.broker.password_file: ")),
        "{error}"
    );
    assert!(!folder.exists(), "nothing was written");
}
