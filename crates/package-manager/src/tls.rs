//! A provider's certificates: per Provider, a CA of its own and a server
//! and a client certificate it signed, in three Secrets of the
//! package-manager's namespace, controlled by the Provider (so they stay
//! the same across upgrades and go with the Provider):
//!
//! - `<provider>-tls-ca`: the CA (`tls.crt`, `tls.key`), never mounted;
//! - `<provider>-tls-server`: `tls.crt`, `tls.key` and `ca.crt`, for the
//!   provider's webhooks, valid for its Service's DNS names; mounted at
//!   `/tls/server`;
//! - `<provider>-tls-client`: the same for the provider as a client
//!   (common name: the Provider's name); mounted at `/tls/client`.
//!
//! The API server trusts the CA for the provider's conversion and
//! admission webhooks (the CRDs' and webhook configurations' `caBundle`).
//! A certificate is issued again once a third of its life is left (or when
//! its CA or Service name changed); the CA likewise, and then the bundle
//! holds the old CA beside the new one until the old one expires, so that
//! the API server keeps trusting a runtime that has not yet read its new
//! certificate.
//!
//! Each Secret records what it was issued for in annotations, so a check
//! reads three Secrets and writes nothing while all is well; the result is
//! remembered for a while, so a steady reconcile reads none.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{Api, api::ObjectMeta};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use runtime::expiring::Expiring;
use time::OffsetDateTime;

/// When a certificate expires (RFC 3339).
const NOT_AFTER: &str = "pkg.crossplane.io/tls-not-after";
/// Which CA signed a certificate (the digest of the CA's certificate).
const ISSUER: &str = "pkg.crossplane.io/tls-issuer";
/// What a certificate was issued for (its DNS names, comma-separated).
const SUBJECT: &str = "pkg.crossplane.io/tls-subject";
/// In the CA Secret: the previous CA's certificate, trusted until it
/// expires.
const PREVIOUS_CA: &str = "previous.crt";

/// How long a CA is valid.
const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a server or client certificate is valid.
const LEAF_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a good check is remembered.
const RECHECK: Duration = Duration::from_secs(600);

/// The names of a Provider's three Secrets: (CA, server, client).
pub fn secret_names(provider: &str) -> (String, String, String) {
    (
        format!("{provider}-tls-ca"),
        format!("{provider}-tls-server"),
        format!("{provider}-tls-client"),
    )
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

/// Why a provider's certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {0}: {1}")]
    Request(&'static str, #[source] kube::Error),
    #[error("cannot make a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error(
        "Secret {0} exists with type {1}, not {2}, and a Secret's type cannot change; delete it and the package manager makes it again"
    )]
    OtherType(String, String, String),
}

/// Keeps the Providers' certificates.
#[derive(Clone)]
pub struct Certificates {
    secrets: Api<Secret>,
    field_manager: String,
    /// Provider → (what it was checked for, the CA bundle), remembered for
    /// [`RECHECK`].
    checked: Expiring<String, (String, String)>,
}

/// A CA read back from its Secret (or just made).
struct Ca {
    key_pem: String,
    /// The bundle the API server trusts: this CA, and the previous one
    /// while it is valid.
    bundle: String,
    digest: String,
}

impl Certificates {
    pub fn new(client: kube::Client, namespace: &str, field_manager: &str) -> Self {
        Self {
            secrets: Api::namespaced(client, namespace),
            field_manager: field_manager.to_owned(),
            checked: Expiring::new(RECHECK),
        }
    }

    /// Makes sure `provider`'s certificates exist, are signed by its CA,
    /// name `service` and are far from expiry; returns the CA bundle (PEM)
    /// the API server should trust for the provider's webhooks.
    pub async fn ensure(
        &self,
        provider: &str,
        service: &str,
        namespace: &str,
        owner: Option<&OwnerReference>,
    ) -> Result<String, Error> {
        let key = format!("{service}.{namespace}");
        if let Some((checked_for, bundle)) = self.checked.get(&provider.to_owned())
            && checked_for == key
        {
            return Ok(bundle);
        }
        let (ca_name, server_name, client_name) = secret_names(provider);
        let now = OffsetDateTime::now_utc();
        let ca = self.ca(&ca_name, provider, owner, now).await?;
        let server_names = service_dns_names(service, namespace);
        self.leaf(&server_name, &ca, provider, &server_names, true, owner, now)
            .await?;
        self.leaf(
            &client_name,
            &ca,
            provider,
            &[provider.to_owned()],
            false,
            owner,
            now,
        )
        .await?;
        self.checked
            .insert(provider.to_owned(), (key, ca.bundle.clone()));
        Ok(ca.bundle)
    }

    async fn ca(
        &self,
        name: &str,
        provider: &str,
        owner: Option<&OwnerReference>,
        now: OffsetDateTime,
    ) -> Result<Ca, Error> {
        let live = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| Error::Request("read a provider's CA Secret", e))?;
        let field = |s: &Secret, k: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(k))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        let mut previous = None;
        if let Some(s) = &live {
            let cert = field(s, "tls.crt");
            let key = field(s, "tls.key");
            if let (Some(cert_pem), Some(key_pem)) = (cert, key)
                && KeyPair::from_pem(&key_pem).is_ok()
            {
                if !due(s, now, CA_LIFETIME) {
                    let mut bundle = cert_pem.clone();
                    if let Some(old) = field(s, PREVIOUS_CA) {
                        bundle.push_str(&old);
                    }
                    return Ok(Ca {
                        digest: oci::Digest::of(cert_pem.as_bytes()).as_str().to_owned(),
                        key_pem,
                        bundle,
                    });
                }
                // Renewed while the old one is still valid: trust both.
                if not_after(s).is_some_and(|t| t > now) {
                    previous = Some(cert_pem);
                }
            }
        }
        let key = KeyPair::generate()?;
        let params = ca_params(provider, now);
        let cert = params.self_signed(&key)?;
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        let mut data = BTreeMap::from([
            (
                "tls.crt".to_owned(),
                ByteString(cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_owned(),
                ByteString(key_pem.clone().into_bytes()),
            ),
        ]);
        let mut bundle = cert_pem.clone();
        if let Some(old) = &previous {
            data.insert(PREVIOUS_CA.to_owned(), ByteString(old.clone().into_bytes()));
            bundle.push_str(old);
        }
        let annotations = BTreeMap::from([(NOT_AFTER.to_owned(), rfc3339(now + CA_LIFETIME))]);
        self.write(name, live.as_ref(), "Opaque", data, annotations, owner)
            .await?;
        Ok(Ca {
            digest: oci::Digest::of(cert_pem.as_bytes()).as_str().to_owned(),
            key_pem,
            bundle,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn leaf(
        &self,
        name: &str,
        ca: &Ca,
        provider: &str,
        names: &[String],
        server: bool,
        owner: Option<&OwnerReference>,
        now: OffsetDateTime,
    ) -> Result<(), Error> {
        let subject = names.join(",");
        let live = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| Error::Request("read a provider's certificate Secret", e))?;
        if let Some(s) = &live {
            let annotations = s.metadata.annotations.clone().unwrap_or_default();
            let complete = ["tls.crt", "tls.key", "ca.crt"]
                .iter()
                .all(|k| s.data.as_ref().is_some_and(|d| d.contains_key(*k)));
            if complete
                && annotations.get(ISSUER) == Some(&ca.digest)
                && annotations.get(SUBJECT) == Some(&subject)
                && s.data
                    .as_ref()
                    .and_then(|d| d.get("ca.crt"))
                    .is_some_and(|b| b.0 == ca.bundle.as_bytes())
                && !due(s, now, LEAF_LIFETIME)
            {
                return Ok(());
            }
        }
        let ca_key = KeyPair::from_pem(&ca.key_pem)?;
        let issuer = Issuer::new(ca_params(provider, now), ca_key);
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.distinguished_name = dn;
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + LEAF_LIFETIME;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer)?;
        let data = BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(cert.pem().into_bytes())),
            (
                "tls.key".to_owned(),
                ByteString(key.serialize_pem().into_bytes()),
            ),
            (
                "ca.crt".to_owned(),
                ByteString(ca.bundle.clone().into_bytes()),
            ),
        ]);
        let annotations = BTreeMap::from([
            (NOT_AFTER.to_owned(), rfc3339(now + LEAF_LIFETIME)),
            (ISSUER.to_owned(), ca.digest.clone()),
            (SUBJECT.to_owned(), subject),
        ]);
        self.write(
            name,
            live.as_ref(),
            "kubernetes.io/tls",
            data,
            annotations,
            owner,
        )
        .await
    }

    /// Writes Secret `name`; `live` is what was read of it.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        name: &str,
        live: Option<&Secret>,
        type_: &str,
        data: BTreeMap<String, ByteString>,
        annotations: BTreeMap<String, String>,
        owner: Option<&OwnerReference>,
    ) -> Result<(), Error> {
        // The type of a Secret cannot change (one made by hand, say).
        if let Some(other) = live
            .and_then(|l| l.type_.as_deref())
            .filter(|t| *t != type_)
        {
            return Err(Error::OtherType(
                name.to_owned(),
                other.to_owned(),
                type_.to_owned(),
            ));
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                annotations: Some(annotations),
                owner_references: owner.map(|o| vec![o.clone()]),
                ..ObjectMeta::default()
            },
            type_: Some(type_.to_owned()),
            data: Some(data),
            ..Secret::default()
        };
        runtime::ssa::apply(&self.secrets, name, &secret, &self.field_manager)
            .await
            .map_err(|e| Error::Request("write a provider's certificate Secret", e))?;
        Ok(())
    }
}

/// The CA's parameters: the same for a provider each time, so that a
/// certificate it signs names it as its issuer.
fn ca_params(provider: &str, now: OffsetDateTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{provider} CA"));
    dn.push(DnType::OrganizationName, "crossplane-rs package-manager");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + CA_LIFETIME;
    params
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn not_after(s: &Secret) -> Option<OffsetDateTime> {
    let text = s.metadata.annotations.as_ref()?.get(NOT_AFTER)?;
    OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

/// Whether a certificate of `lifetime` in `s` should be issued again: a
/// third of its life or less is left (or its expiry is unknown).
fn due(s: &Secret, now: OffsetDateTime, lifetime: Duration) -> bool {
    not_after(s).is_none_or(|t| t - now < lifetime / 3)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_leaf_names_the_ca_that_signed_it() {
        let now = OffsetDateTime::now_utc();
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params("p", now).self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(
            ca_params("p", now),
            KeyPair::from_pem(&ca_key.serialize_pem()).unwrap(),
        );
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(service_dns_names("p", "ns"))
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        // The issuer DN of the leaf is the CA's subject DN (DER-equal).
        assert!(ca.der().len() > 100 && leaf.der().len() > 100);
        assert!(leaf.pem().starts_with("-----BEGIN CERTIFICATE-----"));
    }

    #[test]
    fn a_certificate_is_due_with_a_third_of_its_life_left_or_unknown_expiry() {
        let now = OffsetDateTime::now_utc();
        let with = |t: OffsetDateTime| Secret {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([(NOT_AFTER.to_owned(), rfc3339(t))])),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        };
        assert!(!due(&with(now + LEAF_LIFETIME), now, LEAF_LIFETIME));
        assert!(due(&with(now + LEAF_LIFETIME / 4), now, LEAF_LIFETIME));
        assert!(due(&Secret::default(), now, LEAF_LIFETIME));
    }
}
