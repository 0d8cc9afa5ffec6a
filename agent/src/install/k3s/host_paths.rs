//! What k3s leaves on a node besides its data dir once it is stopped, and how it is cleaned
//! when the official `k3s-killall.sh` is not there (bootstrap's offline `[k3s] binaries`
//! set-up never installs it): pods' mounts, flannel's and the CNI's links, and the folders
//! k3s writes outside its data dir.
//!
//! This does the essential part of `k3s-killall.sh`. What it does NOT do is the script's
//! iptables cleanup (`iptables-save | grep -v KUBE-/CNI-/flannel | iptables-restore`, and
//! the same for ip6tables): rewriting the host's whole ruleset from a filtered dump could
//! drop a rule someone else added that happens to match, so the status detail says the
//! rules stay (they are gone after a reboot, or run the official script).

use std::path::{Path, PathBuf};

use futures_util::TryStreamExt;
use netlink_packet_route::link::LinkAttribute;

/// Where k3s leaves things outside its data dir. The host's paths normally; a test points
/// them into a folder of its own so it never touches the machine's real kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// Folders at or under which every mount is undone, deepest first, before anything is
    /// removed (a pod's hostPath volume is a bind mount: removing through it would delete
    /// host files).
    pub mount_roots: Vec<PathBuf>,
    /// Prefix of the pods' network namespaces (`/run/netns/cni-`): unmounted and removed.
    pub netns_prefix: PathBuf,
    /// Folders removed once nothing is mounted below them.
    pub folders: Vec<PathBuf>,
    /// Parents k3s made for some of [`HostPaths::folders`] (`/etc/rancher`), removed after
    /// them only when empty: a user's own k3s configuration there stays.
    pub emptied_parents: Vec<PathBuf>,
    /// Network links deleted (in the agent's own network namespace), after every link
    /// enslaved to the first one (the `cni0` bridge's veths).
    pub links: Vec<String>,
}

impl HostPaths {
    /// The paths k3s uses on a real node.
    pub fn host() -> Self {
        Self::under(Path::new("/"))
    }

    /// The same layout below `root` (tests).
    pub fn under(root: &Path) -> Self {
        let at = |path: &str| root.join(path);
        HostPaths {
            // k3s-killall.sh's list; not /var/lib/kubelet itself, which may be a partition.
            mount_roots: vec![
                at("run/k3s"),
                at("var/lib/kubelet/pods"),
                at("var/lib/kubelet/plugins"),
            ],
            netns_prefix: at("run/netns/cni-"),
            folders: vec![
                at("run/k3s"),
                at("run/flannel"),
                at("var/lib/cni"),
                at("var/lib/kubelet"),
                at("etc/rancher/node"),
            ],
            emptied_parents: vec![at("etc/rancher")],
            links: [
                "cni0",
                "flannel.1",
                "flannel-v6.1",
                "kube-ipvs0",
                "flannel-wg",
                "flannel-wg-v6",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// What a cleanup did and what failed, each failure a sentence for the status detail.
#[derive(Debug, Default)]
pub(super) struct Cleaned {
    pub(super) done: Vec<String>,
    pub(super) failed: Vec<String>,
}

/// Unmounts at or below `host`'s mount roots and strictly below `data_dir` (which may
/// itself be a partition the user mounted), removes the pods' network namespaces, deletes
/// the links and removes the folders; best effort, every step tried.
pub(super) async fn clean(host: &HostPaths, data_dir: &Path) -> Cleaned {
    let mut cleaned = Cleaned::default();
    unmount_below(host, data_dir, &mut cleaned);
    delete_links(&host.links, &mut cleaned).await;
    let mut removed = Vec::new();
    for folder in &host.folders {
        if let Some(mount) = mounts().into_iter().find(|m| m.starts_with(folder)) {
            cleaned.failed.push(format!(
                "{} kept: {} is still mounted below it",
                folder.display(),
                mount.display()
            ));
            continue;
        }
        match crate::install::system::remove_dir(folder) {
            Ok(true) => removed.push(folder.display().to_string()),
            Ok(false) => {}
            Err(error) => cleaned.failed.push(error.to_string()),
        }
    }
    for parent in &host.emptied_parents {
        match std::fs::remove_dir(parent) {
            Ok(()) => removed.push(parent.display().to_string()),
            // Not there, or holding what is not k3s's own.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty
                ) => {}
            Err(e) => cleaned
                .failed
                .push(format!("removing {}: {e}", parent.display())),
        }
    }
    if !removed.is_empty() {
        cleaned.done.push(format!("removed {}", removed.join(", ")));
    }
    cleaned
}

/// True when nothing is mounted strictly below `dir`: only then may it be removed
/// recursively without deleting another filesystem's files.
pub(super) fn nothing_mounted_below(dir: &Path) -> bool {
    !mounts().iter().any(|m| m.starts_with(dir) && m != dir)
}

fn unmount_below(host: &HostPaths, data_dir: &Path, cleaned: &mut Cleaned) {
    let prefix = host.netns_prefix.as_os_str().as_encoded_bytes();
    let mut targets: Vec<PathBuf> = mounts()
        .into_iter()
        .filter(|m| {
            host.mount_roots.iter().any(|root| m.starts_with(root))
                || (m.starts_with(data_dir) && m != data_dir)
                || m.as_os_str().as_encoded_bytes().starts_with(prefix)
        })
        .collect();
    // Deepest first: a mount below another must go before the one holding it.
    targets.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    targets.dedup();
    let mut unmounted = 0;
    for target in &targets {
        match unmount(target) {
            Ok(()) => unmounted += 1,
            Err(error) => cleaned
                .failed
                .push(format!("unmounting {}: {error}", target.display())),
        }
        let is_netns = target.as_os_str().as_encoded_bytes().starts_with(prefix);
        if is_netns && let Err(error) = crate::install::system::remove_file(target) {
            cleaned.failed.push(error.to_string());
        }
    }
    if unmounted > 0 {
        cleaned.done.push(format!("unmounted {unmounted} mount(s)"));
    }
}

/// Detaches the mount at `target`. Lazily (MNT_DETACH), as a forced unmount of a busy
/// filesystem could block; its processes were killed before, and nothing new can reach it.
fn unmount(target: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a plain syscall with a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Every mount point of this process's mount namespace, from `/proc/self/mountinfo`.
fn mounts() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|text| {
            text.lines()
                .filter_map(|line| line.split(' ').nth(4))
                .map(|field| PathBuf::from(unescape_mount_path(field)))
                .collect()
        })
        .unwrap_or_default()
}

/// mountinfo writes blanks, tabs, newlines and backslashes in paths as `\ooo`.
fn unescape_mount_path(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        if let Some(digits) = octal {
            out.push(
                digits
                    .iter()
                    .fold(0u8, |n, d| n.wrapping_mul(8) + (d - b'0')),
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Deletes the links named in `links` and every link enslaved to the first (the bridge's
/// veths), through rtnetlink in this process's network namespace.
async fn delete_links(links: &[String], cleaned: &mut Cleaned) {
    let (connection, handle, _) = match rtnetlink::new_connection() {
        Ok(opened) => opened,
        Err(error) => {
            cleaned.failed.push(format!(
                "deleting {}: opening rtnetlink: {error}",
                links.join(", ")
            ));
            return;
        }
    };
    let driver = tokio::spawn(connection);
    let mut present: Vec<(u32, String, Option<u32>)> = Vec::new();
    let mut dump = handle.link().get().execute();
    loop {
        match dump.try_next().await {
            Ok(Some(link)) => {
                let mut name = None;
                let mut master = None;
                for attribute in &link.attributes {
                    match attribute {
                        LinkAttribute::IfName(n) => name = Some(n.clone()),
                        LinkAttribute::Controller(index) => master = Some(*index),
                        _ => {}
                    }
                }
                if let Some(name) = name {
                    present.push((link.header.index, name, master));
                }
            }
            Ok(None) => break,
            Err(error) => {
                cleaned.failed.push(format!("listing links: {error}"));
                driver.abort();
                return;
            }
        }
    }
    let bridge = links.first().and_then(|first| {
        present
            .iter()
            .find(|(_, name, _)| name == first)
            .map(|(index, ..)| *index)
    });
    let doomed: Vec<&(u32, String, Option<u32>)> = present
        .iter()
        .filter(|(_, name, master)| (bridge.is_some() && *master == bridge) || links.contains(name))
        .collect();
    let mut deleted = Vec::new();
    for (index, name, _) in doomed {
        match handle.link().del(*index).execute().await {
            Ok(()) => deleted.push(name.clone()),
            // A veth goes with its peer: already gone is fine.
            Err(rtnetlink::Error::NetlinkError(message))
                if message.code.map(|c| -c.get()) == Some(libc::ENODEV) => {}
            Err(error) => cleaned
                .failed
                .push(format!("deleting link {name}: {error}")),
        }
    }
    driver.abort();
    if !deleted.is_empty() {
        cleaned
            .done
            .push(format!("deleted links {}", deleted.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/run/k3s/a\\040b"), "/run/k3s/a b");
        assert_eq!(unescape_mount_path("/x\\134y\\011"), "/x\\y\t");
        assert_eq!(unescape_mount_path("/plain\\9"), "/plain\\9");
    }

    #[test]
    fn test_paths_stay_below_their_root() {
        let root = Path::new("/tmp/t");
        let paths = HostPaths::under(root);
        assert!(paths.mount_roots.iter().all(|p| p.starts_with(root)));
        assert!(paths.folders.iter().all(|p| p.starts_with(root)));
        assert!(paths.emptied_parents.iter().all(|p| p.starts_with(root)));
        assert!(paths.netns_prefix.starts_with(root));
        let host = HostPaths::host();
        assert!(host.folders.contains(&PathBuf::from("/var/lib/kubelet")));
        assert_eq!(host.netns_prefix, PathBuf::from("/run/netns/cni-"));
        assert!(nothing_mounted_below(Path::new("/nonexistent/k3s")));
        assert!(!nothing_mounted_below(Path::new("/")), "/proc is below /");
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(nothing_mounted_below(dir.path()));
    }
}
