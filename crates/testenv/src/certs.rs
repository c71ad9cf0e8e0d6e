//! Key material for the control plane, generated in-process with rcgen: a CA, the apiserver's
//! serving certificate (pinned by the kubeconfigs, so clients verify TLS properly) and the
//! service-account token signing key.

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The Services' range of the API server (`--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.0.0.0/16";
/// The `kubernetes` Service's ClusterIP: the first address of [`SERVICE_CIDR`].
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// PEM-encoded key material for one control plane.
pub struct Pki {
    /// CA certificate (PEM) that signed the serving certificate.
    pub ca_cert_pem: String,
    /// CA certificate (DER), for `kube::Config::root_cert`.
    pub ca_cert_der: Vec<u8>,
    /// Serving certificate for 127.0.0.1 / localhost.
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    /// Service-account signing key (ECDSA P-256, PKCS#8) and its public key.
    pub sa_key_pem: String,
    pub sa_pub_pem: String,
}

impl Pki {
    /// Generates a fresh CA, a serving certificate for loopback and a service-account key.
    pub fn generate() -> Result<Self> {
        let ca_key = KeyPair::generate().context("generating CA key")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name = dn("numaplane-testenv-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).context("self-signing CA")?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let serving_key = KeyPair::generate().context("generating serving key")?;
        // Also the names and ClusterIP (the first of `--service-cluster-ip-range`) by which a
        // pod on the real node reaches it, as in any cluster.
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(KUBERNETES_SERVICE_IP)));
        params.distinguished_name = dn("kube-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let serving_cert = params
            .signed_by(&serving_key, &issuer)
            .context("signing serving certificate")?;

        let sa_key = KeyPair::generate().context("generating service-account key")?;
        Ok(Self {
            ca_cert_pem: ca_cert.pem(),
            ca_cert_der: ca_cert.der().to_vec(),
            serving_cert_pem: serving_cert.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            sa_pub_pem: sa_key.public_key_pem(),
            sa_key_pem: sa_key.serialize_pem(),
        })
    }
}

fn dn(common_name: &str) -> rcgen::DistinguishedName {
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_distinct_pem_material() {
        let pki = Pki::generate().expect("pki");
        assert!(pki.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.serving_key_pem.contains("PRIVATE KEY"));
        assert!(pki.sa_pub_pem.contains("PUBLIC KEY"));
        assert_ne!(pki.ca_cert_pem, pki.serving_cert_pem);
        assert_ne!(pki.sa_key_pem, pki.serving_key_pem);
    }
}
