//! From a command's flags to the spec it runs: the preset or the spec file, every given flag
//! applied over it, then validation.

use super::{CliError, Command, SearchArgs, WarmupArg, WorkloadArgs};
use crate::spec::{Churn, DEFAULT_RETRY, OfflineGap, Pacing, Reconnect, WorkloadSpec};
use crate::{LoadgenError, presets};

impl SearchArgs {
    /// The settings these flags ask for.
    pub fn settings(&self) -> crate::saturation::SearchSettings {
        let mut settings = crate::saturation::SearchSettings::default();
        set(&mut settings.probe, self.probe);
        set(&mut settings.probe_warmup, self.probe_warmup);
        set(&mut settings.p99_bound, self.p99_bound);
        set(&mut settings.budget, self.budget);
        if self.start_rate.is_some() {
            settings.start_rate = self.start_rate;
        }
        settings
    }
}

impl WorkloadArgs {
    /// Applies every given flag to `spec`.
    pub fn apply(&self, spec: &mut WorkloadSpec) {
        if let Some((host, port)) = &self.broker {
            spec.broker.host = host.clone();
            spec.broker.port = *port;
        }
        set(&mut spec.broker.protocol, self.protocol);
        set(&mut spec.qos, self.qos);
        if self.subscriber_qos.is_some() {
            spec.subscriber_qos = self.subscriber_qos;
        }
        if self.topic_alias {
            spec.connection.topic_alias = true;
        }
        if self.message_expiry.is_some() {
            spec.connection.message_expiry = self.message_expiry;
        }
        set(&mut spec.header_in, self.header_in);
        if self.receive_maximum.is_some() {
            spec.connection.receive_maximum = self.receive_maximum;
        }
        if let Some(clients) = self.clients {
            spec.publishers = clients;
            spec.subscribers = clients;
        }
        set(&mut spec.publishers, self.publishers);
        set(&mut spec.subscribers, self.subscribers);
        set(&mut spec.topology, self.topology);
        if let Some(late_subscribers) = self.retain_late {
            spec.retain = Some(crate::spec::Retain {
                late_subscribers,
                filter: self
                    .retain_filter
                    .clone()
                    .unwrap_or_else(|| "#".to_string()),
                handling: self.retain_handling.unwrap_or(0),
                as_published: self.retain_as_published,
            });
        }
        if let (Some(clients), Some(dropped), Some(after)) =
            (self.wills, self.wills_dropped, self.wills_after)
        {
            spec.wills = Some(crate::spec::Wills {
                clients,
                dropped,
                after,
                delay: self.will_delay,
                qos: self.will_qos.unwrap_or(crate::spec::Qos::AtLeastOnce),
                retain: self.will_retain,
            });
        }
        if let Some(pattern) = &self.topics {
            spec.topology = crate::spec::Topology::Tree;
            spec.topics = Some(crate::spec::TopicTree {
                pattern: pattern.clone(),
                counts: self.topic_count.iter().cloned().collect(),
                subscribe: self.subscribe.clone(),
            });
        }
        set(&mut spec.payload, self.payload);
        if let Some(messages) = self.messages {
            spec.messages_per_publisher = messages;
            spec.duration = None;
            spec.warmup = None;
        }
        if let Some(duration) = self.duration {
            // A timed run: the preset's counts give way, and a burst becomes a closed loop.
            spec.duration = Some(duration);
            spec.messages_per_publisher = 0;
            spec.warmup_messages = 0;
            if spec.pacing == Pacing::Burst {
                spec.pacing = Pacing::ClosedLoop;
            }
        }
        match self.warmup {
            Some(WarmupArg::Messages(count)) => spec.warmup_messages = count,
            Some(WarmupArg::Time(time)) => spec.warmup = Some(time),
            None => {}
        }
        if let Some(interval) = self.interval {
            spec.pacing = Pacing::OpenLoop { interval };
        }
        if let Some(rate) = self.rate {
            spec.pacing = Pacing::Rate { rate };
        }
        if self.closed_loop {
            spec.pacing = Pacing::ClosedLoop;
        }
        if self.burst {
            spec.pacing = Pacing::Burst;
        }
        set(&mut spec.engine.threads, self.threads);
        set(&mut spec.engine.coalescing, self.coalescing);
        set(&mut spec.connection.inflight, self.inflight);
        if self.ramp_up.is_some() {
            spec.connection.ramp_up_per_second = self.ramp_up;
        }
        set(&mut spec.connection.keep_alive, self.keep_alive);
        set(&mut spec.connection.connect_timeout, self.connect_timeout);
        set(&mut spec.drain.timeout, self.drain_timeout);
        set(&mut spec.drain.idle, self.drain_idle);
        set(
            &mut spec.connection.client_id_prefix,
            self.client_id_prefix.clone(),
        );
        set(&mut spec.topic_prefix, self.topic_prefix.clone());
        if self.username.is_some() {
            spec.broker.username = self.username.clone();
        }
        if self.tls_ca.is_some() {
            spec.broker.tls_ca_file = self.tls_ca.clone();
        }
        if self.persistent_session {
            spec.connection.clean_session = false;
        }
        if self.subscriber_rate_limit.is_some() {
            spec.subscriber_rate_limit = self.subscriber_rate_limit;
        }
        set(&mut spec.broker.transport, self.transport);
        if self.quic_zero_rtt {
            spec.broker.quic_zero_rtt = true;
        }
        set(&mut spec.broker.quic_streams, self.quic_streams);
        if self.websocket_path.is_some() {
            spec.broker.websocket_path = self.websocket_path.clone();
        }
        if let (Some(rate), Some(connections), Some(hold)) =
            (self.churn_rate, self.churn_connections, self.churn_hold)
        {
            spec.churn = Some(Churn {
                rate,
                connections,
                hold,
            });
        }
        if let (Some(after), Some(gap)) = (self.offline_after, self.offline_gap) {
            spec.connection.offline = Some(OfflineGap { after, gap });
        }
        if let Some(within) = self.reconnect_within {
            spec.connection.reconnect = Some(Reconnect {
                within,
                retry: self.reconnect_retry.unwrap_or(DEFAULT_RETRY),
                cut_all_at: self.cut_all_at,
            });
        }
    }
}

/// Overwrites `field` when a flag gave a value; an absent flag keeps the preset's.
fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// Builds the spec a command asks for.
pub fn spec_for(command: &Command) -> Result<WorkloadSpec, CliError> {
    let (mut spec, args) = match command {
        Command::Latency(args) => (presets::latency(), args),
        Command::Payload(args) => {
            if args.payload.is_none() {
                return Err(CliError::Usage(
                    "loadgen payload needs --size (e.g. 1KB, 10KB, 1MB)".to_string(),
                ));
            }
            (presets::latency(), args)
        }
        Command::Throughput(args) | Command::Saturate { workload: args, .. } => {
            (presets::throughput(), args)
        }
        Command::Run { spec, overrides } => {
            let text = std::fs::read_to_string(spec).map_err(|e| CliError::Input {
                path: spec.display().to_string(),
                problem: e.to_string(),
            })?;
            let parsed: WorkloadSpec = toml::from_str(&text).map_err(|e| CliError::Input {
                path: spec.display().to_string(),
                problem: e.message().to_string() + &span_note(&text, e.span()),
            })?;
            (parsed, overrides)
        }
        Command::Merge { .. } => {
            return Err(CliError::Usage(
                "merge takes result files, not a workload".to_string(),
            ));
        }
    };
    args.apply(&mut spec);
    if let Some(password) = password_of(args)? {
        spec.broker.password = Some(password);
    }
    spec.validate().map_err(LoadgenError::from)?;
    Ok(spec)
}

/// The password `--password-file` or `--password-env` names, if either is given.
fn password_of(args: &super::args::WorkloadArgs) -> Result<Option<String>, CliError> {
    if let Some(path) = &args.password_file {
        let text = std::fs::read_to_string(path).map_err(|e| CliError::Input {
            path: path.display().to_string(),
            problem: e.to_string(),
        })?;
        return Ok(Some(text.lines().next().unwrap_or_default().to_string()));
    }
    if let Some(name) = &args.password_env {
        return std::env::var(name).map(Some).map_err(|_| {
            CliError::Usage(format!(
                "--password-env {name}: the environment has no variable {name}"
            ))
        });
    }
    Ok(None)
}

/// ` (line N)` for a TOML error with a position, so the user finds the bad line.
fn span_note(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!(" (line {line})")
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    #[test]
    fn flags_override_presets() {
        let cli = Cli::try_parse_from([
            "loadgen",
            "throughput",
            "--clients",
            "800",
            "--messages",
            "100",
            "--broker",
            "[::1]:1884",
        ])
        .expect("parses");
        let spec = spec_for(&cli.command).expect("valid");
        assert_eq!(
            (
                spec.publishers,
                spec.subscribers,
                spec.messages_per_publisher
            ),
            (800, 800, 100)
        );
        assert_eq!((spec.broker.host.as_str(), spec.broker.port), ("::1", 1884));
    }

    #[test]
    fn will_flags_make_the_wills_and_a_delay_needs_mqtt_5() {
        let spec_of = |extra: &[&str]| {
            let mut args = vec![
                "loadgen",
                "latency",
                "--wills",
                "200",
                "--wills-dropped",
                "50",
                "--wills-after",
                "2s",
            ];
            args.extend_from_slice(extra);
            spec_for(&Cli::try_parse_from(args).expect("parses").command)
        };
        let wills = spec_of(&[]).expect("valid").wills.expect("wills");
        assert_eq!((wills.clients, wills.dropped), (200, 50));
        assert_eq!(wills.after, std::time::Duration::from_secs(2));
        assert_eq!(
            (wills.qos, wills.retain, wills.delay),
            (crate::spec::Qos::AtLeastOnce, false, None)
        );
        let refused = spec_of(&["--will-delay", "2s"]).expect_err("3.1.1 has no will delay");
        assert!(
            refused.to_string().contains("wills.delay = 2s"),
            "{refused}"
        );
        let delayed = spec_of(&[
            "--will-delay",
            "2s",
            "--protocol",
            "5",
            "--will-qos",
            "2",
            "--will-retain",
        ])
        .expect("valid")
        .wills
        .expect("wills");
        assert_eq!(delayed.delay, Some(std::time::Duration::from_secs(2)));
        assert_eq!(
            (delayed.qos, delayed.retain),
            (crate::spec::Qos::ExactlyOnce, true)
        );
        // The three that define the wills go together.
        assert!(Cli::try_parse_from(["loadgen", "latency", "--wills", "5"]).is_err());
    }

    #[test]
    fn bad_input_is_refused_with_the_field_named() {
        let refused = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).expect("parses");
            spec_for(&cli.command)
                .expect_err("must be refused")
                .to_string()
        };
        assert!(refused(&["loadgen", "throughput", "--clients", "0"]).contains("publishers = 0"));
        assert!(
            refused(&["loadgen", "latency", "--interval", "0s"]).contains("pacing.interval = 0s")
        );
        assert!(refused(&["loadgen", "payload", "--size", "300MB"]).contains("256 MB"));
        assert!(refused(&["loadgen", "payload"]).contains("--size"));
        assert!(Cli::try_parse_from(["loadgen", "latency", "--frobnicate"]).is_err());
        assert!(Cli::try_parse_from(["loadgen", "latency", "--qos", "3"]).is_err());
    }
}
