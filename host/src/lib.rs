//! Continuum's plumbing on a host, shared by the agent, the controller, bootstrap, loadgen and
//! the test harness: what touches processes and signals, and nothing about brokers.
//!
//! # Layout
//! - [`account`]: [`Account`], a system user a child runs as (a broker package's service
//!   user).
//! - [`marker`]: [`Marker`], the environment tag every process of one instance carries, and
//!   the `/proc` sweep that finds and kills the whole tagged tree (detached helpers included).
//! - [`child`]: [`CommandLine`] (a program as plain data) and [`GroupChild`], a tagged child
//!   leading its own process group, killed with its group on drop; [`run_bounded`].
//! - [`capped`]: [`read_capped`], a file someone else named read only if regular and
//!   under a size cap.
//! - [`blocking`]: the same for synchronous callers (the test harness): a command run with a
//!   deadline, its input fed and its output collected without deadlocks.
//! - [`folder`]: [`Folder`], an untrusted folder (a run's results) read and written beneath
//!   it only: no links followed, regular files only, reads capped, files replaced by rename.
//! - [`netns`]: [`Netns`], a network namespace held by descriptor only, work run inside one,
//!   and a TCP connection made from inside one.
//! - [`poll`]: [`poll_until`] and [`poll_until_blocking`], the one way to wait for a
//!   condition with a deadline.
//! - [`program`]: what every binary's `main` does first: tracing, a runtime, SIGTERM and
//!   SIGINT ([`termination`]).

pub mod account;
pub mod blocking;
pub mod capped;
pub mod child;
pub mod folder;
pub mod marker;
pub mod netns;
pub mod poll;
pub mod program;
pub mod secret;

pub use account::Account;
pub use capped::{CappedReadError, Links, read_capped};
pub use child::{CommandLine, GroupChild, SpawnError, log_tail, run_bounded};
pub use folder::{Folder, FolderError};
pub use marker::{
    Marker, descendants, is_running, kill, kill_group, parent_of, process_group, running_processes,
    send_signal, start_time,
};
pub use netns::Netns;
pub use poll::{Attempt, poll_until, poll_until_blocking};
pub use program::termination;
