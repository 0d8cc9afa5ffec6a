//! What the service decides, never a submitted plan: where results go, which PKI reaches the
//! agents, which nodes (and local agents) exist, which external brokers and CA files plans
//! may use, which testbed (Nebula, k3s) its nodes have, and how much each client may queue
//! and keep. A submitted plan only chooses among these: one that sets a path, names a node,
//! an external broker, a CA or a testbed the server does not have (or describes one
//! differently) or sets a WebSocket path is refused before anything is created.
//!
//! Admission only compares text with the configuration: it never resolves or dials an
//! address and never opens a file a plan names, and its refusals do not echo a plan's
//! addresses or paths, so a refusal reads the same whether an address answers, refuses or
//! does not resolve, and whether a path exists or not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use loadgen::spec::DEFAULT_WEBSOCKET_PATH;

use crate::plan::{BrokerEntry, BrokerKind, NodeEntry, Orchestrator, Overlay, Plan, TestbedEntry};

/// Runs one client may have queued or running at once.
pub const MAX_ACTIVE_PER_CLIENT: usize = 4;
/// Ended runs the service remembers per client (their folders stay on disk).
pub const MAX_HISTORY_PER_CLIENT: usize = 32;

/// Plan keys that name paths or listeners on the server: the service decides them.
const SERVER_PATHS: [&str; 3] = ["results_dir", "pki_dir", "metrics"];

/// The service's own configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Every run writes into `<results_dir>/<run id>/`.
    pub results_dir: PathBuf,
    /// The PKI the runs reach remote agents (and k3s's token) with.
    pub pki_dir: PathBuf,
    /// The nodes plans may use, as `[[nodes]]` entries.
    pub nodes: Vec<NodeEntry>,
    /// The external brokers plans may measure (`[[external_brokers]]`).
    pub external_brokers: Vec<ServedBroker>,
    /// The CA files plans may name, by name (`[ca_files]`, name = path): a test's
    /// `broker.tls_ca_file = "<name>"` becomes the path, which the loadgen nodes read (this
    /// machine for local and namespace nodes, where it is checked at start; a remote
    /// agent's own disk otherwise).
    pub ca_files: BTreeMap<String, PathBuf>,
    /// The testbed (Nebula, k3s) the operator set up on the nodes (`[testbed]` as in a
    /// plan); a plan that installs one must describe exactly this one. None: no plan may.
    pub testbed: Option<TestbedEntry>,
}

/// An external broker the service offers (`[[external_brokers]]` in the nodes file). A plan
/// measures it with a `[[brokers]]` entry of kind `"external"` that has its `name`,
/// `address`, `websocket_address` and `quic_address`; its tests speaking WebSocket use
/// `websocket_path`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServedBroker {
    /// The name plans give it.
    pub name: String,
    /// `host:port` of its MQTT listener.
    pub address: String,
    /// `host:port` of its MQTT-over-WebSocket listener, if it has one.
    #[serde(default)]
    pub websocket_address: Option<String>,
    /// The request path of its WebSocket listener; loadgen's default (`/mqtt`) when absent.
    #[serde(default)]
    pub websocket_path: Option<String>,
    /// `host:port` (UDP) of its MQTT-over-QUIC listener, if it has one.
    #[serde(default)]
    pub quic_address: Option<String>,
}

impl ServedBroker {
    /// The WebSocket path its tests use.
    fn websocket_path(&self) -> &str {
        self.websocket_path
            .as_deref()
            .unwrap_or(DEFAULT_WEBSOCKET_PATH)
    }
}

/// The nodes file: `[[nodes]]` tables as in a plan, and optionally `[[external_brokers]]`,
/// `[ca_files]` and `[testbed]` (other keys are ignored, so a plan file itself can serve as
/// one).
#[derive(Debug, serde::Deserialize)]
struct NodesFile {
    #[serde(default)]
    nodes: Vec<NodeEntry>,
    #[serde(default)]
    external_brokers: Vec<ServedBroker>,
    #[serde(default)]
    ca_files: BTreeMap<String, PathBuf>,
    #[serde(default)]
    testbed: Option<TestbedEntry>,
}

impl ServeConfig {
    /// The configuration with the nodes, external brokers and CA files read from
    /// `nodes_file`. Every CA file is read (capped, regular files only) and must hold a
    /// certificate, so a bad one stops the service at its start, not a client's run.
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
        check_external_brokers(&parsed.external_brokers).map_err(|e| format!("{shown}: {e}"))?;
        for (name, path) in &parsed.ca_files {
            if !is_ca_name(name) {
                return Err(format!(
                    "{shown}: ca_files.{name}: a CA's name has 1 to 64 letters, digits, '-' \
                     or '_' (plans name it instead of a path)"
                ));
            }
            loadgen::transport::ca_roots(path)
                .map_err(|reason| format!("{shown}: ca_files.{name}: {reason}"))?;
        }
        Ok(ServeConfig {
            results_dir,
            pki_dir,
            nodes: parsed.nodes,
            external_brokers: parsed.external_brokers,
            ca_files: parsed.ca_files,
            testbed: parsed.testbed,
        })
    }

    /// `plan` as the service runs it, or why it is refused (one line naming the TOML path):
    /// paths are the server's; every node and external broker the plan names must be one of
    /// the server's, described exactly as the server has it; CA files are named from the
    /// server's `ca_files`; WebSocket paths are the server's, and so is the testbed.
    pub fn admit(&self, mut plan: Plan, text: &str) -> Result<Plan, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        for key in SERVER_PATHS {
            if table.contains_key(key) {
                return Err(if key == "metrics" {
                    "metrics: a submitted plan may not open a listener on the service's host \
                     (remove it)"
                        .to_string()
                } else {
                    format!("{key}: set by the service, not by a submitted plan (remove it)")
                });
            }
        }
        admit_password_sources(&plan)?;
        self.admit_testbed(&plan)?;
        self.admit_nodes(&plan)?;
        self.admit_external_brokers(&plan)?;
        self.admit_workloads(&mut plan)?;
        plan.results_dir = self.results_dir.clone();
        plan.metrics = None;
        plan.pki_dir = Some(self.pki_dir.clone());
        Ok(plan)
    }

    /// A plan installs Nebula or k3s only as the operator set them up (then the installs
    /// find them in place); none at all on a service without a `[testbed]`.
    fn admit_testbed(&self, plan: &Plan) -> Result<(), String> {
        let installs = plan.testbed.overlay != Overlay::None
            || plan.testbed.orchestrator != Orchestrator::None;
        if !installs || self.testbed.as_ref() == Some(&plan.testbed) {
            return Ok(());
        }
        let key = if plan.testbed.overlay != Overlay::None {
            "overlay"
        } else {
            "orchestrator"
        };
        Err(match &self.testbed {
            None => format!(
                "testbed.{key}: the service's testbed (Nebula, k3s) is installed by its \
                 operator, never by a submitted plan, and this service has none (remove it)"
            ),
            Some(_) => "testbed: differs from the service's [testbed], which its operator \
                 set up; use it as the service describes it or remove it"
                .to_string(),
        })
    }

    fn admit_nodes(&self, plan: &Plan) -> Result<(), String> {
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
        Ok(())
    }

    /// Every external broker is one of the server's, at the server's addresses. The plan's
    /// addresses are compared, never echoed.
    fn admit_external_brokers(&self, plan: &Plan) -> Result<(), String> {
        for (b, broker) in plan.brokers.iter().enumerate() {
            if broker.kind != BrokerKind::External {
                continue;
            }
            let Some(served) = self.served(broker) else {
                let known: Vec<&str> = self
                    .external_brokers
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect();
                return Err(format!(
                    "brokers[{b}] ({:?}): not an external broker of this service (it has: {}); \
                     external brokers and their addresses are the service's",
                    broker.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ));
            };
            if broker.address.as_deref() != Some(served.address.as_str())
                || broker.websocket_address != served.websocket_address
                || broker.quic_address != served.quic_address
            {
                let shown = |address: Option<&str>| {
                    address.map_or("absent".to_string(), |a| format!("{a:?}"))
                };
                return Err(format!(
                    "brokers[{b}] ({:?}): differs from the service's external broker of that \
                     name; use it as the service describes it (address = {:?}, \
                     websocket_address = {}, quic_address = {})",
                    broker.name,
                    served.address,
                    shown(served.websocket_address.as_deref()),
                    shown(served.quic_address.as_deref()),
                ));
            }
        }
        Ok(())
    }

    /// The server's external broker that `broker` names, if any.
    fn served(&self, broker: &BrokerEntry) -> Option<&ServedBroker> {
        self.external_brokers.iter().find(|e| e.name == broker.name)
    }

    /// Workload fields that reach the server's machine: no WebSocket path (the server's
    /// external broker's own is set here), CA files named from `ca_files` and set to their
    /// paths here.
    fn admit_workloads(&self, plan: &mut Plan) -> Result<(), String> {
        let websocket_path = self.websocket_path(plan)?;
        let websocket_tests = plan.websocket_tests();
        for (i, test) in plan.tests.iter_mut().enumerate() {
            // Named as the plan file numbers it (a transports sweep unrolls tests).
            let file_test = test.unrolled_from.unwrap_or(i);
            // A test speaking WebSocket says so in its workload, so it has one.
            let Some(workload) = test.workload.as_mut() else {
                continue;
            };
            if let Some(broker) = workload
                .get_mut("broker")
                .and_then(toml::Value::as_table_mut)
            {
                if broker.contains_key("websocket_path") {
                    return Err(format!(
                        "tests[{file_test}].workload.broker.websocket_path: WebSocket paths are the \
                         service's (its external brokers' own, the products' for the others); \
                         remove it"
                    ));
                }
                if let Some(value) = broker.get_mut("tls_ca_file") {
                    let path = value
                        .as_str()
                        .and_then(|name| self.ca_files.get(name))
                        .ok_or_else(|| self.ca_refusal(file_test))?;
                    *value = toml::Value::String(path.display().to_string());
                }
            }
            if let Some(path) = websocket_path
                .as_deref()
                .filter(|_| websocket_tests.contains(&i))
            {
                set_websocket_path(workload, path);
            }
        }
        Ok(())
    }

    fn ca_refusal(&self, test: usize) -> String {
        let known: Vec<&str> = self.ca_files.keys().map(String::as_str).collect();
        format!(
            "tests[{test}].workload.broker.tls_ca_file: name one of this service's CAs \
             (it has: {}), not a path",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )
    }

    /// The WebSocket path the plan's tests are given: that of the server's external brokers
    /// in the plan which set one, when the plan has tests speaking WebSocket. Every broker of
    /// such a plan must serve that path, since a test's path applies to all of them.
    fn websocket_path(&self, plan: &Plan) -> Result<Option<String>, String> {
        if plan.websocket_tests().is_empty() {
            return Ok(None);
        }
        let Some(chosen) = plan
            .brokers
            .iter()
            .filter(|b| b.kind == BrokerKind::External)
            .filter_map(|b| self.served(b))
            .find(|served| served.websocket_path.is_some())
        else {
            return Ok(None);
        };
        for (b, broker) in plan.brokers.iter().enumerate() {
            let path = match broker.kind {
                BrokerKind::External => self.served(broker).map(ServedBroker::websocket_path),
                _ => broker
                    .product()
                    .and_then(|product| recipes::websocket_path(product).ok()),
            };
            if path.is_some_and(|path| path != chosen.websocket_path()) {
                return Err(format!(
                    "brokers[{b}] ({:?}): serves WebSocket on another path than the service's \
                     external broker {:?}, whose path every test speaking WebSocket takes; \
                     measure them in plans of their own",
                    broker.name, chosen.name
                ));
            }
        }
        Ok(Some(chosen.websocket_path().to_string()))
    }
}

/// A submitted plan gives a broker password inline or not at all: `password_file` and
/// `password_env` would read the server's files and environment (the plan's validation does
/// not read them; the operator's own runs do, see [`Plan::read_credentials`]).
fn admit_password_sources(plan: &Plan) -> Result<(), String> {
    for (i, test) in plan.tests.iter().enumerate() {
        let Some(broker) = test
            .workload
            .as_ref()
            .and_then(|table| table.get("broker"))
            .and_then(toml::Value::as_table)
        else {
            continue;
        };
        if let Some(key) = ["password_file", "password_env"]
            .into_iter()
            .find(|key| broker.contains_key(*key))
        {
            return Err(format!(
                "tests[{}].workload.broker.{key}: would read the server's files or \
                 environment; a submitted plan gives the password inline (remove it)",
                plan.file_test(i)
            ));
        }
    }
    Ok(())
}

fn set_websocket_path(workload: &mut toml::Table, path: &str) {
    let broker = workload
        .entry("broker")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(broker) = broker.as_table_mut() {
        broker.insert(
            "websocket_path".to_string(),
            toml::Value::String(path.to_string()),
        );
    }
}

/// A CA's name in `[ca_files]`: short, and never mistaken for a path.
fn is_ca_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The server's external brokers: unique names, `host:port` addresses, WebSocket paths that
/// start with `/` and hold only printable ASCII.
fn check_external_brokers(brokers: &[ServedBroker]) -> Result<(), String> {
    for (i, broker) in brokers.iter().enumerate() {
        let at = format!("external_brokers[{i}] ({:?})", broker.name);
        if brokers[..i].iter().any(|b| b.name == broker.name) {
            return Err(format!("{at}: a second broker of that name"));
        }
        for (key, address) in [
            ("address", Some(&broker.address)),
            ("websocket_address", broker.websocket_address.as_ref()),
            ("quic_address", broker.quic_address.as_ref()),
        ] {
            let Some(address) = address else { continue };
            let valid = address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(format!("{at}.{key} = {address:?}: needs host:port"));
            }
        }
        if let Some(path) = &broker.websocket_path
            && (!path.starts_with('/') || !path.chars().all(|c| c.is_ascii_graphic()))
        {
            return Err(format!(
                "{at}.websocket_path = {path:?}: a request path such as \"/mqtt\""
            ));
        }
    }
    Ok(())
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

    /// A service with [`NODES`], one external broker and one CA (a real certificate).
    fn config_with_extras(dir: &Path) -> ServeConfig {
        let pki = dir.join("pki");
        ::tests::pki::TestPki::create(&pki, &[]).expect("a PKI");
        let file = dir.join("nodes.toml");
        let extras = format!(
            r#"{NODES}
[[external_brokers]]
name = "lab"
address = "127.0.0.1:1883"
websocket_address = "127.0.0.1:8080"
websocket_path = "/ws"

[ca_files]
lab-ca = "{}"
"#,
            pki.join("ca.pem").display()
        );
        std::fs::write(&file, extras).expect("written");
        ServeConfig::with_nodes_file("/srv/results".into(), "/srv/pki".into(), &file)
            .expect("a nodes file")
    }

    /// A plan measuring `broker` (a `[[brokers]]` table's body) with a latency test whose
    /// `[tests.workload.broker]` is `workload_broker`.
    fn external_plan(broker: &str, workload_broker: &str) -> String {
        format!(
            r#"name = "p"
{NODES}
[[brokers]]
{broker}
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["local"]
[tests.workload.broker]
{workload_broker}
"#
        )
    }

    const LAB: &str = r#"name = "lab"
kind = "external"
address = "127.0.0.1:1883"
websocket_address = "127.0.0.1:8080""#;

    #[test]
    fn the_servers_external_broker_gets_its_websocket_path_and_a_named_ca_its_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = config_with_extras(dir.path());
        let text = external_plan(LAB, "transport = \"websocket\"\ntls_ca_file = \"lab-ca\"");
        let plan = admit(&config, &text).expect("admitted");
        let spec = crate::plan::workload_for(&plan.tests[0], None, None).expect("a workload");
        assert_eq!(spec.broker.websocket_path.as_deref(), Some("/ws"));
        assert_eq!(spec.broker.tls_ca_file, Some(dir.path().join("pki/ca.pem")));
    }

    #[test]
    fn external_brokers_ca_paths_websocket_paths_and_testbeds_are_refused_in_one_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = config_with_extras(dir.path());
        let cases = [
            (
                external_plan(&LAB.replace("\"lab\"", "\"mine\""), "protocol = \"5\""),
                "brokers[0] (\"mine\"): not an external broker of this service (it has: lab)",
            ),
            (
                external_plan(
                    &LAB.replace("127.0.0.1:1883", "198.51.100.7:1883"),
                    "protocol = \"5\"",
                ),
                "brokers[0] (\"lab\"): differs from the service's external broker",
            ),
            (
                // A QUIC address of the plan's own: the server would send UDP where it says.
                external_plan(
                    &format!("{LAB}\nquic_address = \"198.51.100.7:14567\""),
                    "transport = \"quic\"\ntls_ca_file = \"lab-ca\"",
                ),
                "brokers[0] (\"lab\"): differs from the service's external broker of that name; \
                 use it as the service describes it (address = \"127.0.0.1:1883\", \
                 websocket_address = \"127.0.0.1:8080\", quic_address = absent)",
            ),
            (
                external_plan(
                    LAB,
                    "transport = \"websocket\"\nwebsocket_path = \"/latest/meta-data/\"",
                ),
                "tests[0].workload.broker.websocket_path: WebSocket paths are the service's",
            ),
            (
                external_plan(LAB, "tls_ca_file = \"/etc/shadow\""),
                "tests[0].workload.broker.tls_ca_file: name one of this service's CAs \
                 (it has: lab-ca), not a path",
            ),
            (
                external_plan(LAB, "tls_ca_file = \"other-ca\""),
                "tests[0].workload.broker.tls_ca_file: name one of this service's CAs",
            ),
        ];
        for (text, expected) in cases {
            let refused = admit(&config, &text).expect_err(expected);
            assert!(
                refused.starts_with(expected),
                "{refused}\nexpected {expected}"
            );
            assert!(!refused.contains('\n'), "{refused}");
            for echoed in ["198.51.100.7", "/etc/shadow", "meta-data"] {
                assert!(!refused.contains(echoed), "{refused}");
            }
        }
        let testbed = TESTBED_PLAN;
        let refused = admit(&config, testbed).expect_err("a testbed install");
        assert!(refused.starts_with("testbed.overlay: "), "{refused}");
    }

    #[test]
    fn password_files_and_variables_are_refused_in_one_line_that_reads_the_same_either_way() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = config_with_extras(dir.path());
        let existing = dir.path().join("password");
        std::fs::write(&existing, "hunter2\n").expect("written");
        let refusal = |source: String| {
            let text = external_plan(LAB, &format!("username = \"bob\"\n{source}"));
            let refused = admit(&config, &text).expect_err(&source);
            assert!(!refused.contains('\n'), "{refused}");
            assert!(!refused.contains("hunter2"), "{refused}");
            refused
        };
        let file = refusal(format!("password_file = {existing:?}"));
        assert!(
            file.starts_with("tests[0].workload.broker.password_file: would read the server's"),
            "{file}"
        );
        assert!(!file.contains(&existing.display().to_string()), "{file}");
        let missing = refusal("password_file = \"/nonexistent/password\"".to_string());
        assert_eq!(missing, file, "a missing file reads like an existing one");
        let variable = refusal("password_env = \"HOME\"".to_string());
        assert!(
            variable.starts_with("tests[0].workload.broker.password_env: would read the server's"),
            "{variable}"
        );
        assert_eq!(
            refusal("password_env = \"CONTINUUM_SURELY_UNSET_7f3a\"".to_string()),
            variable,
            "an unset variable reads like a set one"
        );
        let inline = external_plan(LAB, "username = \"bob\"\npassword = \"hunter2\"");
        let plan = admit(&config, &inline).expect("an inline password is the client's own");
        let spec = crate::plan::workload_for(&plan.tests[0], None, None).expect("a workload");
        assert_eq!(spec.broker.password.as_deref(), Some("hunter2"));
    }

    /// A plan on two remote nodes over Nebula, `h` its headnode.
    const TESTBED_PLAN: &str = r#"name = "p"
[testbed]
overlay = "nebula"
headnode = "h"
[[nodes]]
name = "h"
agent = "192.0.2.1:7100"
roles = ["loadgen"]
overlay_ip = "198.19.0.1/24"
[[nodes]]
name = "w"
agent = "192.0.2.2:7100"
roles = ["loadgen", "broker"]
overlay_ip = "198.19.0.2/24"
[[brokers]]
name = "embedded"
kind = "embedded"
node = "w"
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["w"]
"#;

    #[test]
    fn a_testbed_is_admitted_only_as_the_service_has_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("nodes.toml");
        // The plan itself as the nodes file: its nodes and its [testbed] are the service's.
        std::fs::write(&file, TESTBED_PLAN).expect("written");
        let config = ServeConfig::with_nodes_file("r".into(), "p".into(), &file).expect("config");
        admit(&config, TESTBED_PLAN).expect("the service's own testbed");
        let other =
            TESTBED_PLAN.replace("headnode = \"h\"", "headnode = \"h\"\nnebula_port = 4343");
        let refused = admit(&config, &other).expect_err("another testbed");
        assert!(
            refused.starts_with("testbed: differs from the service's [testbed]"),
            "{refused}"
        );
    }

    #[test]
    fn a_ca_file_that_is_not_a_small_regular_certificate_file_stops_the_service_at_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("nodes.toml");
        for (ca_files, expected) in [
            (
                "zero = \"/dev/zero\"",
                "ca_files.zero: /dev/zero: not a regular file",
            ),
            ("dir = \"/\"", "ca_files.dir: /: not a regular file"),
            ("\"../x\" = \"/dev/null\"", "ca_files.../x: a CA's name"),
        ] {
            std::fs::write(&file, format!("{NODES}\n[ca_files]\n{ca_files}\n")).expect("written");
            let error =
                ServeConfig::with_nodes_file("r".into(), "p".into(), &file).expect_err(ca_files);
            assert!(error.contains(expected), "{error}");
        }
        std::fs::write(
            &file,
            format!("{NODES}\n[[external_brokers]]\nname = \"x\"\naddress = \"nowhere\"\n"),
        )
        .expect("written");
        let error =
            ServeConfig::with_nodes_file("r".into(), "p".into(), &file).expect_err("no port");
        assert!(
            error.contains("external_brokers[0] (\"x\").address"),
            "{error}"
        );
    }

    #[test]
    fn the_guides_study_served_by_its_own_file_is_admitted() {
        // docs/remote.md: `controller serve --nodes examples/study.toml`, then the study submitted
        // without its pki_dir: its nodes, kubernetes brokers and [testbed] are the service's.
        let study = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/study.toml");
        let config = ServeConfig::with_nodes_file("r".into(), "p".into(), &study).expect("config");
        let text = std::fs::read_to_string(&study).expect("the study");
        let submitted: String = text
            .lines()
            .filter(|line| !line.starts_with("pki_dir"))
            .map(|line| format!("{line}\n"))
            .collect();
        let plan = admit(&config, &submitted).expect("admitted");
        assert_eq!(plan.testbed.orchestrator, Orchestrator::K3s);
    }
}
