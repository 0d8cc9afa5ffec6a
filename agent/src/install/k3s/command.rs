//! What is run: the `k3s server` / `k3s agent` command lines, `k3s kubectl get nodes`, and
//! under systemd the unit and its EnvironmentFile. Plain data, checked by unit tests.
//!
//! The token and the server URL travel in the environment (`K3S_TOKEN`, `K3S_URL`), never
//! in argv: `/proc/PID/cmdline` is readable by every user, `/proc/PID/environ` only by the
//! process's owner (and the EnvironmentFile is mode 0600).

use std::path::Path;

use super::request::{ClusterPlan, ClusterRole, ROLE_LABEL};
use crate::install::system::systemd_quote;
use host::CommandLine;

/// Keeps workloads off the control plane (the study's headnode runs no broker).
pub(super) const CONTROL_PLANE_TAINT: &str =
    "node-role.kubernetes.io/control-plane=true:NoSchedule";

/// The k3s daemon for `plan`: `binary server|agent <flags>`, the secrets in its environment.
pub(super) fn daemon_line(
    binary: &Path,
    plan: &ClusterPlan,
    data_dir: &Path,
    kubeconfig: &Path,
) -> CommandLine {
    let mut line = CommandLine::new(binary);
    line.args.push(plan.role.name().to_string());
    let mut arg = |flag: &str, value: &str| {
        line.args.push(flag.to_string());
        line.args.push(value.to_string());
    };
    let node_ip = plan.node_ip.to_string();
    arg("--data-dir", &data_dir.display().to_string());
    if let ClusterRole::Server { .. } = plan.role {
        arg("--write-kubeconfig", &kubeconfig.display().to_string());
        arg("--write-kubeconfig-mode", "0600");
    }
    arg("--node-name", &plan.node_name);
    arg("--node-ip", &node_ip);
    if let ClusterRole::Server { .. } = plan.role {
        // Served on the overlay address, so agents join over the overlay.
        arg("--advertise-address", &node_ip);
    }
    arg("--flannel-iface", &plan.flannel_interface);
    arg(
        "--node-label",
        &format!("{ROLE_LABEL}={}", plan.role.label()),
    );
    for (key, value) in &plan.labels {
        arg("--node-label", &format!("{key}={value}"));
    }
    if let ClusterRole::Server { schedule_workloads } = plan.role {
        // Brokers are reached through NodePort services on the worker; traefik would only
        // take ports 80/443 on every node and spend a Raspberry Pi's CPU on nothing.
        arg("--disable", "traefik");
        if !schedule_workloads {
            arg("--node-taint", CONTROL_PLANE_TAINT);
        }
    }
    // A K3S_* variable in the agent's own environment must not redirect k3s.
    line.env_remove_prefixes = vec!["K3S_"];
    line.env.push(("K3S_TOKEN".into(), plan.token.clone()));
    if let ClusterRole::Agent { server_url } = &plan.role {
        line.env.push(("K3S_URL".into(), server_url.clone()));
    }
    line
}

/// `binary kubectl --kubeconfig <kubeconfig> get nodes -o json`.
pub(super) fn kubectl_get_nodes(binary: &Path, kubeconfig: &Path) -> CommandLine {
    let mut line = CommandLine::new(binary);
    line.args = vec![
        "kubectl".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "get".into(),
        "nodes".into(),
        "-o".into(),
        "json".into(),
    ];
    line.env_remove_prefixes = vec!["K3S_", "KUBECONFIG"];
    line
}

/// The unit's name for `role`: the official installer's names, so its uninstall scripts and
/// a user's habits (`journalctl -u k3s`) work unchanged.
pub(super) fn unit_name(role: &ClusterRole) -> &'static str {
    match role {
        ClusterRole::Server { .. } => "k3s.service",
        ClusterRole::Agent { .. } => "k3s-agent.service",
    }
}

/// The first line of every unit this installer writes; uninstall removes only units that
/// carry it (never one the official installer wrote while running in child mode).
pub(super) const UNIT_MARK: &str =
    "# Written by continuum-agent (InstallCluster); UninstallCluster removes it.";

/// The systemd unit running `line`, modelled on the official installer's.
pub(super) fn unit_text(role: &ClusterRole, line: &CommandLine, env_file: &Path) -> String {
    let exec: Vec<String> = std::iter::once(line.program.display().to_string())
        .chain(line.args.iter().cloned())
        .map(|word| systemd_quote(&word))
        .collect();
    // The server tells systemd when it is up; the agent has no such notification.
    let service_type = match role {
        ClusterRole::Server { .. } => "notify",
        ClusterRole::Agent { .. } => "exec",
    };
    format!(
        "{UNIT_MARK}\n\
         [Unit]\n\
         Description=Lightweight Kubernetes (k3s {role})\n\
         Documentation=https://k3s.io\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type={service_type}\n\
         EnvironmentFile={env_file}\n\
         # Pods keep running across a restart of k3s itself, as with the official unit.\n\
         KillMode=process\n\
         Delegate=yes\n\
         LimitNOFILE=1048576\n\
         LimitNPROC=infinity\n\
         LimitCORE=infinity\n\
         TasksMax=infinity\n\
         TimeoutStartSec=0\n\
         Restart=always\n\
         RestartSec=5s\n\
         ExecStartPre=-/sbin/modprobe br_netfilter\n\
         ExecStartPre=-/sbin/modprobe overlay\n\
         ExecStart={exec}\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        role = role.name(),
        // EnvironmentFile takes the rest of the line as the path, unquoted.
        env_file = env_file.display().to_string().replace('%', "%%"),
        exec = exec.join(" \\\n    "),
    )
}

/// The EnvironmentFile for `line`'s variables. Values were checked to hold no quote,
/// backslash or `$`, so single quotes keep them literal.
pub(super) fn env_file_text(line: &CommandLine) -> String {
    line.env
        .iter()
        .map(|(name, value)| format!("{name}='{value}'\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn plan(role: ClusterRole) -> ClusterPlan {
        ClusterPlan {
            role,
            token: "K10abc::server:s3cret".into(),
            node_ip: [198, 19, 0, 1].into(),
            flannel_interface: "nebula1".into(),
            node_name: "headnode".into(),
            labels: [("site".to_string(), "lab".to_string())].into(),
        }
    }

    /// The value following `flag`, every time it appears.
    fn values<'a>(line: &'a CommandLine, flag: &str) -> Vec<&'a str> {
        line.args
            .windows(2)
            .filter(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
            .collect()
    }

    #[test]
    fn the_server_line_has_every_flag_and_no_secret() {
        let server = plan(ClusterRole::Server {
            schedule_workloads: false,
        });
        let kubeconfig = PathBuf::from("/var/lib/k3s/kubeconfig.yaml");
        let line = daemon_line(
            Path::new("/usr/local/bin/k3s"),
            &server,
            Path::new("/var/lib/k3s"),
            &kubeconfig,
        );
        assert_eq!(line.args[0], "server");
        assert_eq!(values(&line, "--data-dir"), ["/var/lib/k3s"]);
        assert_eq!(
            values(&line, "--write-kubeconfig"),
            ["/var/lib/k3s/kubeconfig.yaml"]
        );
        assert_eq!(values(&line, "--write-kubeconfig-mode"), ["0600"]);
        assert_eq!(values(&line, "--node-name"), ["headnode"]);
        assert_eq!(values(&line, "--node-ip"), ["198.19.0.1"]);
        assert_eq!(values(&line, "--advertise-address"), ["198.19.0.1"]);
        assert_eq!(values(&line, "--flannel-iface"), ["nebula1"]);
        assert_eq!(
            values(&line, "--node-label"),
            ["continuum.io/role=headnode", "site=lab"]
        );
        assert_eq!(values(&line, "--node-taint"), [CONTROL_PLANE_TAINT]);
        assert_eq!(values(&line, "--disable"), ["traefik"]);
        assert_eq!(line.env_value("K3S_TOKEN"), Some("K10abc::server:s3cret"));
        assert_eq!(line.env_value("K3S_URL"), None);
        assert!(line.args.iter().all(|a| !a.contains("s3cret")));

        let open = plan(ClusterRole::Server {
            schedule_workloads: true,
        });
        let line = daemon_line(Path::new("k3s"), &open, Path::new("/d"), &kubeconfig);
        assert!(values(&line, "--node-taint").is_empty());
    }

    #[test]
    fn the_agent_line_joins_through_the_environment() {
        let url = "https://198.19.0.1:6443";
        let mut agent = plan(ClusterRole::Agent {
            server_url: url.into(),
        });
        agent.node_name = "worker".into();
        let line = daemon_line(
            Path::new("/k3s"),
            &agent,
            Path::new("/d"),
            Path::new("/d/kubeconfig.yaml"),
        );
        assert_eq!(line.args[0], "agent");
        assert_eq!(
            values(&line, "--node-label"),
            ["continuum.io/role=worker", "site=lab"]
        );
        for server_only in [
            "--write-kubeconfig",
            "--advertise-address",
            "--disable",
            "--node-taint",
        ] {
            assert!(
                values(&line, server_only).is_empty(),
                "{server_only} on an agent"
            );
        }
        assert_eq!(line.env_value("K3S_URL"), Some(url));
        assert!(
            line.args
                .iter()
                .all(|a| !a.contains("s3cret") && !a.contains(url))
        );
        assert_eq!(line.env_remove_prefixes, ["K3S_"]);
    }

    #[test]
    fn the_unit_runs_the_line_and_reads_the_secrets_from_its_env_file() {
        let server = plan(ClusterRole::Server {
            schedule_workloads: false,
        });
        let line = daemon_line(
            Path::new("/opt/k 3s/k3s"),
            &server,
            Path::new("/var/lib/k3s"),
            Path::new("/var/lib/k3s/kubeconfig.yaml"),
        );
        let env_file = Path::new("/etc/systemd/system/k3s.service.env");
        let unit = unit_text(&server.role, &line, env_file);
        assert!(unit.starts_with(UNIT_MARK), "{unit}");
        assert!(unit.contains("Type=notify\n"), "{unit}");
        assert!(unit.contains("EnvironmentFile=/etc/systemd/system/k3s.service.env\n"));
        assert!(
            unit.contains("ExecStart=\"/opt/k 3s/k3s\" \\\n    \"server\" \\\n    \"--data-dir\""),
            "{unit}"
        );
        assert!(
            unit.contains(&format!(
                "\"--node-taint\" \\\n    \"{CONTROL_PLANE_TAINT}\""
            )),
            "{unit}"
        );
        assert!(
            unit.contains("KillMode=process\n") && unit.contains("WantedBy=multi-user.target\n")
        );
        assert!(!unit.contains("s3cret"), "the token stays in the env file");
        assert_eq!(env_file_text(&line), "K3S_TOKEN='K10abc::server:s3cret'\n");

        let agent = plan(ClusterRole::Agent {
            server_url: "https://198.19.0.1:6443".into(),
        });
        let line = daemon_line(
            Path::new("/k3s"),
            &agent,
            Path::new("/d"),
            Path::new("/d/k"),
        );
        assert!(unit_text(&agent.role, &line, env_file).contains("Type=exec\n"));
        assert_eq!(
            env_file_text(&line),
            "K3S_TOKEN='K10abc::server:s3cret'\nK3S_URL='https://198.19.0.1:6443'\n"
        );
        assert_eq!(unit_name(&agent.role), "k3s-agent.service");
    }

    /// systemd itself must accept the unit (PID 1 here is not systemd, so the unit is
    /// checked, not started).
    #[test]
    fn systemd_accepts_the_unit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let env_file = dir.path().join("k3s.service.env");
        let server = plan(ClusterRole::Server {
            schedule_workloads: false,
        });
        // verify checks that ExecStart's program exists.
        let line = daemon_line(
            Path::new("/bin/true"),
            &server,
            dir.path(),
            &dir.path().join("kubeconfig.yaml"),
        );
        std::fs::write(&env_file, env_file_text(&line)).expect("env file");
        let unit = dir.path().join("k3s.service");
        std::fs::write(&unit, unit_text(&server.role, &line, &env_file)).expect("unit");
        crate::install::system::assert_systemd_accepts(&unit);
    }
}
