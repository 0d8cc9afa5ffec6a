//! Continuum's domain types: the words every crate shares, with the rules that keep them
//! valid. Nothing here touches a machine: no processes, no sockets, no netlink.
//!
//! # Layout
//! - [`name`]: the name rule for nodes, brokers, scenarios, plans and agents.
//! - [`role`]: [`NodeRole`], what a node may be asked to do.
//! - [`product`]: [`Product`], the brokers of the study by name.
//! - [`broker`]: [`BrokerSpec`], one broker instance to run (kind, address, limits) and its
//!   checks.
//! - [`invalid_spec`]: [`InvalidSpec`], a bad field of a request, named by its path.
//! - [`netem`]: [`NetemParams`], what netem is asked to do on one interface, and its checks.
//! - [`agent_config`]: [`AgentConfig`], the agent's `agent.toml` (written by bootstrap).
//! - [`overlay`]: overlay addresses as `198.19.0.2/24`.
//! - [`field_error`]: [`FieldError`], one field with a bad value (TOML path, value, problem).
//! - [`file`]: [`FileError`], why a TOML file cannot be used (the file and a
//!   [`FieldError`], or its syntax), and [`read_toml`].

pub mod agent_config;
pub mod broker;
pub mod field_error;
pub mod file;
pub mod invalid_spec;
pub mod name;
pub mod netem;
pub mod overlay;
pub mod product;
pub mod role;

pub use agent_config::{AgentConfig, K3sSettings, NebulaFiles, TlsFiles, shares_the_control_plane};
pub use broker::{BrokerKind, BrokerOptions, BrokerSpec, QuicDelivery};
pub use field_error::FieldError;
pub use file::{FileError, parse_toml, read_toml};
pub use invalid_spec::InvalidSpec;
pub use name::{MAX_NAME_LEN, NameError, check_identity_name, check_name};
pub use netem::{GilbertElliott, NetemParams, ParamsError};
pub use product::Product;
pub use role::NodeRole;
