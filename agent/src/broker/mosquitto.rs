//! Mosquitto: `mosquitto -c FILE` with a generated config that lifts every limit a benchmark
//! could trip over. The config mirrors the test harness's (`tests/src/mosquitto.rs`), with
//! the listener on the spec's address instead of loopback.

use std::net::IpAddr;
use std::time::Duration;

use super::error::BrokerError;
use super::install::InstallPaths;
use super::native::{LaunchPlan, PlanContext};
use domain::{BrokerOptions, Product};
use host::CommandLine;

/// How long Mosquitto may take to answer MQTT; it is usually ready within milliseconds.
pub const START_DEADLINE: Duration = Duration::from_secs(10);

/// Mosquitto's own default for unacknowledged QoS 1/2 messages per client, written
/// explicitly so the config states what the benchmark ran with.
pub const DEFAULT_MAX_INFLIGHT: u16 = 20;

/// The plan for one Mosquitto instance.
pub fn plan(install: &InstallPaths, context: &PlanContext<'_>) -> Result<LaunchPlan, BrokerError> {
    let program = InstallPaths::locate(Product::Mosquitto, &install.mosquitto)?;
    let config_path = context.dir.join("mosquitto.conf");
    let mut main = CommandLine::new(program);
    main.args = vec!["-c".into(), config_path.display().to_string()];
    Ok(LaunchPlan {
        product: Product::Mosquitto,
        listen: context.listen(),
        files: vec![(
            config_path,
            render_config(&context.spec.options, context.spec.bind, context.port),
        )],
        helpers: Vec::new(),
        main,
        // SIGTERM: Mosquitto exits at once, and there is nothing to persist.
        stop: None,
        ready_deadline: context.spec.options.start_deadline_or(START_DEADLINE),
        main_process_names: &["mosquitto"],
        port_taken_markers: &["Address already in use"],
    })
}

/// The config file for a broker listening on `bind:port`.
fn render_config(options: &BrokerOptions, bind: IpAddr, port: u16) -> String {
    settings(options, &format!("listener {port} {bind}"))
}

/// Mosquitto's settings for a benchmark behind `listener` (a `listener` line), shared by
/// the native driver and the kubernetes manifests; 1.6 and 2.x read them alike.
pub(super) fn settings(options: &BrokerOptions, listener: &str) -> String {
    let inflight = options
        .max_inflight_messages
        .unwrap_or(DEFAULT_MAX_INFLIGHT);
    [
        "# Written by the Continuum agent.".to_owned(),
        listener.to_owned(),
        "allow_anonymous true".to_owned(),
        "persistence false".to_owned(),
        // max_packet_size is left unset (no limit beyond MQTT's 256 MB), and so is
        // message_size_limit: its default 0 already means no limit, it is deprecated, and
        // a release that drops it would refuse to start with it in the config.
        format!("max_queued_messages {}", options.max_queued_messages()),
        format!("max_inflight_messages {inflight}"),
        // $SYS counters, refreshed as often as Mosquitto allows.
        "sys_interval 1".to_owned(),
        // The agent (or the container runtime) captures it; stderr is unbuffered, so the
        // start line (with the version the agent reports) is there at once.
        "log_dest stderr".to_owned(),
        // One type per line: Mosquitto reads only the first word of a log_type line (with
        // "error warning notice information" on one line it logged errors alone).
        "log_type error".to_owned(),
        "log_type warning".to_owned(),
        "log_type notice".to_owned(),
        "log_type information".to_owned(),
        String::new(),
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::error::ErrorCode;
    use crate::broker::native::NativeDriver;
    use crate::broker::readiness::{PROBE_TIMEOUT, probe};
    use crate::broker::test_support::{installed_or_skip, loopback_spec, tagged_processes};
    use crate::broker::{BrokerDriver, BrokerState};
    use domain::BrokerKind;
    use host::is_running;

    #[test]
    fn the_config_lifts_limits_and_listens_where_asked() {
        let config = render_config(
            &BrokerOptions::default(),
            "127.0.0.1".parse().unwrap(),
            4242,
        );
        for line in [
            "listener 4242 127.0.0.1",
            "allow_anonymous true",
            "persistence false",
            "max_queued_messages 1000000",
            "max_inflight_messages 20",
            "sys_interval 1",
        ] {
            assert!(
                config.lines().any(|l| l == line),
                "missing {line:?} in\n{config}"
            );
        }
        assert!(!config.contains("max_packet_size"));
        assert!(!config.contains("message_size_limit"));

        let options = BrokerOptions {
            max_inflight_messages: Some(5),
            max_queued_messages: Some(10),
            start_deadline: None,
        };
        let config = render_config(&options, "::".parse().unwrap(), 1883);
        assert!(config.contains("\nlistener 1883 ::\n"));
        assert!(config.contains("\nmax_inflight_messages 5\n"));
        assert!(config.contains("\nmax_queued_messages 10\n"));
    }

    #[tokio::test]
    async fn a_real_mosquitto_starts_answers_and_stops_without_leftovers() {
        let install = InstallPaths::default();
        if !installed_or_skip(&install, Product::Mosquitto) {
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let driver = NativeDriver::new(install, state.path().to_owned());
        let spec = loopback_spec(
            "mosq",
            BrokerKind::Native {
                product: Product::Mosquitto,
            },
        );
        let mut broker = tokio::time::timeout(Duration::from_secs(30), driver.start(&spec))
            .await
            .expect("start is bounded")
            .unwrap();
        let address = broker.address();
        assert_ne!(address.port(), 0, "port 0 is resolved");
        let pid = broker.pid().unwrap();
        assert!(is_running(pid));
        assert_eq!(
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap()
                .trim(),
            "mosquitto"
        );
        assert_eq!(broker.check().await, BrokerState::Running);
        probe(address, PROBE_TIMEOUT).await.unwrap();
        let detail = broker.detail();
        assert!(
            detail.starts_with("mosquitto ")
                && detail.chars().nth(10).is_some_and(|c| c.is_ascii_digit()),
            "the version from its log: {detail}"
        );

        // The same port again is refused before anything is spawned.
        let mut again = spec.clone();
        again.name = "mosq2".into();
        again.port = address.port();
        let error = driver.start(&again).await.unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");

        let config = std::fs::read_to_string(state.path().join("mosq/mosquitto.conf")).unwrap();
        assert!(config.contains(&format!("listener {} 127.0.0.1", address.port())));

        tokio::time::timeout(Duration::from_secs(30), broker.stop())
            .await
            .expect("stop is bounded")
            .unwrap();
        assert!(!is_running(pid), "mosquitto {pid} still runs");
        assert!(probe(address, PROBE_TIMEOUT).await.is_err());
        assert_eq!(tagged_processes("mosq"), Vec::<u32>::new());
    }
}
