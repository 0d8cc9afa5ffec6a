//! Real nodes: three Debian 12 VMs with systemd as PID 1 (`tests::node_vm`,
//! `vm/node-image.sh`), the study's tester, headnode and worker, on the bridge of a namespace
//! testbed whose `laptop` node runs bootstrap and the controller. What only a real node shows
//! is checked here:
//! - bootstrap's first contact (`--accept-new-host-keys`) installs the agent as a systemd
//!   unit, which systemd starts: `systemctl is-active`, and `systemctl show` reporting the
//!   capability bounding set and the protections the shipped unit asks for; a second run
//!   changes nothing and says so;
//! - Nebula between the three kernels, started by the agents under that unit (the lighthouse
//!   on the headnode, the others checking their tunnels), pinged both ways between every pair;
//! - the controller runs a plan against the agents over mTLS: a native Mosquitto on the worker
//!   and one on the headnode, loadgen on the tester, the study's local, edge and cloud
//!   scenarios on the VMs' NICs, two repetitions. Every cell of the worker's broker is
//!   measured, with netem read back on the tester and the worker, and each scenario's rise over
//!   local is printed beside its model. The headnode is powered off during its broker's
//!   cells: they fail naming it, and the run finishes;
//! - `kill -9` of the worker's agent while netem is applied and a native Mosquitto runs:
//!   systemd restarts it, and the qdisc is cleared before the new agent serves;
//! - `systemctl reboot` of the worker while it holds netem and runs a broker, as the headnode
//!   is powered on again: both agents come back by themselves with no qdisc, no broker and no
//!   record of either on disk; the worker's previous boot's journal shows its agent undid
//!   both when systemd stopped it; the tester reaches both over Nebula again;
//! - k3s's server on the headnode (a fake stands in for k3s, which cannot run here; pushed by
//!   bootstrap as an offline binary), installed and uninstalled by the agent under the
//!   unit's protections: k3s's unit active with the PID the agent reports, nothing of k3s left;
//! - `bootstrap uninstall` leaves nothing: no file of its own, unit, process, Nebula link or
//!   qdisc, and no file under `/etc`, `/usr/local`, `/var/lib`, `/opt` or `/root` that was
//!   not there before bootstrap ran, nor one missing (listed on each node before and after).
//!
//! Figures printed: boot time per VM, bootstrap's first and second run, the rises against
//! their models, the time from `kill -9` to the qdisc being gone, the power cycle, the reboot.
//! Under TCG a guest's timers fire late (see `vm/boot.sh`) by as much as the host is busy, and
//! the VMs' clocks are not instruction counts here (they talk to each other): the edge's rise
//! was 67-149 % of its 2.5 ms beside a busy loop. So the rises are figures, not held to
//! within 10 % (the netem VM test checks that on one kernel); only the cloud's is bounded, at
//! half its model, which a path without netem cannot reach. What netem each node held is
//! checked exactly, from the manifest's read-back. Needs root (namespaces, taps), qemu-img and
//! Debian's packages (the image); skips with the reason otherwise, and fails instead under
//! `CI=true`.

#[path = "real_nodes/node_steps.rs"]
mod node_steps;
#[path = "real_nodes/plan.rs"]
mod plan;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use controller::results::CellStatus;
use proto::agent::v1 as pb;
use proto::mtls::Credentials;
use tests::agent_bed::duration;
use tests::netns::Testbed;
use tests::node_vm::{NodeImage, NodeVms};

const NEBULA_CERT: &str = "/usr/bin/nebula-cert";
const SSH: &str = "/usr/bin/ssh";
/// The VMs in bootstrap's roles, with their Nebula addresses.
const NODES: [(&str, &str, &str); 3] = [
    ("tester", "tester", "198.19.0.1"),
    ("headnode", "headnode", "198.19.0.2"),
    ("worker", "worker", "198.19.0.3"),
];
/// The unit bootstrap installs: what `systemctl show` must report.
const UNIT: &str = include_str!("../../agent/systemd/continuum-agent.service");
/// The folders listed before bootstrap and after its uninstall.
const LISTED: &str = "/etc /usr/local /var/lib /opt /root";
/// What systemd itself keeps changing there (its random seed, timers' stamps, journal).
const NOISE: &[&str] = &["/var/lib/systemd/", "/var/lib/private/"];
/// How long the run may take: 12 cells, the headnode's failing after its power-off.
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// How long the whole test may take, image build included; nextest kills it at 15 minutes
/// (`.config/nextest.toml`), and this is below so that the isolated run's output is shown.
const TEST_BUDGET: Duration = Duration::from_secs(870);

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `Key=value` of the unit's lines.
fn unit_setting(key: &str) -> Option<&'static str> {
    UNIT.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .map(str::trim)
}

/// The regular files, folders and links under [`LISTED`], noise left out.
fn listing(vms: &NodeVms, name: &str) -> Result<BTreeSet<String>> {
    let out = vms.ssh_ok(
        name,
        &format!("find {LISTED} -xdev \\( -type f -o -type d -o -type l \\) 2>/dev/null || true"),
    )?;
    Ok(out
        .lines()
        .filter(|line| !NOISE.iter().any(|noise| line.starts_with(noise)))
        .map(str::to_owned)
        .collect())
}

/// What of Continuum a node still holds: its files, units, processes, links and qdiscs.
fn continuum_on(vms: &NodeVms, name: &str) -> Result<Vec<String>> {
    let out = vms.ssh_ok(
        name,
        "for path in /usr/local/bin/continuum-agent /etc/continuum /var/lib/continuum-agent \
           /etc/systemd/system/continuum-agent.service /etc/systemd/system/continuum-nebula.service; do \
           [ -e \"$path\" ] && echo \"file $path\"; done; \
         systemctl list-units --all --plain --no-legend 'continuum*' | sed 's/^/unit /'; \
         pgrep -a 'continuum|nebula|mosquitto' | sed 's/^/process /'; \
         tc qdisc show | grep -w netem | sed 's/^/qdisc /'; \
         ip -o link show | grep -i nebula | sed 's/^/link /'; true",
    )?;
    Ok(out.lines().map(str::to_owned).collect())
}

/// Whether `name`'s agent unit is active.
fn agent_active(vms: &NodeVms, name: &str) -> Result<bool> {
    let active = vms.ssh(name, "systemctl is-active continuum-agent")?;
    Ok(String::from_utf8_lossy(&active.stdout).trim() == "active")
}

/// The bounding set and protections of the agent's unit on every node are the shipped unit's.
fn check_units(vms: &NodeVms, names: &[&str]) -> Result<()> {
    let wanted_caps: BTreeSet<String> = unit_setting("CapabilityBoundingSet")
        .context("the unit's CapabilityBoundingSet")?
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    for name in names {
        ensure!(
            agent_active(vms, name)?,
            "{name}: the agent's unit is not active"
        );
        let shown = vms.ssh_ok(
            name,
            "systemctl show continuum-agent -p CapabilityBoundingSet -p NoNewPrivileges \
             -p ProtectSystem -p ProtectHome -p PrivateTmp -p Restart",
        )?;
        println!("{name}: systemctl show continuum-agent:\n{shown}");
        let value = |key: &str| {
            shown
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{key}=")))
                .unwrap_or("")
                .to_owned()
        };
        let caps: BTreeSet<String> = value("CapabilityBoundingSet")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        ensure!(caps == wanted_caps, "{name}: bounding set {caps:?}");
        for key in [
            "NoNewPrivileges",
            "ProtectSystem",
            "ProtectHome",
            "PrivateTmp",
            "Restart",
        ] {
            let wanted = unit_setting(key).with_context(|| format!("the unit's {key}"))?;
            ensure!(
                value(key) == wanted,
                "{name}: {key}={} but the unit asks {wanted}",
                value(key)
            );
        }
    }
    Ok(())
}

#[test]
fn bootstrap_and_the_controller_on_real_nodes_through_crashes_and_power_loss() -> Result<()> {
    if !tests::components_available(&[NEBULA_CERT, SSH]) {
        return Ok(());
    }
    // Built (Debian's packages fetched) by the test's first process, which has this machine's
    // network; the isolated one below finds it cached.
    let test_started = Instant::now();
    if NodeImage::prepare()?.is_none() {
        return Ok(());
    }
    if !tests::netns::isolate_test_within(TEST_BUDGET.saturating_sub(test_started.elapsed())) {
        return Ok(());
    }
    let Some(image) = NodeImage::prepare()? else {
        return Ok(());
    };
    let agent_binary = tests::workspace::workspace_binary("agent", "continuum-agent")?;
    let controller_binary = tests::workspace::workspace_binary("controller", "controller")?;
    let dir = tempfile::tempdir()?;
    let testbed = Testbed::build("rnode", &["laptop".into()])?;
    let laptop = testbed.node("laptop");
    let names: Vec<&str> = NODES.iter().map(|(name, ..)| *name).collect();
    let mut vms = NodeVms::boot(&testbed, "laptop", &image, dir.path(), &names)?;
    for node in vms.nodes() {
        println!(
            "figure: {} booted (systemd, SSH answering) in {:.1} s",
            node.name,
            node.boot_time.as_secs_f64()
        );
    }
    let before: Vec<BTreeSet<String>> = names
        .iter()
        .map(|name| listing(&vms, name))
        .collect::<Result<_>>()?;

    // The agent as bootstrap copies it, without its debug sections (a third of the size).
    let agent = dir.path().join("continuum-agent");
    let status = std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&agent)
        .arg(&agent_binary)
        .status()?;
    ensure!(status.success(), "strip failed");
    // k3s cannot run here: a fake stands in for it, pushed as bootstrap pushes an offline k3s.
    let fake_k3s = dir.path().join("k3s");
    std::fs::write(&fake_k3s, node_steps::fake_k3s())?;
    std::fs::set_permissions(
        &fake_k3s,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let key = dir.path().join("node_key");
    std::fs::copy(&image.key, &key)?;
    let state = dir.path().join("state");
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(&known_hosts, "")?;
    let mut inventory = format!(
        "state_dir = {state:?}\n[ssh]\nuser = \"root\"\nkey = {key:?}\nknown_hosts = \
         {known_hosts:?}\nconnect_timeout = \"10s\"\n[agent]\nbinaries = {{ x86_64 = {agent:?} }}\n\
         [k3s]\nbinaries = {{ x86_64 = {fake_k3s:?} }}\n"
    );
    for (name, role, overlay_ip) in NODES {
        inventory.push_str(&format!(
            "\n[[nodes]]\nname = {name:?}\naddress = \"{}\"\narch = \"x86_64\"\nrole = {role:?}\n\
             data_interface = \"eth0\"\noverlay_ip = \"{overlay_ip}/24\"\n",
            vms.node(name).address,
        ));
    }
    let inventory_path = dir.path().join("nodes.toml");
    std::fs::write(&inventory_path, inventory)?;
    let bootstrap = |args: &[&str]| -> Result<(std::process::Output, Duration)> {
        let mut command = laptop.command(env!("CARGO_BIN_EXE_bootstrap"));
        command.args(args).env("HOME", dir.path());
        let started = Instant::now();
        let output =
            host::blocking::run_with_deadline(&mut command, None, Duration::from_secs(600))?;
        println!(
            "$ bootstrap {} ({:.1} s)\n{}",
            args.join(" "),
            started.elapsed().as_secs_f64(),
            text(&output)
        );
        Ok((output, started.elapsed()))
    };
    let inventory = inventory_path.display().to_string();

    // First contact and install: systemd starts the unit on every node.
    let (first, first_time) = bootstrap(&[&inventory, "--accept-new-host-keys"])?;
    let said = text(&first);
    ensure!(first.status.success(), "install failed: {said}");
    ensure!(
        said.matches("systemd unit enabled and restarted").count() == 3,
        "every agent runs as a unit: {said}"
    );
    ensure!(said.matches("yes: agent").count() == 3, "{said}");
    println!(
        "figure: bootstrap's first run (3 nodes, first contact) took {:.1} s",
        first_time.as_secs_f64()
    );
    check_units(&vms, &names)?;
    let (second, second_time) = bootstrap(&[&inventory])?;
    let said = text(&second);
    ensure!(second.status.success(), "{said}");
    ensure!(
        said.contains("nothing changed: every node already had this install"),
        "{said}"
    );
    println!(
        "figure: bootstrap's second run took {:.1} s (nothing changed)",
        second_time.as_secs_f64()
    );

    // Nebula between the three kernels, under the agents' unit: the headnode first (the
    // lighthouse), each later node checking its tunnel to every node before it.
    let credentials = Credentials::load(&state.join("pki"), "controller")?;
    let lighthouse = pb::OverlayLighthouse {
        overlay_ip: "198.19.0.2".into(),
        underlay_address: format!("{}:4242", vms.node("headnode").address),
    };
    let mut up: Vec<String> = Vec::new();
    for name in ["headnode", "tester", "worker"] {
        let (.., overlay_ip) = NODES
            .iter()
            .find(|(n, ..)| *n == name)
            .context("a node of NODES")?;
        let is_lighthouse = name == "headnode";
        let request = pb::InstallOverlayRequest {
            lighthouse: is_lighthouse,
            overlay_cidr: format!("{overlay_ip}/24"),
            lighthouses: if is_lighthouse {
                vec![]
            } else {
                vec![lighthouse.clone()]
            },
            listen_port: 4242,
            interface: "nebula1".into(),
            check_reachable: up.clone(),
            timeout: Some(duration(Duration::from_secs(60))),
        };
        let address = format!("{}:7100", vms.node(name).address);
        let credentials = credentials.clone();
        let status = laptop.run_in(|| async move {
            let mut client = proto::client::connect_agent(&address, None, &credentials).await?;
            anyhow::Ok(client.install_overlay(request).await?.into_inner())
        })??;
        ensure!(
            status.running && status.peers.iter().all(|p| p.reachable),
            "{name}: {status:?}"
        );
        println!("overlay on {name}: {} (pid {})", status.detail, status.pid);
        up.push((*overlay_ip).to_owned());
    }
    for (from, ..) in NODES {
        for (to, _, to_ip) in NODES.iter().filter(|(to, ..)| *to != from) {
            let ping = vms.ssh_ok(from, &format!("ping -c 2 -W 5 -I nebula1 {to_ip}"))?;
            ensure!(
                ping.contains(" 0% packet loss"),
                "{from} -> {to} over Nebula: {ping}"
            );
        }
    }
    println!("Nebula: every pair of the three nodes pinged both ways over nebula1");

    // The controller runs a plan against the agents; the headnode goes dark mid-run.
    let results = dir.path().join("results");
    let agents: Vec<(&str, String)> = names
        .iter()
        .map(|name| (*name, vms.node(name).address.to_string()))
        .collect();
    let plan_path = dir.path().join("realnodes.toml");
    std::fs::write(
        &plan_path,
        plan::text(&results, &state.join("pki"), &agents),
    )?;
    let mut controller = laptop.command(&controller_binary);
    controller
        .arg(&plan_path)
        .stdout(std::fs::File::create(dir.path().join("controller.out"))?)
        .stderr(std::fs::File::create(dir.path().join("controller.err"))?);
    let mut run = laptop.spawn(&mut controller)?;
    let started = Instant::now();
    let mut powered_off = None;
    let exit = loop {
        if let Some(status) = run.child_mut().try_wait()? {
            break status;
        }
        // The headnode's broker measured once (its first repetition's local cell): pull its plug.
        if powered_off.is_none() && plan::records_of(&results, plan::ON_HEADNODE) >= 1 {
            vms.power_off("headnode")?;
            powered_off = Some(started.elapsed());
            println!(
                "headnode powered off {:.1} s into the run",
                started.elapsed().as_secs_f64()
            );
        }
        if started.elapsed() > RUN_DEADLINE {
            bail!(
                "the run took over {} s: {}",
                RUN_DEADLINE.as_secs(),
                std::fs::read_to_string(dir.path().join("controller.err")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let run_time = started.elapsed();
    println!(
        "controller exited ({exit}) after {:.1} s\n{}",
        run_time.as_secs_f64(),
        std::fs::read_to_string(dir.path().join("controller.out")).unwrap_or_default()
    );
    let power_off_at = powered_off.context("the headnode's broker never had a cell measured")?;
    // Failed cells are results of the run (`on_failure = "continue"`), not its failure.
    ensure!(exit.success(), "the controller failed ({exit})");
    let run_folder = plan::run_folder(&results)?;
    let rows = plan::rows(&run_folder)?;
    for (scenario, _) in plan::SCENARIOS {
        for repetition in 1..=plan::REPETITIONS {
            let row = rows
                .iter()
                .find(|r| {
                    r.broker == plan::ON_WORKER
                        && r.scenario == scenario
                        && r.repetition == repetition
                })
                .with_context(|| format!("{} {scenario} {repetition}", plan::ON_WORKER))?;
            ensure!(
                row.status == CellStatus::Ok && row.lost == Some(0),
                "{} {scenario} repetition {repetition}: {:?} {} (lost {:?})",
                plan::ON_WORKER,
                row.status,
                row.reason,
                row.lost
            );
        }
    }
    let headnode_rows: Vec<_> = rows
        .iter()
        .filter(|r| r.broker == plan::ON_HEADNODE)
        .collect();
    let failed: Vec<_> = headnode_rows
        .iter()
        .filter(|r| r.status == CellStatus::Failed)
        .collect();
    // Named as the node (its agent unreachable, its lease not renewed) or as its broker's
    // address (loadgen's connection refused on the tester).
    let headnode_ip = vms.node("headnode").address.to_string();
    ensure!(
        headnode_rows.len() == plan::SCENARIOS.len() * plan::REPETITIONS as usize
            && headnode_rows.iter().any(|r| r.status == CellStatus::Ok)
            && !failed.is_empty()
            && headnode_rows
                .iter()
                .all(|r| r.status != CellStatus::Skipped)
            && failed
                .iter()
                .all(|r| r.reason.contains("headnode") || r.reason.contains(&headnode_ip)),
        "the headnode's cells: measured until its power-off, then failed naming it: {:?}",
        headnode_rows
            .iter()
            .map(|r| (&r.scenario, r.repetition, r.status, &r.reason))
            .collect::<Vec<_>>()
    );
    println!(
        "figure: after the headnode's power-off ({:.1} s in), its {} remaining cells failed and the run ended at {:.1} s",
        power_off_at.as_secs_f64(),
        failed.len(),
        run_time.as_secs_f64()
    );
    plan::check_netem_read_back(&run_folder)?;
    let rises = plan::rises(&rows)?;
    for (scenario, model_ms) in plan::SCENARIOS.iter().skip(1) {
        let rise = rises[scenario];
        println!(
            "figure: {scenario} on the VMs' NICs: latency p50 rise over local {rise:.2} ms \
             (mean of {} paired repetitions) against the model's {model_ms} ms: {:.0} %",
            plan::REPETITIONS,
            100.0 * rise / model_ms
        );
        ensure!(
            *scenario != plan::BOUNDED_RISE || rise >= plan::RISE_AT_LEAST * model_ms,
            "{scenario}: a rise of {rise:.2} ms is below {:.0} % of the {model_ms} ms netem adds",
            100.0 * plan::RISE_AT_LEAST
        );
    }
    for name in ["tester", "worker"] {
        let held = continuum_on(&vms, name)?;
        ensure!(
            !held
                .iter()
                .any(|l| l.starts_with("qdisc ") || l.contains("mosquitto")),
            "{name} after the run: {held:?}"
        );
    }

    // kill -9 of the worker's agent while it holds netem and runs a broker.
    node_steps::impair_and_run_broker(laptop, &vms, &credentials, "worker", "crashme")?;
    let old_pid = node_steps::agent_pid(&vms, "worker")?;
    vms.ssh_ok("worker", &format!("kill -9 {old_pid}"))?;
    let killed = Instant::now();
    let mut qdisc_gone = None;
    let (restarted, new_pid) = loop {
        let state_now = vms.ssh_ok(
            "worker",
            "echo pid=$(systemctl show -p MainPID --value continuum-agent) \
             active=$(systemctl is-active continuum-agent); \
             tc qdisc show dev eth0 | grep -cw netem; pgrep -c -x mosquitto; true",
        )?;
        let mut lines = state_now.lines();
        let head = lines.next().unwrap_or("");
        let netem_count = lines.next().unwrap_or("1").trim().to_owned();
        let mosquittos = lines.next().unwrap_or("1").trim().to_owned();
        if qdisc_gone.is_none() && netem_count == "0" {
            qdisc_gone = Some(killed.elapsed());
        }
        let new_pid = head
            .split_whitespace()
            .find_map(|word| word.strip_prefix("pid="))
            .and_then(|pid| pid.parse::<u32>().ok())
            .filter(|&pid| pid > 0 && pid != old_pid);
        if let Some(new_pid) = new_pid
            && head.contains("active=active")
            && netem_count == "0"
            && mosquittos == "0"
        {
            break (killed.elapsed(), new_pid);
        }
        ensure!(
            killed.elapsed() < Duration::from_secs(120),
            "120 s after kill -9: {head}, netem qdiscs {netem_count}, mosquittos {mosquittos}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The new agent's own lines, once it serves: it undid the old one's netem before that.
    let journal = loop {
        let journal = vms.ssh_ok(
            "worker",
            &format!("journalctl --no-pager -o cat _PID={new_pid}"),
        )?;
        if journal.contains("agent serving") {
            break journal;
        }
        ensure!(
            killed.elapsed() < Duration::from_secs(180),
            "the new agent (pid {new_pid}) does not serve: {journal}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    println!("worker's new agent's journal after kill -9:\n{journal}");
    let cleared = journal.find("cleared netem a previous agent left behind");
    let serving = journal.find("agent serving");
    ensure!(
        matches!((cleared, serving), (Some(c), Some(s)) if c < s),
        "the stale qdisc is cleared before the new agent serves: {journal}"
    );
    println!(
        "figure: kill -9 to the stale qdisc gone: {:.1} s; to a new agent active with no \
         qdisc and no broker: {:.1} s",
        qdisc_gone.unwrap_or(restarted).as_secs_f64(),
        restarted.as_secs_f64()
    );

    // A reboot of the worker while it holds netem and runs a broker (systemd stops the agent
    // with SIGTERM), and meanwhile the headnode powered on again.
    node_steps::impair_and_run_broker(laptop, &vms, &credentials, "worker", "rebootme")?;
    let stopped_pid = node_steps::agent_pid(&vms, "worker")?;
    let rebooting = vms.reboot("worker")?;
    let back = vms.power_on("headnode")?;
    println!(
        "figure: headnode powered on again, SSH answering in {:.1} s",
        back.as_secs_f64()
    );
    let rebooted = vms.rebooted(rebooting)?;
    println!(
        "figure: worker rebooted (systemctl reboot), SSH answering in {:.1} s",
        rebooted.as_secs_f64()
    );
    for name in ["headnode", "worker"] {
        node_steps::wait_agent_serving(&vms, name)?;
        // No netem record or broker marker is left on disk: the lost headnode's settled by
        // its new agent (silently: its qdisc went with the power), the worker's by either.
        let records = node_steps::agent_records(&vms, name)?;
        ensure!(
            records.is_empty(),
            "{name}'s agent left records of netem or brokers: {records}"
        );
        let netem =
            node_steps::with_agent(laptop, &vms, &credentials, name, |mut client| async move {
                let read = client
                    .read_netem(pb::ReadNetemRequest {
                        interface: "eth0".into(),
                    })
                    .await?;
                Ok(read.into_inner())
            })?;
        // These two hold after any boot; they check that the agent, once back, did not
        // bring netem or a broker back from its records.
        ensure!(
            !netem.present,
            "{name} holds netem after booting again: {netem:?}"
        );
        let held = continuum_on(&vms, name)?;
        ensure!(
            !held.iter().any(|l| l.contains("mosquitto")),
            "{name} runs a broker after booting again: {held:?}"
        );
    }
    // What the worker's agent did when systemd stopped it for the reboot: its netem cleared
    // and its broker stopped by itself (a qdisc and a process would be gone after a reboot
    // anyway): the lines of that agent's PID in the previous boot's journal, and systemd's
    // last lines about the unit there, its stop, with no SIGKILL after a timeout.
    let stopped = vms.ssh_ok(
        "worker",
        &format!("journalctl --no-pager -o cat -b -1 _PID={stopped_pid}"),
    )?;
    let by_systemd = vms.ssh_ok(
        "worker",
        "journalctl --no-pager -o cat -b -1 -n 4 _PID=1 UNIT=continuum-agent.service",
    )?;
    println!(
        "worker's agent (pid {stopped_pid}) before the reboot:\n{stopped}\nsystemd:\n{by_systemd}"
    );
    ensure!(
        stopped.contains("netem cleared at shutdown interface=eth0")
            && stopped.contains("broker stopped at shutdown broker=rebootme"),
        "the worker's agent undid its netem and broker when systemd stopped it: {stopped}"
    );
    ensure!(
        by_systemd.contains("Deactivated successfully") && !by_systemd.contains("stop-sigterm"),
        "systemd stopped the worker's agent without killing it: {by_systemd}"
    );
    // Nebula is an enabled unit of its own: back after the power cycle and the reboot.
    node_steps::ping_over_nebula(
        &vms,
        "tester",
        &[("headnode", "198.19.0.2"), ("worker", "198.19.0.3")],
    )?;
    println!("Nebula: the tester pings the power-cycled headnode and the rebooted worker");

    // k3s's server on the headnode, installed and uninstalled by its agent under the unit.
    node_steps::k3s_under_the_unit(laptop, &vms, &credentials, "headnode", "198.19.0.2")?;

    // Uninstall: nothing left, nothing lost.
    let (removed, _) = bootstrap(&["uninstall", &inventory])?;
    ensure!(removed.status.success(), "{}", text(&removed));
    node_steps::remove_fake_records(&vms, &names)?;
    for (index, name) in names.iter().enumerate() {
        let held = continuum_on(&vms, name)?;
        let after = listing(&vms, name)?;
        let new: Vec<&String> = after.difference(&before[index]).collect();
        let gone: Vec<&String> = before[index].difference(&after).collect();
        println!(
            "figure: {name} after bootstrap uninstall: Continuum {held:?}, new files {new:?}, \
             files gone {gone:?}"
        );
        ensure!(held.is_empty(), "{name} still holds {held:?}");
        ensure!(new.is_empty(), "{name} has new files {new:?}");
        ensure!(gone.is_empty(), "{name} lost files it had before: {gone:?}");
    }
    drop(vms);
    Ok(())
}
