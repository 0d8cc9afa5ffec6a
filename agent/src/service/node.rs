//! Info and Clock: who the node is, and one clock exchange.

use std::path::Path;

use proto::agent::v1 as pb;
use sysinfo::System;

use crate::broker::InstallPaths;
use crate::netem::NetemCapability;
use domain::AgentConfig;

/// What the node can do, probed once when the agent starts; the brokers are those the
/// native driver would find at `install`.
pub(crate) async fn probe_capabilities(install: &InstallPaths) -> pb::Capabilities {
    let netem = match crate::netem::netem_available().await {
        NetemCapability::Available => capability(true, "sch_netem accepts a qdisc".to_string()),
        other => capability(false, other.to_string()),
    };
    pb::Capabilities {
        netem: Some(netem),
        nebula: Some(binary_capability("nebula")),
        k3s: Some(binary_capability("k3s")),
        kubectl: Some(binary_capability("kubectl")),
        brokers: installed_brokers(install),
    }
}

/// The products the native driver finds at `install`, each with its main program.
pub(crate) fn installed_brokers(install: &InstallPaths) -> Vec<pb::InstalledBroker> {
    install
        .installed()
        .into_iter()
        .map(|(product, path)| pb::InstalledBroker {
            product: pb::Product::from(product).into(),
            path: path.display().to_string(),
        })
        .collect()
}

fn capability(available: bool, detail: String) -> pb::Capability {
    pb::Capability { available, detail }
}

fn binary_capability(name: &str) -> pb::Capability {
    match find_in_path(name) {
        Some(path) => capability(true, path),
        None => capability(false, format!("{name} not found in PATH")),
    }
}

fn find_in_path(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .map(|found| found.display().to_string())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The node's description for Info.
pub(crate) fn node_info(config: &AgentConfig, capabilities: &pb::Capabilities) -> pb::NodeInfo {
    let mut system = System::new().ok();
    if let Some(system) = system.as_mut() {
        system.refresh_memory();
    }
    pb::NodeInfo {
        name: config.name.clone(),
        hostname: System::host_name().unwrap_or_default(),
        arch: std::env::consts::ARCH.to_string(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get() as u32),
        memory_bytes: system.as_ref().map_or(0, System::total_memory),
        kernel: System::kernel_version().unwrap_or_default(),
        os: System::long_os_version().unwrap_or_default(),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        roles: config
            .roles
            .iter()
            .map(|role| role.as_str().to_string())
            .collect(),
        data_plane_interface: config.data_plane_interface.clone().unwrap_or_default(),
        capabilities: Some(capabilities.clone()),
    }
}

/// Stamps t2 (receive) and t3 (send) around an echo of t1.
pub(crate) fn clock_reply(request: &pb::ClockRequest, received_unix_ns: u64) -> pb::ClockReply {
    pb::ClockReply {
        client_send_unix_ns: request.client_send_unix_ns,
        agent_receive_unix_ns: received_unix_ns,
        agent_send_unix_ns: loadgen::clock::unix_now_ns(),
    }
}
