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
const CERT_FILE: &str = "quic/cert.pem";
/// Its key's file, in a folder only the broker's user reads (written as a private file).
const KEY_FILE: &str = "quic/key.pem";
/// The CA's common name (the CA lives as long as the deployment).
const CA_NAME: &str = "Continuum broker QUIC listener";
/// The name in the certificate's identity: the listener's, not the broker's (a broker's name
/// may be one that identities reserve, such as `ca`); the addresses are what clients check.
const LISTENER_NAME: &str = "broker-quic-listener";

/// What a QUIC listener presents, and what its clients trust.
#[derive(Clone)]
pub struct QuicCertificate {
    /// The CA that signed the certificate (PEM): what loadgen nodes trust.
    pub ca_pem: String,
    /// The certificate (PEM), and the file the plan writes it to.
    pub cert_pem: String,
    pub cert_file: PathBuf,
    /// Its private key (PEM), and the private file the plan writes it to.
    pub key_pem: String,
    pub key_file: PathBuf,
}

impl std::fmt::Debug for QuicCertificate {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicCertificate")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

/// Makes a CA and a certificate it signs for `addresses`, to be written into `dir` (the
/// instance's) with the rest of its plan.
pub fn make_certificate(dir: &Path, addresses: &[IpAddr]) -> Result<QuicCertificate, BrokerError> {
    let (ca_pem, issued) = issue_certificate(addresses)?;
    Ok(QuicCertificate {
        ca_pem,
        cert_pem: issued.cert_pem.clone(),
        cert_file: dir.join(CERT_FILE),
        key_pem: issued.key_pem.clone(),
        key_file: dir.join(KEY_FILE),
    })
}

/// A CA of the deployment's own (its certificate, PEM) and the listener's certificate and
/// key it signs for `addresses`: for a pod, whose files come from a Secret.
pub fn issue_certificate(
    addresses: &[IpAddr],
) -> Result<(String, proto::pki::IssuedIdentity), BrokerError> {
    let failed = |error: proto::pki::PkiError| {
        BrokerError::io(
            "making the QUIC listener's certificate",
            std::io::Error::other(error.to_string()),
        )
    };
    let ca = CertificateAuthority::generate(CA_NAME).map_err(failed)?;
    let mut spec = IdentitySpec::new(Role::Agent, LISTENER_NAME);
    spec.ip_addresses = addresses.to_vec();
    let issued = ca.issue(&spec).map_err(failed)?;
    Ok((ca.cert_pem().to_owned(), issued))
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
        quic_zero_rtt: false,
        quic_streams: Default::default(),
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

    #[test]
    fn the_certificate_names_the_dialled_address_and_its_key_stays_out_of_debug() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let made = make_certificate(Path::new("/state/ca"), &[loopback]).expect("made");
        assert_eq!(made.cert_file, Path::new("/state/ca/quic/cert.pem"));
        assert_eq!(made.key_file, Path::new("/state/ca/quic/key.pem"));
        assert!(!format!("{made:?}").contains("PRIVATE KEY"));
        assert!(made.key_pem.contains("PRIVATE KEY"));
        assert!(made.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        // The CA is one loadgen takes (the real broker's test checks a handshake against it).
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
            quic_zero_rtt: false,
            quic_streams: Default::default(),
        };
        Dialer::new(&target).expect("the CA is usable");
        assert!(made.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(
            made.cert_pem, made.ca_pem,
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
