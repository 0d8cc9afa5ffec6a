//! Who may call what: the controller and client identities may read (a client watches a
//! testbed it drives through the controller); only the controller may change the node. Agents
//! never call each other, so an agent's identity, stolen from one node, reads nothing on the
//! others. The TLS layer has already refused peers without a valid certificate from
//! the CA (none, another CA's, expired); a caller whose certificate ends soon is warned about.

use proto::pki::Role;
use tonic::{Request, Status};

/// What an RPC does to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Looks only: Info, Clock, Metrics, ReadNetem, GetBroker.
    Read,
    /// Changes the node: netem, brokers, load.
    Change,
}

/// PermissionDenied (naming the caller's role) unless the caller may do `access`.
pub(crate) fn authorize<T>(request: &Request<T>, access: Access) -> Result<(), Status> {
    let allowed: &[Role] = match access {
        Access::Read => &[Role::Controller, Role::Client],
        Access::Change => &[Role::Controller],
    };
    proto::mtls::require_role(request, allowed)?;
    // A caller whose certificate ends soon is named in this node's log, once.
    if let Some(expiring) = proto::mtls::peer_expiry(
        request,
        proto::pki::EXPIRY_WARNING,
        std::time::SystemTime::now(),
    ) {
        proto::mtls::warn_once(&expiring, "caller");
    }
    Ok(())
}
