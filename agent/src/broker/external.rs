//! The external driver: a broker the agent does not run. Starting one only records its
//! address; its status is whatever an MQTT CONNECT to that address says right now.

use std::net::SocketAddr;

use super::error::BrokerError;
use super::readiness::{PROBE_TIMEOUT, probe};
use super::{BoxFuture, BrokerDriver, BrokerState, RunningBroker};
use domain::{BrokerKind, BrokerSpec};

/// The driver for brokers run elsewhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExternalDriver;

impl BrokerDriver for ExternalDriver {
    fn start<'a>(
        &'a self,
        spec: &'a BrokerSpec,
    ) -> BoxFuture<'a, Result<Box<dyn RunningBroker>, BrokerError>> {
        Box::pin(async move {
            let BrokerKind::External { address } = spec.kind else {
                return Err(BrokerError::invalid(
                    "kind",
                    spec.summary(),
                    "is not an external broker",
                ));
            };
            Ok(Box::new(ExternalBroker { address }) as Box<dyn RunningBroker>)
        })
    }
}

/// A recorded external broker.
#[derive(Debug, Clone, Copy)]
pub struct ExternalBroker {
    address: SocketAddr,
}

impl RunningBroker for ExternalBroker {
    fn address(&self) -> SocketAddr {
        self.address
    }

    /// The agent does not know the process of a broker it does not run.
    fn pid(&self) -> Option<u32> {
        None
    }

    fn detail(&self) -> String {
        format!("external broker at {}, not run by this agent", self.address)
    }

    fn check(&mut self) -> BoxFuture<'_, BrokerState> {
        Box::pin(async move {
            match probe(self.address, PROBE_TIMEOUT).await {
                Ok(()) => BrokerState::Running,
                Err(error) => BrokerState::Failed(format!("not answering MQTT: {error}")),
            }
        })
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), BrokerError>> {
        // Nothing to undo: the agent never started it.
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::embedded::EmbeddedDriver;
    use crate::broker::test_support::loopback_spec;

    #[tokio::test]
    async fn a_dead_address_is_reported_as_not_answering() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = free.local_addr().unwrap();
        drop(free);
        let spec = loopback_spec("ext", BrokerKind::External { address });
        let mut broker = ExternalDriver.start(&spec).await.unwrap();
        assert_eq!(broker.address(), address);
        assert_eq!(broker.pid(), None);
        match broker.check().await {
            BrokerState::Failed(reason) => {
                assert!(
                    reason.starts_with("not answering MQTT: cannot connect"),
                    "{reason}"
                )
            }
            other => panic!("a dead address reads as {other:?}"),
        }
        broker.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_live_broker_is_running() {
        let embedded = EmbeddedDriver
            .start(&loopback_spec("target", BrokerKind::Embedded))
            .await
            .unwrap();
        let spec = loopback_spec(
            "ext",
            BrokerKind::External {
                address: embedded.address(),
            },
        );
        let mut broker = ExternalDriver.start(&spec).await.unwrap();
        assert_eq!(broker.check().await, BrokerState::Running);
        embedded.stop().await.unwrap();
        assert!(matches!(broker.check().await, BrokerState::Failed(_)));
    }
}
