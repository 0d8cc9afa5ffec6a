//! The shipped Grafana dashboard (`dashboards/continuum-run.json`) checked against Grafana's
//! own dashboard types: npm's `@grafana/schema` (the schema Grafana publishes, pinned) with
//! TypeScript's compiler, both installed by `.ci/run` at /opt/grafana-schema. The dashboard is
//! written as an object literal of type `Dashboard`, so a field of the wrong type and a field
//! Grafana does not know both fail; a copy with one misspelt field must fail, which shows the
//! check is live. (Which metrics the queries name is checked in `controller::metrics`.)

use std::path::Path;
use std::process::Command;

/// Where `.ci/run` installs the schema and the compiler.
const MODULES: &str = "/opt/grafana-schema/node_modules";
const TSC: &str = "/opt/grafana-schema/node_modules/.bin/tsc";

const DASHBOARD: &str = include_str!("../../dashboards/continuum-run.json");

/// Compiles `dashboard` typed as Grafana's `Dashboard`: the compiler's complaints, if any.
fn type_errors(folder: &Path, dashboard: &str) -> Option<String> {
    let source = folder.join("dashboard.ts");
    std::fs::write(
        &source,
        format!(
            "import type {{ Dashboard }} from '@grafana/schema';\n\
             export const dashboard: Dashboard = {dashboard};\n"
        ),
    )
    .expect("source written");
    let output = Command::new(TSC)
        .args([
            "--noEmit",
            "--strict",
            "--module",
            "esnext",
            "--moduleResolution",
            "bundler",
            "--target",
            "es2020",
        ])
        .arg(&source)
        .current_dir(folder)
        .output()
        .expect("tsc runs");
    (!output.status.success()).then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn the_dashboard_is_a_grafana_dashboard_by_grafanas_own_schema() {
    if !tests::components_available(&[TSC]) {
        return;
    }
    let folder = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(MODULES, folder.path().join("node_modules"))
        .expect("modules linked");
    if let Some(errors) = type_errors(folder.path(), DASHBOARD) {
        panic!("the dashboard does not match Grafana's schema:\n{errors}");
    }
    let misspelt = DASHBOARD.replacen("\"gridPos\"", "\"gridPosition\"", 1);
    assert_ne!(misspelt, DASHBOARD);
    let errors = type_errors(folder.path(), &misspelt).expect("a misspelt field fails");
    assert!(errors.contains("gridPosition"), "{errors}");
}
