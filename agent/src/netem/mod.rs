//! Network emulation: netem as the root qdisc of an interface, through rtnetlink.
//!
//! [`NetemParams`] is what a user asks for; [`NetemOptions`] is what the kernel holds, in its
//! own units, and is what [`Netem`] reads back and compares. Every change can be held by a
//! [`Lease`], which clears it when its holder stops renewing.
//!
//! - (in `domain::netem`): [`NetemParams`] and its validation.
//! - `encode`: [`NetemOptions`], netem's `TCA_OPTIONS` bytes exactly as iproute2's `tc` sends
//!   them, and their decoding ([`DecodeError`]).
//! - `qdisc`: [`Netem`], which applies, reads back and clears.
//! - `error`: [`NetemError`], why it could not (the lease's clear fails with it too).
//! - `lease`: [`Lease`], the self-clearing hold on an applied qdisc ([`LeaseError`]).
//! - `probe`: [`netem_available`], whether this kernel can do netem at all.
//! - `record`: [`Records`], what is applied, on disk, for the agent after a crash.
//! - `interfaces`: which interface holds an address (the control plane's), which names can
//!   name an interface.

mod encode;
mod error;
pub mod interfaces;
mod lease;
mod probe;
mod qdisc;
mod record;
#[cfg(test)]
mod vectors;

pub use encode::{DecodeError, NetemOptions};
pub use error::NetemError;
pub use lease::{CLEAR_ATTEMPTS, Lease, LeaseEnd, LeaseError};
#[cfg(test)]
pub(crate) use probe::in_throwaway_netns;
pub use probe::{NetemCapability, netem_available};
pub use qdisc::Netem;
pub use record::Records;
