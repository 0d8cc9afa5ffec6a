use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use x509_parser::extensions::GeneralName;

use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn parse(pem: &str) -> Vec<u8> {
    pem_to_der(pem, "test").expect("test certificate is PEM")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("file exists")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn role_and_name_round_trip_through_the_certificate() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    for (role, name) in [
        (Role::Controller, "controller"),
        (Role::Agent, "worker-1"),
        (Role::Client, "laptop"),
    ] {
        let issued = ca.issue(&IdentitySpec::new(role, name))?;
        let der = parse(&issued.cert_pem);
        let expected = PeerIdentity {
            role,
            name: name.into(),
        };
        assert_eq!(PeerIdentity::from_der(&der)?, expected);
        assert_eq!(issued.identity(), expected);

        let (_, cert) = X509Certificate::from_der(&der)?;
        let cn: Vec<_> = cert.subject().iter_common_name().collect();
        let ou: Vec<_> = cert.subject().iter_organizational_unit().collect();
        assert_eq!(cn[0].as_str()?, name);
        assert_eq!(ou[0].as_str()?, role.as_str());
    }
    Ok(())
}

#[test]
fn extended_key_usages_follow_the_role() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    for (role, server, client) in [
        (Role::Controller, true, true),
        (Role::Agent, true, true),
        (Role::Client, false, true),
    ] {
        let der = parse(&ca.issue(&IdentitySpec::new(role, "x"))?.cert_pem);
        let (_, cert) = X509Certificate::from_der(&der)?;
        let eku = cert.extended_key_usage()?.expect("EKU present").value;
        assert_eq!(
            (eku.server_auth, eku.client_auth),
            (server, client),
            "{role}"
        );
        let bc = cert.basic_constraints()?;
        assert!(bc.is_none_or(|bc| !bc.value.ca), "{role} must not be a CA");
    }
    Ok(())
}

#[test]
fn the_ca_is_a_ca_and_signs_what_it_issues() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    let ca_der = parse(ca.cert_pem());
    let (_, ca_cert) = X509Certificate::from_der(&ca_der)?;
    assert!(
        ca_cert
            .basic_constraints()?
            .expect("basicConstraints")
            .value
            .ca
    );
    assert!(
        ca_cert
            .key_usage()?
            .expect("keyUsage")
            .value
            .key_cert_sign()
    );

    let leaf_der = parse(
        &ca.issue(&IdentitySpec::new(Role::Agent, "worker-1"))?
            .cert_pem,
    );
    let (_, leaf) = X509Certificate::from_der(&leaf_der)?;
    assert_eq!(leaf.issuer(), ca_cert.subject());
    leaf.verify_signature(Some(ca_cert.public_key()))?;
    Ok(())
}

#[test]
fn agent_certificates_carry_the_requested_server_names() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    let ip = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 11));
    let spec = IdentitySpec::new(Role::Agent, "worker-1")
        .with_dns_name("worker-1.testbed")
        .with_ip_address(ip);
    let der = parse(&ca.issue(&spec)?.cert_pem);
    let (_, cert) = X509Certificate::from_der(&der)?;
    let san = cert.subject_alternative_name()?.expect("SAN present").value;
    assert!(
        san.general_names
            .contains(&GeneralName::DNSName("worker-1.testbed"))
    );
    assert!(
        san.general_names
            .contains(&GeneralName::IPAddress(&[198, 18, 0, 11]))
    );
    assert!(
        san.general_names
            .contains(&GeneralName::URI("continuum://agent/worker-1"))
    );
    Ok(())
}

#[test]
fn an_already_expired_certificate_can_be_made() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    let day = Duration::from_secs(24 * 3600);
    let now = SystemTime::now();
    let spec = IdentitySpec::new(Role::Controller, "old").valid_between(now - 2 * day, now - day);
    let der = parse(&ca.issue(&spec)?.cert_pem);
    let (_, cert) = X509Certificate::from_der(&der)?;
    assert!(!cert.validity().is_valid());
    assert!(cert.validity().not_after < ASN1Time::now());
    Ok(())
}

#[test]
fn bad_specs_are_refused_naming_the_field() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    let now = SystemTime::now();
    let cases = [
        (IdentitySpec::new(Role::Agent, "../etc"), "letter or digit"),
        (IdentitySpec::new(Role::Agent, "ca"), "reserved"),
        (
            IdentitySpec::new(Role::Agent, "w").valid_between(now, now),
            "not_after",
        ),
        (
            IdentitySpec::new(Role::Agent, "w").with_dns_name("bad name"),
            "dns_names",
        ),
    ];
    for (spec, expected) in cases {
        let error = ca
            .issue(&spec)
            .expect_err("spec must be refused")
            .to_string();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
    }
    Ok(())
}

#[test]
fn pki_round_trips_through_disk_with_private_keys() -> TestResult {
    let root = tempfile::tempdir()?;
    let dir = root.path().join("pki");
    let ca = CertificateAuthority::generate("test CA")?;
    let worker = ca.issue(&IdentitySpec::new(Role::Agent, "worker-1"))?;
    write_pki(&dir, &ca, std::slice::from_ref(&worker), Overwrite::Refuse)?;

    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(CA_KEY_FILE)), 0o600);
    assert_eq!(mode(&key_path(&dir, "worker-1")), 0o600);
    assert_eq!(mode(&dir.join(CA_CERT_FILE)), 0o644);
    assert_eq!(mode(&cert_path(&dir, "worker-1")), 0o644);

    let loaded = IssuedIdentity::load(&dir, "worker-1")?;
    assert_eq!(loaded, worker);
    let reloaded_ca = CertificateAuthority::load(&dir)?;
    assert_eq!(reloaded_ca.cert_pem(), ca.cert_pem());
    // The reloaded CA issues certificates that chain to the original CA certificate.
    let later = reloaded_ca.issue(&IdentitySpec::new(Role::Client, "laptop"))?;
    let ca_der = parse(ca.cert_pem());
    let (_, ca_cert) = X509Certificate::from_der(&ca_der)?;
    let later_der = parse(&later.cert_pem);
    let (_, later_cert) = X509Certificate::from_der(&later_der)?;
    assert_eq!(later_cert.issuer().as_raw(), ca_cert.subject().as_raw());
    later_cert.verify_signature(Some(ca_cert.public_key()))?;
    Ok(())
}

#[test]
fn existing_keys_are_kept_unless_replacing_is_asked() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = CertificateAuthority::generate("test CA")?;
    let first = ca.issue(&IdentitySpec::new(Role::Agent, "worker-1"))?;
    let second = ca.issue(&IdentitySpec::new(Role::Agent, "worker-1"))?;
    first.write(dir.path(), Overwrite::Refuse)?;

    let error = second
        .write(dir.path(), Overwrite::Refuse)
        .expect_err("refused");
    assert!(matches!(error, PkiError::AlreadyExists { .. }));
    assert!(error.to_string().contains("worker-1.pem"), "{error}");
    assert_eq!(IssuedIdentity::load(dir.path(), "worker-1")?, first);

    std::fs::set_permissions(
        key_path(dir.path(), "worker-1"),
        std::fs::Permissions::from_mode(0o644),
    )?;
    second.write(dir.path(), Overwrite::Replace)?;
    assert_eq!(IssuedIdentity::load(dir.path(), "worker-1")?, second);
    assert_eq!(mode(&key_path(dir.path(), "worker-1")), 0o600);
    Ok(())
}

#[test]
fn load_errors_name_the_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = CertificateAuthority::generate("test CA")?;
    ca.write_cert(dir.path(), Overwrite::Refuse)?;
    let missing_key = CertificateAuthority::load(dir.path()).expect_err("no ca.key");
    assert!(missing_key.to_string().contains("ca.key"), "{missing_key}");

    // A worker's key next to another worker's certificate.
    let one = ca.issue(&IdentitySpec::new(Role::Agent, "one"))?;
    let two = ca.issue(&IdentitySpec::new(Role::Agent, "two"))?;
    one.write(dir.path(), Overwrite::Refuse)?;
    std::fs::write(key_path(dir.path(), "one"), &two.key_pem)?;
    let mismatch = IssuedIdentity::load(dir.path(), "one").expect_err("wrong key");
    assert!(matches!(mismatch, PkiError::KeyMismatch { .. }));
    assert!(mismatch.to_string().contains("one.key"), "{mismatch}");

    // A leaf certificate is not a CA.
    std::fs::write(dir.path().join(CA_CERT_FILE), &one.cert_pem)?;
    std::fs::write(dir.path().join(CA_KEY_FILE), &one.key_pem)?;
    let not_ca = CertificateAuthority::load(dir.path()).expect_err("leaf as CA");
    assert!(matches!(not_ca, PkiError::NotCa { .. }), "{not_ca}");

    std::fs::write(cert_path(dir.path(), "two"), "garbage")?;
    std::fs::write(key_path(dir.path(), "two"), &two.key_pem)?;
    let garbage = IssuedIdentity::load(dir.path(), "two").expect_err("garbage");
    assert!(garbage.to_string().contains("two.pem"), "{garbage}");
    Ok(())
}

#[test]
fn a_certificate_whose_subject_contradicts_its_uri_is_refused() -> TestResult {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "worker-1");
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, "agent");
    params.subject_alt_names = vec![SanType::URI(Ia5String::try_from(
        "continuum://controller/worker-1",
    )?)];
    let der = params.self_signed(&key)?.der().to_vec();
    assert!(matches!(
        PeerIdentity::from_der(&der),
        Err(IdentityError::SubjectMismatch {
            attribute: "OU",
            ..
        })
    ));
    Ok(())
}

#[test]
fn debug_output_never_shows_keys() -> TestResult {
    let ca = CertificateAuthority::generate("test CA")?;
    let issued = ca.issue(&IdentitySpec::new(Role::Agent, "worker-1"))?;
    for debug in [format!("{ca:?}"), format!("{issued:?}")] {
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    }
    Ok(())
}
