//! Under `controller serve` a run's results are its submitter's: on a machine several people
//! use, the run's folder is `0700` and every folder in it `0700`, every file `0600`, even
//! when the service's results folder was left open to everyone (`0755`). The service runs
//! in-process on loopback over real mTLS, with a local agent and the embedded broker.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use controller::remote;
use controller::serve::ServeConfig;
use proto::controller::v1 as pb;
use proto::pki::{IdentitySpec, Role};
use tests::pki::TestPki;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Generous: a local latency cell takes about two seconds.
const DEADLINE: Duration = Duration::from_secs(120);

const NODES: &str = r#"
[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]
"#;

const PLAN: &str = r#"
name = "private"
repetitions = 1

[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]

[[brokers]]
name = "embedded"
kind = "embedded"
node = "local"

[[scenarios]]
name = "local"

[[tests]]
kind = "latency"
loadgen = ["local"]
publishers = 5
messages = 3
warmup = 1
"#;

/// Every folder and file under `root` (root included) with its permission bits.
fn modes(root: &Path) -> std::io::Result<Vec<(PathBuf, bool, u32)>> {
    let mut out = vec![(
        root.to_path_buf(),
        true,
        std::fs::metadata(root)?.permissions().mode() & 0o777,
    )];
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            out.push((
                path.clone(),
                meta.is_dir(),
                meta.permissions().mode() & 0o777,
            ));
            if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runs_folder_and_files_are_its_owners_alone() -> TestResult {
    let pki = TestPki::in_memory()?;
    let controller = pki.issue(
        &IdentitySpec::new(Role::Controller, "controller").with_ip_address([127, 0, 0, 1].into()),
    )?;
    let laptop = pki.issue(&IdentitySpec::new(Role::Client, "laptop"))?;
    let results = tempfile::tempdir()?;
    // Left open by the operator: the service must close it, not rely on it.
    std::fs::set_permissions(results.path(), std::fs::Permissions::from_mode(0o755))?;
    let nodes = results.path().join("nodes.toml");
    std::fs::write(&nodes, NODES)?;
    let config = ServeConfig::with_nodes_file(
        results.path().to_path_buf(),
        results.path().join("pki"),
        &nodes,
    )?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let service = tokio::spawn(controller::serve::serve(
        listener,
        controller,
        config,
        async move {
            let _ = stopped.await;
        },
    ));
    let finished = tokio::time::timeout(DEADLINE, async {
        let mut client = remote::connect(&address.to_string(), None, &laptop).await?;
        let id = remote::submit_text(&mut client, PLAN, "private.toml").await?;
        let finished = remote::watch(&mut client, &id, |_| {}).await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(finished)
    })
    .await??;
    let _ = stop.send(());
    tokio::time::timeout(DEADLINE, service).await???;
    assert_eq!(finished.state(), pb::RunState::Finished, "{finished:?}");

    let run = PathBuf::from(&finished.results_dir);
    assert!(run.starts_with(results.path()), "{}", run.display());
    let all = modes(&run)?;
    assert!(
        all.iter().any(|(path, _, _)| path.ends_with("report.html"))
            && all.iter().any(|(path, _, _)| path.ends_with("result.json")),
        "{all:#?}"
    );
    for (path, is_dir, mode) in &all {
        let expected = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(*mode, expected, "{}: {mode:o}", path.display());
    }
    let root = std::fs::metadata(results.path())?.permissions().mode() & 0o777;
    assert_eq!(root, 0o700, "the runs' root is closed to others");
    Ok(())
}
