//! Certificates a binary makes for itself: a CA whose key lives only in
//! memory while it signs, and the server or client certificates it signs.
//! The package-manager makes them for providers' webhooks; the
//! object-provider for its own conversion webhook
//! ([`crate::webhook::serving`]).
//!
//! Nothing here keeps a CA's key: whoever can read where a certificate is
//! kept could otherwise sign certificates the API server trusts. A CA signs
//! what it must when it is made and is dropped; when a certificate has to
//! be issued again, a new CA signs it, and the bundle the API server trusts
//! holds the previous CA beside it until what it signed expires.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

/// How long a CA and the certificates it signs are valid.
pub const LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why a certificate could not be made.
pub type Error = rcgen::Error;

/// What a certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A TLS server (a webhook).
    Server,
    /// A TLS client.
    Client,
}

/// A certificate and its key, both PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new CA, its key in memory only: it signs and is dropped.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    now: OffsetDateTime,
}

impl Authority {
    /// A CA named `common_name` of `organization`, valid from `now`.
    pub fn new(common_name: &str, organization: &str, now: OffsetDateTime) -> Result<Self, Error> {
        let params = || {
            let mut params = CertificateParams::default();
            let mut dn = DistinguishedName::new();
            dn.push(DnType::CommonName, common_name);
            dn.push(DnType::OrganizationName, organization);
            params.distinguished_name = dn;
            params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            params.not_before = now - time::Duration::minutes(5);
            params.not_after = now + LIFETIME + time::Duration::days(1);
            params
        };
        let key = KeyPair::generate()?;
        let cert_pem = params().self_signed(&key)?.pem();
        Ok(Self {
            issuer: Issuer::new(params(), key),
            cert_pem,
            now,
        })
    }

    /// The CA's certificate (PEM): what a client trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// When what this CA signs expires.
    pub fn not_after(&self) -> OffsetDateTime {
        self.now + LIFETIME
    }

    /// A certificate for `names` (the first is its common name), signed by
    /// this CA, valid until [`Authority::not_after`].
    pub fn issue(&self, names: &[String], usage: Usage) -> Result<Leaf, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.distinguished_name = dn;
        params.not_before = self.now - time::Duration::minutes(5);
        params.not_after = self.not_after();
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The DNS names a Service answers to inside the cluster.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A certificate's digest (`sha256:` and hex), to record which CA signed
/// what.
pub fn digest(cert_pem: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(cert_pem.as_bytes()))
    )
}

/// `t` as RFC 3339.
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// An RFC 3339 time, when `s` is one.
pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// A value of a Secret's `data` that holds a certificate or key, as text.
pub fn secret_text(s: &Secret, key: &str) -> Option<String> {
    let bytes = s.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// An annotation of a Secret.
pub fn annotation(s: &Secret, key: &str) -> Option<String> {
    s.metadata.annotations.as_ref()?.get(key).cloned()
}

/// A time a Secret records in an annotation (RFC 3339).
pub fn annotated_time(s: &Secret, key: &str) -> Option<OffsetDateTime> {
    parse_rfc3339(&annotation(s, key)?)
}

/// Whether a certificate expiring at `not_after` (unknown: `None`) should
/// be issued again at `now`: a third of its life or less is left.
pub fn due(not_after: Option<OffsetDateTime>, now: OffsetDateTime) -> bool {
    not_after.is_none_or(|t| t - now < LIFETIME / 3)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_leaf_is_signed_by_the_authority_that_issued_it() {
        let now = OffsetDateTime::now_utc();
        let ca = Authority::new("test CA", "tests", now).unwrap();
        let leaf = ca
            .issue(&service_dns_names("svc", "ns"), Usage::Server)
            .unwrap();
        assert!(leaf.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        // A TLS client trusting the CA accepts the leaf for its names.
        let roots = {
            let mut roots = rustls::RootCertStore::empty();
            let der = rustls::pki_types::CertificateDer::from_pem_slice(ca.cert_pem().as_bytes())
                .unwrap();
            roots.add(der).unwrap();
            std::sync::Arc::new(roots)
        };
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots,
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        use rustls::{client::danger::ServerCertVerifier, pki_types::pem::PemObject};
        let leaf_der =
            rustls::pki_types::CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).unwrap();
        let name = rustls::pki_types::ServerName::try_from("svc.ns.svc").unwrap();
        verifier
            .verify_server_cert(
                &leaf_der,
                &[],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .unwrap();
        let other = rustls::pki_types::ServerName::try_from("other.ns.svc").unwrap();
        assert!(
            verifier
                .verify_server_cert(
                    &leaf_der,
                    &[],
                    &other,
                    &[],
                    rustls::pki_types::UnixTime::now()
                )
                .is_err()
        );
    }

    #[test]
    fn a_certificate_is_due_with_a_third_of_its_life_left_or_unknown_expiry() {
        let now = OffsetDateTime::now_utc();
        assert!(!due(Some(now + LIFETIME), now));
        assert!(due(Some(now + LIFETIME / 4), now));
        assert!(due(None, now));
        assert_eq!(
            parse_rfc3339(&rfc3339(now + LIFETIME)),
            Some(now + LIFETIME)
        );
    }
}
