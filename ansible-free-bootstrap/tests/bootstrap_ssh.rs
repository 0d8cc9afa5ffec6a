//! `bootstrap` against three nodes over real SSH (Debian's sshd in namespaces, see
//! `ssh_nodes`): host keys honoured, install, every agent answering Info over mTLS, a second
//! run that changes nothing, uninstall that leaves no file, unit or process; and nodes that
//! cannot be reached or refuse the key stopping bootstrap before it writes anywhere.

mod ssh_nodes;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use proto::agent::v1 as pb;
use proto::mtls::Credentials;
use ssh_nodes::{NODES, SshBed, agent_processes};
use tests::isolated_netns_test;

const SSHD: &str = "/usr/sbin/sshd";
const NEBULA_CERT: &str = "/usr/bin/nebula-cert";
const SUDO: &str = "/usr/bin/sudo";

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every agent answers Info over mTLS with bootstrap's controller identity, from the laptop.
fn agents_answer(bed: &SshBed) -> Result<Vec<pb::NodeInfo>> {
    let credentials = Credentials::load(&bed.dir.path().join("state/pki"), "controller")?;
    let mut infos = Vec::new();
    for name in NODES {
        let address = format!("{}:7100", bed.testbed.node(name).addr());
        let credentials = credentials.clone();
        let info = bed.testbed.node("laptop").run_in(|| async move {
            let mut client = proto::client::connect_agent(&address, None, &credentials).await?;
            anyhow::Ok(client.info(pb::InfoRequest {}).await?.into_inner())
        })??;
        ensure!(info.name == name, "{name} answered as {}", info.name);
        infos.push(info);
    }
    Ok(infos)
}

/// Phase 2 on the installed agents, with the Nebula certificates bootstrap made: the
/// headnode as lighthouse, then the members, each checking the tunnel to the lighthouse.
fn bring_up_overlay(bed: &SshBed) -> Result<()> {
    let credentials = Credentials::load(&bed.dir.path().join("state/pki"), "controller")?;
    let lighthouse = pb::OverlayLighthouse {
        overlay_ip: "198.19.0.2".into(),
        underlay_address: format!("{}:4242", bed.testbed.node("headnode").addr()),
    };
    for (name, host) in [("headnode", 2), ("tester", 1), ("worker", 3)] {
        let request = pb::InstallOverlayRequest {
            lighthouse: name == "headnode",
            overlay_cidr: format!("198.19.0.{host}/24"),
            lighthouses: if name == "headnode" {
                vec![]
            } else {
                vec![lighthouse.clone()]
            },
            listen_port: 4242,
            interface: "nebula1".into(),
            check_reachable: if name == "headnode" {
                vec![]
            } else {
                vec!["198.19.0.2".into()]
            },
            timeout: None,
        };
        let address = format!("{}:7100", bed.testbed.node(name).addr());
        let credentials = credentials.clone();
        let status = bed.testbed.node("laptop").run_in(|| async move {
            let mut client = proto::client::connect_agent(&address, None, &credentials).await?;
            anyhow::Ok(client.install_overlay(request).await?.into_inner())
        })??;
        ensure!(
            status.running && status.peers.iter().all(|p| p.reachable),
            "{name}: {status:?}"
        );
        println!("overlay on {name}: {} (pid {})", status.detail, status.pid);
    }
    Ok(())
}

/// Nebula processes started by an installed agent (their config is in its state folder).
fn installed_nebulas() -> Vec<u32> {
    host::running_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline);
                text.contains("nebula") && text.contains("/var/lib/continuum-agent/")
            })
        })
        .collect()
}

#[test]
fn bootstrap_installs_checks_and_uninstalls_over_real_ssh() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[SSHD, NEBULA_CERT, SUDO]) {
        return Ok(());
    }
    let mut bed = SshBed::start("boot")?;
    // The worker is reached as a user with passwordless sudo, not as root.
    bed.add_sudo_user("worker", "bench")?;
    let inventory = bed.dir.path().join("lab.toml");
    let known_hosts = bed.dir.path().join("known_hosts");
    std::fs::write(&known_hosts, "")?;
    // An offline k3s binary for the cluster nodes (a stand-in file: k3s cannot run here).
    let k3s = bed.dir.path().join("k3s-offline");
    std::fs::write(&k3s, "#!/bin/sh\necho 'k3s stand-in'\n")?;
    let inventory_text = bed
        .inventory("client_key", &known_hosts, &[])
        .replace("name = \"worker\"", "name = \"worker\"\nuser = \"bench\"")
        .replacen(
            "\n[[nodes]]",
            &format!(
                "\n[k3s]\nbinaries = {{ {} = {:?} }}\n\n[[nodes]]",
                std::env::consts::ARCH,
                k3s
            ),
            1,
        );
    std::fs::write(&inventory, inventory_text)?;
    let inventory = inventory.display().to_string();

    // First contact: unknown host keys are refused unless the user says to accept them.
    let refused = bed.bootstrap(&[&inventory])?;
    let said = text(&refused);
    ensure!(
        !refused.status.success(),
        "unknown host keys must stop bootstrap"
    );
    for name in NODES {
        ensure!(
            said.contains(&format!("node {name}: host key of ")),
            "host-key refusal names {name}: {said}"
        );
        ensure!(
            bed.left_behind(name)?.is_empty(),
            "nothing written on {name}"
        );
    }
    ensure!(
        said.contains("--accept-new-host-keys")
            && said.contains("nothing was installed on any node")
    );

    let first = bed.bootstrap(&[&inventory, "--accept-new-host-keys"])?;
    let said = text(&first);
    ensure!(first.status.success(), "install failed: {said}");
    ensure!(
        said.matches("started detached (no systemd as PID 1)")
            .count()
            == 3,
        "{said}"
    );
    ensure!(said.matches("yes: agent").count() == 3, "{said}");
    let infos = agents_answer(&bed)?;
    ensure!(
        infos[2].roles == ["broker", "netem"],
        "worker roles: {:?}",
        infos[2].roles
    );
    let pids: Vec<Option<u32>> = NODES.iter().map(|n| bed.agent_pid(n)).collect();
    ensure!(
        pids.iter().all(Option::is_some),
        "every node has a running agent: {pids:?}"
    );
    let known = std::fs::read_to_string(&known_hosts)?;
    ensure!(
        known.lines().count() == 3,
        "first contact recorded 3 host keys: {known}"
    );

    // What a node got, with private keys private.
    let worker = bed.root("worker").join("upper");
    for (path, mode) in [
        ("etc/continuum/tls/agent.key", 0o600),
        ("etc/continuum/nebula/host.key", 0o600),
        ("etc/continuum/tls/agent.pem", 0o644),
        ("usr/local/bin/continuum-agent", 0o755),
        ("etc/systemd/system/continuum-agent.service", 0o644),
        ("usr/local/bin/k3s", 0o755),
    ] {
        let meta = std::fs::metadata(worker.join(path)).with_context(|| path.to_string())?;
        ensure!(
            meta.permissions().mode() & 0o777 == mode,
            "{path} mode {:o}",
            meta.permissions().mode()
        );
    }
    let config = std::fs::read_to_string(worker.join("etc/continuum/agent.toml"))?;
    ensure!(
        config.contains("name = \"worker\"")
            && config.contains("[nebula]")
            && config.contains("binary = \"/usr/local/bin/k3s\""),
        "{config}"
    );
    ensure!(
        !bed.root("tester").join("upper/usr/local/bin/k3s").exists(),
        "k3s goes to the cluster nodes only"
    );
    for key in ["ca.key", "controller.key"] {
        let mode = std::fs::metadata(bed.dir.path().join("state/pki").join(key))?
            .permissions()
            .mode();
        ensure!(mode & 0o777 == 0o600, "local {key} mode {mode:o}");
    }

    // A second run changes nothing and says so; the agents keep running untouched.
    let second = bed.bootstrap(&[&inventory])?;
    let said = text(&second);
    ensure!(second.status.success(), "{said}");
    ensure!(said.matches("unchanged").count() == 3, "{said}");
    ensure!(
        said.contains("nothing changed: every node already had this install"),
        "{said}"
    );
    ensure!(
        !said.contains("made "),
        "no certificate was made again: {said}"
    );
    let again: Vec<Option<u32>> = NODES.iter().map(|n| bed.agent_pid(n)).collect();
    ensure!(
        again == pids,
        "agents were not restarted: {pids:?} -> {again:?}"
    );

    // A changed node (its data interface) is updated alone and its agent restarted.
    let edited = std::fs::read_to_string(&inventory)?.replacen(
        "data_interface = \"eth0\"",
        "data_interface = \"eth1\"",
        1,
    );
    std::fs::write(&inventory, edited)?;
    let third = bed.bootstrap(&[&inventory])?;
    let said = text(&third);
    ensure!(third.status.success(), "{said}");
    ensure!(
        said.matches("unchanged").count() == 2 && said.contains("1 file(s) written"),
        "{said}"
    );
    ensure!(
        bed.agent_pid("tester") != pids[0],
        "tester's agent restarted with its new config"
    );

    // An inventory without the offline k3s: the binary bootstrap put there is removed, not
    // forgotten.
    let edited = std::fs::read_to_string(&inventory)?;
    let without_k3s: String = edited
        .lines()
        .filter(|line| !line.starts_with("[k3s]") && !line.starts_with("binaries = "))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&inventory, without_k3s)?;
    let fourth = bed.bootstrap(&[&inventory])?;
    let said = text(&fourth);
    ensure!(fourth.status.success(), "{said}");
    ensure!(
        said.matches("2 file(s) written").count() == 2 && said.matches("unchanged").count() == 1,
        "agent.toml rewritten and k3s removed on headnode and worker: {said}"
    );
    for name in ["headnode", "worker"] {
        ensure!(
            !bed.root(name).join("upper/usr/local/bin/k3s").exists(),
            "{name} keeps no k3s"
        );
    }

    // Nebula brought up by the agents with bootstrap's certificates; uninstall must take it
    // down too.
    if tests::components_available(&["/usr/bin/nebula"]) {
        bring_up_overlay(&bed)?;
        ensure!(
            installed_nebulas().len() == 3,
            "three nebulas: {:?}",
            installed_nebulas()
        );
    }

    // Uninstall: no file, unit, folder or process left on any node.
    let removed = bed.bootstrap(&["uninstall", &inventory])?;
    let said = text(&removed);
    ensure!(removed.status.success(), "{said}");
    for name in NODES {
        let left = bed.left_behind(name)?;
        ensure!(left.is_empty(), "{name} still has {left:?}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !agent_processes().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    ensure!(
        agent_processes().is_empty(),
        "agents still running: {:?}",
        agent_processes()
    );
    if tests::components_available(&["/usr/bin/nebula"]) {
        let nebulas = installed_nebulas();
        ensure!(nebulas.is_empty(), "nebula still running: {nebulas:?}");
        ensure!(
            said.matches("nebula: removed /var/lib/continuum-agent/nebula")
                .count()
                == 3,
            "the agent's uninstall removed Nebula on every node: {said}"
        );
    }
    let twice = bed.bootstrap(&["uninstall", &inventory])?;
    ensure!(
        text(&twice)
            .matches("nothing installed by bootstrap")
            .count()
            == 3,
        "{}",
        text(&twice)
    );
    Ok(())
}

#[test]
fn unreachable_nodes_and_wrong_keys_stop_bootstrap_before_it_writes_anywhere() -> Result<()> {
    isolated_netns_test!(Ok(()));
    if !tests::components_available(&[SSHD, NEBULA_CERT]) {
        return Ok(());
    }
    let bed = SshBed::start("bootbad")?;
    let known_hosts = bed.dir.path().join("known_hosts");
    std::fs::write(&known_hosts, bed.known_hosts()?)?;

    // The worker's address has no sshd behind it (an address of the testbed nobody holds).
    let nobody = bed
        .testbed
        .subnet()
        .host(200)
        .context("a free testbed address")?;
    let inventory = bed.dir.path().join("unreachable.toml");
    std::fs::write(
        &inventory,
        bed.inventory("client_key", &known_hosts, &[("worker", nobody)]),
    )?;
    let output = bed.bootstrap(&[&inventory.display().to_string()])?;
    let said = text(&output);
    ensure!(!output.status.success(), "{said}");
    ensure!(
        said.contains(&format!("node worker: cannot reach root@{nobody} over SSH")),
        "{said}"
    );
    ensure!(said.contains("nothing was installed on any node"), "{said}");

    // A file bootstrap would overwrite but did not install (an agent put there by hand).
    let foreign = bed
        .root("worker")
        .join("upper/usr/local/bin/continuum-agent");
    bed.on_node(
        "worker",
        "mkdir -p /usr/local/bin && echo '# installed by hand' > /usr/local/bin/continuum-agent",
    )?;
    let inventory = bed.dir.path().join("foreign.toml");
    std::fs::write(&inventory, bed.inventory("client_key", &known_hosts, &[]))?;
    let output = bed.bootstrap(&[&inventory.display().to_string()])?;
    let said = text(&output);
    ensure!(!output.status.success(), "{said}");
    ensure!(
        said.contains("node worker: /usr/local/bin/continuum-agent is already there and bootstrap did not install it")
            && said.contains("nothing was installed on any node"),
        "{said}"
    );
    ensure!(
        std::fs::read_to_string(&foreign)?.contains("by hand"),
        "the foreign file is untouched"
    );
    bed.on_node("worker", "rm /usr/local/bin/continuum-agent")?;

    // A key the nodes do not know.
    let inventory = bed.dir.path().join("wrong-key.toml");
    std::fs::write(&inventory, bed.inventory("other_key", &known_hosts, &[]))?;
    let output = bed.bootstrap(&[&inventory.display().to_string()])?;
    let said = text(&output);
    ensure!(!output.status.success(), "{said}");
    for name in NODES {
        ensure!(
            said.contains(&format!("node {name}: root@")) && said.contains("refused the SSH key"),
            "{said}"
        );
    }

    // Two headnodes: refused from the inventory alone, naming the node.
    let inventory = bed.dir.path().join("two-headnodes.toml");
    let text_two = bed
        .inventory("client_key", &known_hosts, &[])
        .replace("role = \"worker\"", "role = \"headnode\"");
    std::fs::write(&inventory, text_two)?;
    let output = bed.bootstrap(&[&inventory.display().to_string()])?;
    let said = text(&output);
    ensure!(
        !output.status.success() && said.contains("node worker is a second headnode"),
        "{said}"
    );

    for name in NODES {
        let left = bed.left_behind(name)?;
        ensure!(
            left.is_empty(),
            "{name} got {left:?} although bootstrap stopped"
        );
    }
    ensure!(agent_processes().is_empty(), "no agent was started");

    // A node that fails after the checks (its key cannot be written: a folder stands where
    // the upload's temporary file goes): the others are installed, and the report says the
    // worker is partially installed and how to remove it all.
    bed.on_node(
        "worker",
        "mkdir -p /etc/continuum/tls/agent.key.bootstrap-new",
    )?;
    let inventory = bed.dir.path().join("partial.toml");
    std::fs::write(&inventory, bed.inventory("client_key", &known_hosts, &[]))?;
    let inventory = inventory.display().to_string();
    let output = bed.bootstrap(&[&inventory])?;
    let said = text(&output);
    ensure!(!output.status.success(), "{said}");
    ensure!(
        said.contains("FAILED, partially installed: node worker: `writing /etc/continuum/tls/agent.key` failed")
            && said.contains("partially installed on worker; the other nodes are installed")
            && said.contains(&format!("`bootstrap uninstall {inventory}` removes it all")),
        "{said}"
    );
    ensure!(
        said.matches("yes: agent").count() == 2,
        "tester and headnode answer: {said}"
    );
    let removed = bed.bootstrap(&["uninstall", &inventory])?;
    ensure!(removed.status.success(), "{}", text(&removed));
    bed.on_node("worker", "rm -r /etc/continuum")?;
    for name in NODES {
        let left = bed.left_behind(name)?;
        ensure!(left.is_empty(), "{name} still has {left:?}");
    }
    ensure!(agent_processes().is_empty(), "no agent left running");
    Ok(())
}
