//! A provider's certificates: per Provider, a CA of its own and a server
//! and a client certificate it signed, in three Secrets of the runtimes'
//! namespace, controlled by the Provider (so they stay the same across
//! upgrades and go with the Provider):
//!
//! - `<provider>-tls-ca`: the CA's certificate (`tls.crt`) and, for a
//!   while after a new CA, the previous one (`previous.crt`); never
//!   mounted, and never the CA's key;
//! - `<provider>-tls-server`: `tls.crt`, `tls.key` and `ca.crt`, for the
//!   provider's webhooks, valid for its Service's DNS names; mounted at
//!   `/tls/server`;
//! - `<provider>-tls-client`: the same for the provider as a client
//!   (common name: the Provider's name); mounted at `/tls/client`.
//!
//! The API server trusts the CA for the provider's conversion and
//! admission webhooks (the CRDs' and webhook configurations' `caBundle`).
//!
//! The CA's key is kept nowhere: a runtime may read Secrets in every
//! namespace (upstream's providers need that for credentials), so a key in
//! a Secret would let any runtime sign a certificate the API server trusts
//! for another provider's webhooks. The key lives in memory while the CA
//! signs the two certificates and is then dropped. Whenever a certificate
//! has to be issued again (a third of its life left, its Service's name
//! changed, one missing or not signed by the CA on record), a new CA signs
//! both; the bundle holds the previous CA beside it until the certificates
//! it signed expire, so that the API server keeps trusting a runtime that
//! has not yet read its new certificate.
//!
//! Each Secret records what it was issued for in annotations, so a check
//! reads three Secrets and writes nothing while all is well; the result is
//! remembered for a while, so a steady reconcile reads none.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{Api, api::ObjectMeta};
use runtime::certificates::service_dns_names;
use runtime::{
    certificates::{
        self, Authority, LIFETIME as LEAF_LIFETIME, Usage, annotated_time, annotation, digest,
        rfc3339, secret_text,
    },
    expiring::Expiring,
};
use time::OffsetDateTime;

/// When a certificate expires (RFC 3339).
const NOT_AFTER: &str = "pkg.crossplane.io/tls-not-after";
/// Which CA signed a certificate (the digest of the CA's certificate).
const ISSUER: &str = "pkg.crossplane.io/tls-issuer";
/// What a certificate was issued for (its DNS names, comma-separated).
const SUBJECT: &str = "pkg.crossplane.io/tls-subject";
/// In the CA Secret: the previous CA's certificate, trusted until the
/// certificates it signed expire ([`PREVIOUS_NOT_AFTER`]).
const PREVIOUS_CA: &str = "previous.crt";
/// When the previous CA's certificates expire (RFC 3339).
const PREVIOUS_NOT_AFTER: &str = "pkg.crossplane.io/tls-previous-not-after";
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

/// Why a provider's certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {0}: {1}")]
    Request(&'static str, #[source] kube::Error),
    #[error("cannot make a certificate: {0}")]
    Certificate(#[from] certificates::Error),
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

/// A new CA at work: what it signs with and what a certificate records.
struct Signed<'a> {
    authority: &'a Authority,
    digest: String,
    bundle: &'a str,
    now: OffsetDateTime,
}

/// A Provider's three Secrets as read: CA, server, client.
struct Live {
    ca: Option<Secret>,
    server: Option<Secret>,
    client: Option<Secret>,
}

/// What a check found to do.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Nothing: the API server should trust this bundle.
    Keep(String),
    /// The certificates stand, but the bundle changed (the previous CA's
    /// certificates expired): write it to the CA and both certificates.
    Bundle { current: String, bundle: String },
    /// A new CA signs both certificates; the CA on record (its certificate,
    /// and when what it signed expires) stays trusted beside it.
    Renew {
        previous: Option<(String, OffsetDateTime)>,
    },
}

/// Decides what `live` needs for certificates naming `subjects` (server,
/// client) at `now`.
fn plan(live: &Live, subjects: [&str; 2], now: OffsetDateTime) -> Plan {
    let leaves = [&live.server, &live.client];
    let Some((ca, ca_cert)) = live
        .ca
        .as_ref()
        .and_then(|s| secret_text(s, "tls.crt").map(|c| (s, c)))
    else {
        return Plan::Renew { previous: None };
    };
    // A CA Secret that holds a key is from a release that kept it there,
    // where every runtime could read it: that CA is not trusted again.
    if secret_text(ca, "tls.key").is_some() {
        return Plan::Renew { previous: None };
    }
    let issuer = digest(&ca_cert);
    let good = |leaf: &Option<Secret>, subject: &str| {
        leaf.as_ref().is_some_and(|s| {
            ["tls.crt", "tls.key", "ca.crt"]
                .iter()
                .all(|k| s.data.as_ref().is_some_and(|d| d.contains_key(*k)))
                && annotation(s, ISSUER).as_deref() == Some(issuer.as_str())
                && annotation(s, SUBJECT).as_deref() == Some(subject)
                && !due(s, now)
        })
    };
    if !leaves.iter().zip(subjects).all(|(l, s)| good(l, s)) {
        // What the CA on record signed may still be served for a while.
        let signed_until = leaves
            .iter()
            .filter_map(|l| l.as_ref())
            .filter(|l| annotation(l, ISSUER).as_deref() == Some(issuer.as_str()))
            .filter_map(|l| annotated_time(l, NOT_AFTER))
            .max()
            .filter(|t| *t > now);
        return Plan::Renew {
            previous: signed_until.map(|t| (ca_cert, t)),
        };
    }
    let mut bundle = ca_cert.clone();
    if let Some(old) = secret_text(ca, PREVIOUS_CA)
        && annotated_time(ca, PREVIOUS_NOT_AFTER).is_some_and(|t| t > now)
    {
        bundle.push_str(&old);
    }
    let stale = leaves
        .iter()
        .filter_map(|l| l.as_ref())
        .any(|l| secret_text(l, "ca.crt").as_deref() != Some(bundle.as_str()));
    let expired_previous = secret_text(ca, PREVIOUS_CA).is_some() && bundle == ca_cert;
    if stale || expired_previous {
        Plan::Bundle {
            current: ca_cert,
            bundle,
        }
    } else {
        Plan::Keep(bundle)
    }
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
        let read = |name: String| async move {
            self.secrets
                .get_opt(&name)
                .await
                .map_err(|e| Error::Request("read a provider's certificate Secret", e))
        };
        let live = Live {
            ca: read(ca_name.clone()).await?,
            server: read(server_name.clone()).await?,
            client: read(client_name.clone()).await?,
        };
        let server_subject = service_dns_names(service, namespace).join(",");
        let subjects = [server_subject.as_str(), provider];
        let now = OffsetDateTime::now_utc();
        let bundle = match plan(&live, subjects, now) {
            Plan::Keep(bundle) => bundle,
            Plan::Bundle { current, bundle } => {
                for (name, leaf) in [(&server_name, &live.server), (&client_name, &live.client)] {
                    let Some(leaf) = leaf else { continue };
                    let mut data = leaf.data.clone().unwrap_or_default();
                    data.insert("ca.crt".to_owned(), ByteString(bundle.clone().into_bytes()));
                    let annotations = leaf.metadata.annotations.clone().unwrap_or_default();
                    self.write(
                        name,
                        Some(leaf),
                        "kubernetes.io/tls",
                        data,
                        annotations,
                        owner,
                    )
                    .await?;
                }
                let ca = live.ca.as_ref();
                let annotations = ca
                    .and_then(|c| annotation(c, NOT_AFTER))
                    .map(|t| BTreeMap::from([(NOT_AFTER.to_owned(), t)]))
                    .unwrap_or_default();
                let data =
                    BTreeMap::from([("tls.crt".to_owned(), ByteString(current.into_bytes()))]);
                self.write(&ca_name, ca, "Opaque", data, annotations, owner)
                    .await?;
                bundle
            }
            Plan::Renew { previous } => {
                // The key signs the two certificates below and is dropped.
                let authority = Authority::new(
                    &format!("{provider} CA"),
                    "crossplane-rs package-manager",
                    now,
                )?;
                let ca_cert = authority.cert_pem().to_owned();
                let mut bundle = ca_cert.clone();
                let mut data = BTreeMap::from([(
                    "tls.crt".to_owned(),
                    ByteString(ca_cert.clone().into_bytes()),
                )]);
                let mut annotations =
                    BTreeMap::from([(NOT_AFTER.to_owned(), rfc3339(now + LEAF_LIFETIME))]);
                if let Some((old, until)) = previous {
                    bundle.push_str(&old);
                    data.insert(PREVIOUS_CA.to_owned(), ByteString(old.into_bytes()));
                    annotations.insert(PREVIOUS_NOT_AFTER.to_owned(), rfc3339(until));
                }
                let signed = Signed {
                    authority: &authority,
                    digest: digest(&ca_cert),
                    bundle: &bundle,
                    now,
                };
                let server_names = service_dns_names(service, namespace);
                self.leaf(
                    &server_name,
                    &signed,
                    &server_names,
                    true,
                    live.server.as_ref(),
                    owner,
                )
                .await?;
                let client_names = [provider.to_owned()];
                self.leaf(
                    &client_name,
                    &signed,
                    &client_names,
                    false,
                    live.client.as_ref(),
                    owner,
                )
                .await?;
                // Last: until the CA on record names the new one, the next
                // check issues again rather than trusting a CA whose
                // certificates were never written.
                self.write(
                    &ca_name,
                    live.ca.as_ref(),
                    "Opaque",
                    data,
                    annotations,
                    owner,
                )
                .await?;
                bundle
            }
        };
        self.checked
            .insert(provider.to_owned(), (key, bundle.clone()));
        Ok(bundle)
    }

    /// Issues certificate Secret `name` for `names`, signed as `signed` says.
    async fn leaf(
        &self,
        name: &str,
        signed: &Signed<'_>,
        names: &[String],
        server: bool,
        live: Option<&Secret>,
        owner: Option<&OwnerReference>,
    ) -> Result<(), Error> {
        let now = signed.now;
        let leaf = signed
            .authority
            .issue(names, if server { Usage::Server } else { Usage::Client })?;
        let data = BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(leaf.cert_pem.into_bytes())),
            ("tls.key".to_owned(), ByteString(leaf.key_pem.into_bytes())),
            (
                "ca.crt".to_owned(),
                ByteString(signed.bundle.to_owned().into_bytes()),
            ),
        ]);
        let annotations = BTreeMap::from([
            (NOT_AFTER.to_owned(), rfc3339(now + LEAF_LIFETIME)),
            (ISSUER.to_owned(), signed.digest.clone()),
            (SUBJECT.to_owned(), names.join(",")),
        ]);
        self.write(name, live, "kubernetes.io/tls", data, annotations, owner)
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

/// Whether the certificate in `s` should be issued again: a third of its
/// life or less is left (or its expiry is unknown).
fn due(s: &Secret, now: OffsetDateTime) -> bool {
    certificates::due(annotated_time(s, NOT_AFTER), now)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

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
        assert!(!due(&with(now + LEAF_LIFETIME), now));
        assert!(due(&with(now + LEAF_LIFETIME / 4), now));
        assert!(due(&Secret::default(), now));
    }

    fn secret(data: &[(&str, &str)], annotations: &[(&str, String)]) -> Option<Secret> {
        Some(Secret {
            metadata: ObjectMeta {
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), v.clone()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        })
    }

    /// A CA on record (certificate "CA") and two certificates it signed for
    /// `subjects`, expiring at `until`, whose ca.crt is `bundle`.
    fn live(subjects: [&str; 2], until: OffsetDateTime, bundle: &str) -> Live {
        let leaf = |subject: &str| {
            secret(
                &[("tls.crt", "leaf"), ("tls.key", "key"), ("ca.crt", bundle)],
                &[
                    (ISSUER, digest("CA")),
                    (SUBJECT, subject.to_owned()),
                    (NOT_AFTER, rfc3339(until)),
                ],
            )
        };
        Live {
            ca: secret(&[("tls.crt", "CA")], &[(NOT_AFTER, rfc3339(until))]),
            server: leaf(subjects[0]),
            client: leaf(subjects[1]),
        }
    }

    #[test]
    fn a_steady_provider_keeps_its_certificates_and_its_ca_on_record_has_no_key() {
        let now = OffsetDateTime::now_utc();
        let until = now + LEAF_LIFETIME;
        let l = live(["svc", "p"], until, "CA");
        assert_eq!(plan(&l, ["svc", "p"], now), Plan::Keep("CA".to_owned()));
        // Nothing on record: a new CA.
        let none = Live {
            ca: None,
            server: None,
            client: None,
        };
        assert_eq!(
            plan(&none, ["svc", "p"], now),
            Plan::Renew { previous: None }
        );
    }

    #[test]
    fn a_ca_whose_key_was_kept_in_its_secret_is_replaced_and_not_trusted_again() {
        let now = OffsetDateTime::now_utc();
        let mut l = live(["svc", "p"], now + LEAF_LIFETIME, "CA");
        l.ca = secret(&[("tls.crt", "CA"), ("tls.key", "ca key")], &[]);
        assert_eq!(plan(&l, ["svc", "p"], now), Plan::Renew { previous: None });
    }

    #[test]
    fn a_new_service_name_or_a_certificate_near_expiry_gets_a_new_ca_beside_the_old() {
        let now = OffsetDateTime::now_utc();
        let until = now + LEAF_LIFETIME;
        let l = live(["svc", "p"], until, "CA");
        let renewed = Plan::Renew {
            previous: Some(("CA".to_owned(), until)),
        };
        assert_eq!(plan(&l, ["other-svc", "p"], now), renewed);
        let soon = now + LEAF_LIFETIME / 4;
        let l = live(["svc", "p"], soon, "CA");
        assert_eq!(
            plan(&l, ["svc", "p"], now),
            Plan::Renew {
                previous: Some(("CA".to_owned(), soon))
            }
        );
        // One certificate lost: the other, still served, keeps the old CA
        // trusted.
        let mut l = live(["svc", "p"], until, "CA");
        l.client = None;
        assert_eq!(plan(&l, ["svc", "p"], now), renewed);
    }

    #[test]
    fn the_previous_ca_is_trusted_until_what_it_signed_expires_then_dropped_without_new_certificates()
     {
        let now = OffsetDateTime::now_utc();
        let until = now + LEAF_LIFETIME;
        let with_previous = |previous_until: OffsetDateTime, bundle: &str| {
            let mut l = live(["svc", "p"], until, bundle);
            l.ca = secret(
                &[("tls.crt", "CA"), (PREVIOUS_CA, "OLD")],
                &[
                    (NOT_AFTER, rfc3339(until)),
                    (PREVIOUS_NOT_AFTER, rfc3339(previous_until)),
                ],
            );
            l
        };
        let l = with_previous(now + Duration::from_secs(3600), "CAOLD");
        assert_eq!(plan(&l, ["svc", "p"], now), Plan::Keep("CAOLD".to_owned()));
        let l = with_previous(now - Duration::from_secs(1), "CAOLD");
        assert_eq!(
            plan(&l, ["svc", "p"], now),
            Plan::Bundle {
                current: "CA".to_owned(),
                bundle: "CA".to_owned()
            }
        );
    }
}
