//! Kubernetes node label syntax, and the kubelet's own restriction on which labels a node
//! may give itself. A label k3s's kubelet refuses makes it exit at start, so it is caught
//! here, before anything runs.

/// Label namespaces a kubelet may not set on its own node, apart from [`KUBELET_ALLOWED`].
const RESTRICTED_NAMESPACES: &[&str] = &["kubernetes.io", "k8s.io"];

/// Prefixes within the restricted namespaces that a kubelet may set (`*.node.kubernetes.io`
/// and `*.kubelet.kubernetes.io` too).
const KUBELET_ALLOWED_NAMESPACES: &[&str] = &["node.kubernetes.io", "kubelet.kubernetes.io"];

/// Well-known labels in the restricted namespaces that a kubelet may set all the same
/// (the kubelet's `kubeletLabels`).
const KUBELET_ALLOWED: &[&str] = &[
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// Checks a node label: Kubernetes syntax for key and value, and that the kubelet accepts it.
pub(super) fn check_label(key: &str, value: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "the key's prefix {prefix:?} is not a lowercase DNS name (at most 253 characters)"
        ));
    }
    if !is_label_word(name) || name.is_empty() {
        return Err(format!(
            "the key's name {name:?} must be 1 to 63 letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit"
        ));
    }
    if !is_label_word(value) {
        return Err(format!(
            "the value {value:?} must be empty or 1 to 63 letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit"
        ));
    }
    if let Some(prefix) = prefix
        && in_namespace(prefix, RESTRICTED_NAMESPACES)
        && !in_namespace(prefix, KUBELET_ALLOWED_NAMESPACES)
        && !KUBELET_ALLOWED.contains(&key)
    {
        return Err(
            "the kubelet refuses to set labels in the kubernetes.io and k8s.io namespaces on \
             its own node, except node.kubernetes.io/..., kubelet.kubernetes.io/... and the \
             well-known topology, os and arch labels"
                .into(),
        );
    }
    Ok(())
}

/// True when `prefix` is one of `namespaces` or a subdomain of one.
fn in_namespace(prefix: &str, namespaces: &[&str]) -> bool {
    namespaces.iter().any(|namespace| {
        prefix == *namespace
            || prefix
                .strip_suffix(namespace)
                .is_some_and(|head| head.ends_with('.'))
    })
}

/// A label name or value: empty, or up to 63 characters of `[A-Za-z0-9._-]` that start and
/// end with an alphanumeric one.
fn is_label_word(word: &str) -> bool {
    let edges_ok = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    word.len() <= 63
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edges_ok(word.chars().next())
        && edges_ok(word.chars().last())
}

/// An RFC 1123 subdomain as Kubernetes checks it: lowercase, at most 253 characters, dot
/// separated labels of `[a-z0-9-]` that start and end with a letter or digit.
pub(super) fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_label_syntax() {
        for (key, value) in [
            ("site", "lab"),
            ("site", ""),
            ("example.com/rack", "r-1.a_b"),
            ("topology.kubernetes.io/zone", "edge"),
            ("node.kubernetes.io/instance-type", "rpi4"),
            ("x.node.kubernetes.io/anything", "1"),
        ] {
            assert_eq!(check_label(key, value), Ok(()), "{key}={value}");
        }
        let long = "a".repeat(64);
        for (key, value) in [
            ("", "x"),
            ("/name", "x"),
            ("Example.com/rack", "x"),
            ("example.com/", "x"),
            ("-site", "x"),
            ("si te", "x"),
            (long.as_str(), "x"),
            ("site", long.as_str()),
            ("site", "a,b"),
            ("site", "trailing-"),
            ("kubernetes.io/role", "x"),
            ("node-role.kubernetes.io/worker", "true"),
            ("foo.k8s.io/x", "y"),
        ] {
            assert!(
                check_label(key, value).is_err(),
                "{key:?}={value:?} accepted"
            );
        }
    }

    #[test]
    fn dns_subdomains() {
        assert!(is_dns_subdomain("worker-1.lab"));
        assert!(!is_dns_subdomain("worker_1"));
        assert!(!is_dns_subdomain("Worker"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }
}
