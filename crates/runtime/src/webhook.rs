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

/// How long one connection is kept: then it is closed after the call it is
/// serving, and the API server connects again for the next.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest the API server waits for a webhook call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

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

/// How a webhook server stops without failing a call: while the Service
/// still sends the API server to a stopping replica, every response says
/// `Connection: close` (no connection is left idle for the API server to
/// reuse, and each new call opens a connection, to a replica the Service
/// still lists); at the end, the connections left are closed after the
/// call each is serving. Clones share it.
#[derive(Clone, Debug)]
pub struct Drain {
    state: Arc<tokio::sync::watch::Sender<Stage>>,
    open: Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Serving,
    Draining,
    Closing,
}

impl Default for Drain {
    fn default() -> Self {
        Self {
            state: Arc::new(tokio::sync::watch::channel(Stage::Serving).0),
            open: Arc::default(),
        }
    }
}

impl Drain {
    /// Serves on until `drain` has passed, answering every call with
    /// `Connection: close`; then closes each connection after its call,
    /// waiting (at most 5 s) until none is open.
    pub async fn finish(&self, drain: Duration) {
        self.state.send_replace(Stage::Draining);
        tokio::time::sleep(drain).await;
        self.state.send_replace(Stage::Closing);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.open.load(std::sync::atomic::Ordering::Acquire) > 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resolves once the drain has begun: a stopping replica must no
    /// longer claim anything for itself (its CRD's conversion, say), or it
    /// would take it back from whoever replaces it.
    pub async fn draining(&self) {
        let mut state = self.state.subscribe();
        let _ = state.wait_for(|s| *s >= Stage::Draining).await;
    }

    fn at_least(&self, stage: Stage) -> bool {
        *self.state.borrow() >= stage
    }
}

/// Counts one open connection while it lives.
struct Open(Arc<std::sync::atomic::AtomicUsize>);

impl Open {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(count.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Serves `app` over HTTPS on `listener` with `certificate`, until the
/// future is dropped, stopping gently through `drain`. A connection that
/// fails (a bad handshake, a client gone) is logged at debug and costs
/// nothing else; one older than its time is closed after its call.
pub async fn serve(
    listener: TcpListener,
    certificate: ServingCertificate,
    app: Router,
    drain: Drain,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certificate));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let app = {
        let drain = drain.clone();
        app.layer(axum::middleware::map_response(
            move |mut response: axum::response::Response| {
                let draining = drain.at_least(Stage::Draining);
                async move {
                    if draining {
                        response.headers_mut().insert(
                            axum::http::header::CONNECTION,
                            axum::http::HeaderValue::from_static("close"),
                        );
                    }
                    response
                }
            },
        ))
    };
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "webhook: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app, drain) = (acceptor.clone(), app.clone(), drain.clone());
        tokio::spawn(async move {
            let _open = Open::new(&drain.open);
            let Ok(Ok(tls)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            else {
                tracing::debug!(%peer, "webhook: TLS handshake failed or timed out");
                return;
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
            let mut connection = std::pin::pin!(connection);
            let mut stage = drain.state.subscribe();
            let closing = async {
                let _ = stage.wait_for(|s| *s == Stage::Closing).await;
            };
            let served = tokio::select! {
                done = connection.as_mut() => Some(done),
                () = tokio::time::sleep(CONNECTION_TIMEOUT) => None,
                () = closing => None,
            };
            let done = match served {
                Some(done) => done,
                // Closed after the call it is serving (at once when idle);
                // a call that takes longer than the API server waits for
                // one is cut.
                None => {
                    connection.as_mut().graceful_shutdown();
                    match tokio::time::timeout(CALL_TIMEOUT, connection).await {
                        Ok(done) => done,
                        Err(_) => return,
                    }
                }
            };
            if let Err(e) = done {
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

    #[tokio::test]
    async fn draining_is_told_when_the_drain_begins_not_before() {
        let drain = Drain::default();
        let told = tokio::spawn({
            let drain = drain.clone();
            async move { drain.draining().await }
        });
        tokio::task::yield_now().await;
        assert!(!told.is_finished(), "told before the drain began");
        let finishing = tokio::spawn({
            let drain = drain.clone();
            async move { drain.finish(Duration::from_secs(3600)).await }
        });
        tokio::time::timeout(Duration::from_secs(5), told)
            .await
            .expect("told once the drain began")
            .unwrap();
        // Told at its start, not its end; and told at once when it began
        // before the question.
        assert!(!finishing.is_finished());
        tokio::time::timeout(Duration::from_secs(5), drain.draining())
            .await
            .expect("told at once");
        finishing.abort();
    }

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
        let server = tokio::spawn(serve(listener, certificate.clone(), app, Drain::default()));
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

    #[tokio::test]
    async fn a_draining_server_closes_each_connection_after_its_call_and_finishes_those_in_flight()
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (ca, cert, key) = issued("drain");
        let certificate = ServingCertificate::new(cert.as_bytes(), key.as_bytes()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/fast", get(|| async { "fast" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(600)).await;
                    "slow"
                }),
            );
        let drain = Drain::default();
        let server = tokio::spawn(serve(listener, certificate, app, drain.clone()));
        let c = client(&ca);
        let close = |r: &reqwest::Response| {
            r.headers()
                .get("connection")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"))
        };
        let serving = c.get(format!("{base}/fast")).send().await.unwrap();
        assert!(!close(&serving), "a serving server keeps connections");
        // A call still in flight when the drain ends.
        let slow = tokio::spawn(c.get(format!("{base}/slow")).send());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let finishing = {
            let drain = drain.clone();
            tokio::spawn(async move { drain.finish(Duration::from_millis(200)).await })
        };
        while !drain.at_least(Stage::Draining) {
            tokio::task::yield_now().await;
        }
        let draining = c.get(format!("{base}/fast")).send().await.unwrap();
        assert!(close(&draining), "a draining server says Connection: close");
        assert_eq!(draining.text().await.unwrap(), "fast");
        finishing.await.unwrap();
        let slow = slow.await.unwrap().expect("the call in flight is answered");
        assert_eq!(slow.text().await.unwrap(), "slow");
        assert_eq!(
            drain.open.load(std::sync::atomic::Ordering::Acquire),
            0,
            "every connection is closed once the drain has finished"
        );
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
            Drain::default(),
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
