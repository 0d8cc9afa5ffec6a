//! The Netem RPCs: apply under a lease, renew, read back, clear; and the clean-up on
//! shutdown. Every request is checked in full before anything touches the kernel.
//!
//! The interface asked for is compared with the loopback and the control plane's interface
//! by the kernel's index, so no other name of theirs (an altname) reaches them. Each renewal
//! reads the qdisc back: netem that went or changed fails the renewal and ends its lease.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use proto::agent::v1 as pb;
use tokio::sync::Mutex;
use tonic::Status;

use super::status::{from_netem, invalid, missing};
use crate::netem::{Lease, Netem, NetemOptions, Records};
use domain::NetemParams;

/// Longest lease a controller may ask for: a dead controller's netem goes within this.
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// The index the kernel gives the loopback of every network namespace (`LOOPBACK_IFINDEX`),
/// whatever it is called.
const LOOPBACK_INDEX: u32 = 1;

/// Where the agent's control plane (its gRPC listener) is, as the interface check sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControlPlane {
    /// Not known: no listen address was given.
    Unknown,
    /// On the interface of this index (`None`: no interface holds the listen address).
    On(Option<u32>),
    /// On every interface: the agent listens on this unspecified address.
    Everywhere(IpAddr),
}

/// What the interface check compares, as kernel indices: every name of an interface (its
/// altnames too) resolves to the same one.
#[derive(Debug, Clone, Copy)]
struct Indices {
    /// The interface asked for (`None`: no interface by that name).
    requested: Option<u32>,
    control: ControlPlane,
    /// The configured data_plane_interface (`None`: not set, or no interface by that name).
    data_plane: Option<u32>,
}

/// netem on this node's interfaces and the leases that hold it.
pub(crate) struct NetemControl {
    netem: Option<Netem>,
    default_interface: Option<String>,
    /// The agent's gRPC listener's address (`None`: not known), which says where its
    /// control plane is.
    listen: Option<IpAddr>,
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
            listen: None,
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

    /// What this agent holds applied, by interface: the options, when its lease ends (Unix
    /// ns) and whether the lease is still in force.
    pub(crate) async fn in_force(&self) -> Vec<(String, NetemOptions, u64, bool)> {
        let held = self.held.lock().await;
        let mut shown: Vec<_> = held
            .iter()
            .map(|(interface, held)| {
                (
                    interface.clone(),
                    held.applied,
                    held.expires_unix_ns,
                    held.lease.is_active(),
                )
            })
            .collect();
        shown.sort_by(|a, b| a.0.cmp(&b.0));
        shown
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

    /// Refuses netem on the interface that holds `listen`, the agent's control plane, unless
    /// it is also the configured data-plane interface (a node with one NIC). An unspecified
    /// `listen` (0.0.0.0, ::) puts the control plane on every interface: netem is then
    /// refused unless the data-plane interface is configured, and goes only there.
    pub(crate) fn with_listen_address(mut self, listen: IpAddr) -> Self {
        self.listen = Some(listen);
        self
    }

    fn netem(&self) -> Result<&Netem, Status> {
        self.netem
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("rtnetlink is not available to the agent"))
    }

    /// The interface a request names (its own or the default), checked by name: what needs
    /// no kernel.
    fn name(&self, requested: &str) -> Result<String, Status> {
        if let Some(ip) = self.listen
            && ip.is_unspecified()
            && self.default_interface.is_none()
        {
            return Err(Status::failed_precondition(format!(
                "netem refused: the agent listens on {ip}, every interface, so none is free of \
                 its control plane; set data_plane_interface in its agent.toml to allow netem \
                 on that interface (and only there)"
            )));
        }
        let name = match (requested, &self.default_interface) {
            ("", Some(default)) => default.clone(),
            ("", None) => {
                return Err(invalid(
                    "interface",
                    "empty, and the agent has no data_plane_interface",
                ));
            }
            (name, _) => name.to_string(),
        };
        if !crate::netem::interfaces::valid_name(&name) {
            return Err(invalid(
                "interface",
                format!(
                    "{name:?} is not an interface name (1 to 15 bytes, no '/', ':' or \
                     whitespace)"
                ),
            ));
        }
        if name == "lo" {
            // Loopback carries the agent's own local traffic (an embedded broker, a local
            // controller): impairing it would distort more than the emulated link.
            return Err(invalid(
                "interface",
                "\"lo\" is the loopback; netem belongs on the data-plane interface",
            ));
        }
        Ok(name)
    }

    /// The interface a request names, checked by the kernel's indices against the loopback
    /// and the control plane's interface under any of their names.
    async fn interface(&self, requested: &str) -> Result<String, Status> {
        let name = self.name(requested)?;
        let netem = self.netem()?;
        let control = match self.listen {
            None => ControlPlane::Unknown,
            Some(ip) if ip.is_unspecified() => ControlPlane::Everywhere(ip),
            Some(ip) => ControlPlane::On(netem.index_holding(ip).await.map_err(from_netem)?),
        };
        let data_plane = match &self.default_interface {
            Some(data_plane) => netem.index_of(data_plane).await.map_err(from_netem)?,
            None => None,
        };
        let indices = Indices {
            requested: netem.index_of(&name).await.map_err(from_netem)?,
            control,
            data_plane,
        };
        admit(&name, &indices, self.default_interface.as_deref())?;
        Ok(name)
    }

    pub(crate) async fn apply(
        &self,
        request: pb::ApplyNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface).await?;
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
        let applied = match netem.apply(&interface, &params).await {
            Ok(applied) => applied,
            Err(error) => {
                self.failed_reapply(netem, &interface, &mut held).await;
                return Err(from_netem(error));
            }
        };
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

    /// After an apply on `interface` failed: the lease of what was there before ends (its
    /// settings are not what the controller now asks for, and the failed replace or its
    /// rollback may have taken them), and the record goes once nothing is left.
    async fn failed_reapply(
        &self,
        netem: &Netem,
        interface: &str,
        held: &mut HashMap<String, Held>,
    ) {
        if let Some(old) = held.remove(interface) {
            // Clears the old settings if the kernel still holds them; already ended is fine.
            let _ = old.lease.release().await;
        }
        if let Some(records) = &self.records
            && let Ok(None) = netem.read(interface).await
        {
            records.forget(interface);
        }
    }

    pub(crate) async fn renew(
        &self,
        request: pb::RenewNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface).await?;
        let netem = self.netem()?;
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
        // What the kernel holds, at each renewal: netem that went (a restarted agent's
        // clear, a recreated interface, someone's `tc qdisc del`) or changed fails the renewal
        // now, so the controller fails the cell, and the lease ends.
        let checked = match netem.read(&interface).await {
            Ok(now) => lapsed(&current.applied, now.as_ref()),
            Err(error) => Err(format!("reading it back failed: {error}")),
        };
        match checked {
            Ok(now) => {
                current.expires_unix_ns = expiry(current.lease.ttl());
                Ok(state_of(&interface, Some(now), Some(current)))
            }
            Err(problem) => {
                if let Some(lapsed) = held.remove(&interface) {
                    // Clears what it applied if the kernel still holds it.
                    let _ = lapsed.lease.release().await;
                }
                Err(Status::failed_precondition(format!(
                    "{interface}: {problem}; the link is no longer emulated as applied, and \
                     its lease has ended: apply again"
                )))
            }
        }
    }

    pub(crate) async fn read(
        &self,
        request: pb::ReadNetemRequest,
    ) -> Result<pb::NetemState, Status> {
        let interface = self.interface(&request.interface).await?;
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
        let interface = self.interface(&request.interface).await?;
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
            match current.lease.release().await {
                // Said so that a node's journal shows what a stop (a reboot) undid.
                Ok(()) => tracing::info!(%interface, "netem cleared at shutdown"),
                Err(error) => tracing::warn!(%interface, %error, "clearing netem at shutdown"),
            }
        }
    }

    async fn state(&self, interface: &str, held: Option<&Held>) -> Result<pb::NetemState, Status> {
        let read = self.netem()?.read(interface).await.map_err(from_netem)?;
        Ok(state_of(interface, read, held))
    }
}

/// The state of `interface` as read from the kernel (`read`) and held under a lease.
fn state_of(interface: &str, read: Option<NetemOptions>, held: Option<&Held>) -> pb::NetemState {
    pb::NetemState {
        interface: interface.to_string(),
        present: read.is_some(),
        netem: read.map(|options| pb::NetemSpec::from(&options.to_params())),
        lease_expires_unix_ns: held.map_or(0, |h| h.expires_unix_ns),
    }
}

/// What the kernel holds (`now`) if it is what a lease `applied`; else why it lapsed.
fn lapsed(applied: &NetemOptions, now: Option<&NetemOptions>) -> Result<NetemOptions, String> {
    match now {
        Some(now) if now == applied => Ok(*now),
        Some(now) => Err(format!(
            "netem reads back as {:?}, not the {:?} applied",
            now.to_params(),
            applied.to_params()
        )),
        None => Err(format!(
            "the netem applied ({:?}) is gone: the root qdisc is no longer netem",
            applied.to_params()
        )),
    }
}

/// Whether netem may go on the interface `name`, which resolves to `at.requested`: never on
/// the loopback, nor on the control plane's interface unless it is also the data plane's
/// (`data_plane` names it). A name no interface has passes: nothing is there to protect, and
/// the netem operation reports the interface unknown.
fn admit(name: &str, at: &Indices, data_plane: Option<&str>) -> Result<(), Status> {
    let Some(index) = at.requested else {
        return Ok(());
    };
    if index == LOOPBACK_INDEX {
        return Err(invalid(
            "interface",
            format!(
                "{name:?} is the loopback (lo) under another name; netem belongs on the \
                 data-plane interface"
            ),
        ));
    }
    match at.control {
        ControlPlane::Everywhere(ip) if at.data_plane != Some(index) => Err(invalid(
            "interface",
            format!(
                "{name:?} is not the data_plane_interface ({}): the agent listens on {ip}, \
                 every interface, so netem goes only on the data-plane interface",
                data_plane.unwrap_or("not set")
            ),
        )),
        ControlPlane::On(Some(control)) if control == index && at.data_plane != Some(index) => {
            Err(invalid(
                "interface",
                format!(
                    "{name:?} carries the agent's control plane (its gRPC listener) and is not \
                     the configured data_plane_interface; impairing it would cut the \
                     controller off, not emulate the broker's link"
                ),
            ))
        }
        _ => Ok(()),
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
            gilbert_elliott: None,
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

    fn apply_request(interface: &str, delay_ms: i32) -> pb::ApplyNetemRequest {
        pb::ApplyNetemRequest {
            interface: interface.into(),
            netem: Some(spec(delay_ms, 0.0)),
            lease: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        }
    }

    fn renew_request(interface: &str) -> pb::RenewNetemRequest {
        pb::RenewNetemRequest {
            interface: interface.into(),
            lease: None,
        }
    }

    fn indices(requested: u32, control: ControlPlane, data_plane: Option<u32>) -> Indices {
        Indices {
            requested: Some(requested),
            control,
            data_plane,
        }
    }

    #[test]
    fn the_loopback_and_the_control_plane_are_refused_by_index_under_any_name() {
        let refused = |name, at: Indices, data_plane| {
            admit(name, &at, data_plane)
                .expect_err(name)
                .message()
                .to_string()
        };
        // An altname of lo is index 1 whatever it is called.
        let message = refused("foo", indices(1, ControlPlane::On(Some(3)), Some(4)), None);
        assert!(message.contains("\"foo\" is the loopback"), "{message}");
        // The control plane's interface (index 3) under another name.
        let message = refused("ctl", indices(3, ControlPlane::On(Some(3)), Some(4)), None);
        assert!(message.contains("control plane"), "{message}");
        // One NIC named as the data plane: netem there is what the operator asked for.
        admit("ctl", &indices(3, ControlPlane::On(Some(3)), Some(3)), None)
            .expect("the data plane");
        admit(
            "eth1",
            &indices(4, ControlPlane::On(Some(3)), Some(4)),
            None,
        )
        .expect("another NIC");
        admit("eth1", &indices(4, ControlPlane::Unknown, None), None).expect("nothing known");
        // Listening on every interface: only the data plane.
        let everywhere = ControlPlane::Everywhere(IpAddr::from([0, 0, 0, 0]));
        admit("d", &indices(4, everywhere, Some(4)), Some("eth1")).expect("the data plane");
        let message = refused("eth0", indices(3, everywhere, Some(4)), Some("eth1"));
        assert!(
            message.contains("not the data_plane_interface (eth1)") && message.contains("0.0.0.0"),
            "{message}"
        );
        // A name no interface has: the netem operation says it is unknown.
        let absent = Indices {
            requested: None,
            control: everywhere,
            data_plane: None,
        };
        admit("nope0", &absent, None).expect("nothing to protect");
    }

    #[tokio::test]
    async fn an_agent_on_every_interface_refuses_netem_without_a_data_plane_interface() {
        for listen in ["0.0.0.0", "::"] {
            let control = NetemControl::new(None, None)
                .with_listen_address(listen.parse().expect("an address"));
            for interface in ["", "eth0"] {
                let error = control
                    .apply(apply_request(interface, 1))
                    .await
                    .expect_err("no data plane");
                assert_eq!(error.code(), tonic::Code::FailedPrecondition);
                assert!(
                    error.message().contains(listen)
                        && error.message().contains("data_plane_interface"),
                    "{}",
                    error.message()
                );
            }
        }
        // With one configured, the check goes on (to the missing rtnetlink here).
        let control = NetemControl::new(None, Some("eth1".into()))
            .with_listen_address("0.0.0.0".parse().expect("an address"));
        let error = control
            .apply(apply_request("", 1))
            .await
            .expect_err("no rtnetlink");
        assert!(error.message().contains("rtnetlink"), "{}", error.message());
    }

    #[test]
    fn a_renewal_finds_netem_gone_or_changed() {
        let options = |delay| {
            NetemOptions::from_params(&NetemParams::from_millis(delay, 0.0, 0.0).expect("valid"))
                .expect("valid")
        };
        assert_eq!(lapsed(&options(5.0), Some(&options(5.0))), Ok(options(5.0)));
        let gone = lapsed(&options(5.0), None).expect_err("gone");
        assert!(gone.contains("is gone"), "{gone}");
        let changed = lapsed(&options(5.0), Some(&options(7.0))).expect_err("changed");
        assert!(changed.contains("reads back as"), "{changed}");
    }

    /// A lease held on `interface` for `applied`, whose clear action says it ran.
    fn held_lease(applied: NetemOptions) -> (Held, tokio::sync::mpsc::UnboundedReceiver<()>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let lease = Lease::start(Duration::from_secs(60), move || {
            let _ = tx.send(());
            async { Ok(()) }
        });
        let held = Held {
            lease,
            applied,
            expires_unix_ns: 0,
        };
        (held, rx)
    }

    fn options(delay_ms: f64) -> NetemOptions {
        NetemOptions::from_params(&NetemParams::from_millis(delay_ms, 0.0, 0.0).expect("valid"))
            .expect("valid")
    }

    #[tokio::test]
    async fn a_failed_reapply_ends_the_old_lease() {
        let Ok(netem) = Netem::connect() else {
            eprintln!("skipped: no route netlink socket");
            return;
        };
        // No interface "nope0": the apply fails in the kernel's lookup, past every check.
        let control = NetemControl::new(Some(netem), None);
        let (held, mut cleared) = held_lease(options(5.0));
        control.held.lock().await.insert("nope0".into(), held);
        let error = control
            .apply(apply_request("nope0", 7))
            .await
            .expect_err("no such interface");
        assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error:?}");
        cleared.recv().await.expect("the old lease cleared");
        assert!(
            control.held.lock().await.is_empty(),
            "the old lease is held"
        );
        let error = control
            .renew(renew_request("nope0"))
            .await
            .expect_err("no lease");
        assert!(
            error.message().contains("no netem lease"),
            "{}",
            error.message()
        );
    }

    #[tokio::test]
    async fn a_renewal_that_cannot_read_netem_back_fails_and_ends_the_lease() {
        let Ok(netem) = Netem::connect() else {
            eprintln!("skipped: no route netlink socket");
            return;
        };
        // The interface went away under the lease.
        let control = NetemControl::new(Some(netem), None);
        let (held, mut cleared) = held_lease(options(5.0));
        control.held.lock().await.insert("nope0".into(), held);
        let error = control
            .renew(renew_request("nope0"))
            .await
            .expect_err("gone");
        assert_eq!(error.code(), tonic::Code::FailedPrecondition);
        assert!(
            error.message().contains("nope0") && error.message().contains("apply again"),
            "{}",
            error.message()
        );
        cleared.recv().await.expect("the lease ended and cleared");
        assert!(control.held.lock().await.is_empty());
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// In a throwaway namespace: a veth pair `va` (the control plane's, 198.18.5.1, also
    /// called `ctl0`) and `vb` (the data plane), and lo also called `lo-alias`.
    async fn testbed(handle: &rtnetlink::Handle) -> Result<(), rtnetlink::Error> {
        use futures_util::TryStreamExt;
        handle
            .link()
            .add(rtnetlink::LinkVeth::new("va", "vb").build())
            .execute()
            .await?;
        let index = |name: &'static str| async move {
            let link = handle.link().get().match_name(name).execute();
            futures_util::pin_mut!(link);
            Ok::<_, rtnetlink::Error>(link.try_next().await?.map_or(0, |l| l.header.index))
        };
        let va = index("va").await?;
        handle
            .address()
            .add(va, IpAddr::from([198, 18, 5, 1]), 24)
            .execute()
            .await?;
        handle
            .link()
            .property_add(va)
            .alt_ifname(&["ctl0"])
            .execute()
            .await?;
        handle
            .link()
            .property_add(LOOPBACK_INDEX)
            .alt_ifname(&["lo-alias"])
            .execute()
            .await
    }

    #[tokio::test]
    async fn altnames_of_lo_and_of_the_control_interface_are_refused_in_a_namespace() {
        if !is_root() {
            eprintln!("skipped: needs root for a throwaway network namespace");
            return;
        }
        let outcome = crate::netem::in_throwaway_netns(|| async {
            let (connection, handle, _) = rtnetlink::new_connection().expect("netlink");
            tokio::spawn(connection);
            testbed(&handle).await.expect("the testbed");
            let netem = Netem::with_handle(handle);
            let control = NetemControl::new(Some(netem.clone()), Some("vb".into()))
                .with_listen_address(IpAddr::from([198, 18, 5, 1]));
            let mut messages = Vec::new();
            for name in ["lo-alias", "ctl0", "va"] {
                let refused = control.apply(apply_request(name, 1)).await;
                messages.push(refused.map(|_| ()).map_err(|s| s.message().to_string()));
            }
            // The data plane passes the check: no lease there yet.
            let renewal = control.renew(renew_request("vb")).await;
            messages.push(renewal.map(|_| ()).map_err(|s| s.message().to_string()));
            // On every interface: only the data plane.
            let everywhere = NetemControl::new(Some(netem.clone()), Some("vb".into()))
                .with_listen_address(IpAddr::from([0, 0, 0, 0]));
            let refused = everywhere.apply(apply_request("va", 1)).await;
            messages.push(refused.map(|_| ()).map_err(|s| s.message().to_string()));
            // A lease on the data plane whose netem is not there: the renewal says so.
            let (held, _cleared) = held_lease(options(5.0));
            control.held.lock().await.insert("vb".into(), held);
            let renewal = control.renew(renew_request("vb")).await;
            messages.push(renewal.map(|_| ()).map_err(|s| s.message().to_string()));
            (
                messages,
                netem.read("va").await.ok(),
                netem.read("vb").await.ok(),
            )
        })
        .await
        .expect("namespace");
        let (messages, va, vb) = outcome;
        let expect = [
            "\"lo-alias\" is the loopback",
            "\"ctl0\" carries the agent's control plane",
            "\"va\" carries the agent's control plane",
            "no netem lease is held on vb",
            "\"va\" is not the data_plane_interface (vb)",
            "is gone",
        ];
        for (message, expected) in messages.iter().zip(expect) {
            assert!(
                message.as_ref().is_err_and(|m| m.contains(expected)),
                "{message:?} does not say {expected:?}"
            );
        }
        assert_eq!(messages.len(), expect.len());
        // Nothing was applied anywhere.
        assert_eq!((va, vb), (Some(None), Some(None)));
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
