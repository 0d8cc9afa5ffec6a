//! The Nebula configuration a [`Plan`] becomes: the PKI bootstrap copied, the lighthouses
//! (`static_host_map`, `lighthouse.hosts`), the listen port, the tun device, and a firewall
//! open between overlay hosts. Its header also records what the YAML does not show but a
//! running Nebula depends on (the overlay address asked for, a digest of the certificate
//! files' contents), so comparing texts tells whether a running Nebula is the one asked for.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::super::InstallError;
use super::plan::Plan;
use domain::NebulaFiles;

/// Nebula's YAML configuration for `plan` with `files` as its PKI (whose contents digest
/// to `pki_digest`, see [`pki_digest`]); `binary` is named in the header comment.
pub(super) fn render(
    plan: &Plan,
    files: &NebulaFiles,
    pki_digest: &str,
    binary: &Path,
) -> Result<String, InstallError> {
    let path = |p: &Path| p.display().to_string();
    let config = NebulaConfig {
        pki: Pki {
            ca: path(&files.ca),
            cert: path(&files.cert),
            key: path(&files.key),
        },
        static_host_map: plan
            .lighthouses
            .iter()
            .map(|l| (l.overlay_ip.to_string(), vec![l.underlay_address.clone()]))
            .collect(),
        lighthouse: LighthouseSection {
            am_lighthouse: plan.lighthouse,
            // Members re-announce themselves this often, so a restarted lighthouse
            // learns them again within seconds.
            interval: 10,
            hosts: if plan.lighthouse {
                Vec::new()
            } else {
                plan.lighthouses
                    .iter()
                    .map(|l| l.overlay_ip.to_string())
                    .collect()
            },
        },
        listen: Listen {
            host: "0.0.0.0",
            port: plan.listen_port,
        },
        punchy: Punchy {
            punch: true,
            respond: true,
        },
        tun: Tun {
            disabled: false,
            dev: plan.interface.clone(),
            mtu: 1300,
        },
        logging: Logging {
            level: "info",
            format: "text",
        },
        firewall: Firewall {
            outbound: vec![Rule::ANY],
            inbound: vec![Rule::ANY],
        },
    };
    let yaml = serde_yaml_ng::to_string(&config)
        .map_err(|e| InstallError::Failed(format!("rendering Nebula's config: {e}")))?;
    Ok(format!(
        "# Written by continuum-agent (InstallOverlay) for {binary}; UninstallOverlay removes it.\n\
         # overlay_cidr: {cidr}\n\
         # pki contents (ca, cert, key): fnv1a64 {pki_digest}\n\
         # The firewall lets every overlay host reach every port: this is a benchmark\n\
         # testbed whose brokers listen on arbitrary ports (k3s NodePorts), and only hosts\n\
         # holding a certificate of this testbed's own Nebula CA are on the overlay.\n{yaml}",
        binary = binary.display(),
        cidr = plan.cidr(),
    ))
}

/// A digest of the CA, certificate and key files' contents: a re-issued certificate (or a
/// new key) must restart Nebula even though the paths in the YAML stay the same. FNV-1a:
/// this detects a change, it proves nothing, and the agent has no other hash at hand.
pub(super) fn pki_digest(files: &NebulaFiles) -> Result<String, InstallError> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (key, path) in [
        ("ca", &files.ca),
        ("cert", &files.cert),
        ("key", &files.key),
    ] {
        let bytes = std::fs::read(path).map_err(|e| {
            InstallError::Missing(format!("[nebula] {key} = {}: {e}", path.display()))
        })?;
        // The length first, so moving bytes from one file to the next changes the digest.
        for byte in (bytes.len() as u64).to_le_bytes().iter().chain(&bytes) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(format!("{hash:016x}"))
}

/// The subset of Nebula's configuration this installer sets; Nebula's defaults cover the rest.
#[derive(Serialize)]
struct NebulaConfig {
    pki: Pki,
    static_host_map: BTreeMap<String, Vec<String>>,
    lighthouse: LighthouseSection,
    listen: Listen,
    punchy: Punchy,
    tun: Tun,
    logging: Logging,
    firewall: Firewall,
}

#[derive(Serialize)]
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

#[derive(Serialize)]
struct LighthouseSection {
    am_lighthouse: bool,
    interval: u32,
    hosts: Vec<String>,
}

#[derive(Serialize)]
struct Listen {
    host: &'static str,
    port: u16,
}

#[derive(Serialize)]
struct Punchy {
    punch: bool,
    respond: bool,
}

#[derive(Serialize)]
struct Tun {
    disabled: bool,
    dev: String,
    mtu: u32,
}

#[derive(Serialize)]
struct Logging {
    level: &'static str,
    format: &'static str,
}

#[derive(Serialize)]
struct Firewall {
    outbound: Vec<Rule>,
    inbound: Vec<Rule>,
}

#[derive(Serialize)]
struct Rule {
    port: &'static str,
    proto: &'static str,
    host: &'static str,
}

impl Rule {
    const ANY: Rule = Rule {
        port: "any",
        proto: "any",
        host: "any",
    };
}

/// The tun device named in a configuration this installer wrote, if it can be read.
pub(super) fn interface_of(config_text: &str) -> Option<String> {
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(config_text).ok()?;
    value.get("tun")?.get("dev")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::agent::v1 as pb;

    fn member() -> pb::InstallOverlayRequest {
        pb::InstallOverlayRequest {
            overlay_cidr: "198.19.0.3/24".into(),
            lighthouses: vec![pb::OverlayLighthouse {
                overlay_ip: "198.19.0.1".into(),
                underlay_address: "198.18.0.2:4242".into(),
            }],
            ..Default::default()
        }
    }

    fn files() -> NebulaFiles {
        NebulaFiles {
            ca: "/etc/continuum/nebula/ca.crt".into(),
            cert: "/etc/continuum/nebula/host.crt".into(),
            key: "/etc/continuum/nebula/host.key".into(),
            binary: "nebula".into(),
        }
    }

    #[test]
    fn the_member_config_names_the_lighthouse_and_opens_the_overlay() {
        let plan = Plan::from_request(&member()).expect("valid");
        let text = render(&plan, &files(), "00ff", Path::new("/usr/bin/nebula")).expect("renders");
        assert!(text.contains("\n# overlay_cidr: 198.19.0.3/24\n"), "{text}");
        assert!(text.contains("fnv1a64 00ff\n"), "{text}");
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(yaml["pki"]["key"], "/etc/continuum/nebula/host.key");
        assert_eq!(yaml["static_host_map"]["198.19.0.1"][0], "198.18.0.2:4242");
        assert_eq!(yaml["lighthouse"]["am_lighthouse"], false);
        assert_eq!(yaml["lighthouse"]["hosts"][0], "198.19.0.1");
        assert_eq!(yaml["listen"]["host"], "0.0.0.0");
        assert_eq!(yaml["listen"]["port"], 4242);
        assert_eq!(yaml["punchy"]["punch"], true);
        assert_eq!(yaml["tun"]["dev"], "nebula1");
        for direction in ["inbound", "outbound"] {
            let rules = yaml["firewall"][direction].as_sequence().expect("rules");
            assert_eq!(rules.len(), 1);
            for key in ["port", "proto", "host"] {
                assert_eq!(rules[0][key], "any", "{direction}.{key}");
            }
        }
        assert_eq!(interface_of(&text).as_deref(), Some("nebula1"));
    }

    #[test]
    fn a_lighthouse_lists_no_lighthouse_hosts() {
        let mut r = member();
        r.lighthouse = true;
        r.overlay_cidr = "198.19.0.2/24".into();
        r.check_reachable.clear();
        r.interface = "overlay0".into();
        r.listen_port = 4243;
        let plan = Plan::from_request(&r).expect("valid");
        let text = render(&plan, &files(), "00ff", Path::new("nebula")).expect("renders");
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        assert_eq!(yaml["lighthouse"]["am_lighthouse"], true);
        assert!(
            yaml["lighthouse"]["hosts"]
                .as_sequence()
                .expect("list")
                .is_empty()
        );
        // The other lighthouse stays reachable by its underlay address.
        assert_eq!(yaml["static_host_map"]["198.19.0.1"][0], "198.18.0.2:4242");
        assert_eq!(yaml["listen"]["port"], 4243);
        assert_eq!(yaml["tun"]["dev"], "overlay0");
    }

    #[test]
    fn the_digest_follows_the_certificate_files_contents() {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = NebulaFiles {
            ca: dir.path().join("ca.crt"),
            cert: dir.path().join("host.crt"),
            key: dir.path().join("host.key"),
            binary: "nebula".into(),
        };
        for (path, text) in [
            (&files.ca, "ca"),
            (&files.cert, "cert"),
            (&files.key, "key"),
        ] {
            std::fs::write(path, text).expect("write");
        }
        let first = pki_digest(&files).expect("digest");
        assert_eq!(first, pki_digest(&files).expect("digest"), "stable");
        std::fs::write(&files.cert, "re-issued cert").expect("write");
        assert_ne!(first, pki_digest(&files).expect("digest"));
        std::fs::write(&files.cert, "cer").expect("write");
        std::fs::write(&files.key, "tkey").expect("write");
        assert_ne!(
            first,
            pki_digest(&files).expect("digest"),
            "bytes moved between files"
        );
        std::fs::remove_file(&files.key).expect("remove");
        let missing = pki_digest(&files).expect_err("no key");
        assert!(missing.to_string().contains("[nebula] key"), "{missing}");
    }
}
