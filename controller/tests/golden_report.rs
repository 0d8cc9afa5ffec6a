//! The report of a fixed results folder, pinned byte for byte.
//!
//! `fixtures/golden-run/` is the folder a real run of `fixtures/golden-run.toml` wrote (every
//! test kind, two repetitions, the embedded broker on agents on loopback). Rebuilding its
//! report must give exactly the report, HTML and figures that run wrote: refactoring how a
//! study flows from plan to report must not change a byte of what a reader sees.
//!
//! When a change to the report is meant, regenerate the pinned files and review their diff:
//! `cp -r controller/tests/fixtures/golden-run /tmp/g && rm -r /tmp/g/report.* /tmp/g/figures
//! && cargo run -p controller -- report /tmp/g && cp -r /tmp/g/report.* /tmp/g/figures
//! controller/tests/fixtures/golden-run/`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden-run")
}

/// Copies `from` into `to` (files and folders only; the fixture has nothing else).
fn copy_folder(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_folder(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The first line where two texts differ, for a failure that says where.
fn first_difference(expected: &str, built: &str) -> String {
    let line = expected
        .lines()
        .zip(built.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(expected.lines().count().min(built.lines().count()));
    format!(
        "line {}: expected {:?}, built {:?}",
        line + 1,
        expected.lines().nth(line).unwrap_or("(end)"),
        built.lines().nth(line).unwrap_or("(end)")
    )
}

#[test]
fn a_fixed_results_folder_gives_the_same_report_byte_for_byte() -> Result<()> {
    let work = tempfile::tempdir()?;
    let folder = work.path().join("golden-run");
    copy_folder(&fixture(), &folder)?;
    fs::remove_file(folder.join("report.md"))?;
    fs::remove_file(folder.join("report.html"))?;
    fs::remove_dir_all(folder.join("figures"))?;

    let files = controller::report::write_report(&folder)?;

    for (name, built) in [("report.md", &files.markdown), ("report.html", &files.html)] {
        let expected = fs::read_to_string(fixture().join(name))?;
        let built = fs::read_to_string(built)?;
        ensure!(
            built == expected,
            "{name} differs from the pinned one at {}",
            first_difference(&expected, &built)
        );
    }
    let mut pinned_figures: Vec<String> = fs::read_dir(fixture().join("figures"))?
        .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    pinned_figures.sort();
    let mut built_figures: Vec<String> = files
        .figures
        .iter()
        .filter_map(|path| path.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .collect();
    built_figures.sort();
    ensure!(
        built_figures == pinned_figures,
        "figures: built {built_figures:?}, pinned {pinned_figures:?}"
    );
    for name in &pinned_figures {
        let expected = fs::read(fixture().join("figures").join(name))?;
        let built = fs::read(folder.join("figures").join(name))?;
        ensure!(
            built == expected,
            "figures/{name} differs from the pinned one"
        );
    }
    Ok(())
}
