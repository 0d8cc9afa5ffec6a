//! MQTT over QUIC in a plan: which tests speak it (`[tests.workload.broker] transport =
//! "quic"`), an external broker's QUIC listener (`quic_address`), and the check that every
//! broker of the plan can be reached that way.

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

    /// The brokers' `quic_address`, and every broker reachable by every test that speaks
    /// QUIC.
    pub(super) fn validate_quic(&self) -> Result<(), PlanError> {
        for (b, broker) in self.brokers.iter().enumerate() {
            let Some(address) = broker.quic_address.as_deref() else {
                continue;
            };
            let path = format!("brokers[{b}].quic_address");
            if broker.kind != BrokerKind::External {
                return Err(invalid(
                    path,
                    quoted(address),
                    "only an external broker has an address of its own",
                ));
            }
            if address.rsplit_once(':').is_none() {
                return Err(invalid(path, quoted(address), "needs host:port"));
            }
        }
        for t in self.quic_tests() {
            for (b, broker) in self.brokers.iter().enumerate() {
                if let Some(reason) = quic_unreachable(broker) {
                    return Err(invalid(
                        format!("tests[{t}].{}", self.transport_field(t)),
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
        BrokerKind::External => broker
            .quic_address
            .is_none()
            .then(|| "an external broker needs quic_address (host:port, UDP)".to_string()),
        BrokerKind::Embedded => Some("the embedded broker (rumqttd) serves no QUIC".to_string()),
        BrokerKind::Native | BrokerKind::Kubernetes => Some(
            "the agent opens no QUIC listener for a broker it deploys yet; run the broker \
             yourself and name it as an external broker with quic_address"
                .to_string(),
        ),
    }
}
