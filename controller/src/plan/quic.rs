//! MQTT over QUIC in a plan: which tests speak it (`[tests.workload.broker] transport =
//! "quic"`), an external broker's QUIC listener (`quic_address`), the listener the agent
//! opens for a native broker or a pod (EMQX's, on a UDP NodePort), and the check that every
//! broker of the plan can be reached that way.
//!
//! A deployed broker's QUIC certificate is made by its agent, and the controller sends that
//! CA with each workload; the test's `tls_ca_file` is for external brokers.

use domain::{Product, QuicDelivery};
use loadgen::spec::{Transport, WorkloadSpec};

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

    /// The QUIC port a deployed `broker` is asked to open when a test speaks QUIC, else
    /// none: any free one natively, the product's default UDP NodePort for a pod.
    pub fn quic_port_of(&self, broker: &BrokerEntry) -> Option<u16> {
        let deployed = matches!(broker.kind, BrokerKind::Native | BrokerKind::Kubernetes);
        (deployed && !self.quic_tests().is_empty()).then_some(0)
    }

    /// Whether the CA of `spec`'s broker comes with the run rather than from the test: a
    /// test speaking QUIC to brokers that are all deployed, whose agents make their
    /// certificates (the other checks refuse QUIC to a broker that cannot open a listener).
    pub(super) fn quic_ca_supplied(&self, spec: &WorkloadSpec) -> bool {
        spec.broker.transport == Transport::Quic
            && self
                .brokers
                .iter()
                .all(|broker| matches!(broker.kind, BrokerKind::Native | BrokerKind::Kubernetes))
    }

    /// `spec` checked as the run will send it: with the agents' CA where they supply one.
    pub(super) fn validate_as_run(
        &self,
        spec: &WorkloadSpec,
    ) -> Result<(), loadgen::spec::SpecError> {
        if self.quic_ca_supplied(spec) {
            spec.validate_with_ca_supplied()
        } else {
            spec.validate()
        }
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
        // A deployed broker has no TLS listener: a test naming a CA reaches it over QUIC only.
        for t in 0..self.tests.len() {
            let Ok(spec) = self.first_workload(t) else {
                continue;
            };
            let Some(ca) = spec.broker.tls_ca_file.as_deref() else {
                continue;
            };
            if spec.broker.transport == Transport::Quic {
                continue;
            }
            if let Some((b, broker)) = self
                .brokers
                .iter()
                .enumerate()
                .find(|(_, broker)| broker.kind != BrokerKind::External)
            {
                return Err(invalid(
                    format!("tests[{t}].workload.broker.tls_ca_file"),
                    quoted(&ca.display().to_string()),
                    format!(
                        "brokers[{b}] ({}): the agent opens no TLS listener for a broker it \
                         deploys, so MQTT over TLS ({} with a CA) reaches external brokers \
                         only; over QUIC its agent's CA is used",
                        broker.name, spec.broker.transport
                    ),
                ));
            }
        }
        if !self.quic_tests().is_empty() {
            for (b, broker) in self.brokers.iter().enumerate() {
                let Some(product) = broker.product() else {
                    continue;
                };
                let quic_node_port = recipes::default_quic_node_port(product);
                if broker.kind == BrokerKind::Kubernetes && quic_node_port == Ok(broker.port) {
                    return Err(invalid(
                        format!("brokers[{b}].port"),
                        broker.port,
                        format!(
                            "is the UDP NodePort of {product}'s QUIC listener in a plan that \
                             speaks QUIC (its default NodePort + {}); choose another",
                            recipes::POD_QUIC_NODE_PORT_OFFSET
                        ),
                    ));
                }
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
        self.validate_quic_streams()
    }

    /// Each broker's `quic_delivery`, and each QUIC test's streams against every broker's
    /// delivery: a client on one stream reads none the broker opens.
    fn validate_quic_streams(&self) -> Result<(), PlanError> {
        for (b, broker) in self.brokers.iter().enumerate() {
            let Some(delivery) = broker.quic_delivery else {
                continue;
            };
            let problem =
                if broker.kind != BrokerKind::Native || broker.product() != Some(Product::Mqttv5) {
                    "only a native mqttv5 broker is deployed with a QUIC delivery of its choosing"
                } else if self.quic_tests().is_empty() {
                    "no test of the plan speaks QUIC, so the broker opens no QUIC listener"
                } else {
                    continue;
                };
            return Err(invalid(
                format!("brokers[{b}].quic_delivery"),
                quoted(delivery.name()),
                problem,
            ));
        }
        for t in self.quic_tests() {
            let Ok(spec) = self.first_workload(t) else {
                continue;
            };
            let streams = spec.broker.quic_streams;
            for (b, broker) in self.brokers.iter().enumerate() {
                let delivery = broker.quic_delivery.unwrap_or_default();
                let problem = if streams.is_single() && delivery != QuicDelivery::ControlOnly {
                    format!(
                        "brokers[{b}] ({}) delivers on QUIC streams it opens (quic_delivery = \
                         {}), which a client on one stream does not read: set quic_streams = \
                         \"per_topic\" or \"per_publish\"",
                        broker.name,
                        quoted(delivery.name())
                    )
                } else if !streams.is_single() && broker.product() == Some(Product::Emqx) {
                    format!(
                        "brokers[{b}] ({}): whether EMQX reads PUBLISH on a client's own \
                         unidirectional streams is not checked here (only the mqttv5 broker's \
                         is); use quic_streams = \"single\"",
                        broker.name
                    )
                } else {
                    continue;
                };
                return Err(invalid(
                    format!("tests[{t}].workload.broker.quic_streams"),
                    quoted(&streams.to_string()),
                    problem,
                ));
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
        BrokerKind::Kubernetes => {
            let product = broker.product()?;
            if let Err(reason) = recipes::pod_quic(product) {
                return Some(format!(
                    "{product}: {reason} (natively, the mqttv5 broker's does too)"
                ));
            }
            entered_elsewhere(broker).then(|| {
                format!(
                    "entered through node {} (entry), but the pod's QUIC certificate names its \
                     own node's address only: set entry = {}",
                    quoted(broker.entry.as_deref().unwrap_or_default()),
                    quoted(broker.node.as_deref().unwrap_or_default())
                )
            })
        }
        BrokerKind::Native => {
            let product = broker.product()?;
            if let Err(reason) = recipes::quic_listener(product) {
                return Some(format!("{product}: {reason}"));
            }
            entered_elsewhere(broker).then(|| {
                "entered through another node, whose forwarding hop relays its MQTT port \
                 (TCP) only"
                    .to_string()
            })
        }
    }
}

/// Whether clients reach `broker` through another node than its own (`entry`).
fn entered_elsewhere(broker: &BrokerEntry) -> bool {
    broker
        .entry
        .as_deref()
        .is_some_and(|entry| broker.node.as_deref() != Some(entry))
}
