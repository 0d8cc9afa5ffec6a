//! The study's scenarios (Table II), its tests (Table III) as loadgen defines them
//! ([`loadgen::presets`]), the plan's overrides of a test's workload, and the broker
//! password a workload reads from a file or the environment (`broker.password_file`,
//! `broker.password_env`).

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use loadgen::WorkloadSpec;
use loadgen::presets::StudyTest;
use loadgen::size::ByteSize;
use loadgen::spec::{Pacing, QuicStreams, Transport};

use super::error::{PlanError, invalid, quoted};
use super::types::{Plan, TestEntry, TestKind, WarmupEntry};

/// Totals between two nodes of a preset scenario: (delay, jitter, loss %).
pub fn scenario_preset(name: &str) -> Option<(Duration, Duration, f64)> {
    let us = Duration::from_micros;
    match name {
        "local" => Some((Duration::ZERO, Duration::ZERO, 0.0)),
        "edge" => Some((us(2_500), us(500), 0.04)),
        "cloud" => Some((us(6_250), us(1_250), 0.1)),
        _ => None,
    }
}

/// The workload of a test kind before the plan's overrides, and the points it sweeps
/// (payload sizes, client pairs): the study's test of that kind, as loadgen defines it.
pub fn test_preset(kind: TestKind) -> (WorkloadSpec, Vec<ByteSize>, Vec<u32>) {
    let test = match kind {
        TestKind::Latency => StudyTest::Latency,
        TestKind::Payload => StudyTest::Payload,
        TestKind::Burst => StudyTest::Burst,
        TestKind::Throughput => StudyTest::Throughput,
        TestKind::Saturation => StudyTest::Saturation,
        // The table sets every field that matters (validation requires it); the latency
        // test's spec only gives it a shape to be laid over.
        TestKind::Custom => {
            let preset = StudyTest::Latency.preset();
            return (preset.workload, Vec::new(), Vec::new());
        }
        TestKind::P2p | TestKind::FanOut | TestKind::FanInShared | TestKind::Connections => {
            let workload = suite_workload(kind, FULL_SCALE, None, None)
                .unwrap_or_else(|| StudyTest::Latency.preset().workload);
            return (workload, Vec::new(), Vec::new());
        }
    };
    let preset = test.preset();
    (preset.workload, preset.payload_sizes, preset.client_pairs)
}

/// A suite scenario's `scale` when the plan gives none: the suite as it ran.
pub const FULL_SCALE: f64 = 1.0;

/// The workload of a suite kind at `scale`, with `publishers` and `subscribers` in place of
/// the scaled counts where the plan sets them (so a fan-in tree keeps a topic per publisher);
/// None for other kinds.
fn suite_workload(
    kind: TestKind,
    scale: f64,
    publishers: Option<u32>,
    subscribers: Option<u32>,
) -> Option<WorkloadSpec> {
    let scenario = kind.suite_scenario()?;
    let mut counts = scenario.counts(scale);
    counts.publishers = publishers.unwrap_or(counts.publishers);
    counts.subscribers = subscribers.unwrap_or(counts.subscribers);
    Some(scenario.workload(counts))
}

/// The workload of one test at one point (payload size or client pairs), with the plan's
/// overrides applied; the broker address is filled in when the cell runs. The controller
/// builds workloads only through [`Plan::workloads_of`], so every reader sees a test's
/// workloads made the same way.
pub fn workload_for(
    test: &TestEntry,
    payload: Option<ByteSize>,
    clients: Option<u32>,
) -> Result<WorkloadSpec, String> {
    let (mut spec, _, _) = test_preset(test.kind);
    let scale = test.scale.unwrap_or(FULL_SCALE);
    if let Some(suite) = suite_workload(test.kind, scale, test.publishers, test.subscribers) {
        spec = suite;
    }
    if let Some(table) = &test.workload {
        spec =
            overlay_workload(spec, table).map_err(|error| error.within("workload").to_string())?;
    }
    if let Some(publishers) = test.publishers {
        spec.publishers = publishers;
    }
    if let Some(subscribers) = test.subscribers {
        spec.subscribers = subscribers;
    }
    if let Some(messages) = test.messages {
        spec.messages_per_publisher = messages;
    }
    match test.warmup {
        Some(WarmupEntry::Messages(count)) => spec.warmup_messages = count,
        Some(WarmupEntry::Time(time)) => spec.warmup = Some(time),
        None => {}
    }
    if let Some(duration) = test.duration {
        spec.duration = Some(duration);
    }
    if let Some(rate) = test.rate {
        spec.pacing = Pacing::Rate { rate };
    }
    if let Some(interval) = test.interval {
        spec.pacing = Pacing::OpenLoop { interval };
    }
    if let Some(search) = &test.search {
        spec.duration = Some(search.probe);
        spec.warmup = Some(search.probe_warmup);
    }
    if let Some(qos) = test.qos {
        spec.qos = qos;
    }
    if let Some(size) = test.payload {
        spec.payload = size;
    }
    if let Some(size) = payload {
        spec.payload = size;
    }
    if let Some(pairs) = clients {
        spec.publishers = pairs;
        spec.subscribers = pairs;
    }
    // A plan's `transports` sweep leaves each of its tests one transport (`transports.rs`);
    // a QUIC setting of the test applies to its QUIC run only.
    if let Some([transport]) = test.transports.as_deref() {
        spec.broker.transport = *transport;
        spec.broker.quic_zero_rtt &= *transport == Transport::Quic;
        if *transport != Transport::Quic {
            spec.broker.quic_streams = QuicStreams::Single;
        }
    }
    if let Some(scenario) = test.kind.suite_scenario() {
        scenario.settle(&mut spec);
    }
    Ok(spec)
}

/// A field of a test's `workload` table that loadgen's spec does not accept, its path inside
/// the table (e.g. `connection.inflight`) and its value as written (or `(absent)`).
pub type WorkloadTableError = domain::FieldError;

/// Fields of the spec that the run sets itself, per cell.
const RUN_OWNED: [(&str, &str); 4] = [
    (
        "broker.host",
        "the broker's address comes from the plan's [[brokers]]",
    ),
    (
        "broker.port",
        "the broker's address comes from the plan's [[brokers]]",
    ),
    ("shard", "the run splits the load over tests[].loadgen"),
    (
        "broker.tls_ca_pem",
        "the run supplies it (the CA an agent made for a QUIC listener it deployed); a test \
         names its CA with tls_ca_file",
    ),
];

/// `spec` with `table` laid over it, field by field (tables merge, values replace), then read
/// back as loadgen's own type, so every field and check of SPEC.toml applies here too.
pub fn overlay_workload(
    spec: WorkloadSpec,
    table: &toml::Table,
) -> Result<WorkloadSpec, WorkloadTableError> {
    for (path, problem) in RUN_OWNED {
        if let Some(value) = lookup(table, path) {
            return Err(WorkloadTableError {
                path: path.to_string(),
                value: value.to_string(),
                problem: problem.to_string(),
            });
        }
    }
    let mut merged = toml::Table::try_from(&spec).map_err(|error| WorkloadTableError {
        path: String::new(),
        value: "(preset)".to_string(),
        problem: format!("the preset does not serialize: {error}"),
    })?;
    merge(&mut merged, &without_password_sources(table));
    let password = spec.broker.password.clone();
    let mut overlaid: WorkloadSpec = serde_path_to_error::deserialize(toml::Value::Table(merged))
        .map_err(|error| {
        let path = error.path().to_string();
        WorkloadTableError {
            value: lookup(table, &path).map_or("(absent)".to_string(), |v| v.to_string()),
            // toml adds "in `table`" on a line of its own; the path already says where.
            problem: error
                .inner()
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            path,
        }
    })?;
    // The password is never serialized, so it does not survive the round trip by itself.
    if overlaid.broker.password.is_none() {
        overlaid.broker.password = password;
    }
    Ok(overlaid)
}

/// The keys of `[tests.workload] broker` that say where the broker's password comes from: at
/// most one of them. `password_file` and `password_env` are the controller's, not loadgen's:
/// [`Plan::read_credentials`] turns either into `password` before a run.
pub const PASSWORD_SOURCES: [&str; 3] = ["password", "password_file", "password_env"];
/// Largest password file read: a password, not a document.
pub const MAX_PASSWORD_FILE: u64 = 4096;

/// `table` without `broker.password_file` and `broker.password_env`, which loadgen's spec does
/// not know (before [`Plan::read_credentials`], the spec has no password).
fn without_password_sources(table: &toml::Table) -> std::borrow::Cow<'_, toml::Table> {
    let names_source = |broker: &toml::Table| {
        PASSWORD_SOURCES[1..]
            .iter()
            .any(|key| broker.contains_key(*key))
    };
    match table.get("broker").and_then(toml::Value::as_table) {
        Some(broker) if names_source(broker) => {
            let mut owned = table.clone();
            if let Some(broker) = owned.get_mut("broker").and_then(toml::Value::as_table_mut) {
                for key in &PASSWORD_SOURCES[1..] {
                    broker.remove(*key);
                }
            }
            std::borrow::Cow::Owned(owned)
        }
        _ => std::borrow::Cow::Borrowed(table),
    }
}

impl Plan {
    /// The plan with each test's `broker.password_file` read (a regular file of at most
    /// [`MAX_PASSWORD_FILE`] bytes, one trailing newline dropped) and each `broker.password_env`
    /// looked up in this process's environment, each becoming `broker.password`. For the
    /// operator's own plans only: a plan submitted to `controller serve` naming either is
    /// refused at admission, since they would read the server's files and environment.
    pub fn read_credentials(self) -> Result<Plan, PlanError> {
        self.read_credentials_with(&|name| std::env::var_os(name))
    }

    /// [`Plan::read_credentials`] with `env` as the environment.
    pub fn read_credentials_with(
        mut self,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Plan, PlanError> {
        for (i, test) in self.tests.iter_mut().enumerate() {
            let Some(broker) = test
                .workload
                .as_mut()
                .and_then(|table| table.get_mut("broker"))
                .and_then(toml::Value::as_table_mut)
            else {
                continue;
            };
            // Named as the plan file numbers it (a transports sweep unrolls tests).
            let file_test = test.unrolled_from.unwrap_or(i);
            let path = |key: &str| format!("tests[{file_test}].workload.broker.{key}");
            let password = if let Some(value) = broker.remove("password_file") {
                let file = value.as_str().unwrap_or_default();
                read_password_file(Path::new(file))
                    .ok_or_else(|| invalid(path("password_file"), quoted(file), unreadable()))?
            } else if let Some(value) = broker.remove("password_env") {
                let name = value.as_str().unwrap_or_default();
                env(name)
                    .and_then(|value| value.into_string().ok())
                    .filter(|value| !value.is_empty())
                    .ok_or_else(|| {
                        invalid(
                            path("password_env"),
                            quoted(name),
                            "not set (or empty, or not UTF-8) in the controller's environment",
                        )
                    })?
            } else {
                continue;
            };
            broker.insert("password".to_string(), toml::Value::String(password));
        }
        Ok(self)
    }

    /// The TOML path of the first password source (`password_file`, `password_env`) not
    /// read yet: a run refuses such a plan rather than connect without the password.
    pub fn unread_password_source(&self) -> Option<String> {
        self.tests.iter().enumerate().find_map(|(i, test)| {
            let broker = test.workload.as_ref()?.get("broker")?.as_table()?;
            PASSWORD_SOURCES[1..]
                .iter()
                .find(|key| broker.contains_key(**key))
                .map(|key| format!("tests[{}].workload.broker.{key}", self.file_test(i)))
        })
    }

    /// Parses and validates the text of the operator's own plan, then reads the passwords it
    /// names from files and the environment ([`Plan::read_credentials`]).
    pub fn parse_local(text: &str, origin: &str) -> Result<Plan, PlanError> {
        Plan::parse(text, origin)?
            .read_credentials()
            .map_err(|error| error.in_file(origin))
    }
}

/// One message for every way a password file fails (missing, not permitted, not a regular
/// file, too large, not UTF-8, empty), so an error never tells which paths exist.
fn unreadable() -> String {
    format!(
        "cannot be read as a password: it must be a regular file of at most \
         {MAX_PASSWORD_FILE} bytes, readable by the controller, holding a non-empty UTF-8 \
         password (one trailing newline is dropped)"
    )
}

/// The password in `file`: the whole file but one trailing newline, or None if the file is
/// not a small regular file holding a non-empty UTF-8 password.
fn read_password_file(file: &Path) -> Option<String> {
    let bytes =
        host::capped::read_capped(file, MAX_PASSWORD_FILE, host::capped::Links::Follow).ok()?;
    let mut text = String::from_utf8(bytes).ok()?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    (!text.is_empty()).then_some(text)
}

fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            // A table naming its `mode` (pacing) is another variant, whose fields are its
            // own: the preset's (an open loop's interval) would be unknown to a rate.
            (Some(toml::Value::Table(inner)), toml::Value::Table(over_inner))
                if !over_inner.contains_key("mode") =>
            {
                merge(inner, over_inner);
            }
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Whether a test's `workload` table sets the field at `path` (e.g. `connection.inflight`).
pub fn sets(table: &toml::Table, path: &str) -> bool {
    lookup(table, path).is_some()
}

fn lookup<'a>(table: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let mut steps = path.split('.');
    let mut value = step_into(table, steps.next()?)?;
    for step in steps {
        value = step_into(value.as_table()?, step)?;
    }
    Some(value)
}

/// One step of a path: a key, or a key and an index into its array (`subscribe[1]`).
fn step_into<'a>(table: &'a toml::Table, step: &str) -> Option<&'a toml::Value> {
    match step.strip_suffix(']').and_then(|s| s.split_once('[')) {
        Some((key, index)) => table
            .get(key)?
            .as_array()?
            .get(index.parse::<usize>().ok()?),
        None => table.get(step),
    }
}
