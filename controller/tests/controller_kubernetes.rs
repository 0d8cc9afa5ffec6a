//! A kubernetes broker through the whole controller: a plan with `kind = "kubernetes"` on a
//! testbed whose phases 2 and 3 the controller runs first, the broker deployed through the
//! headnode's agent and pinned to the worker, measured from the tester over the overlay,
//! its pod's CPU and memory in metrics.csv, and deleted after. A second broker is entered
//! through the headnode's NodePort, as the study's tests did: dialled at the headnode, its
//! path recorded in the manifest.
//!
//! Nebula, the agents, the MQTT traffic and the broker process are real. k3s is NOT: it
//! cannot be downloaded or run here, so the headnode and the worker run the fake `k3s` of
//! `fixtures/cluster/fake-cluster.sh`, which plays the cluster through files and runs the
//! broker "pod" as a real Mosquitto in the worker's namespace on the manifest's NodePort
//! (what a NodePort Service would expose), with canned pod metrics, and for a Service on
//! every node plays kube-proxy with socat on the other nodes.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use controller::plan::Plan;
use controller::results::ResultsDir;
use controller::run::{RunOptions, run_plan};
use tests::agent_bed::nebula::{NEBULA, NEBULA_CERT, nebula_section, overlay_ip, overlay_network};
use tests::agent_bed::{AGENT_PORT, AgentBed};
use tests::isolated_netns_test;
use tokio_util::sync::CancellationToken;

const MOSQUITTO: &str = "/usr/sbin/mosquitto";
/// The fake's kube-proxy.
const SOCAT: &str = "/usr/bin/socat";
const FAKE: &str = include_str!("fixtures/cluster/fake-cluster.sh");
const NODE_PORT: u16 = 31883;
/// The NodePort of the broker entered through the headnode.
const VIA_HEADNODE_PORT: u16 = 31884;
/// What the metrics API says of the pod: 0.25 cores, 100 MiB.
const POD_METRICS: &str = r#"{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1",
"metadata":{},"items":[{"metadata":{"name":"mosquitto-5f4d8-x2x9q","namespace":"continuum"},
"timestamp":"2026-11-30T10:00:00Z","window":"10.2s",
"containers":[{"name":"mosquitto","usage":{"cpu":"250000000n","memory":"102400Ki"}}]}]}"#;

fn plan_text(bed: &AgentBed, net: [u8; 3], results: &Path) -> String {
    let node = |name: &str, roles: &str| {
        format!(
            "[[nodes]]\nname = \"{name}\"\nagent = \"{}:{AGENT_PORT}\"\nroles = {roles}\noverlay_ip = \"{}/24\"\n",
            bed.testbed.node(name).addr(),
            overlay_ip(net, name)
        )
    };
    format!(
        "name = \"kube\"\nrepetitions = 1\npki_dir = \"{pki}\"\nresults_dir = \"{results}\"\n\
         [testbed]\noverlay = \"nebula\"\norchestrator = \"k3s\"\nheadnode = \"headnode\"\ninstall_timeout = \"60s\"\n\
         {tester}{headnode}{worker}\
         [[brokers]]\nname = \"via-headnode\"\nkind = \"kubernetes\"\nproduct = \"mosquitto\"\nnode = \"worker\"\nport = {VIA_HEADNODE_PORT}\nentry = \"headnode\"\n\
         [[brokers]]\nname = \"mosquitto\"\nkind = \"kubernetes\"\nproduct = \"mosquitto\"\nnode = \"worker\"\nport = {NODE_PORT}\n\
         [[scenarios]]\nname = \"local\"\n\
         [[tests]]\nkind = \"latency\"\nloadgen = [\"tester\"]\npublishers = 5\nmessages = 20\nwarmup = 2\n",
        pki = bed.pki.path().display(),
        results = results.display(),
        tester = node("tester", "[\"loadgen\", \"netem\"]"),
        headnode = node("headnode", "[\"broker\", \"netem\"]"),
        worker = node("worker", "[\"broker\", \"netem\"]"),
    )
}

/// Mosquitto processes started as the fake's pod (their config is in the fake's folder).
fn pods(fake: &Path) -> Vec<u32> {
    tests::agent_bed::nebula::processes_mentioning(&fake.join("pod.conf").display().to_string())
}

#[test]
fn a_kubernetes_broker_is_deployed_pinned_measured_and_deleted_through_the_controller() -> Result<()>
{
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[NEBULA, NEBULA_CERT, MOSQUITTO, SOCAT]) {
        return Ok(());
    }
    let fake = tempfile::tempdir()?;
    let binary = fake.path().join("k3s");
    std::fs::write(
        &binary,
        FAKE.replace("@DIR@", &fake.path().display().to_string()),
    )?;
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(fake.path().join("podmetrics.json"), POD_METRICS)?;
    let certs = tempfile::tempdir()?;
    let mut bed = AgentBed::start_with("kube", |testbed, name| {
        let mut extra = nebula_section(certs.path(), overlay_network(testbed), name)?;
        if name != "tester" {
            extra.push_str(&format!("[k3s]\nbinary = \"{}\"\n", binary.display()));
        }
        Ok(extra)
    })?;
    for name in ["headnode", "worker"] {
        std::fs::write(
            fake.path().join(format!("netns-{name}")),
            bed.testbed.node(name).netns_name(),
        )?;
    }
    let net = overlay_network(&bed.testbed);
    let work = tempfile::tempdir()?;
    let text = plan_text(&bed, net, &work.path().join("results"));
    let plan = Plan::parse(&text, "kube.toml")?;
    let summary = bed.on_controller_node(move || async move {
        Ok(run_plan(
            &plan,
            &text,
            RunOptions::default(),
            CancellationToken::new(),
        )
        .await?)
    })?;
    ensure!(
        (summary.measured, summary.failed, summary.skipped) == (2, 0, 0),
        "{summary:?}"
    );

    // The manifests went to the headnode's kubectl, pinned to the worker, on the NodePort.
    let calls = std::fs::read_to_string(fake.path().join("calls"))?;
    ensure!(
        calls.contains("get node worker -o json") && calls.contains("apply -f -"),
        "{calls}"
    );
    // As kubectl was given them: one JSON List.
    let applied = std::fs::read_to_string(fake.path().join("applied.json"))?;
    ensure!(
        applied.contains("\"kubernetes.io/hostname\":\"worker\"")
            && applied.contains(&format!("\"nodePort\":{NODE_PORT}"))
            && applied.contains("\"image\":\"eclipse-mosquitto:"),
        "{applied}"
    );
    let results = ResultsDir::open(&summary.dir)?;
    let rows = controller::results::read_rows(&results.summary_path())?;
    let address_of = |broker: &str| {
        rows.iter()
            .find(|row| row.broker == broker)
            .and_then(|row| row.broker_address.clone())
            .unwrap_or_default()
    };
    let address = address_of("mosquitto");
    ensure!(
        address == format!("mqtt://{}:{NODE_PORT}", overlay_ip(net, "worker")),
        "measured at the worker's NodePort over the overlay: {address}"
    );
    let manifest = results.read_manifest()?;
    let deployed: Vec<_> = manifest
        .brokers
        .iter()
        .filter(|b| b.name == "mosquitto")
        .collect();
    ensure!(
        deployed.len() == 1
            && deployed[0].node == "headnode"
            && deployed[0].detail.contains("eclipse-mosquitto:")
            && deployed[0].detail.contains("on node worker"),
        "the manifest says what ran where: {deployed:?}"
    );

    // Entered through the headnode: its Service answers on every node, the tester dialled
    // the headnode's NodePort (the fake's kube-proxy forwarded to the worker's pod), and the
    // manifest records the path each message took.
    let via = std::fs::read_to_string(
        fake.path()
            .join(format!("applied-{VIA_HEADNODE_PORT}.json")),
    )?;
    ensure!(
        via.contains("\"externalTrafficPolicy\":\"Cluster\"")
            && via.contains("\"kubernetes.io/hostname\":\"worker\""),
        "{via}"
    );
    ensure!(
        applied.contains("\"externalTrafficPolicy\":\"Local\""),
        "the direct broker keeps Local: {applied}"
    );
    let via_address = address_of("via-headnode");
    ensure!(
        via_address == format!("mqtt://{}:{VIA_HEADNODE_PORT}", overlay_ip(net, "headnode")),
        "measured at the headnode's NodePort: {via_address}"
    );
    let path_of = |broker: &str| {
        manifest
            .paths
            .iter()
            .find(|p| p.broker == broker)
            .map(|p| p.path.describe())
    };
    ensure!(
        path_of("via-headnode").as_deref()
            == Some("tester -> headnode -> worker -> headnode -> tester")
            && path_of("mosquitto").as_deref() == Some("tester -> worker -> tester"),
        "the manifest records the paths: {:?}",
        manifest.paths
    );
    let log = std::fs::read_to_string(fake.path().join("pod.log"))?;
    ensure!(
        log.contains(&format!("Opening ipv4 listen socket on port {NODE_PORT}")),
        "the pod served the NodePort: {log}"
    );

    // The pod's CPU and memory, from the metrics API, are in metrics.csv under the broker.
    let metrics = controller::results::read_each_sample(&summary.dir.join("metrics.csv"))?
        .context("metrics.csv")?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let pod_rows: Vec<_> = metrics
        .iter()
        .filter(|r| r.process == "mosquitto")
        .collect();
    ensure!(
        !pod_rows.is_empty(),
        "pod samples in metrics.csv: {metrics:?}"
    );
    for row in &pod_rows {
        ensure!(
            row.process_cpu_percent == 25.0 && row.process_rss_bytes == 104_857_600,
            "0.25 cores and 100 MiB: {row:?}"
        );
    }

    // Deleted after the run: the pod is gone.
    ensure!(calls.contains("delete -f -"), "{calls}");
    // Whether it went in time or not, the check below says.
    let _ = host::poll_until_blocking(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(50),
        || {
            if pods(fake.path()).is_empty() {
                host::Attempt::Done(())
            } else {
                host::Attempt::Retry(())
            }
        },
    );
    ensure!(
        pods(fake.path()).is_empty(),
        "the pod was stopped: {:?} still run; pid file said {:?}",
        pods(fake.path()),
        std::fs::read_to_string(fake.path().join("pod.pid")).ok()
    );
    let forwarders =
        tests::agent_bed::nebula::processes_mentioning(&format!("TCP-LISTEN:{VIA_HEADNODE_PORT}"));
    ensure!(
        forwarders.is_empty(),
        "the fake's kube-proxy was stopped: {forwarders:?}"
    );
    bed.terminate_agents(std::time::Duration::from_secs(30))?;
    Ok(())
}
