//! Applying, reading back and clearing a netem root qdisc through rtnetlink.
//!
//! rtnetlink has no netem builder, so the request is a `TcMessage` carrying the hand-encoded
//! `TCA_OPTIONS` as a raw attribute, sent through rtnetlink's [`Handle`]: the same bytes as
//! `tc qdisc replace dev IFACE root netem ...` (checked against captured `tc` requests).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use netlink_packet_core::{
    DefaultNla, NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkMessage,
    NetlinkPayload, Nla,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcOption};
use rtnetlink::Handle;
use tokio::sync::Mutex;
use tracing::{debug, info};

use super::encode::{DecodeError, NetemOptions};
use super::error::NetemError;
use super::lease::Lease;
use domain::netem::NetemParams;

const TCA_OPTIONS: u16 = 2;
const KIND: &str = "netem";

/// Applies, reads back and clears netem root qdiscs, in the network namespace its netlink
/// connection was opened in.
///
/// Operations run one at a time (clones included): the kernel refuses a second dump on a
/// netlink socket while one is in progress (EBUSY), and a clear must not interleave with an
/// apply between its read and its delete.
#[derive(Debug, Clone)]
pub struct Netem {
    handle: Handle,
    turn: Arc<Mutex<()>>,
}

impl Netem {
    /// Opens a route netlink connection in the calling thread's network namespace and drives
    /// it on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn connect() -> Result<Self, NetemError> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(NetemError::Connect)?;
        tokio::spawn(connection);
        Ok(Self::with_handle(handle))
    }

    /// Uses an existing rtnetlink connection (and so its network namespace). Its other users
    /// must not run dumps concurrently with this `Netem`.
    pub fn with_handle(handle: Handle) -> Self {
        Self {
            handle,
            turn: Arc::new(Mutex::new(())),
        }
    }

    /// Replaces the root qdisc of `iface` by netem with `params`, then reads it back and
    /// returns what the kernel holds, which is checked to be what was sent.
    pub async fn apply(
        &self,
        iface: &str,
        params: &NetemParams,
    ) -> Result<NetemOptions, NetemError> {
        let asked = NetemOptions::from_params(params)?;
        let _turn = self.turn.lock().await;
        let index = self.index(iface).await?;
        let request = replace_request(index, &asked);
        self.send(request)
            .await
            .map_err(|source| match code(&source) {
                // RTM_NEWQDISC answers ENOENT when no qdisc kind "netem" is registered (after the
                // kernel's own attempt to load the module).
                Some(libc::ENOENT) => NetemError::CapabilityMissing {
                    iface: iface.to_owned(),
                    source,
                },
                _ => classify("apply netem", iface, source),
            })?;
        let checked = match self.read_index(iface, index).await {
            Ok(held) if held == Some(asked) => Ok(()),
            Ok(held) => Err(NetemError::ReadBackMismatch {
                iface: iface.to_owned(),
                read_back: Box::new((asked, held)),
            }),
            Err(error) => Err(error),
        };
        if let Err(error) = checked {
            // The kernel may hold something, unverified and under no lease: take it off
            // rather than leave an impairment nobody answers for.
            if let Err(rollback) = self.delete_root(iface, index).await {
                tracing::error!(iface, %rollback, "rolling back an unverified netem failed");
            }
            return Err(error);
        }
        info!(iface, ?params, "netem applied");
        Ok(asked)
    }

    /// Like [`apply`](Self::apply), and returns a [`Lease`] that clears the qdisc unless
    /// renewed within `ttl` (and when released or dropped).
    pub async fn apply_leased(
        &self,
        iface: &str,
        params: &NetemParams,
        ttl: Duration,
    ) -> Result<Lease, NetemError> {
        let held = self.apply(iface, params).await?;
        let netem = self.clone();
        let iface = iface.to_owned();
        Ok(Lease::start(ttl, move || {
            let (netem, iface) = (netem.clone(), iface.clone());
            async move { netem.clear_if(&iface, &held).await.map(|_| ()) }
        }))
    }

    /// The netem options of the root qdisc of `iface`; `None` when the root is not netem.
    pub async fn read(&self, iface: &str) -> Result<Option<NetemOptions>, NetemError> {
        let _turn = self.turn.lock().await;
        let index = self.index(iface).await?;
        self.read_index(iface, index).await
    }

    /// Removes a netem root qdisc from `iface`, restoring the kernel's default. Returns what
    /// was removed; `None` (nothing done) when the root qdisc is not netem.
    pub async fn clear(&self, iface: &str) -> Result<Option<NetemOptions>, NetemError> {
        let _turn = self.turn.lock().await;
        let index = self.index(iface).await?;
        let held = self.read_index(iface, index).await?;
        if held.is_some() {
            self.delete_root(iface, index).await?;
            info!(iface, "netem cleared");
        }
        Ok(held)
    }

    /// Removes the netem root qdisc of `iface` only if it still holds `expected`: a lease
    /// must not remove settings applied after it. Returns whether it removed it.
    pub async fn clear_if(&self, iface: &str, expected: &NetemOptions) -> Result<bool, NetemError> {
        let _turn = self.turn.lock().await;
        let index = self.index(iface).await?;
        let held = self.read_index(iface, index).await?;
        if held.as_ref() != Some(expected) {
            debug!(
                iface,
                ?held,
                "netem changed since the lease began; left alone"
            );
            return Ok(false);
        }
        self.delete_root(iface, index).await?;
        info!(iface, "netem cleared");
        Ok(true)
    }

    /// The kernel's index of the interface called `name` (its name or any of its altnames),
    /// in this connection's network namespace; `None` when no interface is called so, or
    /// when `name` cannot name one ([`valid_name`](super::interfaces::valid_name)).
    pub async fn index_of(&self, name: &str) -> Result<Option<u32>, NetemError> {
        if !super::interfaces::valid_name(name) {
            return Ok(None);
        }
        let _turn = self.turn.lock().await;
        match self.index(name).await {
            Ok(index) => Ok(Some(index)),
            Err(NetemError::UnknownInterface { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The index of the interface that has `ip` assigned, in this connection's network
    /// namespace; `None` when none has it.
    pub async fn index_holding(&self, ip: IpAddr) -> Result<Option<u32>, NetemError> {
        let _turn = self.turn.lock().await;
        let mut addresses = self.handle.address().get().execute();
        let mut found = None;
        // The whole dump is read, so that the socket is free for the next request.
        while let Some(message) = addresses
            .try_next()
            .await
            .map_err(|e| classify("list addresses", &ip.to_string(), e))?
        {
            if found.is_none() && local_address(&message) == Some(ip) {
                found = Some(message.header.index);
            }
        }
        Ok(found)
    }

    async fn index(&self, iface: &str) -> Result<u32, NetemError> {
        let mut links = self
            .handle
            .link()
            .get()
            .match_name(iface.to_owned())
            .execute();
        match links.try_next().await {
            Ok(Some(link)) => Ok(link.header.index),
            Ok(None) => Err(NetemError::UnknownInterface {
                iface: iface.to_owned(),
            }),
            Err(source) if code(&source) == Some(libc::ENODEV) => {
                Err(NetemError::UnknownInterface {
                    iface: iface.to_owned(),
                })
            }
            Err(source) => Err(classify("look up", iface, source)),
        }
    }

    async fn read_index(
        &self,
        iface: &str,
        index: u32,
    ) -> Result<Option<NetemOptions>, NetemError> {
        let ifindex = i32::try_from(index).unwrap_or(i32::MAX);
        // Older kernels ignore the index filter of a dump, so filter here too.
        let mut dump = self.handle.qdisc().get().index(ifindex).execute();
        while let Some(msg) = dump
            .try_next()
            .await
            .map_err(|e| classify("read qdiscs", iface, e))?
        {
            if msg.header.index == ifindex && msg.header.parent == TcHandle::ROOT {
                return netem_options(&msg).map_err(|source| NetemError::Decode {
                    iface: iface.to_owned(),
                    source,
                });
            }
        }
        Ok(None)
    }

    async fn delete_root(&self, iface: &str, index: u32) -> Result<(), NetemError> {
        let mut request = self
            .handle
            .qdisc()
            .del(i32::try_from(index).unwrap_or(i32::MAX));
        request.message_mut().header.parent = TcHandle::ROOT;
        request
            .execute()
            .await
            .map_err(|e| classify("clear netem", iface, e))
    }

    async fn send(
        &self,
        request: NetlinkMessage<RouteNetlinkMessage>,
    ) -> Result<(), rtnetlink::Error> {
        let mut handle = self.handle.clone();
        let mut responses = handle.request(request)?;
        while let Some(message) = responses.next().await {
            // An error message with no code is the kernel's acknowledgement.
            if let NetlinkPayload::Error(err) = message.payload
                && err.code.is_some()
            {
                return Err(rtnetlink::Error::NetlinkError(err));
            }
        }
        Ok(())
    }
}

/// The `RTM_NEWQDISC` request `tc qdisc replace dev IFACE root netem ...` sends.
pub(crate) fn replace_request(
    index: u32,
    options: &NetemOptions,
) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut tc = TcMessage::with_index(i32::try_from(index).unwrap_or(i32::MAX));
    tc.header.parent = TcHandle::ROOT;
    tc.attributes.push(TcAttribute::Kind(KIND.to_owned()));
    // netem's options are a struct followed by attributes, which TcOption cannot express:
    // carry them as one raw attribute.
    tc.attributes.push(TcAttribute::Other(DefaultNla::new(
        TCA_OPTIONS,
        options.encode(),
    )));
    let mut message = NetlinkMessage::from(RouteNetlinkMessage::NewQueueDiscipline(tc));
    message.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE | NLM_F_CREATE;
    message
}

/// The address an interface holds: `IFA_LOCAL` where there is one (on a point-to-point link
/// `IFA_ADDRESS` is the peer's), else `IFA_ADDRESS`.
fn local_address(message: &AddressMessage) -> Option<IpAddr> {
    let local = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// Decodes the options of a dumped qdisc; `None` if it is not netem.
fn netem_options(msg: &TcMessage) -> Result<Option<NetemOptions>, DecodeError> {
    let is_netem = msg
        .attributes
        .iter()
        .any(|a| matches!(a, TcAttribute::Kind(k) if k == KIND));
    if !is_netem {
        return Ok(None);
    }
    // For kinds it does not know, netlink-packet-route keeps TCA_OPTIONS as one raw attribute.
    let raw = msg.attributes.iter().find_map(|a| match a {
        TcAttribute::Options(opts) => opts.iter().find_map(|o| match o {
            TcOption::Other(nla) if nla.kind() == TCA_OPTIONS => {
                let mut bytes = vec![0; nla.value_len()];
                nla.emit_value(&mut bytes);
                Some(bytes)
            }
            _ => None,
        }),
        _ => None,
    });
    NetemOptions::decode(raw.as_deref().unwrap_or_default()).map(Some)
}

fn code(err: &rtnetlink::Error) -> Option<i32> {
    match err {
        rtnetlink::Error::NetlinkError(msg) => msg.code.map(|c| -c.get()),
        _ => None,
    }
}

fn classify(op: &'static str, iface: &str, source: rtnetlink::Error) -> NetemError {
    let iface = iface.to_owned();
    match code(&source) {
        Some(libc::EPERM) | Some(libc::EACCES) => NetemError::PermissionDenied { op, iface },
        Some(libc::ENODEV) => NetemError::UnknownInterface { iface },
        _ => NetemError::Netlink { op, iface, source },
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NetlinkSerializable;

    use super::super::vectors;
    use super::*;

    fn bytes<I: NetlinkSerializable>(mut message: NetlinkMessage<I>) -> Vec<u8> {
        message.finalize();
        let mut buf = vec![0; message.buffer_len()];
        message.serialize(&mut buf);
        buf
    }

    #[test]
    fn whole_request_is_byte_identical_to_tc_replace() {
        for req in vectors::requests().iter().filter(|r| r.verb == "replace") {
            let options = NetemOptions::from_params(&vectors::params(&req.name)).expect("valid");
            // Captured with ifindex and sequence number zeroed; ours has both at zero too.
            let ours = bytes(replace_request(0, &options));
            assert_eq!(
                ours, req.message,
                "{} ({}): ours {ours:02x?}",
                req.name, req.args
            );
        }
    }

    #[test]
    fn a_dumped_netem_qdisc_decodes_and_others_are_none() {
        let options = NetemOptions::from_params(&vectors::params("edge_side")).expect("valid");
        let sent = bytes(replace_request(3, &options));
        let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&sent).expect("parses");
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewQueueDiscipline(tc)) =
            parsed.payload
        else {
            panic!("not a qdisc message");
        };
        assert_eq!(tc.header.index, 3);
        assert_eq!(netem_options(&tc), Ok(Some(options)));

        let mut other = TcMessage::with_index(3);
        other.attributes.push(TcAttribute::Kind("noqueue".into()));
        assert_eq!(netem_options(&other), Ok(None));

        let mut empty = TcMessage::with_index(3);
        empty.attributes.push(TcAttribute::Kind(KIND.into()));
        assert_eq!(netem_options(&empty), Err(DecodeError::TooShort { len: 0 }));
    }
}
