//! Steps on one real node through its agent (gRPC over mTLS from the testbed's laptop) and
//! over SSH: impairing it, reading what it holds, k3s under the agent's unit.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use proto::agent::v1 as pb;
use proto::mtls::Credentials;
use tests::agent_bed::duration;
use tests::netns::Node;
use tests::node_vm::NodeVms;

/// Where the fake k3s keeps its call records on a node (the agent's unit lets it write
/// `/var/lib`): the fake's own, not k3s's, so the test removes it before its last listing.
pub const FAKE_K3S_RECORDS: &str = "/var/lib/fake-k3s";
/// The token of the one-node cluster.
const CLUSTER_TOKEN: &str = "realnodes-cluster-token";
/// What of k3s a node may hold: its units and their env files, the node password folder k3s
/// keeps in /etc, the agent's k3s data dir and its processes.
const K3S_HELD: &str = "for path in /etc/systemd/system/k3s.service /etc/systemd/system/k3s.service.env \
       /etc/systemd/system/k3s-agent.service /etc/rancher /var/lib/continuum-agent/k3s /var/lib/continuum-agent/cluster; do \
       [ -e \"$path\" ] && echo \"file $path\"; done; \
     systemctl list-units --all --plain --no-legend 'k3s*' | sed 's/^/unit /'; \
     pgrep -a -f '/usr/local/bin/k3s (server|agent)' | sed 's/^/process /'; true";

/// The fake k3s (see `tests::fake_k3s`) as bootstrap pushes it to a real node: it records
/// under [`FAKE_K3S_RECORDS`] and keeps the node password in `/etc/rancher`, as k3s does.
pub fn fake_k3s() -> String {
    tests::fake_k3s::script(FAKE_K3S_RECORDS, "/etc/rancher")
}

/// A gRPC client of node `name`'s agent, used by `call` inside the laptop's namespace.
pub fn with_agent<T, F, Fut>(
    laptop: &Node,
    vms: &NodeVms,
    credentials: &Credentials,
    name: &str,
    call: F,
) -> Result<T>
where
    T: Send,
    F: FnOnce(pb::agent_client::AgentClient<tonic::transport::Channel>) -> Fut + Send,
    Fut: std::future::Future<Output = Result<T>>,
{
    let address = format!("{}:7100", vms.node(name).address);
    let credentials = credentials.clone();
    laptop.run_in(|| async move {
        let client = proto::client::connect_agent(&address, None, &credentials).await?;
        call(client).await
    })?
}

/// 20 ms on `eth0` for 10 minutes and a native Mosquitto named `broker` on node `name`:
/// what a crash or a reboot must not leave behind. Checked over SSH to be there.
pub fn impair_and_run_broker(
    laptop: &Node,
    vms: &NodeVms,
    credentials: &Credentials,
    name: &str,
    broker: &str,
) -> Result<()> {
    let bind = vms.node(name).address.to_string();
    let broker_name = broker.to_owned();
    let (applied, started) = with_agent(laptop, vms, credentials, name, |mut client| async move {
        let applied = client
            .apply_netem(pb::ApplyNetemRequest {
                interface: "eth0".into(),
                netem: Some(pb::NetemSpec {
                    delay: Some(duration(Duration::from_millis(20))),
                    jitter: Some(duration(Duration::ZERO)),
                    ..Default::default()
                }),
                lease: Some(duration(Duration::from_secs(600))),
            })
            .await?
            .into_inner();
        let started = client
            .start_broker(pb::StartBrokerRequest {
                spec: Some(pb::BrokerSpec {
                    name: broker_name,
                    kind: Some(pb::broker_spec::Kind::Native(pb::NativeBroker {
                        product: pb::Product::Mosquitto.into(),
                    })),
                    bind,
                    port: 0,
                    options: Default::default(),
                }),
                lease: None,
            })
            .await?
            .into_inner();
        Ok((applied, started))
    })?;
    ensure!(applied.present, "{name}: netem applied: {applied:?}");
    println!(
        "{name}: netem on eth0 and Mosquitto {broker} (pid {}) at {}",
        started.pid, started.address
    );
    let held = vms.ssh_ok(
        name,
        "tc qdisc show dev eth0 | grep -cw netem; pgrep -c -x mosquitto; \
         ls /var/lib/continuum-agent/netem/ | wc -l; true",
    )?;
    ensure!(
        held.split_whitespace().collect::<Vec<_>>() == ["1", "1", "1"],
        "{name} before the crash or reboot: netem qdiscs, mosquittos, netem records: {held}"
    );
    Ok(())
}

/// Waits (90 s at most) until node `name`'s agent serves in this boot: it has settled what
/// an earlier agent left ("active" comes before that: the unit is `Type=exec`).
pub fn wait_agent_serving(vms: &NodeVms, name: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let journal = vms.ssh(
            name,
            "journalctl --no-pager -o cat -b 0 -u continuum-agent | grep -c 'agent serving'",
        )?;
        if String::from_utf8_lossy(&journal.stdout)
            .trim()
            .parse::<u32>()
            .is_ok_and(|count| count > 0)
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{name}: the agent does not serve 90 s after boot"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The main PID of node `name`'s agent unit.
pub fn agent_pid(vms: &NodeVms, name: &str) -> Result<u32> {
    let shown = vms.ssh_ok(name, "systemctl show -p MainPID --value continuum-agent")?;
    shown
        .trim()
        .parse()
        .ok()
        .filter(|&pid| pid > 0)
        .with_context(|| format!("{name}: the agent's MainPID: {shown:?}"))
}

/// The netem records and broker markers an agent keeps on disk: empty once it settled them.
pub fn agent_records(vms: &NodeVms, name: &str) -> Result<String> {
    Ok(vms
        .ssh_ok(
            name,
            "ls /var/lib/continuum-agent/netem/ 2>/dev/null; \
             find /var/lib/continuum-agent/brokers -name marker 2>/dev/null; true",
        )?
        .trim()
        .to_owned())
}

/// Nebula pinged from `from` to each of `to` over `nebula1`, tried for up to 60 s (a node
/// just booted is still handshaking).
pub fn ping_over_nebula(vms: &NodeVms, from: &str, to: &[(&str, &str)]) -> Result<()> {
    for (to, ip) in to {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ping = vms.ssh(from, &format!("ping -c 2 -W 3 -I nebula1 {ip}"))?;
            let said = String::from_utf8_lossy(&ping.stdout).into_owned();
            if ping.status.success() && said.contains(" 0% packet loss") {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{from} -> {to} over Nebula: {said}{}",
                String::from_utf8_lossy(&ping.stderr)
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    Ok(())
}

/// k3s's server on node `name` (the fake bootstrap pushed, see [`fake_k3s`]) installed and
/// uninstalled by the agent under its unit's protections: the agent writes k3s's unit and
/// env file, systemd runs it, the node is listed Ready; the uninstall leaves nothing of k3s,
/// the node password folder k3s made in /etc included.
pub fn k3s_under_the_unit(
    laptop: &Node,
    vms: &NodeVms,
    credentials: &Credentials,
    name: &str,
    overlay_ip: &str,
) -> Result<()> {
    let request = pb::InstallClusterRequest {
        role: Some(pb::install_cluster_request::Role::Server(pb::K3sServer {
            schedule_workloads: false,
        })),
        token: CLUSTER_TOKEN.into(),
        node_ip: overlay_ip.into(),
        flannel_interface: "nebula1".into(),
        node_name: String::new(),
        labels: Default::default(),
        timeout: Some(duration(Duration::from_secs(60))),
    };
    let installed = with_agent(laptop, vms, credentials, name, |mut client| async move {
        Ok(client.install_cluster(request).await?.into_inner())
    })?;
    println!("k3s on {name}: {}", installed.detail);
    ensure!(
        installed.running
            && installed
                .nodes
                .iter()
                .any(|node| node.name == name && node.ready),
        "{name}: k3s installed and its node Ready: {installed:?}"
    );
    let unit = vms.ssh_ok(
        name,
        "systemctl is-active k3s; systemctl show -p MainPID --value k3s; \
         stat -c '%a' /etc/systemd/system/k3s.service.env /etc/rancher/node/password",
    )?;
    let lines: Vec<&str> = unit.lines().collect();
    ensure!(
        lines.len() == 4
            && lines[0] == "active"
            && lines[1]
                .parse::<u32>()
                .is_ok_and(|pid| pid == installed.pid)
            && lines[2] == "600"
            && lines[3] == "600",
        "{name}: k3s.service active with the PID the agent reports ({}), its env file and \
         the node password private: {unit}",
        installed.pid
    );
    let removed = with_agent(laptop, vms, credentials, name, |mut client| async move {
        Ok(client
            .uninstall_cluster(pb::UninstallClusterRequest {})
            .await?
            .into_inner())
    })?;
    println!("k3s uninstalled on {name}: {}", removed.detail);
    let held = vms.ssh_ok(name, K3S_HELD)?;
    ensure!(
        !removed.running && held.trim().is_empty(),
        "{name} after the agent's k3s uninstall holds: {held}(detail: {})",
        removed.detail
    );
    Ok(())
}

/// Removes the fake k3s's own records from every node (see [`FAKE_K3S_RECORDS`]).
pub fn remove_fake_records(vms: &NodeVms, names: &[&str]) -> Result<()> {
    for name in names {
        vms.ssh_ok(name, &format!("rm -rf {FAKE_K3S_RECORDS}"))?;
    }
    Ok(())
}
