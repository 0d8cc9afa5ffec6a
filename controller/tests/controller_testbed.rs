//! The controller's phases 2 and 3 end to end: a plan with `overlay = "nebula"` and
//! `orchestrator = "k3s"` run by `run_plan` against three agents in namespaces. Nebula is
//! real (Debian's, certificates from `nebula-cert`) and the measurement crosses it; k3s is
//! NOT: it cannot be downloaded or run here, so both k3s nodes run the fake `k3s` of
//! `tests::fake_k3s` (`tests/fixtures/fake-k3s.sh`), which records its calls and plays a cluster through files
//! (the server's token, the nodes it lists). Brokers here are embedded ones on the worker's
//! overlay address; the kubernetes driver's own path is tested in the agent's unit tests.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use controller::plan::Plan;
use controller::results::ResultsDir;
use controller::run::{RunOptions, run_plan};
use tests::agent_bed::nebula::{
    NEBULA, NEBULA_CERT, nebula_section, overlay_ip, overlay_network, tun_bytes,
};
use tests::agent_bed::{AGENT_PORT, AgentBed};
use tests::fake_k3s::Fake;
use tests::isolated_netns_test;
use tokio_util::sync::CancellationToken;

fn plan_text(bed: &AgentBed, net: [u8; 3], results: &std::path::Path) -> String {
    let node = |name: &str, roles: &str| {
        format!(
            "[[nodes]]\nname = \"{name}\"\nagent = \"{}:{AGENT_PORT}\"\nroles = {roles}\noverlay_ip = \"{}/24\"\n",
            bed.testbed.node(name).addr(),
            overlay_ip(net, name)
        )
    };
    format!(
        "name = \"overlay\"\nrepetitions = 1\npki_dir = \"{pki}\"\nresults_dir = \"{results}\"\n\
         [testbed]\noverlay = \"nebula\"\norchestrator = \"k3s\"\nheadnode = \"headnode\"\ninstall_timeout = \"60s\"\n\
         {tester}{headnode}{worker}\
         [[brokers]]\nname = \"embedded\"\nkind = \"embedded\"\nnode = \"worker\"\n\
         [[scenarios]]\nname = \"local\"\n\
         [[tests]]\nkind = \"latency\"\nloadgen = [\"tester\"]\npublishers = 5\nmessages = 20\nwarmup = 2\n",
        pki = bed.pki.path().display(),
        results = results.display(),
        tester = node("tester", "[\"loadgen\", \"netem\"]"),
        headnode = node("headnode", "[\"broker\", \"netem\"]"),
        worker = node("worker", "[\"broker\", \"netem\"]"),
    )
}

#[test]
fn a_plan_brings_up_nebula_and_k3s_then_measures_over_the_overlay() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[NEBULA, NEBULA_CERT]) {
        return Ok(());
    }
    let fake = Fake::new();
    let certs = tempfile::tempdir()?;
    let mut bed = AgentBed::start_with("phases", |testbed, name| {
        let mut extra = nebula_section(certs.path(), overlay_network(testbed), name)?;
        extra.push_str(&format!(
            "[k3s]\nbinary = \"{}\"\n",
            fake.binary().display()
        ));
        Ok(extra)
    })?;
    let net = overlay_network(&bed.testbed);
    let work = tempfile::tempdir()?;
    let text = plan_text(&bed, net, &work.path().join("results"));
    let plan = Plan::parse(&text, "overlay.toml")?;
    let worker = bed.testbed.node("worker");

    let before = tun_bytes(worker).unwrap_or((0, 0));
    let run = |plan: Plan, text: String| {
        bed.on_controller_node(move || async move {
            Ok(run_plan(
                &plan,
                &text,
                RunOptions::default(),
                CancellationToken::new(),
            )
            .await?)
        })
    };
    let first = run(plan.clone(), text.clone())?;
    ensure!(
        (first.measured, first.failed, first.skipped) == (1, 0, 0),
        "one cell measured over the overlay: {first:?}"
    );
    let (rx, tx) = tun_bytes(worker)?;
    ensure!(
        rx > before.0 && tx > before.1,
        "the broker's traffic crossed the worker's tun: rx {} -> {rx}, tx {} -> {tx}",
        before.0,
        before.1
    );
    let results = ResultsDir::open(&first.dir)?;
    let manifest = results.read_manifest()?;
    let testbed = manifest
        .testbed
        .context("the manifest records phases 2 and 3")?;
    let order: Vec<&str> = testbed.overlay.iter().map(|o| o.node.as_str()).collect();
    ensure!(
        order == ["headnode", "tester", "worker"],
        "lighthouse first: {order:?}"
    );
    ensure!(testbed.overlay[0].lighthouse && !testbed.overlay[1].lighthouse);
    let checked: Vec<&str> = testbed.overlay[2]
        .peers
        .iter()
        .map(|p| p.address.as_str())
        .collect();
    let expected = [
        overlay_ip(net, "headnode").to_string(),
        overlay_ip(net, "tester").to_string(),
    ];
    ensure!(
        checked == expected,
        "the last member checked every node: {checked:?}"
    );
    ensure!(
        testbed
            .overlay
            .iter()
            .flat_map(|o| &o.peers)
            .all(|p| p.reachable),
        "all reachable"
    );
    let cluster = testbed.cluster.context("the cluster is recorded")?;
    let nodes: Vec<(&str, bool)> = cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.ready))
        .collect();
    ensure!(
        nodes.contains(&("headnode", true)) && nodes.contains(&("worker", true)),
        "{nodes:?}"
    );
    let head = cluster
        .nodes
        .iter()
        .find(|n| n.name == "headnode")
        .context("headnode")?;
    ensure!(
        head.taints.iter().any(|t| t.ends_with(":NoSchedule")),
        "workloads kept off the control plane: {:?}",
        head.taints
    );

    let report = std::fs::read_to_string(first.dir.join("report.md"))?;
    ensure!(
        report.contains("Overlay and cluster") && report.contains("lighthouse"),
        "the report shows phases 2 and 3"
    );

    // The fake saw the server, then the agent, with the controller's token in the environment.
    let token = std::fs::read_to_string(bed.pki.path().join("k3s-token"))?;
    let calls = fake.daemon_calls();
    let roles: Vec<&str> = calls.iter().map(|c| c.argv[0].as_str()).collect();
    ensure!(roles == ["server", "agent"], "{roles:?}");
    for call in &calls {
        ensure!(call.env.get("K3S_TOKEN").map(String::as_str) == Some(token.trim()));
        ensure!(
            !call.argv.iter().any(|a| a.contains(token.trim())),
            "token not in argv"
        );
        ensure!(
            call.values("--flannel-iface") == ["nebula1"],
            "{:?}",
            call.argv
        );
    }
    ensure!(
        calls[1].env.get("K3S_URL").map(String::as_str)
            == Some(format!("https://{}:6443", overlay_ip(net, "headnode")).as_str())
    );

    // A second run finds both phases done and changes nothing.
    let second = run(plan, text)?;
    ensure!(second.measured == 1, "{second:?}");
    let again = ResultsDir::open(&second.dir)?
        .read_manifest()?
        .testbed
        .context("recorded")?;
    for overlay in &again.overlay {
        ensure!(
            overlay.detail == "already running",
            "{}: {}",
            overlay.node,
            overlay.detail
        );
    }
    ensure!(
        fake.daemon_calls().len() == 2,
        "no k3s daemon started again"
    );

    bed.terminate_agents(Duration::from_secs(30))?;
    ensure!(
        tests::agent_bed::nebula::processes_mentioning(&bed.pki.path().display().to_string())
            .is_empty(),
        "SIGTERM stopped every agent's Nebula"
    );
    Ok(())
}
