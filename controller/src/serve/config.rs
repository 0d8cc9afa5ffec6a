//! What the service decides, never a submitted plan: where results go, which PKI reaches the
//! agents, which nodes (and local agents) exist, and how much each client may queue and keep.
//! A submitted plan only chooses among these: one that sets a path or names a node the
//! server does not have (or describes it differently) is refused before anything is created.

use std::path::{Path, PathBuf};

use crate::plan::{NodeEntry, Plan};

/// Runs one client may have queued or running at once.
pub const MAX_ACTIVE_PER_CLIENT: usize = 4;
/// Ended runs the service remembers per client (their folders stay on disk).
pub const MAX_HISTORY_PER_CLIENT: usize = 32;

/// Plan keys that name paths on the server: the service sets them.
const SERVER_PATHS: [&str; 2] = ["results_dir", "pki_dir"];

/// The service's own configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Every run writes into `<results_dir>/<run id>/`.
    pub results_dir: PathBuf,
    /// The PKI the runs reach remote agents (and k3s's token) with.
    pub pki_dir: PathBuf,
    /// The nodes plans may use, as `[[nodes]]` entries.
    pub nodes: Vec<NodeEntry>,
}

/// The nodes file: `[[nodes]]` tables as in a plan (other keys are ignored, so a plan file
/// itself can serve as one).
#[derive(Debug, serde::Deserialize)]
struct NodesFile {
    #[serde(default)]
    nodes: Vec<NodeEntry>,
}

impl ServeConfig {
    /// The configuration with the nodes read from `nodes_file` (`[[nodes]]` tables).
    pub fn with_nodes_file(
        results_dir: PathBuf,
        pki_dir: PathBuf,
        nodes_file: &Path,
    ) -> Result<Self, String> {
        let shown = nodes_file.display();
        let text = std::fs::read_to_string(nodes_file).map_err(|e| format!("{shown}: {e}"))?;
        let parsed: NodesFile = toml::from_str(&text).map_err(|e| format!("{shown}: {e}"))?;
        if parsed.nodes.is_empty() {
            return Err(format!(
                "{shown}: no [[nodes]]: plans would have nothing to run on"
            ));
        }
        Ok(ServeConfig {
            results_dir,
            pki_dir,
            nodes: parsed.nodes,
        })
    }

    /// `plan` as the service runs it, or why it is refused (one line naming the TOML path):
    /// paths are the server's, and every node the plan names must be one of the server's,
    /// described exactly as the server has it.
    pub fn admit(&self, mut plan: Plan, text: &str) -> Result<Plan, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        for key in SERVER_PATHS {
            if table.contains_key(key) {
                return Err(format!(
                    "{key}: set by the service, not by a submitted plan (remove it)"
                ));
            }
        }
        for (i, node) in plan.nodes.iter().enumerate() {
            match self.nodes.iter().find(|known| known.name == node.name) {
                None => {
                    let known: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
                    return Err(format!(
                        "nodes[{i}].name = {:?}: not a node of this service (it has: {})",
                        node.name,
                        known.join(", ")
                    ));
                }
                Some(known) if known != node => {
                    return Err(format!(
                        "nodes[{i}] ({:?}): differs from the service's node of that name \
                         (agent {}, roles {:?}); use it as the service describes it",
                        node.name, known.agent, known.roles
                    ));
                }
                Some(_) => {}
            }
        }
        plan.results_dir = self.results_dir.clone();
        plan.pki_dir = Some(self.pki_dir.clone());
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = r#"
[[nodes]]
name = "local"
agent = "local"
roles = ["loadgen", "broker"]
"#;

    fn plan_text(extra_top: &str, nodes: &str) -> String {
        format!(
            r#"name = "p"
{extra_top}
{nodes}
[[brokers]]
name = "embedded"
kind = "embedded"
node = "local"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["local"]
"#
        )
    }

    fn config() -> ServeConfig {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("nodes.toml");
        std::fs::write(&file, NODES).expect("written");
        ServeConfig::with_nodes_file("/srv/results".into(), "/srv/pki".into(), &file)
            .expect("a nodes file")
    }

    fn admit(config: &ServeConfig, text: &str) -> Result<Plan, String> {
        let plan = Plan::parse(text, "plan.toml").expect("a valid plan");
        config.admit(plan, text)
    }

    #[test]
    fn a_plan_on_the_servers_nodes_gets_the_servers_paths() {
        let config = config();
        let plan = admit(&config, &plan_text("", NODES)).expect("admitted");
        assert_eq!(plan.results_dir, Path::new("/srv/results"));
        assert_eq!(plan.pki_dir.as_deref(), Some(Path::new("/srv/pki")));
    }

    #[test]
    fn paths_and_unknown_or_changed_nodes_are_refused_naming_the_key() {
        let config = config();
        for key in ["results_dir = \"/etc\"", "pki_dir = \"/root\""] {
            let refused = admit(&config, &plan_text(key, NODES)).expect_err(key);
            assert!(refused.contains("set by the service"), "{refused}");
        }
        let other = NODES.replace("\"local\"\nagent", "\"elsewhere\"\nagent");
        let refused = admit(
            &config,
            &plan_text("", &other)
                .replace("node = \"local\"", "node = \"elsewhere\"")
                .replace("loadgen = [\"local\"]", "loadgen = [\"elsewhere\"]"),
        )
        .expect_err("unknown node");
        assert!(
            refused.starts_with("nodes[0].name = \"elsewhere\""),
            "{refused}"
        );
        let moved = NODES.replace("agent = \"local\"", "agent = \"192.0.2.1:7100\"");
        let refused = admit(&config, &plan_text("", &moved)).expect_err("moved node");
        assert!(
            refused.contains("differs from the service's node"),
            "{refused}"
        );
    }

    #[test]
    fn a_nodes_file_without_nodes_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("nodes.toml");
        std::fs::write(&file, "").expect("written");
        let error = ServeConfig::with_nodes_file("r".into(), "p".into(), &file).expect_err("empty");
        assert!(error.contains("no [[nodes]]"), "{error}");
    }
}
