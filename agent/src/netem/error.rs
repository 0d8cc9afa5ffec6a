//! [`NetemError`]: why applying, reading back or clearing netem failed; apart from the qdisc
//! code so that the lease, which clears through an injected action, names it too.

use std::io;

use thiserror::Error;

use super::encode::{DecodeError, NetemOptions};
use domain::netem::ParamsError;

/// Why a netem operation failed. Nothing was changed unless the variant says so.
#[derive(Debug, Error)]
pub enum NetemError {
    /// The settings cannot be applied as asked.
    #[error("invalid netem settings: {0}")]
    InvalidParams(#[from] ParamsError),
    /// No interface by that name in this network namespace.
    #[error("unknown interface {iface:?}")]
    UnknownInterface {
        /// The name asked for.
        iface: String,
    },
    /// The kernel has no netem qdisc (`sch_netem` neither built in nor loadable).
    #[error("netem is not available in this kernel (applying on {iface:?}: {source})")]
    CapabilityMissing {
        /// The interface the apply was for.
        iface: String,
        /// The kernel's answer.
        source: rtnetlink::Error,
    },
    /// The kernel refused for lack of privilege (CAP_NET_ADMIN).
    #[error("not permitted to {op} on {iface:?} (needs CAP_NET_ADMIN)")]
    PermissionDenied {
        /// What was attempted.
        op: &'static str,
        /// The interface.
        iface: String,
    },
    /// The route netlink socket could not be opened.
    #[error("cannot open a route netlink socket: {0}")]
    Connect(#[source] io::Error),
    /// Any other netlink failure.
    #[error("netlink request to {op} on {iface:?} failed: {source}")]
    Netlink {
        /// What was attempted.
        op: &'static str,
        /// The interface.
        iface: String,
        /// The failure.
        source: rtnetlink::Error,
    },
    /// The kernel holds a netem qdisc whose options cannot be read.
    #[error("cannot read the netem qdisc on {iface:?}: {source}")]
    Decode {
        /// The interface.
        iface: String,
        /// Why.
        source: DecodeError,
    },
    /// After an apply, the kernel holds something else than asked. The qdisc is left as the
    /// kernel holds it (the caller decides whether to clear).
    #[error("netem on {iface:?} reads back as {:?}, not the {:?} applied", read_back.1, read_back.0)]
    ReadBackMismatch {
        /// The interface.
        iface: String,
        /// What was sent, and what the kernel reports (none: no netem root qdisc); boxed, as
        /// the options are large beside the other errors.
        read_back: Box<(NetemOptions, Option<NetemOptions>)>,
    },
}
