use super::*;

const THREE_NODES: &str = r#"
[[nodes]]
name = "tester"
address = "198.18.0.1"
arch = "x86_64"
role = "tester"
data_interface = "nebula1"
overlay_ip = "198.19.0.1/24"

[[nodes]]
name = "headnode"
address = "198.18.0.2"
arch = "aarch64"
role = "headnode"
data_interface = "nebula1"
overlay_ip = "198.19.0.2/24"

[[nodes]]
name = "worker"
address = "198.18.0.3"
user = "pi"
arch = "aarch64"
role = "worker"
data_interface = "nebula1"
overlay_ip = "198.19.0.3/24"
"#;

fn load(text: &str) -> Result<Loaded, InventoryError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("lab.toml");
    std::fs::write(&path, text).expect("write");
    Loaded::load(&path)
}

fn error_of(text: &str) -> String {
    load(text).expect_err("invalid").to_string()
}

#[test]
fn the_example_inventory_loads_with_defaults_resolved() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/inventory.toml");
    let loaded = Loaded::load(&path).expect("the example is valid");
    assert_eq!(loaded.nodes.len(), 3);
    assert_eq!(loaded.headnode().map(|n| n.name.as_str()), Some("headnode"));
    let worker = &loaded.nodes[2];
    assert_eq!((worker.user.as_str(), worker.port), ("pi", 22));
    assert_eq!(worker.overlay, Some((Ipv4Addr::new(198, 19, 0, 3), 24)));
    assert_eq!(worker.agent, "198.18.0.3:7100".parse().expect("addr"));
    assert!(loaded.state_dir.ends_with(".continuum/inventory"));
    assert!(loaded.has_overlay());
}

#[test]
fn two_headnodes_are_refused_naming_both() {
    let text = THREE_NODES.replace("role = \"worker\"", "role = \"headnode\"");
    let error = error_of(&text);
    assert!(error.contains("nodes[2].role"), "{error}");
    assert!(
        error.contains("node worker is a second headnode (headnode is one already)"),
        "{error}"
    );
}

#[test]
fn a_duplicate_overlay_address_names_both_nodes() {
    let text = THREE_NODES.replace("198.19.0.3/24", "198.19.0.2/24");
    let error = error_of(&text);
    assert!(
        error.contains("lab.toml: nodes[2].overlay_ip = \"198.19.0.2/24\""),
        "{error}"
    );
    assert!(
        error.contains("node worker has the overlay address of node headnode"),
        "{error}"
    );
}

#[test]
fn other_mistakes_name_the_toml_path_and_value() {
    let cases = [
        (
            THREE_NODES.replace("198.19.0.3/24", "198.19.0.3"),
            "nodes[2].overlay_ip",
        ),
        (
            THREE_NODES.replace("198.19.0.3/24", "198.19.1.3/24"),
            "not in the overlay network",
        ),
        (
            THREE_NODES.replace("arch = \"x86_64\"", "arch = \"sparc\""),
            "nodes[0].arch = \"sparc\"",
        ),
        (
            THREE_NODES.replace("name = \"worker\"", "name = \"tester\""),
            "nodes[0] has the same name",
        ),
        (
            THREE_NODES.replace("address = \"198.18.0.3\"", "address = \"worker.lab\""),
            "nodes[2].agent_address",
        ),
        (
            THREE_NODES.replace("address = \"198.18.0.3\"", "address = \"198.18.0.1\""),
            "share its agent address with node tester",
        ),
        (
            THREE_NODES.replace("overlay_ip = \"198.19.0.1/24\"", ""),
            "node tester has no overlay address",
        ),
        (
            THREE_NODES.replace("role = \"headnode\"", "role = \"tester\""),
            "the overlay needs a headnode",
        ),
        (
            THREE_NODES.replace(
                "data_interface = \"nebula1\"\noverlay_ip = \"198.19.0.1/24\"",
                "data_interface = \"a-very-long-interface\"\noverlay_ip = \"198.19.0.1/24\"",
            ),
            "nodes[0].data_interface",
        ),
        (
            format!("[agent]\nbinaries = {{ mips = \"x\" }}\n{THREE_NODES}"),
            "agent.binaries.mips",
        ),
        (format!("colour = 1\n{THREE_NODES}"), "colour"),
        ("nodes = []".to_string(), "list at least one node"),
        (
            THREE_NODES.replace("user = \"pi\"", "user = \"-oProxyCommand=touch /tmp/x\""),
            "nodes[2].user",
        ),
        (
            THREE_NODES.replace("address = \"198.18.0.1\"", "address = \"-oProxyCommand=x\""),
            "nodes[0].address",
        ),
        (
            format!("[ssh]\nuser = \"a b\"\n{THREE_NODES}"),
            "ssh.user = \"a b\"",
        ),
        (
            THREE_NODES.replacen(
                "data_interface = \"nebula1\"",
                "data_interface = \"eth0:1\"",
                1,
            ),
            "nodes[0].data_interface = \"eth0:1\"",
        ),
        (
            THREE_NODES.replacen(
                "arch = \"x86_64\"",
                "arch = \"x86_64\"\nagent_address = \"198.18.0.2\"",
                1,
            ),
            "share its agent address",
        ),
        (
            THREE_NODES.replacen(
                "arch = \"x86_64\"",
                "arch = \"x86_64\"\nmetrics_listen = \"0.0.0.0:7100\"",
                1,
            ),
            "nodes[0].metrics_listen = 0.0.0.0:7100",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(
            error.contains(expected),
            "expected {expected:?} in: {error}"
        );
        assert!(
            error.starts_with(&std::env::temp_dir().display().to_string()),
            "names the file: {error}"
        );
    }
}

#[test]
fn relative_key_paths_resolve_against_the_inventory() {
    let loaded = load(&format!(
        "[ssh]\nkey = \"keys/id\"\nknown_hosts = \"~/kh\"\n{THREE_NODES}"
    ))
    .expect("valid");
    let key = loaded.inventory.ssh.key.expect("key");
    assert!(
        key.is_absolute() && key.ends_with("keys/id"),
        "{}",
        key.display()
    );
    assert_eq!(
        loaded.inventory.ssh.known_hosts,
        Some(PathBuf::from("~/kh"))
    );
}
