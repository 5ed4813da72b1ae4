//! HTTP with a registry: the client (timeouts, which redirects are followed),
//! reading an answer up to a bound, and what a failed request or an error
//! answer means ([`Target`] turns them into the crate's errors, naming
//! the reference and the registry).

use std::fmt;

use reqwest::{StatusCode, Url};
use serde_json::Value;

use super::{RegistryPolicy, TIMEOUT, Tls};
use crate::{
    Error,
    text::{RegistryText, text},
};

/// The most bytes of an error answer read (only its start is shown).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Redirects followed per request (registries send one, to a CDN).
const MAX_REDIRECTS: usize = 5;

/// Why a redirect was not followed.
#[derive(Debug)]
struct RedirectRefused(String);

impl fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedirectRefused {}

/// Follows at most [`MAX_REDIRECTS`] redirects, never from https to plain
/// http. (reqwest itself drops Authorization on a redirect to another
/// host, port or scheme.)
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            return attempt.error(RedirectRefused(format!(
                "it redirected more than {MAX_REDIRECTS} times"
            )));
        }
        let to = attempt.url();
        let host = text(to.host_str().unwrap_or("?"));
        if !matches!(to.scheme(), "http" | "https") {
            let scheme = text(to.scheme());
            return attempt.error(RedirectRefused(format!(
                "it redirected to a {scheme}: URL (on {host}); only http(s) is followed"
            )));
        }
        if to.scheme() == "http" && attempt.previous().iter().any(|u| u.scheme() == "https") {
            return attempt.error(RedirectRefused(format!(
                "it redirected from https to plain http (to {host}); a redirect to plain HTTP is \
                 not followed"
            )));
        }
        attempt.follow()
    })
}

/// How one TLS setting reaches registries: its HTTP client, built once
/// when first used (connecting and each read give up after [`TIMEOUT`];
/// redirects as [`redirect_policy`]), so every session shares its
/// connections and a CA bundle is parsed once. A client that cannot be
/// built (a CA bundle that is not PEM) fails each request that would use
/// it, saying why.
#[derive(Debug)]
pub(crate) struct Transport {
    tls: Tls,
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
}

impl Transport {
    /// The transport for `tls`.
    pub(crate) fn new(tls: &Tls) -> Self {
        Self {
            tls: tls.clone(),
            client: std::sync::OnceLock::new(),
        }
    }

    /// Whether every registry is spoken to over plain HTTP.
    fn plain(&self) -> bool {
        matches!(self.tls, Tls::PlainHttp)
    }

    /// The client, built on first use.
    fn client(&self) -> Result<reqwest::Client, String> {
        self.client
            .get_or_init(|| client_with(&self.tls, true).map_err(|e| e.to_string()))
            .clone()
    }
}

impl Default for Transport {
    fn default() -> Self {
        Self::new(&Tls::default())
    }
}

/// As [`client`], but a request may wait for its answer as long as it
/// takes (only connecting is bounded): for blob uploads, which a registry
/// answers once it has the whole blob (a binaries layer is tens of
/// megabytes).
pub(crate) fn upload_client(tls: &Tls) -> Result<reqwest::Client, reqwest::Error> {
    client_with(tls, false)
}

fn client_with(tls: &Tls, read_timeout: bool) -> Result<reqwest::Client, reqwest::Error> {
    super::install_crypto_provider();
    let mut builder = reqwest::Client::builder().connect_timeout(TIMEOUT);
    if read_timeout {
        builder = builder.read_timeout(TIMEOUT);
    }
    let mut builder = builder
        .redirect(redirect_policy())
        .referer(false)
        .user_agent(concat!("crossplane-rs/", env!("CARGO_PKG_VERSION")));
    match tls {
        Tls::Ca(pem) => {
            builder = builder.tls_certs_merge(reqwest::Certificate::from_pem_bundle(pem)?);
        }
        Tls::InsecureSkipVerify => builder = builder.tls_danger_accept_invalid_certs(true),
        Tls::System | Tls::PlainHttp => {}
    }
    builder.build()
}

/// What the start of an answer (up to `max` bytes) holds: whether more
/// followed.
pub(crate) async fn read_prefix(
    resp: &mut reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// The error codes of a distribution error envelope
/// (`{"errors": [{"code", "message"}]}`), and its messages.
fn envelope(body: &[u8]) -> (Vec<String>, Vec<String>) {
    let json: Value = serde_json::from_slice(body).unwrap_or_default();
    let errors = json
        .get("errors")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let field = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
    (
        errors.iter().filter_map(|e| field(e, "code")).collect(),
        errors
            .iter()
            .filter_map(|e| match (field(e, "code"), field(e, "message")) {
                (Some(c), Some(m)) => Some(format!("{c}: {m}")),
                (c, m) => c.or(m),
            })
            .collect(),
    )
}

/// The causes of an error, looking inside `io::Error`s too (which hide the
/// error they wrap from `source()`).
fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        out.push(cause);
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _).or(cause.source()),
            None => cause.source(),
        };
    }
    out
}

/// Why a request got no answer, in a few words.
fn unreachable_reason(e: &reqwest::Error) -> String {
    let causes = causes(e);
    for cause in &causes {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return match tls {
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                    "TLS failed: its certificate is not trusted (signed by an unknown authority; \
                     give the CA that signed it)"
                        .to_owned()
                }
                rustls::Error::InvalidCertificate(c) => {
                    format!("TLS failed: its certificate is not valid ({c:?})")
                }
                other => format!("TLS failed: {other}"),
            };
        }
    }
    if e.is_timeout() {
        return format!("no answer within {}s", TIMEOUT.as_secs());
    }
    for cause in &causes {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            match io.kind() {
                K::ConnectionRefused => return "connection refused".to_owned(),
                K::TimedOut => return format!("no answer within {}s", TIMEOUT.as_secs()),
                K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof => {
                    return "the connection was closed before an answer".to_owned();
                }
                _ => {}
            }
        }
    }
    let all: Vec<String> = causes.iter().map(|c| c.to_string()).collect();
    let all = all.join(": ");
    let lower = all.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        return format!("TLS failed: its certificate is not trusted ({all})");
    }
    if lower.contains("dns error") || lower.contains("failed to lookup") {
        return format!("the host name does not resolve ({all})");
    }
    all
}

/// One registry, reached over HTTP, for one reference: the client, where
/// it is, and what its failures name.
pub(crate) struct Endpoint<'a> {
    pub(crate) http: reqwest::Client,
    /// `scheme://host[:port]`.
    pub(crate) base: Url,
    /// `host[:port]`.
    pub(crate) registry: String,
    /// Whether the operator allowed plain HTTP for this registry.
    pub(crate) plain: bool,
    /// The reference being read (for messages).
    pub(crate) reference: &'a str,
    /// Whether credentials were given (a refusal then blames them).
    pub(crate) with_credentials: bool,
}

impl<'a> Endpoint<'a> {
    /// `registry` (`host[:port]`), reading `reference`: over https, or
    /// plain http when `transport` says so or the policy allows it for this
    /// registry.
    pub(crate) fn new(
        reference: &'a str,
        registry: &str,
        with_credentials: bool,
        transport: &Transport,
        policy: &RegistryPolicy,
    ) -> Result<Self, Error> {
        let plain = transport.plain() || policy.allows_plain_http(registry);
        let scheme = if plain { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{registry}"))
            .ok()
            .filter(|u| u.path() == "/" && u.host_str().is_some())
            .ok_or_else(|| Error::Reference {
                reference: text(reference),
                reason: format!("{:?} is not a registry host[:port]", text(registry)),
            })?;
        let http = transport.client().map_err(|e| Error::Registry {
            reference: text(reference),
            step: "setting up the HTTP client",
            detail: text(&e),
            transient: false,
            source: Box::new(RegistryText::new(&e)),
        })?;
        Ok(Self {
            http,
            base,
            registry: registry.to_owned(),
            plain,
            reference,
            with_credentials,
        })
    }

    /// The URL of `path` on the registry.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.as_str().trim_end_matches('/'))
    }

    /// A whole request (and its body) that took longer than [`TIMEOUT`].
    pub(crate) fn timed_out(&self) -> Error {
        let reason = format!("no answer within {}s", TIMEOUT.as_secs());
        Error::Unreachable {
            reference: text(self.reference),
            registry: self.registry.clone(),
            source: Box::new(RegistryText::new(&reason)),
            reason,
        }
    }

    /// A request that failed before an answer (or while reading it).
    pub(crate) fn transport(&self, step: &'static str, e: &reqwest::Error) -> Error {
        let all = causes(e);
        if let Some(refused) = all.iter().find_map(|c| c.downcast_ref::<RedirectRefused>()) {
            return Error::Registry {
                reference: text(self.reference),
                step,
                detail: text(&refused.0),
                transient: false,
                source: Box::new(RegistryText::new(&refused.0)),
            };
        }
        let chain: Vec<String> = all.iter().map(|c| c.to_string()).collect();
        Error::Unreachable {
            reference: text(self.reference),
            registry: self.registry.clone(),
            reason: text(&unreachable_reason(e)),
            source: Box::new(RegistryText::new(&chain.join(": "))),
        }
    }

    pub(crate) fn untrusted(&self, fault: String) -> Error {
        Error::Untrusted {
            registry: self.registry.clone(),
            fault,
        }
    }

    /// An error answer's status, error codes and what it says (sanitized
    /// and capped).
    async fn said(resp: &mut reqwest::Response) -> (StatusCode, Vec<String>, String) {
        let status = resp.status();
        let (body, _) = read_prefix(resp, MAX_ERROR_BODY_BYTES)
            .await
            .unwrap_or_default();
        let (codes, messages) = envelope(&body);
        let said = if messages.is_empty() {
            String::from_utf8_lossy(&body).into_owned()
        } else {
            messages.join("; ")
        };
        (status, codes, text(&format!("HTTP {status}: {said}")))
    }

    /// [`Error::Unauthorized`] when an answer turned the request away for
    /// want of (valid) credentials.
    fn unauthorized(&self, status: StatusCode, codes: &[String], detail: &str) -> Option<Error> {
        let denied = codes
            .iter()
            .any(|c| matches!(c.as_str(), "UNAUTHORIZED" | "DENIED"));
        (matches!(status.as_u16(), 401 | 403) || denied).then(|| Error::Unauthorized {
            registry: self.registry.clone(),
            with_credentials: self.with_credentials,
            source: Box::new(RegistryText::new(detail)),
        })
    }

    /// An answer to a push's request that is not a success:
    /// [`Error::Unauthorized`], or [`Error::Push`] saying what the registry
    /// answered.
    pub(crate) async fn refused_push(
        &self,
        step: &'static str,
        mut resp: reqwest::Response,
    ) -> Error {
        let (status, codes, detail) = Self::said(&mut resp).await;
        self.unauthorized(status, &codes, &detail)
            .unwrap_or_else(|| Error::Push {
                reference: text(self.reference),
                step,
                source: Box::new(RegistryText::new(&detail)),
            })
    }

    /// An answer that is not a success: what it says, classified.
    pub(crate) async fn refused(&self, step: &'static str, mut resp: reqwest::Response) -> Error {
        let (status, codes, detail) = Self::said(&mut resp).await;
        let has = |c: &[&str]| codes.iter().any(|code| c.contains(&code.as_str()));
        if let Some(e) = self.unauthorized(status, &codes, &detail) {
            return e;
        }
        if status == StatusCode::NOT_FOUND
            || has(&["MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN"])
        {
            return Error::NotFound {
                reference: text(self.reference),
            };
        }
        Error::Registry {
            reference: text(self.reference),
            step,
            transient: status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS,
            source: Box::new(RegistryText::new(&detail)),
            detail,
        }
    }
}
