//! Does this kernel have netem? Found out by doing it, where it harms nothing.
//!
//! The probe applies a netem qdisc to `lo` of a network namespace that exists only for the
//! probe (a thread of its own enters it and exits with it), through the same code as
//! [`Netem::apply`], read-back included. So "available" means the kernel accepted and
//! reported back netem options (the kernel loads `sch_netem` on demand if it is a module),
//! and "missing" means the kernel said it knows no such qdisc. Looking at `/proc/modules`
//! or `/sys/module` would say neither: built-in netem leaves no trace there, and an
//! unloaded module is not a missing one.

use std::fmt;
use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::sync::oneshot;

use super::error::NetemError;
use super::qdisc::Netem;
use domain::netem::NetemParams;

/// What [`netem_available`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetemCapability {
    /// The kernel applied netem and reported it back.
    Available,
    /// The kernel has no netem qdisc, neither built in nor loadable.
    Missing {
        /// The kernel's answer.
        detail: String,
    },
    /// The probe could not find out, typically for lack of privilege (it needs
    /// CAP_SYS_ADMIN for the namespace and CAP_NET_ADMIN for the qdisc).
    Unknown {
        /// Why.
        reason: String,
    },
}

impl fmt::Display for NetemCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Available => f.write_str("netem available"),
            Self::Missing { detail } => write!(f, "netem missing ({detail})"),
            Self::Unknown { reason } => write!(f, "netem availability unknown ({reason})"),
        }
    }
}

/// Probes whether this kernel can apply netem; see the module documentation for what it
/// does and what each answer means.
pub async fn netem_available() -> NetemCapability {
    let probe = NetemParams {
        delay: Duration::from_millis(1),
        ..Default::default()
    };
    let outcome = in_throwaway_netns(move || async move {
        let netem = Netem::connect()?;
        netem.apply("lo", &probe).await
    })
    .await;
    match outcome {
        Ok(Ok(_)) => NetemCapability::Available,
        Ok(Err(NetemError::CapabilityMissing { source, .. })) => NetemCapability::Missing {
            detail: format!("the kernel knows no qdisc kind netem: {source}"),
        },
        Ok(Err(other)) => NetemCapability::Unknown {
            reason: other.to_string(),
        },
        Err(err) => NetemCapability::Unknown {
            reason: format!("cannot create a network namespace: {err}"),
        },
    }
}

/// Runs `task` on a new thread, with a runtime of its own, inside a fresh network namespace
/// that vanishes when the thread ends. Sockets opened by `task` belong to that namespace.
pub(crate) async fn in_throwaway_netns<F, Fut, T>(task: F) -> io::Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    // Not spawn_blocking: that thread would go back to tokio's pool still in the namespace.
    std::thread::Builder::new()
        .name("netns-probe".into())
        .spawn(move || {
            let _ = tx.send(enter_new_netns().and_then(|()| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                Ok(runtime.block_on(task()))
            }));
        })?;
    rx.await
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
}

/// Moves the calling thread (only) into a new network namespace.
fn enter_new_netns() -> io::Result<()> {
    // SAFETY: unshare takes no pointers; CLONE_NEWNET affects only the calling thread.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netem::NetemOptions;

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// On this kernel, whatever it is: applying agrees with the probe, and a missing netem
    /// is the distinct capability error, never a silent success.
    #[tokio::test]
    async fn apply_agrees_with_the_probe() {
        if !is_root() {
            eprintln!("skipped: needs root for a throwaway network namespace");
            return;
        }
        let capability = netem_available().await;
        let params = NetemParams::from_millis(1.25, 0.25, 0.02).expect("valid");
        let expected = NetemOptions::from_params(&params).expect("valid");
        let outcome = in_throwaway_netns(move || async move {
            let netem = Netem::connect()?;
            let applied = netem.apply("lo", &params).await?;
            let read = netem.read("lo").await?;
            let cleared = netem.clear("lo").await?;
            Ok::<_, NetemError>((applied, read, cleared, netem.read("lo").await?))
        })
        .await
        .expect("namespace");
        eprintln!("{capability}: {outcome:?}");
        match capability {
            NetemCapability::Available => {
                let (applied, read, cleared, after) =
                    outcome.expect("netem available, so apply works");
                assert_eq!(
                    (applied, read, cleared, after),
                    (expected, Some(expected), Some(expected), None)
                );
            }
            NetemCapability::Missing { .. } => {
                assert!(
                    matches!(outcome, Err(NetemError::CapabilityMissing { .. })),
                    "{outcome:?}"
                );
            }
            NetemCapability::Unknown { reason } => eprintln!("skipped: {reason}"),
        }
    }

    #[tokio::test]
    async fn bad_interface_and_bad_params_change_nothing() {
        if !is_root() {
            eprintln!("skipped: needs root for a throwaway network namespace");
            return;
        }
        let outcome = in_throwaway_netns(|| async {
            let netem = Netem::connect().expect("netlink");
            let unknown = netem
                .apply(
                    "nope0",
                    &NetemParams::from_millis(1.0, 0.0, 0.0).expect("valid"),
                )
                .await;
            let invalid = NetemParams {
                loss_percent: 150.0,
                ..Default::default()
            };
            let bad = netem.apply("lo", &invalid).await;
            (unknown, bad, netem.read("lo").await)
        })
        .await
        .expect("namespace");
        assert!(
            matches!(outcome.0, Err(NetemError::UnknownInterface { ref iface }) if iface == "nope0"),
            "{:?}",
            outcome.0
        );
        assert!(
            matches!(outcome.1, Err(NetemError::InvalidParams(ref e)) if e.field() == "loss_percent"),
            "{:?}",
            outcome.1
        );
        assert!(matches!(outcome.2, Ok(None)), "{:?}", outcome.2);
    }
}
