//! A native broker's QUIC listener: the certificate the agent makes for it, and readiness
//! over QUIC.
//!
//! QUIC is always TLS 1.3, so the listener needs a certificate its clients trust. The agent
//! makes a CA of its own for each deployment and signs the listener's certificate with it:
//! nothing outside the deployment is trusted or needed, and the controller hands the CA to
//! the loadgen nodes with the workload. The certificate names the addresses clients dial
//! (the bind address, or loopback for a broker bound to every address).
//!
//! Readiness is an MQTT CONNECT answered over the listener, dialled by loadgen's own QUIC
//! dialer: the probe speaks what the load will (TLS 1.3 against the CA, ALPN `mqtt`, one
//! bidirectional stream).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use loadgen::spec::{BrokerTarget, MqttVersion, Transport};
use loadgen::transport::Dialer;
use proto::pki::{CertificateAuthority, IdentitySpec, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::BrokerError;
use super::readiness::{connect_packet, probe_client_id, wait_for};

/// The certificate's file in the instance's directory.
const CERT_FILE: &str = "quic-cert.pem";
/// Its key's file, readable by the agent's user only.
const KEY_FILE: &str = "quic-key.pem";
/// The CA's common name (the CA lives as long as the deployment).
const CA_NAME: &str = "Continuum broker QUIC listener";

/// What a QUIC listener presents, and what its clients trust.
#[derive(Debug, Clone)]
pub struct QuicCertificate {
    /// The CA that signed the certificate (PEM): what loadgen nodes trust.
    pub ca_pem: String,
    /// The certificate (PEM), in the instance's directory.
    pub cert_file: PathBuf,
    /// Its private key (PEM, mode 0600), in the instance's directory.
    pub key_file: PathBuf,
}

/// Makes a CA and a certificate it signs for `addresses`, and writes both files into `dir`.
pub fn make_certificate(
    dir: &Path,
    instance: &str,
    addresses: &[IpAddr],
) -> Result<QuicCertificate, BrokerError> {
    let failed = |error: proto::pki::PkiError| {
        BrokerError::io(
            format!("making the QUIC listener's certificate for {instance}"),
            std::io::Error::other(error.to_string()),
        )
    };
    let ca = CertificateAuthority::generate(CA_NAME).map_err(failed)?;
    let mut spec = IdentitySpec::new(Role::Agent, instance);
    spec.ip_addresses = addresses.to_vec();
    let issued = ca.issue(&spec).map_err(failed)?;
    let cert_file = dir.join(CERT_FILE);
    let key_file = dir.join(KEY_FILE);
    std::fs::write(&cert_file, &issued.cert_pem)
        .map_err(|e| BrokerError::io(format!("writing {}", cert_file.display()), e))?;
    write_private(&key_file, &issued.key_pem)?;
    Ok(QuicCertificate {
        ca_pem: ca.cert_pem().to_owned(),
        cert_file,
        key_file,
    })
}

/// Writes `text` to a new file only its owner can read.
fn write_private(path: &Path, text: &str) -> Result<(), BrokerError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let write = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?
            .write_all(text.as_bytes())
    };
    write().map_err(|e| BrokerError::io(format!("writing {}", path.display()), e))
}

/// The addresses the certificate names for a listener bound to `bind`: the address clients
/// dial, which is loopback for a listener on every address.
pub fn certified_addresses(bind: IpAddr, connect: IpAddr) -> Vec<IpAddr> {
    let mut addresses = vec![connect];
    if !bind.is_unspecified() && bind != connect {
        addresses.push(bind);
    }
    addresses
}

/// One MQTT 3.1.1 CONNECT over QUIC to `address`, trusting `ca_pem`, answered within `limit`
/// by a CONNACK that accepts it; then DISCONNECT.
pub async fn probe(address: SocketAddr, ca_pem: &str, limit: Duration) -> Result<(), String> {
    let target = BrokerTarget {
        host: address.ip().to_string(),
        port: address.port(),
        protocol: MqttVersion::V311,
        tls_ca_file: None,
        tls_ca_pem: Some(ca_pem.to_owned()),
        username: None,
        password: None,
        transport: Transport::Quic,
        websocket_path: None,
    };
    let dialer = Dialer::new(&target).map_err(|e| e.to_string())?;
    let exchange = async {
        let (mut read, mut write) = dialer
            .dial()
            .await
            .map_err(|e| format!("cannot connect over QUIC to {address}: {e}"))?;
        write
            .write_all(&connect_packet(&probe_client_id(), None))
            .await
            .map_err(|e| format!("sending CONNECT failed: {e}"))?;
        let mut connack = [0u8; 4];
        read.read_exact(&mut connack)
            .await
            .map_err(|e| format!("reading CONNACK failed: {e}"))?;
        match connack {
            [0x20, 0x02, _, 0] => {
                // A failed DISCONNECT is harmless: the broker drops the session either way.
                let _ = write.write_all(&[0xE0, 0x00]).await;
                let _ = write.shutdown().await;
                Ok(())
            }
            [0x20, 0x02, _, code] => Err(format!("CONNACK return code {code}")),
            other => Err(format!("not a CONNACK: bytes {other:02x?}")),
        }
    };
    let result = match tokio::time::timeout(limit, exchange).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no CONNACK over QUIC from {address} within {limit:?}"
        )),
    };
    dialer.settle().await;
    result
}

/// Polls [`probe`] until it succeeds or `deadline` has passed, stopping early when `exited`
/// gives a reason (the broker's process is gone).
pub async fn wait_ready(
    address: SocketAddr,
    ca_pem: &str,
    deadline: Duration,
    exited: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    wait_for(deadline, exited, |limit| probe(address, ca_pem, limit)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_certificate_names_the_dialled_address_and_its_key_is_private() {
        let dir = tempfile::tempdir().expect("temp dir");
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let made = make_certificate(dir.path(), "m5", &[loopback]).expect("made");
        let key_mode = std::fs::metadata(&made.key_file)
            .expect("key written")
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        assert!(made.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        // The certificate verifies against the CA for the address, as loadgen will check it.
        let target = BrokerTarget {
            host: "127.0.0.1".into(),
            port: 1,
            protocol: MqttVersion::V311,
            tls_ca_file: None,
            tls_ca_pem: Some(made.ca_pem.clone()),
            username: None,
            password: None,
            transport: Transport::Quic,
            websocket_path: None,
        };
        Dialer::new(&target).expect("the CA is usable");
        let cert = std::fs::read_to_string(&made.cert_file).expect("certificate written");
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(
            cert, made.ca_pem,
            "the listener's own certificate, not the CA"
        );
    }

    #[test]
    fn a_listener_on_every_address_is_certified_for_loopback() {
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let node: IpAddr = "198.18.0.2".parse().unwrap();
        assert_eq!(certified_addresses(any, loopback), [loopback]);
        assert_eq!(certified_addresses(node, node), [node]);
    }
}
