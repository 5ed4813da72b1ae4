//! Authentication with a registry: its `WWW-Authenticate` challenge, the
//! token exchange it asks for, and where credentials may go (only to the
//! registry's own host, and a token service the operator allowed, never in
//! the clear unless allowed). Tokens are kept per scope for a session.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use base64::Engine as _;
use reqwest::{
    StatusCode, Url,
    header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE},
};
use serde_json::Value;

use super::{
    Auth, RegistryPolicy, TIMEOUT,
    http::{Endpoint, read_prefix},
};
use crate::{
    Error,
    text::{RegistryText, text},
};

/// The largest answer of a token service read: tokens are JWTs of a few
/// KB.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

/// The longest token used.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Where Basic credentials are kept (they serve every scope).
const EVERY_SCOPE: &str = "";

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

/// The credentials of a session and what they bought: the Authorization
/// header per scope ([`EVERY_SCOPE`] for Basic), and whether `/v2/` was
/// asked how to authenticate.
pub(crate) struct Credentials<'a> {
    auth: &'a Auth,
    policy: &'a RegistryPolicy,
    authorization: Mutex<HashMap<String, HeaderValue>>,
    pinged: AtomicBool,
}

impl<'a> Credentials<'a> {
    /// `auth`, to be sent where `policy` allows.
    pub(crate) fn new(auth: &'a Auth, policy: &'a RegistryPolicy) -> Self {
        Self {
            auth,
            policy,
            authorization: Mutex::new(HashMap::new()),
            pinged: AtomicBool::new(false),
        }
    }

    pub(crate) fn authorization(&self, scope: &str) -> Option<HeaderValue> {
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
    pub(crate) async fn ping(
        &self,
        to: &Endpoint<'_>,
        step: &'static str,
        scope: &str,
    ) -> Result<(), Error> {
        if self.pinged.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let resp = to
            .http
            .get(to.url("/v2/"))
            .send()
            .await
            .map_err(|e| to.transport(step, &e))?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            self.authorize(to, step, scope, resp.headers()).await?;
        }
        Ok(())
    }

    /// Gets what `headers`' challenge asks for; whether there is anything
    /// new to try.
    pub(crate) async fn authorize(
        &self,
        to: &Endpoint<'_>,
        step: &'static str,
        scope: &str,
        headers: &HeaderMap,
    ) -> Result<bool, Error> {
        match challenge(headers) {
            Some(Challenge::Bearer { realm, service }) => {
                let token = self
                    .token(to, step, &realm, service.as_deref(), scope)
                    .await?;
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
    fn check_realm(&self, to: &Endpoint<'_>, realm: &Url, shown: &str) -> Result<(), Error> {
        let host = realm.host_str().unwrap_or_default();
        let same_host = host.eq_ignore_ascii_case(to.base.host_str().unwrap_or_default())
            && realm.port_or_known_default() == to.base.port_or_known_default();
        let host_port = text(&match realm.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        });
        if !same_host && !self.policy.allows_realm(host, realm.port()) {
            return Err(to.untrusted(format!(
                "its token service (WWW-Authenticate realm {shown}) is on another host, \
                 {host_port}: the registry's credentials go only to the registry's own host, so \
                 none were sent; if {host_port} is this registry's token service, the operator \
                 must allow that realm host"
            )));
        }
        if realm.scheme() != "https" && !to.plain {
            return Err(to.untrusted(format!(
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
        to: &Endpoint<'_>,
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
                to.untrusted(format!(
                    "its token service (WWW-Authenticate realm {shown:?}) is not an http(s) URL"
                ))
            })?;
        let basic = self.basic();
        if basic.is_some() {
            self.check_realm(to, &url, &shown)?;
        }
        url.query_pairs_mut().append_pair("scope", scope);
        if let Some(service) = service {
            url.query_pairs_mut().append_pair("service", service);
        }
        let mut request = to.http.get(url);
        if let Some(basic) = basic {
            request = request.header(AUTHORIZATION, basic);
        }
        let step_token = "asking the registry's token service for a token";
        let bad = |what: &str| Error::Registry {
            reference: text(to.reference),
            step,
            detail: format!(
                "the token service {shown} of registry {} answered {what}",
                to.registry
            ),
            transient: false,
            source: Box::new(RegistryText::new(what)),
        };
        let answer = tokio::time::timeout(TIMEOUT, async {
            let mut resp = request
                .send()
                .await
                .map_err(|e| to.transport(step_token, &e))?;
            if !resp.status().is_success() {
                return Err(to.refused(step_token, resp).await);
            }
            let (body, more) = read_prefix(&mut resp, MAX_TOKEN_ANSWER_BYTES)
                .await
                .map_err(|e| to.transport(step_token, &e))?;
            if more {
                return Err(bad(&format!(
                    "more than {MAX_TOKEN_ANSWER_BYTES} bytes; a token answer is a small JSON \
                     object"
                )));
            }
            Ok(body)
        })
        .await
        .map_err(|_| to.timed_out())??;
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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
}
