//! MQTT over QUIC in a plan: which tests speak it (`[tests.workload.broker] transport =
//! "quic"`) and the check that every broker of the plan can be reached that way.

use loadgen::spec::Transport;

use super::error::{PlanError, invalid, quoted};
use super::types::{BrokerEntry, BrokerKind, Plan};

impl Plan {
    /// The indices of the tests whose workload speaks QUIC.
    pub fn quic_tests(&self) -> Vec<usize> {
        (0..self.tests.len())
            .filter(|&test| {
                self.first_workload(test)
                    .is_ok_and(|spec| spec.broker.transport == Transport::Quic)
            })
            .collect()
    }

    /// Every broker reachable by every test that speaks QUIC.
    pub(super) fn validate_quic(&self) -> Result<(), PlanError> {
        for t in self.quic_tests() {
            for (b, broker) in self.brokers.iter().enumerate() {
                if let Some(reason) = quic_unreachable(broker) {
                    return Err(invalid(
                        format!("tests[{t}].workload.broker.transport"),
                        quoted("quic"),
                        format!("brokers[{b}] ({}): {reason}", broker.name),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why a test speaking QUIC cannot reach `broker`, if it cannot.
fn quic_unreachable(broker: &BrokerEntry) -> Option<String> {
    match broker.kind {
        BrokerKind::External => None,
        BrokerKind::Embedded => Some("the embedded broker (rumqttd) serves no QUIC".to_string()),
        BrokerKind::Native | BrokerKind::Kubernetes => Some(
            "the agent opens no QUIC listener for a broker it deploys yet; give the broker's \
             QUIC address as an external broker's address"
                .to_string(),
        ),
    }
}
