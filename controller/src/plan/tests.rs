//! Plan parsing and validation against the shipped examples and bad input.

use super::*;
use loadgen::spec::QuicStreams;

fn examples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn the_shipped_plans_are_valid() {
    let study = Plan::load(&examples().join("study.toml")).expect("study.toml");
    assert_eq!(
        (
            study.brokers.len(),
            study.scenarios.len(),
            study.tests.len(),
            study.repetitions
        ),
        (5, 3, 5, 10)
    );
    // 5 tests: latency (1 point), payload (3), burst (8), throughput (4), saturation (2)
    // -> 18 points x 10 reps per scenario.
    assert_eq!(study.cells().len(), 5 * 3 * 18 * 10);
    let quickstart = Plan::load(&examples().join("quickstart.toml")).expect("quickstart.toml");
    // The study's two nodes, emulated where this machine can, else on loopback.
    assert!(quickstart.nodes.iter().all(NodeEntry::is_namespace));
    assert_eq!(quickstart.testbed.fallback, Fallback::Local);
    assert_eq!(quickstart.cells_of(0, 0).len(), (1 + 3 + 2 + 1) * 2);
    let emulated = Plan::load(&examples().join("emulated.toml")).expect("emulated.toml");
    assert!(emulated.nodes.iter().all(NodeEntry::is_namespace));
    // Every scenario of every broker runs: the nodes have a link to emulate.
    assert_eq!(emulated.cells().len(), 2 * 3 * 2 * 3);
    let fleet = Plan::load(&examples().join("fleet.toml")).expect("fleet.toml");
    // 3 brokers x 1 scenario x 5 tests x 2 repetitions.
    assert_eq!(fleet.cells().len(), 3 * 5 * 2);
    let suite = Plan::load(&examples().join("suite.toml")).expect("suite.toml");
    // 3 brokers x 1 scenario x the suite's 4 scenarios x 2 repetitions.
    assert_eq!(suite.cells().len(), 3 * 4 * 2);
    let kinds: Vec<&str> = suite.tests.iter().map(|t| t.kind.name()).collect();
    assert_eq!(kinds, ["p2p", "fan-out", "fan-in-shared", "connections"]);
}

/// The 1-based number of the first line of `text` that starts with `start`.
fn line_starting(text: &str, start: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(start))
        .expect("the line")
        + 1
}

fn error_of(text: &str) -> String {
    Plan::parse(text, "plan.toml")
        .expect_err("invalid")
        .to_string()
}

const BASE: &str = r#"
name = "t"
[[nodes]]
name = "n"
agent = "local"
roles = ["loadgen", "broker"]
[[scenarios]]
name = "local"
[[tests]]
kind = "latency"
loadgen = ["n"]
"#;

#[test]
fn every_error_names_the_file_path_and_value() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\n";
    let cases = [
        (
            format!("{BASE}{broker}product = \"nanomq\"\n"),
            "plan.toml: brokers[0].product = \"nanomq\": unknown broker",
        ),
        (
            format!("{BASE}{broker}product = \"mosquitto\"\ncolour = 1\n"),
            "unknown field `colour`",
        ),
        (
            format!(
                "{BASE}{broker}product = \"mosquitto\"\n[[scenarios]]\nname = \"x\"\ndelay = \"1ms\"\njitter = \"0ms\"\nloss_percent = 200.0\n"
            ),
            "plan.toml: scenarios[1].loss_percent = 200: a percentage is between 0 and 100",
        ),
        (
            format!(
                "{}{broker}product = \"mosquitto\"\n",
                BASE.replace("roles = [\"loadgen\", \"broker\"]", "roles = [\"broker\"]")
            ),
            "plan.toml: tests[0].loadgen = \"n\": that node does not have the loadgen role",
        ),
        (
            format!("{BASE}{broker}product = \"mosquitto\"\n[[scenarios]]\nname = \"moon\"\n"),
            "scenarios[1].name = \"moon\": not a preset",
        ),
        (
            format!(
                "{}[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"m\"\n",
                BASE
            ),
            "brokers[0].node = \"m\": no such node",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
    let zero_clients = format!(
        "{BASE}[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n[[tests]]\nkind = \"throughput\"\nloadgen = [\"n\"]\nclients = [0]\n"
    );
    assert!(
        error_of(&zero_clients).contains("tests[1].clients = 0"),
        "{}",
        error_of(&zero_clients)
    );
}

#[test]
fn timed_tests_refuse_zeros_and_counts_naming_the_path() {
    let embedded = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let test = |body: &str| format!("{BASE}{embedded}[[tests]]\nloadgen = [\"n\"]\n{body}");
    let cases = [
        (
            "kind = \"throughput\"\nduration = \"0s\"\n",
            "plan.toml: tests[1].duration = 0s: must be above zero",
        ),
        (
            "kind = \"throughput\"\nrate = 0\n",
            "plan.toml: tests[1].rate = 0: an offered rate must be above zero",
        ),
        (
            "kind = \"throughput\"\nmessages = 1000\n",
            "tests[1].messages = 1000: a throughput test runs for a time, not a count",
        ),
        (
            "kind = \"throughput\"\nwarmup = 100\n",
            "tests[1].warmup = 100: a throughput test warms up for a time",
        ),
        (
            "kind = \"saturation\"\n[tests.search]\np99_bound = \"0s\"\n",
            "plan.toml: tests[1].search.p99_bound = 0s: a latency bound of zero admits nothing",
        ),
        (
            "kind = \"saturation\"\n[tests.search]\nbudget = \"0s\"\n",
            "plan.toml: tests[1].search.budget = 0s: a search needs a time budget above zero",
        ),
        (
            "kind = \"saturation\"\n[tests.search]\nbudget = \"10m\"\n",
            "timeouts.cell = 10m: tests[1] (saturation) needs 10m and 30s more",
        ),
        (
            "kind = \"latency\"\nduration = \"10s\"\n",
            "tests[1].duration = 10s: a latency test has no duration",
        ),
        (
            "kind = \"burst\"\nsearch = { budget = \"10s\" }\n",
            "tests[1].search = {..}: only a saturation test has search settings",
        ),
    ];
    for (body, expected) in cases {
        let error = error_of(&test(body));
        assert_eq!(error.lines().count(), 1, "one line: {error}");
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
    // The defaults are valid: a sustained test and a search within the default cell deadline.
    let fine = test("kind = \"throughput\"\nclients = [10]\nrate = 5000\nwarmup = \"1s\"\n");
    Plan::parse(&fine, "plan.toml").expect("a sustained test");
    let fine = test("kind = \"saturation\"\nclients = [10]\n");
    Plan::parse(&fine, "plan.toml").expect("a search");
}

/// The sizes and names that aborted a server or escaped the results folder are refused at
/// validation, each with a one-line error naming the field.
#[test]
fn sizes_durations_and_names_that_would_abort_or_escape_are_refused() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let throughput = "[[tests]]\nkind = \"burst\"\nloadgen = [\"n\"]\n";
    let cases = [
        (
            format!("repetitions = 4000000000\n{BASE}{broker}"),
            "repetitions = 4000000000: at most 1000",
        ),
        (
            format!("{BASE}{broker}{throughput}clients = [4000000000]\n"),
            "tests[1].clients = 4000000000: at most 100000",
        ),
        (
            format!(
                "{BASE}{broker}[[tests]]\nkind = \"payload\"\nloadgen = [\"n\"]\npayloads = [\"200MB\"]\npublishers = 10000\n"
            ),
            "tests[1].payloads = 200MB",
        ),
        (
            format!("{BASE}{broker}[timeouts]\ndeploy = \"18446744073709551615s\"\n"),
            "timeouts.deploy",
        ),
        (
            format!(
                "{BASE}{broker}[[scenarios]]\nname = \"../x\"\ndelay = \"1ms\"\njitter = \"0ms\"\nloss_percent = 0\n"
            ),
            "scenarios[1].name = \"../x\"",
        ),
        (
            format!("{BASE}{broker}[[scenarios]]\nname = \"Local\"\n"),
            "scenarios[1].name = \"Local\": another scenario has this name",
        ),
        (
            format!("{BASE}{broker}[[brokers]]\nname = \"B\"\nkind = \"embedded\"\nnode = \"n\"\n"),
            "brokers[1].name = \"B\": another broker has this name",
        ),
        (
            format!(
                "{BASE}{broker}[[scenarios]]\nname = \"far\"\ndelay = \"2h\"\njitter = \"0ms\"\nloss_percent = 0\n"
            ),
            "scenarios[1].delay",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(
            error.contains(expected),
            "{error:?} should contain {expected:?}"
        );
        assert_eq!(error.lines().count(), 1, "{error}");
    }
}

/// A test's `workload` table reaches every field of loadgen's spec over the preset, and its
/// mistakes name their path inside the table.
#[test]
fn a_workload_table_sets_any_spec_field_and_names_its_mistakes() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let text = format!(
        "{BASE}{broker}[tests.workload]\ntopology = \"fan-out\"\nsubscribers = 300\nbroker = {{ protocol = \"5\", username = \"bob\" }}\nconnection = {{ inflight = 7, keep_alive = \"30s\" }}\n"
    );
    let plan = Plan::parse(&text, "plan.toml").expect("a workload table");
    let spec = workload_for(&plan.tests[0], None, None).expect("workload");
    assert_eq!(spec.topology, loadgen::spec::Topology::FanOut);
    assert_eq!(spec.subscribers, 300);
    assert_eq!(spec.publishers, 100, "the latency preset's publishers stay");
    assert_eq!(spec.broker.protocol, loadgen::spec::MqttVersion::V5);
    assert_eq!(spec.broker.username.as_deref(), Some("bob"));
    assert_eq!(spec.connection.inflight, 7);
    assert_eq!(
        spec.connection.keep_alive,
        std::time::Duration::from_secs(30)
    );

    let cases = [
        (
            "[tests.workload]\ntopolgy = \"pairs\"\n",
            "tests[0].workload.topolgy",
        ),
        (
            "[tests.workload]\nconnection = { inflight = \"many\" }\n",
            "tests[0].workload.connection.inflight = \"many\"",
        ),
        (
            "[tests.workload]\nbroker = { port = 1884 }\n",
            "tests[0].workload.broker.port = 1884: the broker's address comes from the plan",
        ),
        (
            "[tests.workload]\nbroker = { tls_ca_pem = \"-----BEGIN CERTIFICATE-----\" }\n",
            "tests[0].workload.broker.tls_ca_pem = \"-----BEGIN CERTIFICATE-----\": the run supplies it",
        ),
        (
            "[tests.workload]\ntopology = \"pairs\"\nsubscribers = 3\n",
            "tests[0].workload.subscribers = 3",
        ),
    ];
    for (table, expected) in cases {
        let error = error_of(&format!("{BASE}{broker}{table}"));
        assert!(
            error.contains(expected),
            "{error:?} should contain {expected:?}"
        );
    }
}

/// An entry node must exist and be able to forward: kube-proxy on a cluster node, or an
/// agent with the broker role that runs the forwarding hop.
#[test]
fn entry_nodes_are_checked() {
    let loadgen_only = "[[nodes]]\nname = \"t\"\nagent = \"local\"\nroles = [\"loadgen\"]\n";
    let cases = [
        (
            format!(
                "{BASE}[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\nentry = \"nowhere\"\n"
            ),
            "brokers[0].entry = \"nowhere\": no such node in [[nodes]]",
        ),
        (
            format!(
                "{BASE}{loadgen_only}[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\nentry = \"t\"\n"
            ),
            "brokers[0].entry = \"t\": the entry node needs the broker role",
        ),
        (
            format!(
                "{BASE}[[brokers]]\nname = \"b\"\nkind = \"external\"\naddress = \"198.18.0.9:1883\"\nentry = \"n\"\n"
            ),
            "brokers[0].entry = \"n\": an external broker is dialled at its address",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert_eq!(error.lines().count(), 1, "one line: {error}");
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
    let direct = format!(
        "{BASE}[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\nentry = \"n\"\n"
    );
    Plan::parse(&direct, "plan.toml").expect("its own node is the direct path");
}

/// Spreading load over several loadgen nodes: each mistake names its TOML path and value.
#[test]
fn load_spread_mistakes_name_the_toml_path() {
    let nodes = "[[nodes]]\nname = \"m\"\nagent = \"local\"\nroles = [\"loadgen\"]\n\
                 [[nodes]]\nname = \"o\"\nagent = \"local\"\nroles = [\"loadgen\"]\n\
                 [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let test = |body: &str| format!("{BASE}{nodes}[[tests]]\nkind = \"latency\"\n{body}");
    let cases = [
        (
            test("loadgen = [\"m\", \"o\", \"m\"]\n"),
            "tests[1].loadgen[2] = \"m\": named twice: give it a weight instead",
        ),
        (
            test("loadgen = [\"m\", \"o\", \"n\"]\nspread = \"split\"\n"),
            "tests[1].spread = \"split\": split puts publishers on the first node and subscribers on the second: it needs exactly two loadgen nodes, not 3",
        ),
        (
            test("loadgen = [\"m\", \"o\"]\nspread = \"split\"\nweights = [1, 2]\n"),
            "tests[1].weights = [..]: weights apply to spread = \"even\" only",
        ),
        (
            test("loadgen = [\"m\", \"o\"]\nweights = [1]\n"),
            "tests[1].weights = [1]: one weight per loadgen node (2)",
        ),
        (
            test("loadgen = [\"m\", \"o\"]\nweights = [1, 0]\n"),
            "tests[1].weights[1] = 0: from 1 to 1000",
        ),
        (
            test("loadgen = [\"m\", \"o\", \"n\"]\npublishers = 2\n"),
            "tests[1].loadgen = \"n\": 2 publishers and 1 subscribers leave this node without a client",
        ),
        (
            test("loadgen = []\n"),
            "tests[1].loadgen = []: one node or more, at most 256",
        ),
        (
            test("loadgen = [\"m\"]\nspread = \"round-robin\"\n"),
            "unknown variant `round-robin`",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
    let fine = Plan::parse(
        &test("loadgen = [\"m\", \"o\", \"n\"]\nweights = [2, 1, 1]\n"),
        "plan.toml",
    )
    .expect("three weighted loadgen nodes");
    let placed: Vec<(String, u32)> = fine.tests[1]
        .placements(100, 1)
        .into_iter()
        .map(|p| (p.node, p.shard.publishers.len() as u32))
        .collect();
    assert_eq!(
        placed,
        vec![("m".into(), 50), ("o".into(), 25), ("n".into(), 25)]
    );
}

/// A custom test takes its whole workload from its table: each mistake names the TOML path.
#[test]
fn custom_test_mistakes_name_the_toml_path() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let custom = |body: &str| {
        format!("{BASE}{broker}[[tests]]\nkind = \"custom\"\nloadgen = [\"n\"]\n{body}")
    };
    let whole = "publishers = 1\nsubscribers = 20\ntopology = \"fan-out\"\nqos = 2\npayload = \"256B\"\n\
                 messages_per_publisher = 50\npacing = { mode = \"open-loop\", interval = \"20ms\" }\n";
    let cases = [
        (
            custom(""),
            "tests[1].workload = (absent): a custom test needs its workload",
        ),
        (
            custom("[tests.workload]\npublishers = 1\nqos = 1\n"),
            "tests[1].workload = {..}: a custom test sets its whole workload; missing: subscribers, payload, pacing",
        ),
        (
            custom(&format!("publishers = 3\n[tests.workload]\n{whole}")),
            "tests[1].publishers = (set): a custom test takes its whole workload from [tests.workload]: set publishers there",
        ),
        (
            custom(&format!("interval = \"1s\"\n[tests.workload]\n{whole}")),
            "set pacing = { mode = \"open-loop\", interval = \"...\" } there",
        ),
        (
            custom(&format!("[tests.workload]\n{whole}colour = \"red\"\n")),
            "tests[1].workload.colour",
        ),
        (
            custom(&format!(
                "[tests.workload]\n{}",
                whole.replace("qos = 2", "qos = 3")
            )),
            "tests[1].workload.qos = 3",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
    let plan = Plan::parse(&custom(&format!("[tests.workload]\n{whole}")), "plan.toml")
        .expect("a whole custom workload");
    assert_eq!(plan.cells().len(), 2, "one cell per scenario, no sweep");
    let spec = workload_for(&plan.tests[1], None, None).expect("its spec");
    assert_eq!(
        (spec.publishers, spec.subscribers, spec.qos.level()),
        (1, 20, 2)
    );
    assert_eq!(spec.topology, loadgen::spec::Topology::FanOut);
}

/// Trees, shared subscriptions and retained messages come from the custom table; what
/// loadgen refuses is named at its TOML path, and retain over several publishing nodes is
/// refused before anything runs.
#[test]
fn fleet_workloads_are_checked_when_the_plan_is_read() {
    let tree = "publishers = 4\nsubscribers = 2\ntopology = \"tree\"\nqos = 1\npayload = \"32B\"\n\
                messages_per_publisher = 5\npacing = { mode = \"burst\" }\n\
                [tests.workload.topics]\npattern = \"d/{n}\"\ncounts = { n = 4 }\n";
    let plan = |loadgen: &str, tail: &str| {
        format!(
            "{BASE}[[nodes]]\nname = \"m\"\nagent = \"local\"\nroles = [\"loadgen\"]\n\
             [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n\
             [[tests]]\nkind = \"custom\"\nloadgen = {loadgen}\n[tests.workload]\n{tree}{tail}"
        )
    };
    let good = "subscribe = [\"d/+\", \"$share/g/d/#\"]\n";
    Plan::parse(&plan("[\"n\", \"m\"]", good), "plan.toml").expect("a tree over two nodes");
    let retained = format!("{good}[tests.workload.retain]\nlate_subscribers = 3\n");
    let split = plan("[\"n\", \"m\"]", &retained).replace(
        "loadgen = [\"n\", \"m\"]\n[tests.workload]",
        "loadgen = [\"n\", \"m\"]\nspread = \"split\"\n[tests.workload]",
    );
    Plan::parse(&split, "plan.toml").expect("retain with every publisher on the first node");
    let cases = [
        (
            plan("[\"n\"]", "subscribe = [\"d/#/x\"]\n"),
            "tests[1].workload.topics.subscribe[0] = \"d/#/x\": # is the last level of a filter",
        ),
        (
            plan("[\"n\"]", "subscribe = [\"$share//d/+\"]\n"),
            "tests[1].workload.topics.subscribe[0]",
        ),
        (
            plan(
                "[\"n\", \"m\"]",
                &format!("{good}[tests.workload.retain]\nlate_subscribers = 3\n"),
            ),
            "tests[1].loadgen = [\"n\", \"m\"]: retain needs every publisher on one loadgen node",
        ),
        (
            plan(
                "[\"n\"]",
                &format!("{good}[tests.workload.retain]\nlate_subscribers = 3\nfilter = \"e/#\"\n"),
            ),
            "tests[1].workload.retain.filter = \"e/#\": matches none of the run's topics",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
}

#[test]
fn websocket_tests_reach_every_broker_or_name_the_one_they_cannot() {
    let ws = "[tests.workload.broker]\ntransport = \"websocket\"\n";
    let native = |product: &str| {
        format!(
            "[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"{product}\"\n"
        )
    };
    let cases = [
        (
            format!("{BASE}{ws}[[brokers]]\nname = \"e\"\nkind = \"embedded\"\nnode = \"n\"\n"),
            "tests[0].workload.broker.transport = \"websocket\": brokers[0] (e): the embedded broker serves no WebSocket",
        ),
        (
            format!("{BASE}{ws}{}", native("emqx")),
            "tests[0].workload.broker.transport = \"websocket\": brokers[0] (b): emqx: its recipe opens no WebSocket listener",
        ),
        (
            format!(
                "{BASE}{ws}[[brokers]]\nname = \"x\"\nkind = \"external\"\naddress = \"198.18.0.9:1883\"\n"
            ),
            "brokers[0] (x): an external broker needs websocket_address (host:port)",
        ),
        (
            format!(
                "{BASE}[[brokers]]\nname = \"e\"\nkind = \"embedded\"\nnode = \"n\"\nwebsocket_port = 9001\n"
            ),
            "brokers[0].websocket_port = 9001: only a native or kubernetes broker opens a WebSocket listener",
        ),
        (
            format!(
                "{BASE}{}websocket_address = \"198.18.0.9:9001\"\n",
                native("mosquitto")
            ),
            "brokers[0].websocket_address = \"198.18.0.9:9001\": only an external broker",
        ),
        (
            format!(
                "{BASE}{}port = 1883\nwebsocket_port = 1883\n",
                native("mosquitto")
            ),
            "brokers[0].websocket_port = 1883: is its MQTT port",
        ),
        (
            format!(
                "{BASE}{ws}[[nodes]]\nname = \"m\"\nagent = \"198.18.0.2:7000\"\nroles = [\"broker\"]\n{}entry = \"m\"\n",
                native("mosquitto")
            ),
            "brokers[0] (b): entered through another node, whose forwarding hop relays its MQTT port only",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }

    let with_ws = Plan::parse(&format!("{BASE}{ws}{}", native("rabbitmq")), "plan.toml").unwrap();
    assert_eq!(with_ws.websocket_tests(), [0]);
    assert_eq!(with_ws.websocket_port_of(&with_ws.brokers[0]), Some(0));
    let without = Plan::parse(&format!("{BASE}{}", native("mosquitto")), "plan.toml").unwrap();
    assert!(without.websocket_tests().is_empty());
    assert_eq!(without.websocket_port_of(&without.brokers[0]), None);
    let fixed = Plan::parse(
        &format!("{BASE}{}websocket_port = 9001\n", native("mosquitto")),
        "plan.toml",
    )
    .unwrap();
    assert_eq!(fixed.websocket_port_of(&fixed.brokers[0]), Some(9001));
}

#[test]
fn a_churn_fleet_in_a_workload_is_checked_naming_its_path() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let churn = |fields: &str| format!("{BASE}[tests.workload.churn]\n{fields}{broker}");
    for (fields, expected) in [
        (
            "rate = 0\nconnections = 100\nhold = \"1s\"\n",
            "plan.toml: tests[0].workload.churn.rate = 0: new connections per second",
        ),
        (
            "rate = 50\nconnections = 0\nhold = \"1s\"\n",
            "tests[0].workload.churn.connections = 0: at least 1",
        ),
        (
            "rate = 50\nconnections = 100\nhold = \"1s\"\nburst = true\n",
            "unknown field `burst`",
        ),
    ] {
        let error = error_of(&churn(fields));
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
        assert_eq!(error.lines().count(), 1, "{error}");
    }
    let plan = Plan::parse(
        &churn("rate = 50\nconnections = 100\nhold = \"1s\"\n"),
        "plan.toml",
    )
    .unwrap();
    let spec = workload_for(&plan.tests[0], None, None).unwrap();
    assert_eq!(spec.churn.map(|c| c.connections), Some(100));
}

#[test]
fn emulated_nodes_are_all_or_none_and_take_no_addresses() {
    let emulated = |extra: &str| {
        format!(
            "name = \"t\"\n{extra}[[nodes]]\nname = \"t\"\nagent = \"namespace\"\nroles = [\"loadgen\"]\n\
             [[nodes]]\nname = \"w\"\nagent = \"namespace\"\nroles = [\"broker\"]\n\
             [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"w\"\n\
             [[scenarios]]\nname = \"edge\"\n[[tests]]\nkind = \"latency\"\nloadgen = [\"t\"]\n"
        )
    };
    let plan = Plan::parse(&emulated(""), "plan.toml").expect("two emulated nodes");
    assert!(plan.nodes.iter().all(NodeEntry::is_namespace));
    assert_eq!(
        plan.cells_of(0, 0).len(),
        1,
        "edge runs: the nodes have a link between them"
    );
    let mixed = emulated("").replacen(
        "agent = \"namespace\"\nroles = [\"broker\"]",
        "agent = \"198.18.0.9:7100\"\nroles = [\"broker\"]",
        1,
    );
    let addressed = emulated("").replacen(
        "roles = [\"broker\"]\n",
        "roles = [\"broker\"]\ndata_address = \"198.18.0.9\"\n",
        1,
    );
    let overlay = emulated("[testbed]\noverlay = \"nebula\"\nheadnode = \"w\"\n");
    let cases = [
        (
            mixed,
            "nodes[1].agent = \"198.18.0.9:7100\": a plan with nodes emulated in namespaces",
        ),
        (
            addressed,
            "nodes[1].data_address = \"198.18.0.9\": an emulated node's addresses are given",
        ),
        (overlay, "no overlay or cluster is installed on them"),
        (
            emulated("").replace("agent = \"namespace\"", "agent = \"local\"")
                + "[testbed]\nfallback = \"local\"\n",
            "testbed.fallback = \"local\": a fallback is for nodes emulated in namespaces",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert_eq!(error.lines().count(), 1, "one line: {error}");
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
    }
}

/// BASE with an embedded broker and `fields` in the latency test's `[tests.workload.broker]`.
fn with_broker_fields(fields: &str) -> String {
    format!(
        "{BASE}[tests.workload.broker]\n{fields}\n\
         [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n"
    )
}

#[test]
fn a_password_comes_from_a_file_or_the_environment_read_only_when_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("password");
    let password_of = |plan: &Plan| {
        workload_for(&plan.tests[0], None, None)
            .expect("a workload")
            .broker
            .password
    };
    for (written, read) in [
        ("s3cret\n", "s3cret"),
        ("s3cret\r\n", "s3cret"),
        ("s3cret", "s3cret"),
        ("two lines\n\n", "two lines\n"),
    ] {
        std::fs::write(&file, written).expect("written");
        let text = with_broker_fields(&format!("username = \"u\"\npassword_file = {file:?}"));
        // Validation does not read the file: a plan submitted to `serve` is validated too.
        let plan = Plan::parse(&text, "plan.toml").expect("valid");
        assert_eq!(password_of(&plan), None);
        let plan = plan.read_credentials().expect("read");
        assert_eq!(password_of(&plan).as_deref(), Some(read), "{written:?}");
        let local = Plan::parse_local(&text, "plan.toml").expect("parsed and read");
        assert_eq!(password_of(&local).as_deref(), Some(read));
    }
    let text = with_broker_fields("username = \"u\"\npassword_env = \"BROKER_PASSWORD\"");
    let plan = Plan::parse(&text, "plan.toml").expect("valid");
    assert_eq!(password_of(&plan), None);
    let env = |name: &str| (name == "BROKER_PASSWORD").then(|| "from-env".into());
    let read = plan.clone().read_credentials_with(&env).expect("read");
    assert_eq!(password_of(&read).as_deref(), Some("from-env"));
    // The controller's own environment by default.
    if let Ok(path) = std::env::var("PATH").map(|p| p.chars().take(1000).collect::<String>())
        && !path.is_empty()
        && path.len() < 1000
    {
        let text = with_broker_fields("username = \"u\"\npassword_env = \"PATH\"");
        let plan = Plan::parse_local(&text, "plan.toml").expect("PATH is set");
        assert_eq!(password_of(&plan), Some(path));
    }
    // The results folder's copy of the plan holds neither the password nor a way to it.
    let redacted = read.redacted();
    let broker = &redacted.tests[0].workload.as_ref().expect("a workload")["broker"];
    assert_eq!(broker["password"].as_str(), Some(REDACTED));
}

#[test]
fn a_password_files_path_may_hold_an_equals_sign_a_variables_name_may_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("k=v");
    std::fs::write(&file, "s3cret\n").expect("written");
    let text = with_broker_fields(&format!("username = \"u\"\npassword_file = {file:?}"));
    let plan = Plan::parse_local(&text, "plan.toml").expect("a path with = is a path");
    let password = workload_for(&plan.tests[0], None, None)
        .expect("a workload")
        .broker
        .password;
    assert_eq!(password.as_deref(), Some("s3cret"));
    let text = with_broker_fields("username = \"u\"\npassword_env = \"A=B\"");
    let error = Plan::parse(&text, "plan.toml")
        .expect_err("not a name")
        .to_string();
    assert!(
        error.contains("tests[0].workload.broker.password_env = \"A=B\""),
        "{error}"
    );
}

#[test]
fn a_password_file_or_variable_that_cannot_be_read_is_one_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let large = dir.path().join("large");
    std::fs::write(&large, "x".repeat(5000)).expect("written");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("written");
    let binary = dir.path().join("binary");
    std::fs::write(&binary, [0xff, 0xfe, b'\n']).expect("written");
    let missing = dir.path().join("missing");
    let candidates = [
        missing,
        dir.path().to_path_buf(),
        large,
        empty,
        binary,
        "/dev/zero".into(),
    ];
    let mut problems = std::collections::BTreeSet::new();
    for file in candidates {
        let text = with_broker_fields(&format!("username = \"u\"\npassword_file = {file:?}"));
        let error = Plan::parse_local(&text, "plan.toml")
            .expect_err("unreadable")
            .to_string();
        let named = format!(
            "plan.toml: tests[0].workload.broker.password_file = {:?}: ",
            file.display().to_string()
        );
        assert!(error.starts_with(&named), "{error}");
        assert_eq!(error.lines().count(), 1, "{error}");
        problems.insert(error[named.len()..].to_string());
    }
    assert_eq!(
        problems.len(),
        1,
        "one message for every failure: {problems:?}"
    );
    let problem = problems.first().expect("one");
    assert!(
        problem.contains("regular file of at most 4096 bytes"),
        "{problem}"
    );

    let text = with_broker_fields("username = \"u\"\npassword_env = \"CONTINUUM_UNSET_7f3a\"");
    let error = Plan::parse(&text, "plan.toml")
        .expect("valid")
        .read_credentials_with(&|_| None)
        .expect_err("unset")
        .to_string();
    assert!(
        error.contains("tests[0].workload.broker.password_env = \"CONTINUUM_UNSET_7f3a\": not set"),
        "{error}"
    );
    let error = Plan::parse_local(&text, "plan.toml")
        .expect_err("unset")
        .to_string();
    assert!(
        error.starts_with("plan.toml: tests[0].workload.broker.password_env"),
        "{error}"
    );
}

#[test]
fn a_password_is_given_one_way_and_with_a_username() {
    let cases = [
        (
            "username = \"u\"\npassword = \"p\"\npassword_file = \"/run/p\"",
            "plan.toml: tests[0].workload.broker.password_file = (set): give the password one \
             way: password and password_file are both set",
        ),
        (
            "username = \"u\"\npassword_file = \"/run/p\"\npassword_env = \"P\"",
            "tests[0].workload.broker.password_env = (set): give the password one way",
        ),
        (
            "password_file = \"/run/p\"",
            "tests[0].workload.broker.password_file = \"/run/p\": a password needs broker.username",
        ),
        (
            "username = \"u\"\npassword_env = \"\"",
            "tests[0].workload.broker.password_env = \"\": the name of an environment variable",
        ),
        (
            "username = \"u\"\npassword_env = \"A=B\"",
            "tests[0].workload.broker.password_env = \"A=B\": the name of an environment variable",
        ),
        (
            "username = \"u\"\npassword_file = 5",
            "tests[0].workload.broker.password_file = (not a string): the path of a file",
        ),
    ];
    for (fields, expected) in cases {
        let error = error_of(&with_broker_fields(fields));
        assert!(
            error.contains(expected),
            "{error}\n  should contain: {expected}"
        );
        assert_eq!(error.lines().count(), 1, "{error}");
    }
}

/// A node's data address is an IP address, refused where the plan is read (it was accepted
/// and only failed when the run reached the node).
#[test]
fn a_data_address_that_is_not_an_ip_is_refused_naming_its_line() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let text = format!("{BASE}{broker}").replace(
        "roles = [\"loadgen\", \"broker\"]\n",
        "roles = [\"loadgen\", \"broker\"]\ndata_address = \"worker.lan\"\n",
    );
    let line = line_starting(&text, "data_address");
    let message = error_of(&text);
    assert!(
        message.contains("plan.toml")
            && message.contains(&format!("line {line}"))
            && message.contains("data_address = \"worker.lan\": not an IP address"),
        "{message}"
    );
    let good = text.replace("worker.lan", "127.0.0.1");
    let plan = Plan::parse(&good, "plan.toml").expect("an IP is fine");
    assert_eq!(plan.nodes[0].data_address, Some([127, 0, 0, 1].into()));
}

/// A test's QoS is read as loadgen's `Qos`: a level that is not 0, 1 or 2 is refused where
/// the plan is read, naming the line.
#[test]
fn a_qos_that_is_not_a_level_is_refused_naming_its_line() {
    let broker = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let text = format!("{BASE}qos = 3\n{broker}");
    let line = line_starting(&text, "qos");
    let message = error_of(&text);
    assert!(
        message.contains(&format!("plan.toml line {line}"))
            && message.contains("QoS must be 0, 1 or 2, not 3"),
        "{message}"
    );
    let plan = Plan::parse(&text.replace("qos = 3", "qos = 2"), "plan.toml").expect("QoS 2");
    let spec = plan.first_workload(0).expect("workload");
    assert_eq!(spec.qos, loadgen::spec::Qos::ExactlyOnce);
}

/// The messages built from the kinds' traits read whole as they did when each was written
/// out by hand, kind by kind.
#[test]
fn messages_built_from_the_kinds_traits_read_as_written() {
    let embedded = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let test = |body: &str| format!("{BASE}{embedded}[[tests]]\nloadgen = [\"n\"]\n{body}");
    let cases = [
        (
            "kind = \"latency\"\npayloads = [\"1KB\"]\n",
            "plan.toml: tests[1].payloads = [..]: only the payload test sweeps payloads",
        ),
        (
            "kind = \"payload\"\nclients = [1]\n",
            "plan.toml: tests[1].clients = [..]: only the throughput, burst and saturation tests sweep clients",
        ),
        (
            "kind = \"burst\"\nduration = \"10s\"\n",
            "plan.toml: tests[1].duration = 10s: a burst test has no duration (only throughput, p2p, fan-out, fan-in-shared and connections do)",
        ),
        (
            "kind = \"saturation\"\nrate = 100\n",
            "plan.toml: tests[1].rate = 100: a saturation test has no offered rate (only throughput, p2p, fan-out, fan-in-shared and connections do)",
        ),
        (
            "kind = \"latency\"\nsearch = { budget = \"10s\" }\n",
            "plan.toml: tests[1].search = {..}: only a saturation test has search settings",
        ),
        (
            "kind = \"saturation\"\nmessages = 5\n",
            "plan.toml: tests[1].messages = 5: a saturation test runs for a time, not a count (the study's counted burst is kind = \"burst\")",
        ),
        (
            "kind = \"payload\"\nwarmup = \"2s\"\n",
            "plan.toml: tests[1].warmup = \"2s\": a payload test warms up by a number of messages",
        ),
        (
            "kind = \"latency\"\nscale = 0.5\n",
            "plan.toml: tests[1].scale = 0.5: only the p2p, fan-out, fan-in-shared and connections tests (the Open MQTT Benchmark Suite's) take a scale",
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(error_of(&test(body)), expected, "{body}");
    }
}

#[test]
fn a_metrics_table_names_its_mistakes() {
    let embedded = "[[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n";
    // The table goes after the top-level keys and before the arrays of tables.
    let with = |table: &str| {
        format!(
            "{}{embedded}",
            BASE.replacen("[[nodes]]", &format!("{table}\n[[nodes]]"), 1)
        )
    };
    let plan = Plan::parse(
        &with("[metrics]\nlisten = \"127.0.0.1:9464\"\nlinger = \"30s\""),
        "plan.toml",
    )
    .expect("a plan with metrics");
    let metrics = plan.metrics.expect("[metrics]");
    assert_eq!(metrics.listen.port(), 9464);
    assert_eq!(metrics.linger, std::time::Duration::from_secs(30));
    let host_name = error_of(&with("[metrics]\nlisten = \"localhost:9464\""));
    assert!(
        host_name.contains("metrics.listen = \"localhost:9464\": not IP:PORT"),
        "{host_name}"
    );
    let long = error_of(&with(
        "[metrics]\nlisten = \"127.0.0.1:9464\"\nlinger = \"11m\"",
    ));
    assert!(
        long.contains("metrics.linger = \"11m\": at most 10m"),
        "{long}"
    );
}

#[test]
fn quic_tests_need_a_ca_and_reach_external_brokers_and_native_ones_that_open_a_listener() {
    let quic = "[tests.workload.broker]\ntransport = \"quic\"\ntls_ca_file = \"/etc/ca.pem\"\n";
    let external_tcp =
        "[[brokers]]\nname = \"x\"\nkind = \"external\"\naddress = \"198.18.0.9:1883\"\n";
    let external = format!("{external_tcp}quic_address = \"198.18.0.9:14567\"\n");
    let cases = [
        (
            format!("{BASE}[tests.workload.broker]\ntransport = \"quic\"\n{external}"),
            "broker.transport = \"quic\": QUIC is always TLS 1.3: set broker.tls_ca_file",
        ),
        (
            format!("{BASE}{quic}[[brokers]]\nname = \"e\"\nkind = \"embedded\"\nnode = \"n\"\n"),
            "tests[0].workload.broker.transport = \"quic\": brokers[0] (e): the embedded broker (rumqttd) serves no QUIC",
        ),
        (
            format!(
                "{BASE}{quic}[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mosquitto\"\n"
            ),
            "tests[0].workload.broker.transport = \"quic\": brokers[0] (b): mosquitto: it serves no MQTT over QUIC",
        ),
        (
            // The native broker's CA comes with the run, the external one's from the test.
            format!(
                "{BASE}[tests.workload.broker]\ntransport = \"quic\"\n{external}\
                 [[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mqttv5\"\n"
            ),
            "broker.transport = \"quic\": QUIC is always TLS 1.3: set broker.tls_ca_file",
        ),
        (
            format!("{BASE}{quic}{external_tcp}"),
            "brokers[0] (x): an external broker needs quic_address (host:port, UDP)",
        ),
        (
            format!(
                "{BASE}[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mqttv5\"\nquic_address = \"198.18.0.9:14567\"\n"
            ),
            "brokers[0].quic_address = \"198.18.0.9:14567\": only an external broker",
        ),
        (
            format!("{BASE}{external_tcp}quic_address = \"14567\"\n"),
            "brokers[0].quic_address = \"14567\": needs host:port",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }
    let plan = Plan::parse(&format!("{BASE}{quic}{external}"), "plan.toml").unwrap();
    assert_eq!(plan.quic_tests(), [0]);
    assert_eq!(
        plan.quic_port_of(&plan.brokers[0]),
        None,
        "external: its own"
    );
    // A native mqttv5 needs no CA in the test: its agent makes the certificate.
    let native =
        "[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mqttv5\"\n";
    let text = format!("{BASE}[tests.workload.broker]\ntransport = \"quic\"\n{native}");
    let plan = Plan::parse(&text, "plan.toml").unwrap();
    assert_eq!(plan.quic_port_of(&plan.brokers[0]), Some(0));
    let tcp_only = Plan::parse(&format!("{BASE}{native}"), "plan.toml").unwrap();
    assert_eq!(tcp_only.quic_port_of(&tcp_only.brokers[0]), None);
}

#[test]
fn a_transports_sweep_runs_the_test_once_per_transport() {
    use loadgen::spec::Transport;
    let external = "[[brokers]]\nname = \"x\"\nkind = \"external\"\naddress = \"198.18.0.9:1883\"\n\
                    quic_address = \"198.18.0.9:14567\"\n";
    let sweep =
        "transports = [\"tcp\", \"quic\"]\n[tests.workload.broker]\ntls_ca_file = \"/ca.pem\"\n";
    let payload = "[[tests]]\nkind = \"payload\"\nloadgen = [\"n\"]\n";
    let plan = Plan::parse(&format!("{BASE}{sweep}{payload}{external}"), "plan.toml").unwrap();
    let transports: Vec<_> = (0..plan.tests.len())
        .map(|t| {
            (
                plan.tests[t].kind,
                plan.first_workload(t).unwrap().broker.transport,
            )
        })
        .collect();
    assert_eq!(
        transports,
        [
            (TestKind::Latency, Transport::Tcp),
            (TestKind::Latency, Transport::Quic),
            (TestKind::Payload, Transport::Tcp),
        ]
    );
    assert_eq!(plan.quic_tests(), [1]);
    // Each run keeps the file's number; the run records the unrolled plan, read back as is.
    assert_eq!(
        (0..3).map(|t| plan.file_test(t)).collect::<Vec<_>>(),
        [0, 0, 1]
    );
    assert_eq!(plan.swept_transport(1), Some(Transport::Quic));
    assert_eq!(plan.swept_transport(2), None);
    let again: Plan = serde_json::from_str(&serde_json::to_string(&plan).unwrap()).unwrap();
    assert_eq!(again, plan);
}

#[test]
fn an_external_broker_may_name_the_node_it_runs_on_for_its_links() {
    let external =
        "[[brokers]]\nname = \"x\"\nkind = \"external\"\naddress = \"198.18.0.9:1883\"\n";
    let nodes =
        "[[nodes]]\nname = \"w\"\nagent = \"198.19.0.6:7100\"\nroles = [\"broker\", \"netem\"]\n";
    let plan = Plan::parse(
        &format!("{BASE}{nodes}{external}node = \"w\"\n"),
        "plan.toml",
    )
    .unwrap();
    let path = MessagePath::of(&plan, 0, 0).expect("a path through the broker's node");
    assert_eq!(path.describe(), "n -> w -> n");
    let without = Plan::parse(&format!("{BASE}{nodes}{external}"), "plan.toml").unwrap();
    assert_eq!(MessagePath::of(&without, 0, 0), None);
    let error = error_of(&format!("{BASE}{external}node = \"nowhere\"\n"));
    assert!(
        error.contains("brokers[0].node = \"nowhere\": no such node in [[nodes]]"),
        "{error}"
    );
}

#[test]
fn a_sweeps_quic_setting_applies_to_its_quic_run_only() {
    let native =
        "[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mqttv5\"\n";
    let text = format!(
        "{BASE}transports = [\"tcp\", \"quic\"]\n[tests.workload.broker]\nquic_zero_rtt = true\n\
         quic_streams = \"per_publish\"\n\
         [tests.workload.connection.reconnect]\nwithin = \"20s\"\n{native}"
    );
    let plan = Plan::parse(&text, "plan.toml").expect("valid");
    let zero_rtt: Vec<bool> = (0..2)
        .map(|t| plan.first_workload(t).unwrap().broker.quic_zero_rtt)
        .collect();
    assert_eq!(zero_rtt, [false, true]);
    let streams: Vec<QuicStreams> = (0..2)
        .map(|t| plan.first_workload(t).unwrap().broker.quic_streams)
        .collect();
    assert_eq!(streams, [QuicStreams::Single, QuicStreams::PerPublish]);
    // Written on a TCP test, it is refused naming the field.
    let tcp = format!("{BASE}[tests.workload.broker]\nquic_zero_rtt = true\n{native}");
    let error = error_of(&tcp);
    assert!(
        error.contains(
            "tests[0].workload.broker.quic_zero_rtt = true: only with broker.transport = \"quic\""
        ),
        "{error}"
    );
    let tcp = format!("{BASE}[tests.workload.broker]\nquic_streams = \"per_topic\"\n{native}");
    let error = error_of(&tcp);
    assert!(
        error.contains(
            "tests[0].workload.broker.quic_streams = \"per_topic\": only with broker.transport \
             = \"quic\""
        ),
        "{error}"
    );
}

#[test]
fn a_brokers_quic_delivery_is_read_by_the_tests_streams() {
    let mqttv5 =
        "[[brokers]]\nname = \"m\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mqttv5\"\n";
    let quic = |streams: &str| {
        format!(
            "{BASE}[tests.workload.broker]\ntransport = \"quic\"\nquic_streams = \"{streams}\"\n"
        )
    };
    let per_topic_broker = format!("{mqttv5}quic_delivery = \"per_topic\"\n");
    let plan = Plan::parse(
        &format!("{}{per_topic_broker}", quic("per_publish")),
        "plan.toml",
    )
    .expect("a stream mode reads the broker's streams");
    assert_eq!(
        plan.brokers[0].quic_delivery,
        Some(domain::QuicDelivery::PerTopic)
    );
    let error = error_of(&format!("{}{per_topic_broker}", quic("single")));
    assert_eq!(
        error,
        "plan.toml: tests[0].workload.broker.quic_streams = \"single\": brokers[0] (m) delivers on QUIC \
         streams it opens (quic_delivery = \"per_topic\"), which a client on one stream does not \
         read: set quic_streams = \"per_topic\" or \"per_publish\""
    );
    let mosquitto = "[[brokers]]\nname = \"q\"\nkind = \"native\"\nnode = \"n\"\n\
                     product = \"mosquitto\"\nquic_delivery = \"per_publish\"\n";
    let error = error_of(&format!("{BASE}{per_topic_broker}"));
    assert!(
        error.ends_with(
            "brokers[0].quic_delivery = \"per_topic\": no test of the plan speaks QUIC, so the \
             broker opens no QUIC listener"
        ),
        "{error}"
    );
    let error = error_of(&format!("{BASE}{mosquitto}"));
    assert!(
        error.starts_with("plan.toml: brokers[0].quic_delivery = \"per_publish\": only a native"),
        "{error}"
    );
    let emqx = "[[brokers]]\nname = \"e\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"emqx\"\n";
    let error = error_of(&format!("{}{emqx}", quic("per_topic")));
    assert!(
        error.starts_with(
            "plan.toml: tests[0].workload.broker.quic_streams = \"per_topic\": brokers[0] (e): \
             whether EMQX reads PUBLISH"
        ),
        "{error}"
    );
    let delivery = error_of(&format!("{BASE}{mqttv5}quic_delivery = \"sideways\"\n"));
    assert!(delivery.contains("sideways"), "{delivery}");
}

#[test]
fn a_transports_sweep_is_checked_as_the_file_numbers_its_test() {
    let external = "[[brokers]]\nname = \"x\"\nkind = \"external\"\naddress = \"198.18.0.9:1883\"\n\
                    quic_address = \"198.18.0.9:14567\"\n";
    let cases = [
        (
            // The QUIC run lacks a CA: named as tests[0], its transport said.
            format!("{BASE}transports = [\"tcp\", \"quic\"]\n{external}"),
            "tests[0].transports = \"quic\": QUIC is always TLS 1.3: set broker.tls_ca_file",
        ),
        (
            format!("{BASE}transports = []\n{external}"),
            "tests[0].transports = []: name at least one transport",
        ),
        (
            format!("{BASE}transports = [\"quic\", \"quic\"]\n{external}"),
            "tests[0].transports = [\"quic\", \"quic\"]: quic is named twice",
        ),
        (
            format!(
                "{BASE}transports = [\"tcp\"]\n[tests.workload.broker]\ntransport = \"quic\"\n{external}"
            ),
            "tests[0].transports = [\"tcp\"]: tests[0].workload.broker.transport sets the transport as well",
        ),
    ];
    for (text, expected) in cases {
        let error = error_of(&text);
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }
    let swept = error_of(&format!(
        "{BASE}transports = [\"tcp\", \"quic\"]\n{external}"
    ));
    assert!(
        swept.contains("(its run over quic, from tests[0].transports)"),
        "{swept}"
    );
    // A test after a sweep is named as the file numbers it, not as the unrolled plan does.
    let sweep =
        "transports = [\"tcp\", \"quic\"]\n[tests.workload.broker]\ntls_ca_file = \"/ca.pem\"\n";
    let bad = "[[tests]]\nkind = \"latency\"\nloadgen = [\"n\"]\nqos = 1\nmessages = 0\n";
    let later = error_of(&format!("{BASE}{sweep}{bad}{external}"));
    assert!(later.contains("tests[1].messages"), "{later}");
    assert!(!later.contains("its run over"), "{later}");
    // A QUIC refusal of a swept test names the sweep's field.
    let mosquitto =
        "[[brokers]]\nname = \"m\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mosquitto\"\n";
    let refused = error_of(&format!(
        "{BASE}transports = [\"tcp\", \"quic\"]\n{mosquitto}"
    ));
    assert!(
        refused.contains(
            "tests[0].transports = \"quic\": brokers[0] (m): mosquitto: it serves no MQTT over QUIC"
        ),
        "{refused}"
    );
    // A deployed broker has no TLS listener: the sweep's TCP run with the CA is refused.
    let embedded = "[[brokers]]\nname = \"e\"\nkind = \"embedded\"\nnode = \"n\"\n";
    let tls = error_of(&format!("{BASE}{sweep}{embedded}"));
    assert!(
        tls.contains(
            "tests[0].workload.broker.tls_ca_file = \"/ca.pem\": brokers[0] (e): the agent \
             opens no TLS listener for a broker it deploys"
        ) && tls.contains("(its run over tcp, from tests[0].transports)"),
        "{tls}"
    );
    let written = error_of(&format!("{BASE}unrolled_from = 3\n{external}"));
    assert!(
        written.contains("tests[0].unrolled_from = 3: is the plan's own note"),
        "{written}"
    );
}

#[test]
fn a_scenario_with_a_burst_loss_model_is_read_and_checked() {
    let broker =
        "[[brokers]]\nname = \"b\"\nkind = \"native\"\nnode = \"n\"\nproduct = \"mosquitto\"\n";
    let bursty = "[[scenarios]]\nname = \"edge-bursts\"\ndelay = \"2.5ms\"\njitter = \"0.5ms\"\n\
                  [scenarios.gilbert_elliott]\np_percent = 1.0\nr_percent = 25.0\n";
    let plan = Plan::parse(&format!("{BASE}{broker}{bursty}"), "plan.toml").expect("valid");
    let model = plan.scenarios[1].gilbert_elliott.expect("a model");
    assert_eq!(
        (model.bad_loss_percent, model.good_loss_percent),
        (100.0, 0.0)
    );
    for (extra, expected) in [
        (
            "bad_loss_percent = 120.0\n",
            "scenarios[1].gilbert_elliott.bad_loss_percent = 120: a percentage is between 0 and 100",
        ),
        (
            "good_loss_percent = -1.0\n",
            "scenarios[1].gilbert_elliott.good_loss_percent = -1",
        ),
    ] {
        let error = error_of(&format!("{BASE}{broker}{bursty}{extra}"));
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }
    let twice = "[[scenarios]]\nname = \"x\"\ndelay = \"1ms\"\njitter = \"0ms\"\nloss_percent = 1.0\n\
                 [scenarios.gilbert_elliott]\np_percent = 1.0\nr_percent = 25.0\n";
    let error = error_of(&format!("{BASE}{broker}{twice}"));
    assert!(
        error.contains("scenarios[1].loss_percent = 1: given with gilbert_elliott"),
        "{error}"
    );
}
