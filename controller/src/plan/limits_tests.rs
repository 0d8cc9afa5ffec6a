//! Plan values that once scheduled endless work or gave two cells one id: every duration at
//! u64::MAX seconds, and duplicate or equivalent sweep points, are refused at validation
//! naming their TOML path and value.

use super::*;

/// `u64::MAX` seconds, as a plan writes it.
const MAX: &str = "\"18446744073709551615s\"";

/// One local node, one embedded broker, a local scenario; `tests` and `extra` follow.
fn plan(top: &str, tests: &str) -> String {
    format!(
        "name = \"t\"\n{top}\n[[nodes]]\nname = \"n\"\nagent = \"local\"\nroles = [\"loadgen\", \"broker\"]\n\
         [[brokers]]\nname = \"b\"\nkind = \"embedded\"\nnode = \"n\"\n\
         [[scenarios]]\nname = \"local\"\n{tests}"
    )
}

fn test_of(kind: &str, fields: &str) -> String {
    format!("[[tests]]\nkind = \"{kind}\"\nloadgen = [\"n\"]\n{fields}")
}

/// A custom test's workload with `extra` fields (TOML lines of `[tests.workload]`).
fn custom(pacing: &str, extra: &str) -> String {
    test_of(
        "custom",
        &format!(
            "[tests.workload]\npublishers = 1\nsubscribers = 1\nqos = 1\npayload = \"16B\"\n\
             pacing = {pacing}\n{extra}"
        ),
    )
}

#[test]
fn every_duration_at_u64_max_seconds_is_refused_naming_its_path() {
    let open_loop = "{ mode = \"open-loop\", interval = \"100ms\" }";
    // A timed custom workload: the shape it is laid over (the latency test's) counts
    // messages, so it says it does not.
    let rate = "{ mode = \"rate\", rate = 10 }\nmessages_per_publisher = 0\nwarmup_messages = 0";
    let counted = "messages_per_publisher = 10\n";
    let cases: Vec<(&str, String)> = vec![
        (
            "timeouts.connect",
            plan(
                &format!("[timeouts]\nconnect = {MAX}"),
                &test_of("latency", ""),
            ),
        ),
        (
            "timeouts.deploy",
            plan(
                &format!("[timeouts]\ndeploy = {MAX}"),
                &test_of("latency", ""),
            ),
        ),
        (
            "timeouts.netem",
            plan(
                &format!("[timeouts]\nnetem = {MAX}"),
                &test_of("latency", ""),
            ),
        ),
        (
            "timeouts.cell",
            plan(
                &format!("[timeouts]\ncell = {MAX}"),
                &test_of("latency", ""),
            ),
        ),
        (
            "testbed.install_timeout",
            plan(
                &format!("[testbed]\ninstall_timeout = {MAX}"),
                &test_of("latency", ""),
            ),
        ),
        (
            "scenarios[1].delay",
            plan(
                "",
                &format!(
                    "[[scenarios]]\nname = \"far\"\ndelay = {MAX}\njitter = \"0s\"\nloss_percent = 0.0\n{}",
                    test_of("latency", "")
                ),
            ),
        ),
        (
            "scenarios[1].jitter",
            plan(
                "",
                &format!(
                    "[[scenarios]]\nname = \"far\"\ndelay = \"2s\"\njitter = {MAX}\nloss_percent = 0.0\n{}",
                    test_of("latency", "")
                ),
            ),
        ),
        (
            "tests[0].interval",
            plan("", &test_of("latency", &format!("interval = {MAX}\n"))),
        ),
        (
            "tests[0].interval",
            plan("", &test_of("payload", &format!("interval = {MAX}\n"))),
        ),
        (
            "tests[0].duration",
            plan(
                "",
                &test_of("throughput", &format!("duration = {MAX}\nclients = [1]\n")),
            ),
        ),
        (
            "tests[0].warmup",
            plan(
                "",
                &test_of("throughput", &format!("warmup = {MAX}\nclients = [1]\n")),
            ),
        ),
        (
            "tests[0].search.probe",
            plan(
                "",
                &test_of(
                    "saturation",
                    &format!("clients = [1]\n[tests.search]\nprobe = {MAX}\n"),
                ),
            ),
        ),
        (
            "tests[0].search.probe_warmup",
            plan(
                "",
                &format!(
                    "{}[tests.search]\nprobe_warmup = {MAX}\n",
                    test_of("saturation", "clients = [1]\n")
                ),
            ),
        ),
        (
            "tests[0].search.p99_bound",
            plan(
                "",
                &format!(
                    "{}[tests.search]\np99_bound = {MAX}\n",
                    test_of("saturation", "clients = [1]\n")
                ),
            ),
        ),
        (
            "tests[0].search.budget",
            plan(
                "",
                &format!(
                    "{}[tests.search]\nprobe = \"100us\"\nprobe_warmup = \"100us\"\nbudget = {MAX}\n",
                    test_of("saturation", "clients = [1]\n")
                ),
            ),
        ),
        (
            "tests[0].workload.pacing.interval",
            plan(
                "",
                &custom(
                    &format!("{{ mode = \"open-loop\", interval = {MAX} }}"),
                    counted,
                ),
            ),
        ),
        (
            "tests[0].workload.duration",
            plan("", &custom(rate, &format!("duration = {MAX}\n"))),
        ),
        (
            "tests[0].workload.warmup",
            plan(
                "",
                &custom(rate, &format!("duration = \"1s\"\nwarmup = {MAX}\n")),
            ),
        ),
        (
            "tests[0].workload.drain.timeout",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!("{counted}drain = {{ timeout = {MAX} }}\n"),
                ),
            ),
        ),
        (
            "tests[0].workload.drain.idle",
            plan(
                "",
                &custom(open_loop, &format!("{counted}drain = {{ idle = {MAX} }}\n")),
            ),
        ),
        (
            "tests[0].workload.connection.keep_alive",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!("{counted}connection = {{ keep_alive = {MAX} }}\n"),
                ),
            ),
        ),
        (
            "tests[0].workload.connection.connect_timeout",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!("{counted}connection = {{ connect_timeout = {MAX} }}\n"),
                ),
            ),
        ),
        (
            "tests[0].workload.connection.offline.after",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!(
                        "{counted}connection = {{ clean_session = false, offline = {{ after = {MAX}, gap = \"1s\" }} }}\n"
                    ),
                ),
            ),
        ),
        (
            "tests[0].workload.connection.offline.gap",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!(
                        "{counted}connection = {{ clean_session = false, offline = {{ after = \"1s\", gap = {MAX} }} }}\n"
                    ),
                ),
            ),
        ),
        (
            "tests[0].workload.connection.reconnect.within",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!(
                        "{counted}connection = {{ reconnect = {{ within = {MAX}, retry = \"1ms\" }} }}\n"
                    ),
                ),
            ),
        ),
        (
            "tests[0].workload.connection.reconnect.retry",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!(
                        "{counted}connection = {{ reconnect = {{ within = \"5s\", retry = {MAX} }} }}\n"
                    ),
                ),
            ),
        ),
        (
            "tests[0].workload.connection.reconnect.cut_all_at",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!(
                        "{counted}connection = {{ reconnect = {{ within = \"5s\", cut_all_at = {MAX} }} }}\n"
                    ),
                ),
            ),
        ),
        (
            "tests[0].workload.engine.coalescing",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!("{counted}engine = {{ coalescing = {MAX} }}\n"),
                ),
            ),
        ),
        (
            "tests[0].workload.churn.hold",
            plan(
                "",
                &custom(
                    open_loop,
                    &format!(
                        "{counted}churn = {{ rate = 10.0, connections = 10, hold = {MAX} }}\n"
                    ),
                ),
            ),
        ),
        // A preset test's workload table is bounded the same way.
        (
            "tests[0].workload.drain.timeout",
            plan(
                "",
                &test_of(
                    "latency",
                    &format!("[tests.workload]\ndrain = {{ timeout = {MAX} }}\n"),
                ),
            ),
        ),
    ];
    for (path, text) in cases {
        // The same plan with the field at a millisecond is valid: the bound is what refuses.
        let sane = text.replace("18446744073709551615s", "1ms");
        if let Err(error) = Plan::parse(&sane, "plan.toml") {
            panic!("{path}: the plan at 1s should be valid: {error}\n{sane}");
        }
        let error = Plan::parse(&text, "plan.toml").expect_err(path).to_string();
        assert!(
            error.starts_with(&format!("plan.toml: {path} = ")),
            "{path}: {error}"
        );
        assert!(
            error.contains("18446744073709551615") || error.contains("584542046090y"),
            "{path}: the value is named: {error}"
        );
    }
}

#[test]
fn duplicate_sweep_points_are_refused_naming_the_path() {
    let clients = plan("", &test_of("throughput", "clients = [1, 1]\n"));
    let error = Plan::parse(&clients, "plan.toml")
        .expect_err("duplicate")
        .to_string();
    assert!(
        error.starts_with(
            "plan.toml: tests[0].clients[1] = 1: the same count as tests[0].clients[0]"
        ),
        "{error}"
    );
    let payloads = plan("", &test_of("payload", "payloads = [\"1KB\", \"1000B\"]\n"));
    let error = Plan::parse(&payloads, "plan.toml")
        .expect_err("equivalent")
        .to_string();
    assert!(
        error.starts_with(
            "plan.toml: tests[0].payloads[1] = \"1KB\": the same size (1000 B) as tests[0].payloads[0]"
        ),
        "{error}"
    );
    // Distinct points are as before; 1KiB and 1KB are different sizes.
    let distinct = plan(
        "",
        &test_of("payload", "payloads = [\"1KB\", \"1KiB\", \"1000B\"]\n"),
    );
    let error = Plan::parse(&distinct, "plan.toml")
        .expect_err("third")
        .to_string();
    assert!(error.contains("tests[0].payloads[2]"), "{error}");
    let fine = plan("", &test_of("payload", "payloads = [\"1KB\", \"1KiB\"]\n"));
    let parsed = Plan::parse(&fine, "plan.toml").expect("distinct sizes");
    let ids: std::collections::HashSet<String> =
        parsed.cells().iter().map(|cell| cell.id(&parsed)).collect();
    assert_eq!(ids.len(), parsed.cells().len(), "one id per cell");
}

#[test]
fn will_clients_outlasting_the_cell_are_refused_naming_the_cell_timeout() {
    // Dropped at 20 minutes, then the drain timeout for their wills: past a 10-minute cell.
    let wills = "[tests.workload.wills]\nclients = 4\ndropped = 1\nafter = \"20m\"\n";
    let error = Plan::parse(&plan("", &test_of("latency", wills)), "plan.toml")
        .expect_err("the wills outlast the cell")
        .to_string();
    assert!(
        error.starts_with("plan.toml: timeouts.cell = 10m: tests[0] (latency) needs 20m"),
        "{error}"
    );
    let soon = wills.replace("20m", "2s");
    Plan::parse(&plan("", &test_of("latency", &soon)), "plan.toml").expect("room for the wills");
}
