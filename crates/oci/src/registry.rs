//! Reading from a registry (the OCI distribution API's GETs: manifests,
//! blobs, tag lists, the catalog) with everything it answers treated as
//! data. Written on reqwest rather than oci-client because oci-client
//! cannot be told where credentials may go: it sends a pull secret's Basic
//! credentials to whatever token service (`WWW-Authenticate: Bearer
//! realm=`) the registry names, on any host and in the clear, follows
//! redirects from https to http, reads answers of any size, and panics on a
//! token that is not a header value. Here:
//!
//! - credentials go only to the registry's own host: requests carry them
//!   only when addressed to it, reqwest drops them on a redirect to another
//!   host, scheme or port, and a redirect from https to http is not
//!   followed at all;
//! - a token service on another host, or over plain HTTP, gets no
//!   credentials unless the operator allowed it ([`RegistryPolicy`]); it is
//!   refused with [`Error::Untrusted`] naming the registry and the realm;
//! - a token is checked before it becomes a header; answers are read up to
//!   a bound; registry text reaches an error only sanitized and capped
//!   ([`text`]).

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use base64::Engine as _;
use reqwest::{
    StatusCode, Url,
    header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE},
};
use serde_json::Value;

use crate::{Auth, Error, Tls, push::TIMEOUT};

/// The manifest media types a pull accepts.
pub(crate) const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// The largest manifest (or index), and the largest page of a tag list or
/// of the catalog, read.
pub(crate) const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// The most characters of registry text an error carries: enough for a
/// registry's error message, not enough to flood a status.
pub const MAX_TEXT_CHARS: usize = 200;

/// The most bytes of an error answer read (only its start is shown).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The largest answer of a token service read: tokens are JWTs of a few
/// KB.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

/// The longest token used.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Redirects followed per request (registries send one, to a CDN).
const MAX_REDIRECTS: usize = 5;

/// Where Basic credentials are kept (they serve every scope).
const EVERY_SCOPE: &str = "";

/// `s` fit for an error message: control characters (escapes, NULs) are
/// removed, runs of whitespace (newlines too) become one space, and at most
/// [`MAX_TEXT_CHARS`] characters are kept ("…" marks a cut).
pub fn text(s: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if c.is_control() {
            continue;
        }
        if chars + usize::from(space) >= MAX_TEXT_CHARS {
            out.push('…');
            return out;
        }
        if space {
            out.push(' ');
            chars += 1;
            space = false;
        }
        out.push(c);
        chars += 1;
    }
    out
}

/// What a registry (or the way to it) said, sanitized and capped (control
/// characters removed, whitespace collapsed, at most 200
/// characters): the cause errors carry.
#[derive(Debug)]
pub struct RegistryText(String);

impl RegistryText {
    /// `s`, sanitized and capped.
    pub fn new(s: &str) -> Self {
        Self(text(s))
    }
}

impl fmt::Display for RegistryText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RegistryText {}

/// What the operator allows registries beyond the defaults. The default
/// allows nothing more: credentials go to the registry's own host, over
/// https.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryPolicy {
    /// Hosts that may serve a registry's token service (the realm of its
    /// `WWW-Authenticate: Bearer` challenge) on another host than the
    /// registry, and so receive the registry's credentials to exchange for
    /// a token: `host` (any port) or `host:port`, e.g. `auth.docker.io`
    /// for Docker Hub.
    pub realm_hosts: Vec<String>,
    /// Registries (`host[:port]`, as references write them) read over
    /// plain HTTP, their credentials sent in the clear.
    pub plain_http: Vec<String>,
}

impl RegistryPolicy {
    fn allows_realm(&self, host: &str, port: Option<u16>) -> bool {
        self.realm_hosts.iter().any(|allowed| {
            let allowed = allowed.trim();
            allowed.eq_ignore_ascii_case(host)
                || port.is_some_and(|p| allowed.eq_ignore_ascii_case(&format!("{host}:{p}")))
        })
    }

    fn allows_plain_http(&self, registry: &str) -> bool {
        self.plain_http
            .iter()
            .any(|r| r.trim().eq_ignore_ascii_case(registry))
    }
}

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

/// An HTTP client for `tls`: connecting and each read give up after
/// [`TIMEOUT`]; redirects as [`redirect_policy`].
fn client(tls: &Tls) -> Result<reqwest::Client, reqwest::Error> {
    crate::push::install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(TIMEOUT)
        .read_timeout(TIMEOUT)
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

/// A `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    /// Ask `realm` for a token.
    Bearer {
        realm: String,
        service: Option<String>,
    },
    /// Send Basic credentials to the registry.
    Basic,
}

/// The challenge of an answer: Bearer (with a realm) before Basic.
fn challenge(headers: &HeaderMap) -> Option<Challenge> {
    let mut basic = false;
    for value in headers.get_all(WWW_AUTHENTICATE) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        let value = value.trim();
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            let mut params = auth_params(rest);
            if let Some(realm) = params.remove("realm") {
                return Some(Challenge::Bearer {
                    realm,
                    service: params.remove("service"),
                });
            }
        } else if scheme.eq_ignore_ascii_case("basic") {
            basic = true;
        }
    }
    basic.then_some(Challenge::Basic)
}

/// `key=value, key="quoted \" value"` pairs (keys lower-cased).
fn auth_params(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = s.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        out.insert(key, value);
        rest = next.trim_start().trim_start_matches(',');
    }
    out
}

/// What the start of an answer (up to `max` bytes) holds: whether more
/// followed.
async fn read_prefix(
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

/// A valid tag (the distribution spec's grammar).
fn is_tag(t: &str) -> bool {
    let mut bytes = t.bytes();
    t.len() <= 128
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A valid repository name (lower-case path components).
fn is_repository(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 255
        && r.split('/').all(|c| {
            !c.is_empty()
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
        })
}

/// A conversation with one registry for one reference: tokens are asked
/// for when the registry challenges, kept per scope for the session.
pub(crate) struct Session<'a> {
    http: reqwest::Client,
    /// `scheme://host[:port]`.
    base: Url,
    /// `host[:port]`.
    registry: String,
    /// Whether the operator allowed plain HTTP for this registry.
    plain: bool,
    /// The reference being read (for messages).
    reference: &'a str,
    auth: &'a Auth,
    policy: &'a RegistryPolicy,
    /// Authorization per scope ([`EVERY_SCOPE`] for Basic).
    authorization: Mutex<HashMap<String, HeaderValue>>,
    /// Whether `/v2/` was asked how to authenticate.
    pinged: AtomicBool,
}

impl<'a> Session<'a> {
    /// A session with `registry` (`host[:port]`), reading `reference`: over
    /// https, or plain http when `tls` says so or the policy allows it for
    /// this registry.
    pub(crate) fn new(
        reference: &'a str,
        registry: &str,
        auth: &'a Auth,
        tls: &Tls,
        policy: &'a RegistryPolicy,
    ) -> Result<Self, Error> {
        let plain = matches!(tls, Tls::PlainHttp) || policy.allows_plain_http(registry);
        let scheme = if plain { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{registry}"))
            .ok()
            .filter(|u| u.path() == "/" && u.host_str().is_some())
            .ok_or_else(|| Error::Reference {
                reference: text(reference),
                reason: format!("{:?} is not a registry host[:port]", text(registry)),
            })?;
        let http = client(tls).map_err(|e| Error::Registry {
            reference: text(reference),
            step: "setting up the HTTP client",
            detail: text(&e.to_string()),
            transient: false,
            source: Box::new(RegistryText::new(&e.to_string())),
        })?;
        Ok(Self {
            http,
            base,
            registry: registry.to_owned(),
            plain,
            reference,
            auth,
            policy,
            authorization: Mutex::new(HashMap::new()),
            pinged: AtomicBool::new(false),
        })
    }

    fn url(&self, path: &str) -> String {
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

    fn untrusted(&self, fault: String) -> Error {
        Error::Untrusted {
            registry: self.registry.clone(),
            fault,
        }
    }

    /// An answer that is not a success: what it says, classified.
    pub(crate) async fn refused(&self, step: &'static str, mut resp: reqwest::Response) -> Error {
        let status = resp.status();
        let (body, _) = read_prefix(&mut resp, MAX_ERROR_BODY_BYTES)
            .await
            .unwrap_or_default();
        let (codes, messages) = envelope(&body);
        let said = if messages.is_empty() {
            String::from_utf8_lossy(&body).into_owned()
        } else {
            messages.join("; ")
        };
        let detail = text(&format!("HTTP {status}: {said}"));
        let has = |c: &[&str]| codes.iter().any(|code| c.contains(&code.as_str()));
        if matches!(status.as_u16(), 401 | 403) || has(&["UNAUTHORIZED", "DENIED"]) {
            return Error::Unauthorized {
                registry: self.registry.clone(),
                with_credentials: *self.auth != Auth::Anonymous,
                source: Box::new(RegistryText::new(&detail)),
            };
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

    fn authorization(&self, scope: &str) -> Option<HeaderValue> {
        let known = self
            .authorization
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.get(scope).or_else(|| known.get(EVERY_SCOPE)).cloned()
    }

    fn remember(&self, scope: &str, value: HeaderValue) {
        self.authorization
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(scope.to_owned(), value);
    }

    /// The Basic credentials header, when there are credentials.
    fn basic(&self) -> Option<HeaderValue> {
        let Auth::Basic { username, password } = self.auth else {
            return None;
        };
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
        value.set_sensitive(true);
        Some(value)
    }

    /// Asks `/v2/` how to authenticate, once per session (as Docker and
    /// oci-client do): a challenge there is met before the first request,
    /// so that request carries what it asks for. Any other answer leaves
    /// requests anonymous until one of them is challenged.
    async fn ping(&self, step: &'static str, scope: &str) -> Result<(), Error> {
        if self.pinged.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let resp = self
            .http
            .get(self.url("/v2/"))
            .send()
            .await
            .map_err(|e| self.transport(step, &e))?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            self.authorize(step, scope, resp.headers()).await?;
        }
        Ok(())
    }

    /// GETs `path` for `scope`: with what the registry's challenge asked
    /// for (see [`Session::ping`]), and when the request itself is
    /// challenged, once more with what that challenge asks for.
    pub(crate) async fn get(
        &self,
        step: &'static str,
        path: &str,
        scope: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, Error> {
        self.ping(step, scope).await?;
        let url = self.url(path);
        let mut challenged = false;
        loop {
            let mut request = self.http.get(&url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(authorization) = self.authorization(scope) {
                request = request.header(AUTHORIZATION, authorization);
            }
            let resp = request.send().await.map_err(|e| self.transport(step, &e))?;
            if resp.status() != StatusCode::UNAUTHORIZED || challenged {
                return Ok(resp);
            }
            challenged = true;
            if !self.authorize(step, scope, resp.headers()).await? {
                return Ok(resp);
            }
        }
    }

    /// Gets what `headers`' challenge asks for; whether there is anything
    /// new to try.
    async fn authorize(
        &self,
        step: &'static str,
        scope: &str,
        headers: &HeaderMap,
    ) -> Result<bool, Error> {
        match challenge(headers) {
            Some(Challenge::Bearer { realm, service }) => {
                let token = self.token(step, &realm, service.as_deref(), scope).await?;
                self.remember(scope, token);
                Ok(true)
            }
            Some(Challenge::Basic) => match self.basic() {
                Some(basic) if self.authorization(scope).is_none() => {
                    self.remember(EVERY_SCOPE, basic);
                    Ok(true)
                }
                _ => Ok(false),
            },
            None => Ok(false),
        }
    }

    /// Refuses to send credentials to `realm` unless it is the registry's
    /// own host, or one the operator allowed, and not in the clear unless
    /// the operator allowed plain HTTP for this registry.
    fn check_realm(&self, realm: &Url, shown: &str) -> Result<(), Error> {
        let host = realm.host_str().unwrap_or_default();
        let same_host = host.eq_ignore_ascii_case(self.base.host_str().unwrap_or_default())
            && realm.port_or_known_default() == self.base.port_or_known_default();
        let host_port = text(&match realm.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        });
        if !same_host && !self.policy.allows_realm(host, realm.port()) {
            return Err(self.untrusted(format!(
                "its token service (WWW-Authenticate realm {shown}) is on another host, \
                 {host_port}: the registry's credentials go only to the registry's own host, so \
                 none were sent; if {host_port} is this registry's token service, the operator \
                 must allow that realm host"
            )));
        }
        if realm.scheme() != "https" && !self.plain {
            return Err(self.untrusted(format!(
                "its token service (WWW-Authenticate realm {shown}) is plain HTTP: credentials \
                 are not sent in the clear, so none were sent; serve the token service over \
                 https, or the operator must allow this registry over plain HTTP"
            )));
        }
        Ok(())
    }

    /// A token from the token service `realm` for `scope`, as an
    /// Authorization header.
    async fn token(
        &self,
        step: &'static str,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<HeaderValue, Error> {
        let shown = text(realm);
        let mut url = Url::parse(realm)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| {
                self.untrusted(format!(
                    "its token service (WWW-Authenticate realm {shown:?}) is not an http(s) URL"
                ))
            })?;
        let basic = self.basic();
        if basic.is_some() {
            self.check_realm(&url, &shown)?;
        }
        url.query_pairs_mut().append_pair("scope", scope);
        if let Some(service) = service {
            url.query_pairs_mut().append_pair("service", service);
        }
        let mut request = self.http.get(url);
        if let Some(basic) = basic {
            request = request.header(AUTHORIZATION, basic);
        }
        let step_token = "asking the registry's token service for a token";
        let bad = |what: &str| Error::Registry {
            reference: text(self.reference),
            step,
            detail: format!(
                "the token service {shown} of registry {} answered {what}",
                self.registry
            ),
            transient: false,
            source: Box::new(RegistryText::new(what)),
        };
        let answer = tokio::time::timeout(TIMEOUT, async {
            let mut resp = request
                .send()
                .await
                .map_err(|e| self.transport(step_token, &e))?;
            if !resp.status().is_success() {
                return Err(self.refused(step_token, resp).await);
            }
            let (body, more) = read_prefix(&mut resp, MAX_TOKEN_ANSWER_BYTES)
                .await
                .map_err(|e| self.transport(step_token, &e))?;
            if more {
                return Err(bad(&format!(
                    "more than {MAX_TOKEN_ANSWER_BYTES} bytes; a token answer is a small JSON \
                     object"
                )));
            }
            Ok(body)
        })
        .await
        .map_err(|_| self.timed_out())??;
        let json: Value =
            serde_json::from_slice(&answer).map_err(|_| bad("something that is not JSON"))?;
        let token = ["token", "access_token"]
            .iter()
            .find_map(|k| json.get(*k).and_then(Value::as_str))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("no token"))?;
        let invalid = || {
            bad(&format!(
                "a token that is not a valid HTTP header value (control characters, spaces, or \
                 over {MAX_TOKEN_BYTES} bytes)"
            ))
        };
        if token.len() > MAX_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid());
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| invalid())?;
        value.set_sensitive(true);
        Ok(value)
    }

    /// A success answer's body, at most `max` bytes (more is `Err(n)` with
    /// the bound); the whole request within [`TIMEOUT`].
    async fn small_body(
        &self,
        step: &'static str,
        path: &str,
        scope: &str,
        accept: Option<&str>,
        max: usize,
    ) -> Result<Result<Vec<u8>, usize>, Error> {
        tokio::time::timeout(TIMEOUT, async {
            let mut resp = self.get(step, path, scope, accept).await?;
            if !resp.status().is_success() {
                return Err(self.refused(step, resp).await);
            }
            if resp.content_length().is_some_and(|n| n > max as u64) {
                return Ok(Err(max));
            }
            let (body, more) = read_prefix(&mut resp, max)
                .await
                .map_err(|e| self.transport(step, &e))?;
            Ok(if more { Err(max) } else { Ok(body) })
        })
        .await
        .map_err(|_| self.timed_out())?
    }

    /// The manifest `tag_or_digest` of `repository`, at most
    /// [`MAX_MANIFEST_BYTES`].
    pub(crate) async fn manifest(
        &self,
        repository: &str,
        tag_or_digest: &str,
    ) -> Result<Vec<u8>, Error> {
        let body = self
            .small_body(
                "reading the manifest",
                &format!("/v2/{repository}/manifests/{tag_or_digest}"),
                &format!("repository:{repository}:pull"),
                Some(&MANIFEST_TYPES.join(", ")),
                MAX_MANIFEST_BYTES,
            )
            .await?;
        body.map_err(|max| {
            Error::invalid(
                self.reference,
                "manifest",
                format!("the manifest is over {max} bytes; at most {max} are read"),
            )
        })
    }

    /// The answer to a blob request (the caller reads it).
    pub(crate) async fn blob(
        &self,
        repository: &str,
        digest: &str,
    ) -> Result<reqwest::Response, Error> {
        let step = "downloading a layer";
        let resp = tokio::time::timeout(
            TIMEOUT,
            self.get(
                step,
                &format!("/v2/{repository}/blobs/{digest}"),
                &format!("repository:{repository}:pull"),
                None,
            ),
        )
        .await
        .map_err(|_| self.timed_out())??;
        if !resp.status().is_success() {
            return Err(self.refused(step, resp).await);
        }
        Ok(resp)
    }

    /// A page of a paginated list: the strings of `field`, valid ones only.
    async fn page(
        &self,
        step: &'static str,
        path: &str,
        scope: &str,
        field: &str,
        valid: fn(&str) -> bool,
    ) -> Result<Vec<String>, Error> {
        let body = self
            .small_body(step, path, scope, None, MAX_MANIFEST_BYTES)
            .await?
            .map_err(|max| Error::Registry {
                reference: text(self.reference),
                step,
                detail: format!("a page of the list is over {max} bytes"),
                transient: false,
                source: Box::new(RegistryText::new("the answer is too large")),
            })?;
        let json: Value = serde_json::from_slice(&body).map_err(|e| Error::Registry {
            reference: text(self.reference),
            step,
            detail: text(&format!("the answer is not JSON: {e}")),
            transient: false,
            source: Box::new(RegistryText::new(&e.to_string())),
        })?;
        Ok(json
            .get(field)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| valid(s))
            .map(str::to_owned)
            .collect())
    }

    /// A page of `repository`'s tags: at most `n`, after `last`.
    pub(crate) async fn tags(
        &self,
        repository: &str,
        n: usize,
        last: Option<&str>,
    ) -> Result<Vec<String>, Error> {
        let mut path = format!("/v2/{repository}/tags/list?n={n}");
        if let Some(last) = last {
            path.push_str(&format!("&last={last}"));
        }
        self.page(
            "listing tags",
            &path,
            &format!("repository:{repository}:pull"),
            "tags",
            is_tag,
        )
        .await
    }

    /// A page of the registry's repositories: at most `n`, after `last`.
    pub(crate) async fn catalog(&self, n: usize, last: Option<&str>) -> Result<Vec<String>, Error> {
        let mut path = format!("/v2/_catalog?n={n}");
        if let Some(last) = last {
            path.push_str(&format!("&last={last}"));
        }
        self.page(
            "listing the registry's repositories",
            &path,
            "registry:catalog:*",
            "repositories",
            is_repository,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn registry_text_loses_control_characters_and_is_capped() {
        assert_eq!(text(" a\u{1b}[31mb\r\n\tc\u{0}\n"), "a[31mb c");
        let long = text(&"x".repeat(1 << 20));
        assert_eq!(long.chars().count(), MAX_TEXT_CHARS + 1);
        let words = text(&"ab ".repeat(1 << 20));
        assert_eq!(words.chars().count(), MAX_TEXT_CHARS + 1, "{words}");
        assert!(long.ends_with('…'));
    }

    #[test]
    fn challenges_are_read_bearer_first() {
        let mut h = HeaderMap::new();
        h.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"x\""),
        );
        h.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_static(
                "Bearer realm=\"https://auth.example/token\",service=\"reg, \\\"x\\\"\",scope=\"repository:a:pull\"",
            ),
        );
        assert_eq!(
            challenge(&h),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".to_owned(),
                service: Some("reg, \"x\"".to_owned()),
            })
        );
        let mut h = HeaderMap::new();
        h.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("basic realm=testenv"),
        );
        assert_eq!(challenge(&h), Some(Challenge::Basic));
        let mut h = HeaderMap::new();
        h.append(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer service=x"),
        );
        assert_eq!(challenge(&h), None, "a Bearer challenge without a realm");
    }

    #[test]
    fn realm_hosts_are_allowed_by_host_or_host_and_port() {
        let p = RegistryPolicy {
            realm_hosts: vec!["auth.docker.io".to_owned(), "10.0.0.1:5001".to_owned()],
            plain_http: vec!["10.0.0.1:5000".to_owned()],
        };
        assert!(p.allows_realm("auth.docker.io", None));
        assert!(p.allows_realm("AUTH.docker.io", Some(8443)));
        assert!(p.allows_realm("10.0.0.1", Some(5001)));
        assert!(!p.allows_realm("10.0.0.1", Some(5002)));
        assert!(!p.allows_realm("evil.docker.io", None));
        assert!(p.allows_plain_http("10.0.0.1:5000"));
        assert!(!p.allows_plain_http("10.0.0.1"));
        assert!(!RegistryPolicy::default().allows_realm("auth.docker.io", None));
    }

    #[test]
    fn tags_and_repositories_from_a_registry_are_checked() {
        assert!(is_tag("v1.0.0") && is_tag("latest") && is_tag("_x"));
        assert!(!is_tag("") && !is_tag(".x") && !is_tag("a b") && !is_tag(&"a".repeat(129)));
        assert!(is_repository("a/b-c/d_e.f"));
        assert!(!is_repository("A/b") && !is_repository("a//b") && !is_repository("a\u{1}"));
    }
}
