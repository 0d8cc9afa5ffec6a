//! The Netem RPCs: apply under a lease, renew, read back, clear; and the clean-up on
//! shutdown. Every request is checked in full before anything touches the kernel.

use std::collections::HashMap;
use std::time::Duration;

use proto::agent::v1 as pb;
use tokio::sync::Mutex;
use tonic::Status;

use super::status::{from_netem, invalid, missing};
use crate::netem::{Lease, Netem, NetemOptions, Records};
use domain::NetemParams;

/// Longest lease a controller may ask for: a dead controller's netem goes within this.
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// netem on this node's interfaces and the leases that hold it.
pub(crate) struct NetemControl {
    netem: Option<Netem>,
    default_interface: Option<String>,
    /// The interface the agent's gRPC listener is on, when its address is a specific one.
    control_interface: Option<String>,
    /// What is applied, on disk, for the agent after a crash (`None`: kept in memory only).
    records: Option<Records>,
    held: Mutex<HashMap<String, Held>>,
}

struct Held {
    lease: Lease,
    applied: NetemOptions,
    expires_unix_ns: u64,
}

impl NetemControl {
    /// `netem` is `None` when rtnetlink could not be opened; the RPCs then say so.
    pub(crate) fn new(netem: Option<Netem>, default_interface: Option<String>) -> Self {
        NetemControl {
            netem,
            default_interface,
            control_interface: None,
            records: None,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps a record of what is applied in `records`, so that the next agent clears what
    /// this one could not (see [`Self::clear_stale`]).
    pub(crate) fn with_records(mut self, records: Records) -> Self {
        self.records = Some(records);
        self
    }

    /// Clears the netem that a previous agent on this node recorded and never cleared (it
    /// died without its shutdown); run before the agent serves.
    pub(crate) async fn clear_stale(&self) {
        let (Some(records), Some(netem)) = (&self.records, &self.netem) else {
            return;
        };
        for (interface, what) in records.recorded() {
            match netem.clear(&interface).await {
                Ok(Some(_)) => {
                    tracing::warn!(%interface, applied = %what, "cleared netem a previous agent left behind");
                    records.forget(&interface);
                }
                Ok(None) => records.forget(&interface),
                Err(crate::netem::NetemError::UnknownInterface { .. }) => {
                    records.forget(&interface)
                }
                Err(error) => {
                    tracing::error!(%interface, %error, "cannot clear netem a previous agent left behind");
                }
            }
        }
    }

    /// Refuses netem on `interface`, the one the agent's control plane uses, unless it is
    /// also the configured data-plane interface (a node with one NIC).
    pub(crate) fn with_control_interface(mut self, interface: Option<String>) -> Self {
        self.control_interface = interface;
        self
    }

    fn netem(&self) -> Result<&Netem, Status> {
        self.netem
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("rtnetlink is not available to the agent"))
    }

    fn interface(&self, requested: &str) -> Result<String, Status> {
        match (requested, &self.default_interface) {
            ("", Some(default)) => Ok(default.clone()),
            ("", None) => Err(invalid(
                "interface",
                "empty, and the agent has no data_plane_interface",
            )),
            // Loopback carries the agent's own local traffic (an embedded broker, a local
            // controller): impairing it would distort more than the emulated link.
            ("lo", _) => Err(invalid(
                "interface",
                "\"lo\" is the loopback; netem belongs on the data-plane interface",
            )),
            (name, default)
                if self.control_interface.as_deref() == Some(name)
                    && default.as_deref() != Some(name) =>
            {
                Err(invalid(
                    "interface",
                    format!(
                        "{name:?} carries the agent's control plane (its gRPC listener) and is not \
                         the configured data_plane_interface; impairing it would cut the \
                         controller off, not emulate the broker's link"
                    ),
                ))
            }
            (name, _) => Ok(name.to_string()),
        }
    }

    pub(crate) async fn apply(
        &self,
        request: pb::ApplyNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface)?;
        let params =
            NetemParams::try_from(request.netem.as_ref().ok_or_else(|| missing("netem"))?)?;
        let ttl = lease_from(request.lease.as_ref())?;
        let asked = NetemOptions::from_params(&params)
            .map_err(|e| invalid(&format!("netem.{}", e.field()), &e))?;
        let netem = self.netem()?;
        let mut held = self.held.lock().await;
        if let Some(current) = held.get_mut(&interface)
            && current.applied == asked
            && current.lease.renew().is_ok()
        {
            // The same settings again: keep the qdisc, extend its lease (idempotent).
            current.expires_unix_ns = expiry(ttl);
            return self.state(&interface, Some(current)).await;
        }
        if let Some(records) = &self.records {
            // On disk before the kernel has it: a crash in between leaves a record, never an
            // unrecorded qdisc.
            records
                .note(&interface, &format!("{params:?}"))
                .map_err(|e| Status::internal(format!("recording netem on {interface}: {e}")))?;
        }
        let applied = netem.apply(&interface, &params).await.map_err(from_netem)?;
        let lease = {
            let (netem, interface) = (netem.clone(), interface.clone());
            let records = self.records.clone();
            Lease::start(ttl, move || {
                let (netem, interface) = (netem.clone(), interface.clone());
                let records = records.clone();
                async move {
                    let cleared = netem.clear_if(&interface, &applied).await?;
                    if let (true, Some(records)) = (cleared, records) {
                        records.forget(&interface);
                    }
                    Ok(())
                }
            })
        };
        // A lease of other settings clears only what it applied, so replacing it is safe.
        let entry = Held {
            lease,
            applied,
            expires_unix_ns: expiry(ttl),
        };
        held.insert(interface.clone(), entry);
        self.state(&interface, held.get(&interface)).await
    }

    pub(crate) async fn renew(
        &self,
        request: pb::RenewNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface)?;
        let mut held = self.held.lock().await;
        let current = held.get_mut(&interface).ok_or_else(|| {
            Status::failed_precondition(format!("no netem lease is held on {interface}"))
        })?;
        if let Some(lease) = request.lease.as_ref() {
            let asked = lease_from(Some(lease))?;
            if asked != current.lease.ttl() {
                return Err(invalid(
                    "lease",
                    format!(
                        "{asked:?}: a renewal keeps the lease's {:?}",
                        current.lease.ttl()
                    ),
                ));
            }
        }
        if let Err(ended) = current.lease.renew() {
            held.remove(&interface);
            return Err(Status::failed_precondition(format!(
                "{interface}: {ended}; apply again"
            )));
        }
        current.expires_unix_ns = expiry(current.lease.ttl());
        self.state(&interface, held.get(&interface)).await
    }

    pub(crate) async fn read(
        &self,
        request: pb::ReadNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface)?;
        let held = self.held.lock().await;
        self.state(
            &interface,
            held.get(&interface).filter(|h| h.lease.is_active()),
        )
        .await
    }

    pub(crate) async fn clear(
        &self,
        request: pb::ClearNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface)?;
        let netem = self.netem()?;
        let mut held = self.held.lock().await;
        if let Some(current) = held.remove(&interface) {
            // The lease may have ended already; the explicit clear below covers that.
            let _ = current.lease.release().await;
        }
        netem.clear(&interface).await.map_err(from_netem)?;
        if let Some(records) = &self.records {
            records.forget(&interface);
        }
        self.state(&interface, None).await
    }

    /// Clears every qdisc this agent applied: on SIGTERM/SIGINT and when the server stops.
    pub(crate) async fn clear_all(&self) {
        let mut held = self.held.lock().await;
        for (interface, current) in held.drain() {
            if let Err(error) = current.lease.release().await {
                tracing::warn!(%interface, %error, "clearing netem at shutdown");
            }
        }
    }

    async fn state(&self, interface: &str, held: Option<&Held>) -> Result<pb::NetemState, Status> {
        let read = self.netem()?.read(interface).await.map_err(from_netem)?;
        Ok(pb::NetemState {
            interface: interface.to_string(),
            present: read.is_some(),
            netem: read.map(|options| pb::NetemSpec::from(&options.to_params())),
            lease_expires_unix_ns: held.map_or(0, |h| h.expires_unix_ns),
        })
    }
}

fn expiry(ttl: Duration) -> u64 {
    loadgen::clock::unix_now_ns() + u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX)
}

fn duration_from(field: &str, value: Option<&prost_types::Duration>) -> Result<Duration, Status> {
    let value = value.ok_or_else(|| missing(field))?;
    let seconds = u64::try_from(value.seconds)
        .map_err(|_| invalid(field, format!("{}s is negative", value.seconds)))?;
    let nanos = u32::try_from(value.nanos)
        .map_err(|_| invalid(field, format!("{} ns is negative", value.nanos)))?;
    Ok(Duration::new(seconds, nanos))
}

fn lease_from(value: Option<&prost_types::Duration>) -> Result<Duration, Status> {
    let lease = duration_from("lease", value)?;
    if lease.is_zero() || lease > MAX_LEASE {
        return Err(invalid(
            "lease",
            format!("{lease:?} must be above zero and at most {MAX_LEASE:?}"),
        ));
    }
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(delay_ms: i32, loss: f64) -> pb::NetemSpec {
        pb::NetemSpec {
            delay: Some(prost_types::Duration {
                seconds: 0,
                nanos: delay_ms * 1_000_000,
            }),
            jitter: Some(prost_types::Duration::default()),
            loss_percent: loss,
            rate_bytes_per_sec: None,
            limit_packets: None,
        }
    }

    #[test]
    fn bad_values_are_invalid_arguments_naming_the_field() {
        let error =
            Status::from(NetemParams::try_from(&spec(5, 150.0)).expect_err("loss above 100"));
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(
            error.message().starts_with("netem.loss"),
            "{}",
            error.message()
        );
        assert!(
            lease_from(Some(&prost_types::Duration {
                seconds: 0,
                nanos: 0
            }))
            .is_err()
        );
        assert!(
            lease_from(Some(&prost_types::Duration {
                seconds: 3600,
                nanos: 0
            }))
            .is_err()
        );
    }

    #[tokio::test]
    async fn no_interface_and_no_default_is_refused_before_anything_changes() {
        let control = NetemControl::new(None, None);
        let request = pb::ApplyNetemRequest {
            interface: String::new(),
            netem: Some(spec(1, 0.0)),
            lease: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        };
        let error = control.apply(request).await.expect_err("no interface");
        assert!(
            error.message().starts_with("interface:"),
            "{}",
            error.message()
        );
    }

    #[tokio::test]
    async fn the_control_plane_interface_is_refused_unless_it_is_the_data_plane_too() {
        let request = |interface: &str| pb::ApplyNetemRequest {
            interface: interface.into(),
            netem: Some(spec(1, 0.0)),
            lease: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        };
        let two_nics = NetemControl::new(None, Some("eth1".into()))
            .with_control_interface(Some("eth0".into()));
        let error = two_nics
            .apply(request("eth0"))
            .await
            .expect_err("the control plane");
        assert!(
            error.message().contains("control plane"),
            "{}",
            error.message()
        );
        // One NIC named as the data plane: netem there is what the operator asked for (it
        // gets as far as the missing rtnetlink here, past the interface check).
        let one_nic = NetemControl::new(None, Some("eth0".into()))
            .with_control_interface(Some("eth0".into()));
        let error = one_nic.apply(request("")).await.expect_err("no rtnetlink");
        assert!(error.message().contains("rtnetlink"), "{}", error.message());
    }

    #[tokio::test]
    async fn the_loopback_is_refused_before_anything_changes() {
        let control = NetemControl::new(None, Some("eth1".into()));
        let request = pb::ApplyNetemRequest {
            interface: "lo".into(),
            netem: Some(spec(1, 0.0)),
            lease: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        };
        let error = control.apply(request).await.expect_err("loopback");
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(error.message().contains("loopback"), "{}", error.message());
    }
}
