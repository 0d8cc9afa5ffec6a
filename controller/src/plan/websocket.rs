//! MQTT over WebSocket in a plan: which tests speak it (`[tests.workload.broker] transport =
//! "websocket"`), which brokers then open a WebSocket listener, and the checks that a test
//! speaking it can reach every broker of the plan that way.

use loadgen::spec::Transport;

use super::error::{PlanError, invalid, quoted};
use super::types::{BrokerEntry, BrokerKind, Plan};

impl Plan {
    /// The indices of the tests whose workload speaks WebSocket.
    pub fn websocket_tests(&self) -> Vec<usize> {
        (0..self.tests.len())
            .filter(|&test| {
                self.first_workload(test)
                    .is_ok_and(|spec| spec.broker.transport == Transport::WebSocket)
            })
            .collect()
    }

    /// The WebSocket port a native or kubernetes `broker` is asked to open: its own, else a
    /// free one (a default NodePort) when a test speaks WebSocket, else none.
    pub fn websocket_port_of(&self, broker: &BrokerEntry) -> Option<u16> {
        if !matches!(broker.kind, BrokerKind::Native | BrokerKind::Kubernetes) {
            return None;
        }
        let asks = broker.websocket_port.is_some() || !self.websocket_tests().is_empty();
        asks.then(|| broker.websocket_port.unwrap_or(0))
    }

    /// The WebSocket fields of the brokers, and every broker reachable by every test that
    /// speaks WebSocket.
    pub(super) fn validate_websocket(&self) -> Result<(), PlanError> {
        for (b, broker) in self.brokers.iter().enumerate() {
            let path = |field: &str| format!("brokers[{b}].{field}");
            if let Some(port) = broker.websocket_port {
                if !matches!(broker.kind, BrokerKind::Native | BrokerKind::Kubernetes) {
                    return Err(invalid(
                        path("websocket_port"),
                        port,
                        "only a native or kubernetes broker opens a WebSocket listener \
                         (an external one: websocket_address)",
                    ));
                }
                if port != 0 && port == broker.port {
                    return Err(invalid(
                        path("websocket_port"),
                        port,
                        "is its MQTT port; the WebSocket listener needs a port of its own",
                    ));
                }
            }
            if let Some(address) = broker.websocket_address.as_deref() {
                if broker.kind != BrokerKind::External {
                    return Err(invalid(
                        path("websocket_address"),
                        quoted(address),
                        "only an external broker has an address of its own; the others \
                         open a WebSocket listener when a test speaks WebSocket",
                    ));
                }
                if address.rsplit_once(':').is_none() {
                    return Err(invalid(
                        path("websocket_address"),
                        quoted(address),
                        "needs host:port",
                    ));
                }
            }
        }
        for t in self.websocket_tests() {
            for (b, broker) in self.brokers.iter().enumerate() {
                if let Some(reason) = websocket_unreachable(broker) {
                    return Err(invalid(
                        format!("tests[{t}].{}", self.transport_field(t)),
                        quoted("websocket"),
                        format!("brokers[{b}] ({}): {reason}", broker.name),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why a test speaking WebSocket cannot reach `broker`, if it cannot.
fn websocket_unreachable(broker: &BrokerEntry) -> Option<String> {
    match broker.kind {
        BrokerKind::Embedded => Some(
            "the embedded broker serves no WebSocket (rumqttd's websocket listener is not \
             built in); measure it in a test of its own plan"
                .to_string(),
        ),
        BrokerKind::External => broker
            .websocket_address
            .is_none()
            .then(|| "an external broker needs websocket_address (host:port)".to_string()),
        BrokerKind::Native | BrokerKind::Kubernetes => {
            let product = broker.product()?;
            if let Err(reason) = recipes::websocket_path(product) {
                return Some(format!("{product}: {reason}"));
            }
            let forwarded_by_hop = broker.kind == BrokerKind::Native
                && broker
                    .entry
                    .as_deref()
                    .is_some_and(|entry| broker.node.as_deref() != Some(entry));
            forwarded_by_hop.then(|| {
                "entered through another node, whose forwarding hop relays its MQTT port \
                 only"
                    .to_string()
            })
        }
    }
}
