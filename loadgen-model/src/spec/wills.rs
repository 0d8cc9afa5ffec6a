//! Wills: clients beside the workload connect with a will, and at a set time some of them
//! drop their connection without DISCONNECT (the socket closed, as a dying device's is). A
//! watcher subscribed to their will topics must receive each dropped client's will once, and
//! no will of a client that disconnected cleanly; how long each will took from its drop is
//! reported, and with an MQTT 5 will delay, any will that came before it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{MAX_DURATION, MqttVersion, Qos, SpecError, WorkloadSpec};

/// Most will clients one run connects.
pub const MAX_WILL_CLIENTS: u32 = 10_000;
/// How long the watcher listens, after the clean disconnects and the will delay, for wills
/// that should not come: brokers check their will timers about once a second.
pub const WILL_QUIET: Duration = Duration::from_millis(1_500);
/// How long the clean disconnects wait for the broker to close each connection (so that no
/// reset overtakes a DISCONNECT).
pub const WILL_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Clients with a will beside the workload, some of them dropped mid-run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wills {
    /// Clients that connect with a will.
    pub clients: u32,
    /// Of them, how many drop their connection without DISCONNECT; the others disconnect
    /// cleanly at the end, and their wills must not be sent.
    pub dropped: u32,
    /// When they drop, from the start barrier.
    #[serde(with = "humantime_serde")]
    pub after: Duration,
    /// MQTT 5 will delay interval: how long the broker waits before it publishes a will.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub delay: Option<Duration>,
    /// The wills' QoS.
    #[serde(default = "will_qos")]
    pub qos: Qos,
    /// The wills are retained (the run clears their topics once it has checked them).
    #[serde(default)]
    pub retain: bool,
}

fn will_qos() -> Qos {
    Qos::AtLeastOnce
}

fn invalid(path: &str, value: impl std::fmt::Display, problem: impl Into<String>) -> SpecError {
    SpecError {
        path: path.to_string(),
        value: value.to_string(),
        problem: problem.into(),
    }
}

impl Wills {
    /// The delay in whole seconds, as MQTT 5 carries it (rounded up, so no will is due
    /// before the delay asked for).
    pub fn delay_secs(&self) -> Option<u32> {
        self.delay.map(|delay| {
            let secs = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
            u32::try_from(secs).unwrap_or(u32::MAX)
        })
    }
}

impl Wills {
    /// The delay as sent, whole seconds (none: zero).
    pub fn delay_sent(&self) -> Duration {
        Duration::from_secs(u64::from(self.delay_secs().unwrap_or(0)))
    }

    /// The longest the will clients take from the start barrier: the drop, the delay and
    /// `drain_timeout` for the wills owed, the clean disconnects, then the delay and a quiet
    /// spell for wills that should not come.
    pub fn span(&self, drain_timeout: Duration) -> Duration {
        let delay = self.delay_sent();
        self.after
            .saturating_add(delay)
            .saturating_add(drain_timeout)
            .saturating_add(WILL_CLOSE_WAIT)
            .saturating_add(delay)
            .saturating_add(WILL_QUIET)
    }
}

impl WorkloadSpec {
    /// The topic of will client `index`'s will: beside the run's topics, not below them, so
    /// that no workload filter (`#` included) reads a will, and a watcher of
    /// `{prefix}-wills/{run}/#` sees this run's wills only.
    pub fn will_topic(&self, run_id: &str, index: u32) -> String {
        format!("{}/{index}", self.will_topics(run_id))
    }

    /// The level above every will topic of the run.
    pub fn will_topics(&self, run_id: &str) -> String {
        format!("{}-wills/{run_id}", self.topic_prefix)
    }

    /// The checks of `wills`: counts within bounds, times within loadgen's longest
    /// schedule, and a will delay only where MQTT 5 carries one.
    pub(super) fn validate_wills(&self) -> Result<(), SpecError> {
        let Some(wills) = &self.wills else {
            return Ok(());
        };
        if wills.clients == 0 || wills.clients > MAX_WILL_CLIENTS {
            return Err(invalid(
                "wills.clients",
                wills.clients,
                format!("at least 1 and at most {MAX_WILL_CLIENTS}"),
            ));
        }
        if wills.dropped > wills.clients {
            return Err(invalid(
                "wills.dropped",
                wills.dropped,
                format!("at most wills.clients ({})", wills.clients),
            ));
        }
        for (path, value) in [
            ("wills.after", Some(wills.after)),
            ("wills.delay", wills.delay),
        ] {
            if let Some(value) = value
                && value > MAX_DURATION
            {
                return Err(invalid(
                    path,
                    humantime::format_duration(value),
                    format!("at most {}", humantime::format_duration(MAX_DURATION)),
                ));
            }
        }
        if let Some(delay) = wills.delay
            && self.broker.protocol != MqttVersion::V5
        {
            return Err(invalid(
                "wills.delay",
                humantime::format_duration(delay),
                "a will delay is an MQTT 5 property: set broker.protocol = \"5\"",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tests::example;

    fn with(wills: Wills) -> WorkloadSpec {
        WorkloadSpec {
            wills: Some(wills),
            ..example()
        }
    }

    fn wills() -> Wills {
        Wills {
            clients: 200,
            dropped: 50,
            after: Duration::from_secs(1),
            delay: None,
            qos: Qos::AtLeastOnce,
            retain: false,
        }
    }

    #[test]
    fn bad_wills_are_refused_naming_the_field() {
        let cases: Vec<(Wills, &str)> = vec![
            (
                Wills {
                    clients: 0,
                    ..wills()
                },
                "wills.clients = 0: at least 1 and at most 10000",
            ),
            (
                Wills {
                    dropped: 201,
                    ..wills()
                },
                "wills.dropped = 201: at most wills.clients (200)",
            ),
            (
                Wills {
                    after: Duration::from_secs(7_200),
                    ..wills()
                },
                "wills.after = 2h: at most 1h",
            ),
            (
                Wills {
                    delay: Some(Duration::from_secs(2)),
                    ..wills()
                },
                "wills.delay = 2s: a will delay is an MQTT 5 property: set broker.protocol = \"5\"",
            ),
        ];
        for (wills, expected) in cases {
            let error = with(wills).validate().expect_err("refused");
            assert_eq!(error.to_string(), expected);
        }
        let mut five = with(Wills {
            delay: Some(Duration::from_secs(2)),
            ..wills()
        });
        five.broker.protocol = MqttVersion::V5;
        five.validate().expect("a will delay over MQTT 5");
    }

    #[test]
    fn a_will_delay_is_carried_in_whole_seconds_never_shorter() {
        let delay = |ms: u64| Wills {
            delay: Some(Duration::from_millis(ms)),
            ..wills()
        };
        assert_eq!(delay(2_000).delay_secs(), Some(2));
        assert_eq!(delay(1_500).delay_secs(), Some(2));
        assert_eq!(wills().delay_secs(), None);
    }

    #[test]
    fn wills_read_from_toml_with_their_defaults() {
        let text = "clients = 10\ndropped = 3\nafter = \"500ms\"\n";
        let read: Wills = toml::from_str(text).expect("wills");
        assert_eq!(
            (read.qos, read.retain, read.delay),
            (Qos::AtLeastOnce, false, None)
        );
        assert!(
            toml::from_str::<Wills>("clients = 1\ndropped = 0\nafter = \"1s\"\nbogus = 1\n")
                .is_err()
        );
    }
}
