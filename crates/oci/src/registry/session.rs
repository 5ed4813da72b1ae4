//! One conversation with a registry for one reference: requests (GETs for
//! pulls, any method for pushes) that carry what the registry's challenge
//! asked for ([`super::token`]), bounded answers, manifests and blobs.

use reqwest::{
    StatusCode,
    header::{ACCEPT, AUTHORIZATION},
};

use super::{
    Auth, RegistryPolicy, TIMEOUT,
    http::{Endpoint, Transport, read_prefix},
    token::Credentials,
};
use crate::{Error, text::text};

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

/// A conversation with one registry for one reference: tokens are asked
/// for when the registry challenges, kept per scope for the session.
pub(crate) struct Session<'a> {
    to: Endpoint<'a>,
    credentials: Credentials<'a>,
}

impl<'a> Session<'a> {
    /// A session with `registry` (`host[:port]`), reading `reference`: over
    /// https, or plain http when `transport` says so or the policy allows
    /// it for this registry.
    pub(crate) fn new(
        reference: &'a str,
        registry: &str,
        auth: &'a Auth,
        transport: &Transport,
        policy: &'a RegistryPolicy,
    ) -> Result<Self, Error> {
        Ok(Self {
            to: Endpoint::new(
                reference,
                registry,
                *auth != Auth::Anonymous,
                transport,
                policy,
            )?,
            credentials: Credentials::new(auth, policy),
        })
    }

    /// A whole request (and its body) that took longer than [`TIMEOUT`].
    pub(crate) fn timed_out(&self) -> Error {
        self.to.timed_out()
    }

    /// A request that failed before an answer (or while reading it).
    pub(crate) fn transport(&self, step: &'static str, e: &reqwest::Error) -> Error {
        self.to.transport(step, e)
    }

    /// An answer that is not a success: what it says, classified.
    pub(crate) async fn refused(&self, step: &'static str, resp: reqwest::Response) -> Error {
        self.to.refused(step, resp).await
    }

    /// The reference being read (for messages).
    pub(crate) fn reference(&self) -> &str {
        self.to.reference
    }

    /// GETs `path` for `scope`: with what the registry's challenge asked
    /// for (see [`Credentials::ping`]), and when the request itself is
    /// challenged, once more with what that challenge asks for.
    pub(crate) async fn get(
        &self,
        step: &'static str,
        path: &str,
        scope: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, Error> {
        let mut request = self.to.http.get(self.to.url(path));
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        self.send(step, scope, request).await
    }

    /// Sends `request` (any method, to the registry's own host) for
    /// `scope`: with what the registry's challenge asked for (see
    /// [`Credentials::ping`]), and when the request itself is challenged,
    /// once more with what that challenge asks for (its body, held in
    /// memory, sent again).
    pub(crate) async fn send(
        &self,
        step: &'static str,
        scope: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Error> {
        self.credentials.ping(&self.to, step, scope).await?;
        let mut challenged = false;
        loop {
            let mut attempt = request.try_clone().ok_or_else(|| Error::Registry {
                reference: text(self.to.reference),
                step,
                detail: "the request's body cannot be sent again".to_owned(),
                transient: false,
                source: "a streamed request body".into(),
            })?;
            if let Some(authorization) = self.credentials.authorization(scope) {
                attempt = attempt.header(AUTHORIZATION, authorization);
            }
            let resp = attempt.send().await.map_err(|e| self.transport(step, &e))?;
            if resp.status() != StatusCode::UNAUTHORIZED || challenged {
                return Ok(resp);
            }
            challenged = true;
            if !self
                .credentials
                .authorize(&self.to, step, scope, resp.headers())
                .await?
            {
                return Ok(resp);
            }
        }
    }

    /// Asks the registry how to authenticate for `scope`, and gets what it
    /// asks for, before the first request (see [`Credentials::ping`]).
    pub(crate) async fn authenticate(&self, step: &'static str, scope: &str) -> Result<(), Error> {
        self.credentials.ping(&self.to, step, scope).await
    }

    /// The registry this session speaks to.
    pub(crate) fn endpoint(&self) -> &Endpoint<'a> {
        &self.to
    }

    /// A success answer's body, at most `max` bytes (more is `Err(n)` with
    /// the bound); the whole request within [`TIMEOUT`].
    pub(crate) async fn small_body(
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
                self.to.reference,
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
}
