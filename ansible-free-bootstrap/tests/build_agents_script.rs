//! `scripts/build-agents.sh --check`: for each architecture an inventory names, either ready
//! to build here or the exact things to install. This machine (like CI's) has no Rust target
//! but its own, so for aarch64 and armv7 the script must name the `rustup target add` and
//! the Debian cross-linker package, and exit non-zero.

use std::path::Path;
use std::process::Command;

fn has_std_for(triple: &str) -> bool {
    let output = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", triple])
        .output();
    let Ok(output) = output else { return false };
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
    })
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[test]
fn the_script_says_what_to_install_for_each_foreign_architecture() {
    let dir = tempfile::tempdir().expect("temp dir");
    let inventory = dir.path().join("pis.toml");
    std::fs::write(
        &inventory,
        "[[nodes]]\nname = \"a\"\narch = \"aarch64\"\n[[nodes]]\nname = \"b\"\narch = \"armv7\"\n\
         [[nodes]]\nname = \"c\"\narch = \"aarch64\"\n",
    )
    .expect("write");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-agents.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--check")
        .arg(&inventory)
        .output()
        .expect("bash runs the script");
    let said = String::from_utf8_lossy(&output.stdout);
    println!("{said}");
    let mut any_missing = false;
    for (arch, triple, linker, package) in [
        (
            "aarch64",
            "aarch64-unknown-linux-gnu",
            "aarch64-linux-gnu-gcc",
            "gcc-aarch64-linux-gnu",
        ),
        (
            "armv7",
            "armv7-unknown-linux-gnueabihf",
            "arm-linux-gnueabihf-gcc",
            "gcc-arm-linux-gnueabihf",
        ),
    ] {
        assert_eq!(
            said.matches(&format!("{arch}: ")).count(),
            1,
            "each architecture once: {said}"
        );
        if has_std_for(triple) && said.contains(&format!("{arch}: ready")) {
            continue;
        }
        any_missing = true;
        assert!(
            said.contains(&format!("{arch}: cannot build here; install")),
            "{said}"
        );
        if !has_std_for(triple) {
            assert!(
                said.contains(&format!("rustup target add {triple}")),
                "{said}"
            );
        }
        if !on_path(linker) {
            assert!(
                said.contains(&format!("apt-get install {package}")),
                "{said}"
            );
        }
        assert!(
            said.contains(&format!("binaries = {{ {arch} = \"PATH\" }}")),
            "{said}"
        );
    }
    assert_eq!(output.status.success(), !any_missing, "{said}");
}
