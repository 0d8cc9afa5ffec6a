//! The emulated nodes' links: a veth from the hub to each node, their addresses, each
//! node's route to the others through the hub, and forwarding in the hub, all through
//! rtnetlink from threads inside the namespaces concerned.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

use futures_util::TryStreamExt;
use host::Netns;
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::run::error::RunError;

/// One node's end of its link, as the wiring sees it.
pub(super) struct NodeLink<'a> {
    /// The node.
    pub(super) name: &'a str,
    /// Its namespace.
    pub(super) netns: &'a Netns,
    /// Its end of the veth.
    pub(super) interface: &'a str,
    /// Its address (the hub's is the one before).
    pub(super) address: Ipv4Addr,
}

/// The nodes' network: 198.18.0.0/24, from the range set aside for benchmarking.
const NODE_NETWORK: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);

/// The links: a veth from the hub to each node, addresses, routes, forwarding in the hub.
pub(super) async fn wire(hub: &Netns, nodes: &[NodeLink<'_>]) -> Result<(), RunError> {
    let failed = |e: &dyn std::fmt::Display| RunError::Local(format!("wiring the namespaces: {e}"));
    let moves: Vec<(String, String, i32)> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            (
                format!("h{i}"),
                node.interface.to_string(),
                node.netns.as_raw_fd(),
            )
        })
        .collect();
    let hub_addresses: Vec<(String, Ipv4Addr)> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (format!("h{i}"), hub_end(node.address)))
        .collect();
    in_namespace(hub, move |handle| async move {
        for (near, far, fd) in &moves {
            handle
                .link()
                .add(LinkVeth::new(near, far).build())
                .execute()
                .await
                .map_err(|e| format!("veth {near}-{far}: {e}"))?;
            let index = index_of(&handle, far).await?;
            handle
                .link()
                .set(LinkUnspec::new_with_index(index).setns_by_fd(*fd).build())
                .execute()
                .await
                .map_err(|e| format!("moving {far} into its node: {e}"))?;
        }
        for (name, address) in &hub_addresses {
            address_and_up(&handle, name, *address).await?;
        }
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
            .map_err(|e| format!("forwarding in the hub: {e}"))?;
        Ok(())
    })
    .await
    .map_err(|e| failed(&e))?;
    for node in nodes {
        let (interface, address) = (node.interface.to_string(), node.address);
        in_namespace(node.netns, move |handle| async move {
            address_and_up(&handle, &interface, address).await?;
            let lo = index_of(&handle, "lo").await?;
            handle
                .link()
                .set(LinkUnspec::new_with_index(lo).up().build())
                .execute()
                .await
                .map_err(|e| format!("lo up: {e}"))?;
            handle
                .route()
                .add(
                    RouteMessageBuilder::<Ipv4Addr>::new()
                        .destination_prefix(NODE_NETWORK, 24)
                        .gateway(hub_end(address))
                        .build(),
                )
                .execute()
                .await
                .map_err(|e| format!("route to the other nodes: {e}"))
        })
        .await
        .map_err(|e| failed(&format!("node {}: {e}", node.name)))?;
    }
    Ok(())
}

/// The hub's end of the /30 whose node end is `node`.
fn hub_end(node: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(node) - 1)
}

/// Runs `work` with a netlink handle inside `netns`, on a thread and runtime of its own.
async fn in_namespace<F, Fut>(netns: &Netns, work: F) -> Result<(), String>
where
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let netns = netns.try_clone().map_err(|e| e.to_string())?;
    tokio::task::spawn_blocking(move || {
        netns
            .run(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async move {
                    let (connection, handle, _) =
                        rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
                    tokio::spawn(connection);
                    work(handle).await
                })
            })
            .map_err(|e| e.to_string())?
    })
    .await
    .map_err(|e| e.to_string())?
}

async fn index_of(handle: &Handle, name: &str) -> Result<u32, String> {
    let link = handle
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await
        .map_err(|e| format!("link {name}: {e}"))?;
    link.map(|link| link.header.index)
        .ok_or_else(|| format!("no link {name}"))
}

async fn address_and_up(handle: &Handle, name: &str, address: Ipv4Addr) -> Result<(), String> {
    let index = index_of(handle, name).await?;
    handle
        .address()
        .add(index, IpAddr::V4(address), 30)
        .execute()
        .await
        .map_err(|e| format!("address {address} on {name}: {e}"))?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(|e| format!("{name} up: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_is_the_far_end_of_its_own_slash_30() {
        let node = Ipv4Addr::new(198, 18, 0, 6);
        assert_eq!(hub_end(node), Ipv4Addr::new(198, 18, 0, 5));
        assert_eq!(
            u32::from(node) & !3,
            u32::from(Ipv4Addr::new(198, 18, 0, 4))
        );
        let last = 4 * (crate::plan::MAX_EMULATED_NODES - 1) + 2;
        assert!(
            last <= 254,
            "the last node's address {last} fits in the /24"
        );
    }
}
