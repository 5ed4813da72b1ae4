//! A binary that serves its own CRD's conversion webhook keeps the
//! certificate for it: one `kubernetes.io/tls` Secret in its namespace,
//! shared by its replicas, and the CRD's `spec.conversion` pointing at the
//! webhook with the CA bundle that vouches for it. No cert-manager.
//!
//! The Secret holds the served certificate and key (`tls.crt`,
//! `tls.key`), the CA that signed them (`authority.crt`), the bundle the
//! API server trusts (`ca.crt`: that CA, and for a while the previous one,
//! `previous.crt`), and annotations saying when the certificate expires,
//! which CA signed it and for which names. The CA's key is kept nowhere
//! ([`crate::certificates`]): a certificate due again (a third of its life
//! left, other names, missing) is signed by a new CA, and the previous CA
//! stays in the bundle until what it signed expires, so a replica that has
//! not yet read the new certificate stays trusted.
//!
//! Every replica checks at start, then whenever the Secret or the CRD
//! changes (a watch on each, by name) and when the certificate falls due.
//! Two replicas that issue at once both write conditionally on what they
//! read; one wins and the other serves what it wrote.

use std::{collections::BTreeMap, time::Duration};

use futures::StreamExt;
use k8s_openapi::{
    ByteString, api::core::v1::Secret,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::ServingCertificate;
use crate::certificates::{
    self, Authority, Leaf, Usage, annotated_time, annotation, digest, rfc3339, secret_text,
};

/// When the served certificate expires (RFC 3339).
const NOT_AFTER: &str = "tls.crossplane.io/not-after";
/// Which CA signed it (the digest of `authority.crt`).
const ISSUER: &str = "tls.crossplane.io/issuer";
/// For which names (comma-separated).
const SUBJECT: &str = "tls.crossplane.io/subject";
/// When what the previous CA signed expires (RFC 3339).
const PREVIOUS_NOT_AFTER: &str = "tls.crossplane.io/previous-not-after";

const CERT: &str = "tls.crt";
const KEY: &str = "tls.key";
const BUNDLE: &str = "ca.crt";
const AUTHORITY: &str = "authority.crt";
const PREVIOUS: &str = "previous.crt";

/// How long to wait before checking again after a failed check.
const RETRY: Duration = Duration::from_secs(5);

/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Service in the cluster (the binary runs as pods behind it).
    Service {
        namespace: String,
        name: String,
        port: i32,
        path: String,
    },
    /// A URL (the binary runs where the API server reaches it directly).
    Url(String),
}

impl Endpoint {
    /// The names the served certificate must carry.
    fn names(&self) -> Vec<String> {
        match self {
            Self::Service {
                namespace, name, ..
            } => certificates::service_dns_names(name, namespace),
            Self::Url(url) => {
                let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
                let authority = rest.split('/').next().unwrap_or_default();
                let host = match authority.strip_prefix('[') {
                    Some(v6) => v6.split(']').next().unwrap_or_default(),
                    None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
                };
                vec![host.to_owned()]
            }
        }
    }

    /// The CRD's `spec.conversion.webhook.clientConfig` (a merge patch:
    /// the other way of pointing is cleared).
    fn client_config(&self, bundle: &str) -> Value {
        use base64::Engine;
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(bundle);
        match self {
            Self::Service {
                namespace,
                name,
                port,
                path,
            } => json!({
                "caBundle": ca_bundle,
                "url": null,
                "service": {"namespace": namespace, "name": name, "port": port, "path": path},
            }),
            Self::Url(url) => json!({"caBundle": ca_bundle, "url": url, "service": null}),
        }
    }
}

/// Why the certificate could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {0}: {1}")]
    Request(&'static str, #[source] kube::Error),
    #[error("cannot make the webhook certificate: {0}")]
    Certificate(#[from] certificates::Error),
    #[error("cannot serve the webhook certificate: {0}")]
    Serving(#[from] super::CertificateError),
    #[error(
        "Secret {0} exists with type {1}, not kubernetes.io/tls; delete it and it is made again"
    )]
    OtherType(String, String),
}

/// The certificate to serve and the bundle that vouches for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub leaf: Leaf,
    pub bundle: String,
    not_after: Option<OffsetDateTime>,
}

impl Issued {
    /// When a check is due again, whatever happens meanwhile.
    fn recheck_in(&self, now: OffsetDateTime) -> Duration {
        let due = self
            .not_after
            .map(|t| t - certificates::LIFETIME / 3 - now)
            .unwrap_or_default();
        // Capped, so that a clock that jumps is noticed within a day.
        Duration::try_from(due)
            .unwrap_or_default()
            .clamp(RETRY, Duration::from_secs(24 * 3600))
    }
}

/// What a check found to do.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Serve what is there.
    Keep(Issued),
    /// The certificate stands, but the bundle changed (the previous CA's
    /// certificate expired).
    Rebundle(Issued),
    /// A new CA signs a new certificate; the CA on record stays trusted
    /// until what it signed expires.
    Renew {
        previous: Option<(String, OffsetDateTime)>,
    },
}

/// Decides what the Secret as read needs to serve for `subject` at `now`.
fn plan(live: Option<&Secret>, subject: &str, now: OffsetDateTime) -> Plan {
    let Some(s) = live else {
        return Plan::Renew { previous: None };
    };
    let not_after = annotated_time(s, NOT_AFTER);
    let (Some(cert), Some(key), Some(authority)) = (
        secret_text(s, CERT),
        secret_text(s, KEY),
        secret_text(s, AUTHORITY),
    ) else {
        return Plan::Renew { previous: None };
    };
    let signed_by_it = annotation(s, ISSUER).as_deref() == Some(digest(&authority).as_str());
    if !signed_by_it
        || annotation(s, SUBJECT).as_deref() != Some(subject)
        || certificates::due(not_after, now)
    {
        // What the CA on record signed may still be served for a while.
        let previous = not_after
            .filter(|t| signed_by_it && *t > now)
            .map(|t| (authority, t));
        return Plan::Renew { previous };
    }
    let mut bundle = authority;
    if let Some(old) = secret_text(s, PREVIOUS)
        && annotated_time(s, PREVIOUS_NOT_AFTER).is_some_and(|t| t > now)
    {
        bundle.push_str(&old);
    }
    let issued = Issued {
        leaf: Leaf {
            cert_pem: cert,
            key_pem: key,
        },
        bundle,
        not_after,
    };
    if secret_text(s, BUNDLE).as_deref() == Some(issued.bundle.as_str()) {
        Plan::Keep(issued)
    } else {
        Plan::Rebundle(issued)
    }
}

/// Keeps one binary's webhook certificate and its CRD's conversion.
#[derive(Clone)]
pub struct SelfServing {
    secrets: Api<Secret>,
    crds: Api<CustomResourceDefinition>,
    secret: String,
    crd: String,
    endpoint: Endpoint,
    organization: String,
}

impl SelfServing {
    /// For the conversion webhook of CRD `crd`, reached at `endpoint`, with
    /// its certificate in Secret `secret` of `namespace`; `binary` names
    /// the CA.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        secret: &str,
        crd: &str,
        endpoint: Endpoint,
        binary: &str,
    ) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), namespace),
            crds: Api::all(client),
            secret: secret.to_owned(),
            crd: crd.to_owned(),
            endpoint,
            organization: format!("crossplane-rs {binary}"),
        }
    }

    /// The certificate to serve, issued first when the Secret does not
    /// hold a good one.
    pub async fn ensure(&self) -> Result<Issued, Error> {
        // A conditional write another replica won is read again.
        let mut attempts = 0;
        loop {
            match self.check().await {
                Err(Error::Request(_, kube::Error::Api(e))) if e.code == 409 && attempts < 3 => {
                    attempts += 1;
                }
                other => return other,
            }
        }
    }

    async fn check(&self) -> Result<Issued, Error> {
        let live = self
            .secrets
            .get_opt(&self.secret)
            .await
            .map_err(|e| Error::Request("read the webhook certificate Secret", e))?;
        if let Some(other) = live
            .as_ref()
            .and_then(|l| l.type_.as_deref())
            .filter(|t| *t != "kubernetes.io/tls")
        {
            return Err(Error::OtherType(self.secret.clone(), other.to_owned()));
        }
        let names = self.endpoint.names();
        let subject = names.join(",");
        let now = OffsetDateTime::now_utc();
        match plan(live.as_ref(), &subject, now) {
            Plan::Keep(issued) => Ok(issued),
            Plan::Rebundle(issued) => {
                let mut s = live.unwrap_or_default();
                let data = s.data.get_or_insert_default();
                data.insert(
                    BUNDLE.into(),
                    ByteString(issued.bundle.clone().into_bytes()),
                );
                data.remove(PREVIOUS);
                if let Some(a) = s.metadata.annotations.as_mut() {
                    a.remove(PREVIOUS_NOT_AFTER);
                }
                self.write(s, true).await?;
                Ok(issued)
            }
            Plan::Renew { previous } => {
                let authority =
                    Authority::new(&format!("{} CA", self.crd), &self.organization, now)?;
                let leaf = authority.issue(&names, Usage::Server)?;
                let mut bundle = authority.cert_pem().to_owned();
                let text = |s: &str| ByteString(s.as_bytes().to_vec());
                let mut data = BTreeMap::from([
                    (CERT.to_owned(), text(&leaf.cert_pem)),
                    (KEY.to_owned(), text(&leaf.key_pem)),
                    (AUTHORITY.to_owned(), text(authority.cert_pem())),
                ]);
                let mut annotations = BTreeMap::from([
                    (NOT_AFTER.to_owned(), rfc3339(authority.not_after())),
                    (ISSUER.to_owned(), digest(authority.cert_pem())),
                    (SUBJECT.to_owned(), subject),
                ]);
                if let Some((old, until)) = previous {
                    bundle.push_str(&old);
                    data.insert(PREVIOUS.to_owned(), text(&old));
                    annotations.insert(PREVIOUS_NOT_AFTER.to_owned(), rfc3339(until));
                }
                data.insert(BUNDLE.to_owned(), text(&bundle));
                let exists = live.is_some();
                let mut s = live.unwrap_or_default();
                s.metadata = ObjectMeta {
                    name: Some(self.secret.clone()),
                    annotations: Some(annotations),
                    resource_version: s.metadata.resource_version,
                    labels: s.metadata.labels,
                    ..ObjectMeta::default()
                };
                s.type_ = Some("kubernetes.io/tls".to_owned());
                s.data = Some(data);
                s.string_data = None;
                self.write(s, exists).await?;
                tracing::info!(secret = %self.secret, "issued a new webhook certificate");
                Ok(Issued {
                    leaf,
                    bundle,
                    not_after: Some(authority.not_after()),
                })
            }
        }
    }

    /// Creates the Secret, or replaces it if its resourceVersion is still
    /// the one read (409 otherwise).
    async fn write(&self, s: Secret, exists: bool) -> Result<(), Error> {
        let pp = PostParams::default();
        let result = if exists {
            self.secrets.replace(&self.secret, &pp, &s).await
        } else {
            self.secrets.create(&pp, &s).await
        };
        result
            .map(drop)
            .map_err(|e| Error::Request("write the webhook certificate Secret", e))
    }

    /// Points the CRD's conversion at the webhook with `bundle`, unless it
    /// already does; whether it patched.
    pub async fn point_crd(&self, bundle: &str) -> Result<bool, Error> {
        let crd = self
            .crds
            .get(&self.crd)
            .await
            .map_err(|e| Error::Request("read the CRD whose conversion this serves", e))?;
        let live = serde_json::to_value(crd.spec.conversion.as_ref()).unwrap_or(Value::Null);
        let wanted = self.endpoint.client_config(bundle);
        let pointed = live["strategy"] == "Webhook"
            && live["webhook"]["conversionReviewVersions"] == json!(["v1"])
            && wanted.as_object().is_some_and(|w| {
                w.iter().all(|(k, v)| {
                    live["webhook"]["clientConfig"]
                        .get(k)
                        .unwrap_or(&Value::Null)
                        == v
                })
            });
        if pointed {
            return Ok(false);
        }
        let patch = json!({"spec": {"conversion": {
            "strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": wanted},
        }}});
        self.crds
            .patch(&self.crd, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::Request("point the CRD's conversion at this webhook", e))?;
        tracing::info!(crd = %self.crd, "pointed the CRD's conversion at this webhook");
        Ok(true)
    }

    /// Checks until a check succeeds (an API server that is not there yet
    /// is waited for), then serves: the certificate to serve, the CRD
    /// pointed at it.
    pub async fn start(&self) -> ServingCertificate {
        loop {
            match self.ready().await {
                Ok(c) => return c,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook certificate not ready; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    async fn ready(&self) -> Result<ServingCertificate, Error> {
        let issued = self.ensure().await?;
        let certificate = ServingCertificate::new(
            issued.leaf.cert_pem.as_bytes(),
            issued.leaf.key_pem.as_bytes(),
        )?;
        self.point_crd(&issued.bundle).await?;
        Ok(certificate)
    }

    /// Keeps `certificate` and the CRD current, until dropped: checks when
    /// the Secret or the CRD changes and when the certificate falls due.
    pub async fn keep(self, certificate: ServingCertificate) {
        let by_name =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let secret_changes = watcher(self.secrets.clone(), by_name(&self.secret))
            .default_backoff()
            .filter(|e| std::future::ready(changed(e)))
            .map(drop);
        // Replicas behind a Service point the CRD alike, and put it back
        // when it changes; a URL is one replica's own (outside the
        // cluster), pointed at start and when the certificate changes, so
        // that two such replicas never take the CRD from each other.
        let behind_a_service = matches!(self.endpoint, Endpoint::Service { .. });
        let crd_changes = watcher(self.crds.clone(), by_name(&self.crd))
            .default_backoff()
            .filter(move |e| std::future::ready(behind_a_service && changed(e)))
            .map(drop);
        let mut changes = std::pin::pin!(futures::stream::select(secret_changes, crd_changes));
        let mut served: Option<Issued> = None;
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = changes.next() => {}
                () = tokio::time::sleep(wait) => {}
            }
            let checked = match self.ensure().await {
                Ok(issued) => {
                    let replaced = served.as_ref() == Some(&issued)
                        || certificate
                            .replace(
                                issued.leaf.cert_pem.as_bytes(),
                                issued.leaf.key_pem.as_bytes(),
                            )
                            .is_ok();
                    let point = behind_a_service || served.as_ref() != Some(&issued);
                    let pointed = if point {
                        self.point_crd(&issued.bundle).await.map(drop)
                    } else {
                        Ok(())
                    };
                    match pointed {
                        Ok(()) if replaced => Ok(issued),
                        Ok(_) => Err("the certificate in the Secret cannot be served".to_owned()),
                        Err(e) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            wait = match checked {
                Ok(issued) => {
                    let next = issued.recheck_in(OffsetDateTime::now_utc());
                    served = Some(issued);
                    next
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot keep the webhook certificate; retrying");
                    RETRY
                }
            };
        }
    }
}

/// Whether a watch event says the object changed (not the bookkeeping of
/// a relist).
fn changed<K>(e: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(
        e,
        Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const SUBJECT_NAMES: &str = "w,w.ns,w.ns.svc,w.ns.svc.cluster.local";

    fn secret(data: &[(&str, &str)], annotations: &[(&str, String)]) -> Secret {
        Secret {
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
        }
    }

    fn issued_by(ca: &str, until: OffsetDateTime, bundle: &str) -> Secret {
        secret(
            &[(CERT, "C"), (KEY, "K"), (AUTHORITY, ca), (BUNDLE, bundle)],
            &[
                (NOT_AFTER, rfc3339(until)),
                (ISSUER, digest(ca)),
                (SUBJECT, SUBJECT_NAMES.to_owned()),
            ],
        )
    }

    #[test]
    fn a_good_certificate_is_kept_and_a_missing_one_issued() {
        let now = OffsetDateTime::now_utc();
        let until = now + certificates::LIFETIME;
        let s = issued_by("CA", until, "CA");
        assert!(matches!(plan(Some(&s), SUBJECT_NAMES, now), Plan::Keep(i) if i.bundle == "CA"));
        assert_eq!(
            plan(None, SUBJECT_NAMES, now),
            Plan::Renew { previous: None }
        );
    }

    #[test]
    fn a_certificate_due_or_for_other_names_is_issued_again_and_its_ca_trusted_meanwhile() {
        let now = OffsetDateTime::now_utc();
        let soon = now + certificates::LIFETIME / 4;
        let s = issued_by("CA", soon, "CA");
        assert_eq!(
            plan(Some(&s), SUBJECT_NAMES, now),
            Plan::Renew {
                previous: Some(("CA".to_owned(), soon))
            }
        );
        let until = now + certificates::LIFETIME;
        let s = issued_by("CA", until, "CA");
        assert_eq!(
            plan(Some(&s), "other", now),
            Plan::Renew {
                previous: Some(("CA".to_owned(), until))
            }
        );
        // A certificate not signed by the CA on record earns it no trust.
        let mut s = issued_by("CA", until, "CA");
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ISSUER.to_owned(), digest("OTHER"));
        assert_eq!(
            plan(Some(&s), SUBJECT_NAMES, now),
            Plan::Renew { previous: None }
        );
    }

    #[test]
    fn the_previous_ca_is_trusted_until_what_it_signed_expires() {
        let now = OffsetDateTime::now_utc();
        let until = now + certificates::LIFETIME;
        let with_previous = |previous_until: OffsetDateTime, bundle: &str| {
            let mut s = issued_by("CA", until, bundle);
            s.data
                .as_mut()
                .unwrap()
                .insert(PREVIOUS.into(), ByteString(b"OLD".to_vec()));
            s.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(PREVIOUS_NOT_AFTER.into(), rfc3339(previous_until));
            s
        };
        let s = with_previous(now + Duration::from_secs(3600), "CAOLD");
        assert!(matches!(plan(Some(&s), SUBJECT_NAMES, now), Plan::Keep(i) if i.bundle == "CAOLD"));
        let s = with_previous(now - Duration::from_secs(1), "CAOLD");
        assert!(
            matches!(plan(Some(&s), SUBJECT_NAMES, now), Plan::Rebundle(i) if i.bundle == "CA")
        );
    }

    #[test]
    fn a_url_endpoint_names_its_host_and_a_service_its_dns_names() {
        let url = |u: &str| Endpoint::Url(u.to_owned()).names();
        assert_eq!(url("https://127.0.0.1:9443/convert"), ["127.0.0.1"]);
        assert_eq!(url("https://[::1]:9443/convert"), ["::1"]);
        assert_eq!(url("https://hooks.example/convert"), ["hooks.example"]);
        let service = Endpoint::Service {
            namespace: "ns".into(),
            name: "w".into(),
            port: 443,
            path: "/convert".into(),
        };
        assert_eq!(service.names().join(","), SUBJECT_NAMES);
        let config = service.client_config("PEM");
        assert_eq!(config["service"]["port"], 443);
        assert_eq!(config["url"], Value::Null);
    }

    #[tokio::test]
    async fn a_certificate_issued_for_an_ip_url_is_served_and_trusted_by_its_bundle() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let now = OffsetDateTime::now_utc();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/", listener.local_addr().unwrap());
        let names = Endpoint::Url(url.clone()).names();
        let ca = Authority::new("t CA", "tests", now).unwrap();
        let leaf = ca.issue(&names, Usage::Server).unwrap();
        let cert =
            ServingCertificate::new(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let server = tokio::spawn(super::super::serve(
            listener,
            cert,
            app,
            super::super::Drain::default(),
        ));
        let client = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap()])
            .build()
            .unwrap();
        let body = client.get(&url).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "ok");
        server.abort();
    }
}
