//! Serving a webhook the API server calls (a CRD's conversion webhook):
//! HTTPS with a certificate that can be replaced while serving (a renewed
//! certificate is used for the next connection, with no restart), HTTP/1.1,
//! every connection bounded in time so that a client that connects and
//! says nothing holds nothing for long.

pub mod serving;

use std::{sync::Arc, time::Duration};

use axum::Router;
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use rustls::{
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tokio::net::TcpListener;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one connection may last: the API server's webhook calls take
/// at most 30 s each, and it connects again when a connection is closed.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a certificate could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve the webhook certificate: {0}")]
pub struct CertificateError(String);

/// The certificate a webhook server presents; cheap to clone, and clones
/// share it: [`ServingCertificate::replace`] changes it for every
/// connection made afterwards.
#[derive(Clone, Debug)]
pub struct ServingCertificate {
    current: Arc<std::sync::RwLock<Arc<CertifiedKey>>>,
}

impl ServingCertificate {
    /// A certificate chain and its key, both PEM.
    pub fn new(chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, CertificateError> {
        Ok(Self {
            current: Arc::new(std::sync::RwLock::new(certified_key(chain_pem, key_pem)?)),
        })
    }

    /// Serves `chain_pem` and `key_pem` from the next connection on.
    pub fn replace(&self, chain_pem: &[u8], key_pem: &[u8]) -> Result<(), CertificateError> {
        let key = certified_key(chain_pem, key_pem)?;
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = key;
        Ok(())
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn certified_key(chain_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, CertificateError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertificateError(format!("the certificate is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(CertificateError("no certificate in the PEM".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| CertificateError(format!("the key is not PEM: {e}")))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| CertificateError(format!("the key cannot sign: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// Serves `app` over HTTPS on `listener` with `certificate`, until the
/// future is dropped. A connection that fails (a bad handshake, a client
/// gone) is logged at debug and costs nothing else.
pub async fn serve(listener: TcpListener, certificate: ServingCertificate, app: Router) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certificate));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "webhook: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            else {
                tracing::debug!(%peer, "webhook: TLS handshake failed or timed out");
                return;
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
            // A connection that outlives its time is dropped.
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                tracing::debug!(%peer, error = %e, "webhook: connection failed");
            }
        });
    }
}

/// The largest ConversionReview read: the API server converts a list's
/// objects in one call.
const MAX_REVIEW_BYTES: usize = 64 * 1024 * 1024;

/// What converts one object to an `apiVersion`; its error is said in the
/// review's result.
pub type Convert = fn(&serde_json::Value, &str) -> Result<serde_json::Value, String>;

/// A router answering `apiextensions.k8s.io/v1` ConversionReviews at `path`
/// with `convert`: every object of a review converted, or the review failed
/// naming the first object that could not be (the API server then fails
/// the request that needed it, and nothing is written half converted).
pub fn conversion_router(path: &str, convert: Convert) -> Router {
    use axum::{extract::DefaultBodyLimit, routing::post};
    Router::new()
        .route(
            path,
            post(move |body: axum::body::Bytes| async move { review(&body, convert) }),
        )
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
}

/// The answer to one ConversionReview.
fn review(body: &[u8], convert: Convert) -> axum::response::Response {
    use axum::{http::StatusCode, response::IntoResponse};
    use serde_json::{Value, json};
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return (StatusCode::BAD_REQUEST, "not a ConversionReview").into_response();
    };
    let uid = request
        .pointer("/request/uid")
        .cloned()
        .unwrap_or(Value::Null);
    let to = request
        .pointer("/request/desiredAPIVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let objects = request
        .pointer("/request/objects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let converted: Result<Vec<Value>, String> = objects
        .iter()
        .map(|o| {
            convert(o, to).map_err(|e| {
                let name = o.pointer("/metadata/name").and_then(Value::as_str);
                format!("{}: {e}", name.unwrap_or("an object"))
            })
        })
        .collect();
    let response = match converted {
        Ok(objects) => {
            json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}})
        }
        Err(message) => {
            json!({"uid": uid, "result": {"status": "Failure", "message": message}})
        }
    };
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": response,
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        review.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use axum::routing::get;

    use super::*;

    /// A CA, and a certificate for 127.0.0.1 it signed (chain and key PEM).
    fn issued(name: &str) -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name}-ca"));
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.subject_alt_names = vec![rcgen::SanType::IpAddress([127, 0, 0, 1].into())];
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    fn client(ca_pem: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn a_replaced_certificate_is_served_from_the_next_connection_on() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (ca1, cert1, key1) = issued("first");
        let (ca2, cert2, key2) = issued("second");
        let certificate = ServingCertificate::new(cert1.as_bytes(), key1.as_bytes()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/convert", listener.local_addr().unwrap());
        let app = Router::new().route("/convert", get(|| async { "converted" }));
        let server = tokio::spawn(serve(listener, certificate.clone(), app));
        let body = client(&ca1).get(&url).send().await.unwrap().text().await;
        assert_eq!(body.unwrap(), "converted");
        certificate
            .replace(cert2.as_bytes(), key2.as_bytes())
            .unwrap();
        assert!(
            client(&ca1).get(&url).send().await.is_err(),
            "the first CA no longer vouches for what is served"
        );
        let body = client(&ca2).get(&url).send().await.unwrap().text().await;
        assert_eq!(body.unwrap(), "converted");
        // A PEM that is not one leaves the certificate served as it was.
        assert!(certificate.replace(b"not pem", key2.as_bytes()).is_err());
        assert!(client(&ca2).get(&url).send().await.is_ok());
        server.abort();
    }

    fn rename(o: &serde_json::Value, to: &str) -> Result<serde_json::Value, String> {
        if o["metadata"]["name"] == "bad" {
            return Err("cannot say this in the other version".into());
        }
        let mut o = o.clone();
        o["apiVersion"] = serde_json::json!(to);
        Ok(o)
    }

    #[tokio::test]
    async fn a_conversion_review_converts_every_object_or_fails_naming_one() {
        use serde_json::json;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (ca, cert, key) = issued("review");
        let certificate = ServingCertificate::new(cert.as_bytes(), key.as_bytes()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/convert", listener.local_addr().unwrap());
        let server = tokio::spawn(serve(
            listener,
            certificate,
            conversion_router("/convert", rename),
        ));
        let ask = |names: &[&str]| {
            let objects: Vec<_> = names
                .iter()
                .map(|n| json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": n}}))
                .collect();
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u-1", "desiredAPIVersion": "g/v2", "objects": objects}})
        };
        let answer = |review: serde_json::Value| {
            let (url, client) = (url.clone(), client(&ca));
            async move {
                let r = client
                    .post(url)
                    .body(review.to_string())
                    .send()
                    .await
                    .unwrap();
                serde_json::from_str::<serde_json::Value>(&r.text().await.unwrap()).unwrap()
            }
        };
        let ok = answer(ask(&["a", "b"])).await;
        assert_eq!(ok["response"]["uid"], "u-1");
        assert_eq!(ok["response"]["result"]["status"], "Success");
        assert_eq!(ok["response"]["convertedObjects"][1]["apiVersion"], "g/v2");
        let failed = answer(ask(&["a", "bad"])).await;
        assert_eq!(failed["response"]["result"]["status"], "Failure");
        assert_eq!(
            failed["response"]["result"]["message"],
            "bad: cannot say this in the other version"
        );
        assert!(failed["response"].get("convertedObjects").is_none());
        server.abort();
    }
}
