//! Nebula's tun device as the kernel sees it: does it exist, with which IPv4 addresses, and
//! waiting for it to come up or go away. Read through rtnetlink, so it is the agent's own
//! network namespace that is looked at (sysfs shows the namespace of whoever mounted it).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use futures_util::TryStreamExt;
use host::poll::{Attempt, poll_until};
use netlink_packet_route::address::AddressAttribute;

use super::super::InstallError;
use super::daemon::Supervisor;
use super::plan::Plan;
use domain::NebulaFiles;

/// How long Nebula may take to bring its tun device up with the overlay address.
const UP_DEADLINE: Duration = Duration::from_secs(20);
/// How long the tun device may linger after Nebula was stopped.
const GONE_DEADLINE: Duration = Duration::from_secs(10);

/// The IPv4 addresses (with prefix lengths) on `interface`, or `None` when there is no
/// such interface.
pub(super) async fn addresses(interface: &str) -> Result<Option<Vec<(Ipv4Addr, u8)>>, String> {
    let (connection, handle, _) =
        rtnetlink::new_connection().map_err(|e| format!("opening rtnetlink: {e}"))?;
    let driver = tokio::spawn(connection);
    let result = async {
        let mut links = handle
            .link()
            .get()
            .match_name(interface.to_owned())
            .execute();
        let index = match links.try_next().await {
            Ok(Some(link)) => link.header.index,
            Ok(None) => return Ok(None),
            Err(rtnetlink::Error::NetlinkError(message))
                if message.code.map(|c| -c.get()) == Some(libc::ENODEV) =>
            {
                return Ok(None);
            }
            Err(error) => return Err(format!("looking up {interface}: {error}")),
        };
        let mut found = Vec::new();
        let mut dump = handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute();
        while let Some(message) = dump
            .try_next()
            .await
            .map_err(|e| format!("reading the addresses of {interface}: {e}"))?
        {
            for attribute in &message.attributes {
                if let AddressAttribute::Address(IpAddr::V4(ip)) = attribute {
                    found.push((*ip, message.header.prefix_len));
                }
            }
        }
        Ok(Some(found))
    }
    .await;
    driver.abort();
    result
}

/// `addresses` rendered for a message: `198.19.0.3/24, 10.0.0.1/8` or `no address`.
pub(super) fn describe(addresses: &[(Ipv4Addr, u8)]) -> String {
    if addresses.is_empty() {
        return "no address".to_string();
    }
    addresses
        .iter()
        .map(|(ip, prefix)| format!("{ip}/{prefix}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until the tun device carries the overlay address; fails early if Nebula exits or
/// the device comes up with another address (a certificate made for another IP).
pub(super) async fn wait_up(
    supervisor: &mut Supervisor,
    plan: &Plan,
    files: &NebulaFiles,
) -> Result<(), InstallError> {
    let wanted = (plan.address, plan.prefix);
    let waited = poll_until(UP_DEADLINE, Duration::from_millis(50), || {
        // Asked before the device is read, so a device that is up wins over an exit.
        let exit = supervisor.exit_status();
        async move {
            let last = match addresses(&plan.interface).await {
                Ok(Some(found)) if found.contains(&wanted) => return Attempt::Done(()),
                // Nebula sets the address and then its netmask (two ioctls): the wanted
                // address with another prefix may be that moment, so it is waited out.
                Ok(Some(found)) if found.iter().any(|(ip, _)| *ip == plan.address) => {
                    format!("the device has {} so far", describe(&found))
                }
                Ok(Some(found)) if !found.is_empty() => {
                    return Attempt::Stop(NotUp::OtherAddress(describe(&found)));
                }
                Ok(Some(_)) => "the device has no address yet".to_string(),
                Ok(None) => "no such device".to_string(),
                Err(error) => error,
            };
            match exit {
                Some(status) => Attempt::Stop(NotUp::Exited(status)),
                None => Attempt::Retry(NotUp::NotYet(last)),
            }
        }
    })
    .await;
    let Err(why) = waited else {
        return Ok(());
    };
    Err(InstallError::Failed(match why {
        NotUp::OtherAddress(found) => format!(
            "{} came up with {found}, not {} as the request says: this host's Nebula \
             certificate ({}) was made for another address",
            plan.interface,
            plan.cidr(),
            files.cert.display()
        ),
        NotUp::Exited(status) => format!(
            "nebula exited ({status}) before {} came up. Its log:\n{}",
            plan.interface,
            supervisor.log_tail().await
        ),
        NotUp::NotYet(last) => format!(
            "{} did not come up with {} within {UP_DEADLINE:?} ({last}). Nebula's log:\n{}",
            plan.interface,
            plan.cidr(),
            supervisor.log_tail().await
        ),
    }))
}

/// Why the tun device did not come up.
enum NotUp {
    /// It has addresses, not the wanted one (described).
    OtherAddress(String),
    /// Nebula exited (its status).
    Exited(String),
    /// Not yet, when the time was up (the last check).
    NotYet(String),
}

/// Waits until a stopped Nebula's tun device is gone.
pub(super) async fn wait_gone(interface: &str) -> Result<(), InstallError> {
    poll_until(GONE_DEADLINE, Duration::from_millis(50), || async {
        match addresses(interface).await {
            Ok(None) => Attempt::Done(()),
            Ok(Some(_)) => Attempt::Retry(InstallError::Failed(format!(
                "{interface} still exists {GONE_DEADLINE:?} after nebula stopped"
            ))),
            Err(error) => Attempt::Retry(InstallError::Failed(error)),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_has_its_address_and_a_missing_device_is_none() {
        let lo = addresses("lo").await.expect("rtnetlink answers");
        // Namespaces with `lo` down have no address on it; when up, 127.0.0.1/8.
        if let Some(found) = &lo
            && !found.is_empty()
        {
            assert!(found.contains(&(Ipv4Addr::LOCALHOST, 8)), "{found:?}");
        }
        assert!(lo.is_some());
        assert_eq!(addresses("nosuchdev0").await.expect("answers"), None);
        assert_eq!(describe(&[]), "no address");
        assert_eq!(
            describe(&[(Ipv4Addr::new(198, 19, 0, 3), 24)]),
            "198.19.0.3/24"
        );
    }
}
