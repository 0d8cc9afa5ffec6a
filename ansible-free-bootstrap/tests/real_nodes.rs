//! Real nodes: two Debian 12 VMs with systemd as PID 1 (`tests::node_vm`, `vm/node-image.sh`),
//! a headnode and a worker, on the bridge of a namespace testbed whose `laptop` node runs
//! bootstrap and speaks to the agents. What only a real node shows is checked here:
//! - bootstrap's first contact (`--accept-new-host-keys`) installs the agent as a systemd
//!   unit, which systemd starts: `systemctl is-active`, and `systemctl show` reporting the
//!   capability bounding set and the protections the shipped unit asks for; a second run
//!   changes nothing and says so;
//! - Nebula between the two kernels, started by the agents under that unit (the lighthouse
//!   on the headnode, the worker checking its tunnel to it);
//! - `kill -9` of the worker's agent while netem is applied and a native Mosquitto runs:
//!   systemd restarts it, and the qdisc and the broker are gone (seen through SSH);
//! - a reboot brings the agent back with no qdisc and no broker;
//! - `bootstrap uninstall` leaves nothing: no file of its own, unit, process, Nebula link or
//!   qdisc, and no file anywhere under `/etc`, `/usr/local` or `/var/lib` that was not there
//!   before bootstrap ran (listed on each node before and after).
//!
//! Figures printed: boot time per VM, bootstrap's first and second run, the time from
//! `kill -9` to the qdisc being gone, the reboot. Needs root (network namespaces, taps),
//! qemu-img and Debian's packages (the image); skips with the reason otherwise, and fails
//! instead under `CI=true`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use proto::agent::v1 as pb;
use proto::mtls::Credentials;
use tests::agent_bed::duration;
use tests::isolated_netns_test;
use tests::netns::Testbed;
use tests::node_vm::{NodeImage, NodeVms};

const NEBULA_CERT: &str = "/usr/bin/nebula-cert";
const SSH: &str = "/usr/bin/ssh";
/// The VMs, in bootstrap's roles.
const NODES: [(&str, &str); 2] = [("headnode", "headnode"), ("worker", "worker")];
/// The unit bootstrap installs: what `systemctl show` must report.
const UNIT: &str = include_str!("../../agent/systemd/continuum-agent.service");
/// The folders listed before bootstrap and after its uninstall.
const LISTED: &str = "/etc /usr/local /var/lib /opt /root";
/// What changes there on its own on a running Debian node, whoever is logged in: the
/// journal and systemd's own state, logins (`lastlog`, `wtmp` live elsewhere), ssh's
/// known hosts of root.
const NOISE: &[&str] = &[
    "/var/lib/systemd/",
    "/var/lib/private/",
    "/etc/.pwd.lock",
    "/var/lib/dhcp/",
];

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `Key=value` of the unit's `[Service]` lines.
fn unit_setting(key: &str) -> Option<&'static str> {
    UNIT.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .map(str::trim)
}

/// The regular files and folders under [`LISTED`], one per line, noise left out.
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

/// 20 ms on the worker's NIC for 10 minutes: what a crash or a reboot must not leave behind.
fn apply_delay() -> pb::ApplyNetemRequest {
    pb::ApplyNetemRequest {
        interface: "eth0".into(),
        netem: Some(pb::NetemSpec {
            delay: Some(duration(Duration::from_millis(20))),
            jitter: Some(duration(Duration::ZERO)),
            ..Default::default()
        }),
        lease: Some(duration(Duration::from_secs(600))),
    }
}

#[test]
fn bootstrap_installs_systemd_units_on_real_nodes_which_survive_crashes_and_leave_nothing()
-> Result<()> {
    if !tests::components_available(&[NEBULA_CERT, SSH]) {
        return Ok(());
    }
    // Built (Debian's packages fetched) by the test's first process, which has this machine's
    // network; the isolated one below finds it cached.
    if NodeImage::prepare()?.is_none() {
        return Ok(());
    }
    isolated_netns_test!(Ok(()));
    let Some(image) = NodeImage::prepare()? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let testbed = Testbed::build("rnode", &["laptop".into()])?;
    let names: Vec<&str> = NODES.iter().map(|(name, _)| *name).collect();
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
        .arg(env!("CARGO_BIN_EXE_bootstrap").replace("/bootstrap", "/continuum-agent"))
        .status()?;
    ensure!(status.success(), "strip failed");
    let key = dir.path().join("node_key");
    std::fs::copy(&image.key, &key)?;
    let state = dir.path().join("state");
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(&known_hosts, "")?;
    let mut inventory = format!(
        "state_dir = {state:?}\n[ssh]\nuser = \"root\"\nkey = {key:?}\nknown_hosts = \
         {known_hosts:?}\nconnect_timeout = \"10s\"\n[agent]\nbinaries = {{ x86_64 = {agent:?} }}\n"
    );
    for (index, (name, role)) in NODES.iter().enumerate() {
        inventory.push_str(&format!(
            "\n[[nodes]]\nname = {name:?}\naddress = \"{}\"\narch = \"x86_64\"\nrole = {role:?}\n\
             data_interface = \"eth0\"\noverlay_ip = \"198.19.0.{}/24\"\n",
            vms.node(name).address,
            index + 2
        ));
    }
    let inventory_path = dir.path().join("nodes.toml");
    std::fs::write(&inventory_path, inventory)?;
    let bootstrap = |args: &[&str]| -> Result<(std::process::Output, Duration)> {
        let mut command = testbed
            .node("laptop")
            .command(env!("CARGO_BIN_EXE_bootstrap"));
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

    // First contact and install: systemd starts the unit on both nodes.
    let (first, first_time) = bootstrap(&[&inventory, "--accept-new-host-keys"])?;
    let said = text(&first);
    ensure!(first.status.success(), "install failed: {said}");
    ensure!(
        said.matches("systemd unit enabled and restarted").count() == 2,
        "both agents run as units: {said}"
    );
    ensure!(said.matches("yes: agent").count() == 2, "{said}");
    println!(
        "figure: bootstrap's first run (2 nodes, first contact) took {:.1} s",
        first_time.as_secs_f64()
    );
    let wanted_caps: BTreeSet<String> = unit_setting("CapabilityBoundingSet")
        .context("the unit's CapabilityBoundingSet")?
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    for name in &names {
        let active = vms.ssh(name, "systemctl is-active continuum-agent")?;
        ensure!(
            String::from_utf8_lossy(&active.stdout).trim() == "active",
            "{name}: {}",
            text(&active)
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

    // Nebula between the two kernels, under the agents' unit.
    let credentials = Credentials::load(&state.join("pki"), "controller")?;
    let agent_address = |name: &str| format!("{}:7100", vms.node(name).address);
    let laptop = testbed.node("laptop");
    let lighthouse = pb::OverlayLighthouse {
        overlay_ip: "198.19.0.2".into(),
        underlay_address: format!("{}:4242", vms.node("headnode").address),
    };
    for name in &names {
        let is_lighthouse = *name == "headnode";
        let request = pb::InstallOverlayRequest {
            lighthouse: is_lighthouse,
            overlay_cidr: format!("198.19.0.{}/24", if is_lighthouse { 2 } else { 3 }),
            lighthouses: if is_lighthouse {
                vec![]
            } else {
                vec![lighthouse.clone()]
            },
            listen_port: 4242,
            interface: "nebula1".into(),
            check_reachable: if is_lighthouse {
                vec![]
            } else {
                vec!["198.19.0.2".into()]
            },
            timeout: Some(duration(Duration::from_secs(60))),
        };
        let address = agent_address(name);
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
    }
    // The tunnel both ways, seen from outside the agents.
    for (from, to) in [("worker", "198.19.0.2"), ("headnode", "198.19.0.3")] {
        let ping = vms.ssh_ok(from, &format!("ping -c 3 -W 5 -I nebula1 {to}"))?;
        println!("{from} -> {to} over Nebula:\n{ping}");
        ensure!(
            ping.contains(" 0% packet loss"),
            "{from} -> {to} over Nebula: {ping}"
        );
    }

    // kill -9 of the worker's agent while it holds netem and runs a broker.
    let worker_ip = vms.node("worker").address.to_string();
    let address = agent_address("worker");
    let worker_credentials = credentials.clone();
    let applied = laptop.run_in(|| async move {
        let mut client = proto::client::connect_agent(&address, None, &worker_credentials).await?;
        let applied = client.apply_netem(apply_delay()).await?.into_inner();
        let broker = client
            .start_broker(pb::StartBrokerRequest {
                spec: Some(pb::BrokerSpec {
                    name: "crashme".into(),
                    kind: Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
                        product: pb::Product::Mosquitto.into(),
                    })),
                    bind: worker_ip,
                    port: 0,
                    options: Default::default(),
                }),
                lease: None,
            })
            .await?
            .into_inner();
        anyhow::Ok((applied, broker))
    })??;
    ensure!(applied.0.present, "netem applied: {:?}", applied.0);
    println!(
        "worker: netem on eth0 and Mosquitto (pid {}) at {}",
        applied.1.pid, applied.1.address
    );
    let held = continuum_on(&vms, "worker")?;
    ensure!(
        held.iter().any(|l| l.starts_with("qdisc "))
            && held.iter().any(|l| l.contains("mosquitto")),
        "before the crash: {held:?}"
    );
    let old_pid = vms
        .ssh_ok(
            "worker",
            "systemctl show -p MainPID --value continuum-agent",
        )?
        .trim()
        .to_owned();
    vms.ssh_ok("worker", &format!("kill -9 {old_pid}"))?;
    let killed = Instant::now();
    let mut qdisc_gone = None;
    let restarted = loop {
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
        let new_agent =
            head.contains("active=active") && !head.contains(&format!("pid={old_pid} "));
        if new_agent && netem_count == "0" && mosquittos == "0" {
            break killed.elapsed();
        }
        ensure!(
            killed.elapsed() < Duration::from_secs(120),
            "120 s after kill -9: {head}, netem qdiscs {netem_count}, mosquittos {mosquittos}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let journal = vms.ssh_ok(
        "worker",
        "journalctl -u continuum-agent --no-pager -o cat | tail -n 40",
    )?;
    println!("worker's agent journal after kill -9:\n{journal}");
    // The new agent undid the old one's netem before it served a call.
    let cleared = journal.find("cleared netem a previous agent left behind");
    let serving = journal.rfind("agent serving");
    ensure!(
        matches!((cleared, serving), (Some(c), Some(s)) if c < s),
        "the stale qdisc is cleared before the new agent serves: {journal}"
    );
    println!(
        "figure: kill -9 to the stale qdisc gone: {:.1} s; to a new agent active with no qdisc and no broker: {:.1} s",
        qdisc_gone.unwrap_or(restarted).as_secs_f64(),
        restarted.as_secs_f64()
    );

    // A reboot brings the agent back clean.
    let address = agent_address("worker");
    let worker_credentials = credentials.clone();
    laptop.run_in(|| async move {
        let mut client = proto::client::connect_agent(&address, None, &worker_credentials).await?;
        anyhow::Ok(client.apply_netem(apply_delay()).await?.into_inner())
    })??;
    let rebooted = vms.reboot("worker")?;
    println!("figure: worker rebooted in {:.1} s", rebooted.as_secs_f64());
    let active = vms.ssh("worker", "systemctl is-active continuum-agent")?;
    ensure!(
        String::from_utf8_lossy(&active.stdout).trim() == "active",
        "the agent is back after the reboot: {}",
        text(&active)
    );
    let after_reboot = continuum_on(&vms, "worker")?;
    ensure!(
        !after_reboot
            .iter()
            .any(|l| l.starts_with("qdisc ") || l.contains("mosquitto")),
        "after the reboot: {after_reboot:?}"
    );

    // Uninstall: nothing left.
    let (removed, _) = bootstrap(&["uninstall", &inventory])?;
    ensure!(removed.status.success(), "{}", text(&removed));
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
