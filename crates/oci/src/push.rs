//! Pushing an image to a registry: the OCI distribution API's uploads
//! (`HEAD` a blob, `POST` then one `PUT` per blob, `PUT` the manifest),
//! spoken through the registry client pulls use ([`crate::registry`]), so
//! credentials go where they go for a pull and nowhere else.

use reqwest::{
    Method, StatusCode, Url,
    header::{CONTENT_TYPE, LOCATION},
};

use crate::{
    Digest, Error, Image,
    guard::unwinding,
    image::{INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE},
    registry::{
        Auth, RegistryPolicy, Session, TIMEOUT, Tls,
        http::{Transport, upload_client},
    },
    text::{RegistryText, text},
};

/// What a push did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest digest: `<repository>@<digest>` pulls exactly this image.
    pub digest: Digest,
    /// Blobs (layers and config) uploaded.
    pub uploaded: usize,
    /// Blobs the registry already had, so were not sent again.
    pub skipped: usize,
    /// Bytes uploaded.
    pub bytes: u64,
}

impl Image {
    /// Pushes the image to `reference` (`host[:port]/repository:tag`): every
    /// layer and the config the registry does not already have, then the
    /// manifest, byte for byte as [`Image::serialize`] makes it (so the digest
    /// the registry reports is [`Pushed::digest`]). A registry that wants
    /// credentials it was not given, or refuses the ones it was given, fails
    /// with [`Error::Unauthorized`]; one that asks for them to go elsewhere
    /// than the registry (or in the clear) with [`Error::Untrusted`]; any
    /// other failure is [`Error::Push`] naming the step.
    ///
    /// A panic while pushing becomes [`Error::Crashed`] naming the
    /// registry.
    pub async fn push(&self, reference: &str, auth: &Auth, tls: &Tls) -> Result<Pushed, Error> {
        self.push_within(reference, auth, tls, &RegistryPolicy::default())
            .await
    }

    /// [`Image::push`], with credentials also going where `policy` allows
    /// (a token service on another host, such as Docker Hub's).
    pub async fn push_within(
        &self,
        reference: &str,
        auth: &Auth,
        tls: &Tls,
        policy: &RegistryPolicy,
    ) -> Result<Pushed, Error> {
        unwinding(
            reference,
            "pushing",
            self.push_unguarded(reference, auth, tls, policy),
        )
        .await
    }

    async fn push_unguarded(
        &self,
        reference: &str,
        auth: &Auth,
        tls: &Tls,
        policy: &RegistryPolicy,
    ) -> Result<Pushed, Error> {
        let image = crate::reference::parse(reference)?;
        let to = Uploads::new(reference, &image, auth, tls, policy)?;
        to.authenticate().await?;
        let s = self.serialize()?;
        let mut blobs: Vec<(&Digest, &[u8])> = self
            .layers()
            .iter()
            .map(|l| (l.digest(), l.blob()))
            .collect();
        blobs.push((&s.config_digest, &s.config));
        let mut pushed = Pushed {
            digest: s.digest.clone(),
            uploaded: 0,
            skipped: 0,
            bytes: 0,
        };
        for (digest, bytes) in blobs {
            if to.has_blob(digest).await? {
                pushed.skipped += 1;
                continue;
            }
            to.upload_blob(digest, bytes).await?;
            pushed.uploaded += 1;
            pushed.bytes += bytes.len() as u64;
        }
        to.put_manifest(s.manifest, MANIFEST_MEDIA_TYPE, "uploading the manifest")
            .await?;
        Ok(pushed)
    }
}

/// One push's conversation with the registry: the repository, the scope
/// its token is asked for, and the client blobs are uploaded with.
struct Uploads<'a> {
    session: Session<'a>,
    /// Uploads wait for their answer as long as it takes.
    upload: reqwest::Client,
    repository: String,
    /// Where the manifest goes: the reference's digest, else its tag.
    tag: String,
    scope: String,
}

impl<'a> Uploads<'a> {
    fn new(
        reference: &'a str,
        image: &oci_spec::distribution::Reference,
        auth: &'a Auth,
        tls: &Tls,
        policy: &'a RegistryPolicy,
    ) -> Result<Self, Error> {
        let fail = |e: reqwest::Error| Error::Push {
            reference: text(reference),
            step: "setting up the HTTP client",
            source: Box::new(RegistryText::new(&e.to_string())),
        };
        let repository = image.repository().to_owned();
        Ok(Self {
            session: Session::new(
                reference,
                image.resolve_registry(),
                auth,
                &Transport::new(tls),
                policy,
            )?,
            upload: upload_client(tls).map_err(fail)?,
            scope: format!("repository:{repository}:pull,push"),
            tag: image
                .digest()
                .or(image.tag())
                .unwrap_or("latest")
                .to_owned(),
            repository,
        })
    }

    /// [`Error::Push`] for a failure at `step` (refusals of credentials,
    /// and what the operator must allow, stay what they are).
    fn fail(&self, step: &'static str) -> impl Fn(Error) -> Error + '_ {
        move |e| {
            let said = match e {
                Error::Registry {
                    step: inner,
                    detail,
                    ..
                } if inner != step => format!("{inner}: {detail}"),
                Error::Registry { detail, .. } => detail,
                Error::Unreachable {
                    registry, reason, ..
                } => format!("registry {registry}: {reason}"),
                Error::NotFound { .. } => "the registry has no such repository".to_owned(),
                other => return other,
            };
            Error::Push {
                reference: text(self.session.reference()),
                step,
                source: Box::new(RegistryText::new(&said)),
            }
        }
    }

    /// Sends `request` (within [`TIMEOUT`] unless `bounded` is false); a
    /// success answer, or the error it is.
    async fn send(
        &self,
        step: &'static str,
        request: reqwest::RequestBuilder,
        bounded: bool,
    ) -> Result<reqwest::Response, Error> {
        let sent = self.session.send(step, &self.scope, request);
        let resp = if bounded {
            tokio::time::timeout(TIMEOUT, sent)
                .await
                .map_err(|_| self.session.timed_out())
                .and_then(|r| r)
        } else {
            sent.await
        }
        .map_err(self.fail(step))?;
        Ok(resp)
    }

    /// Asks the registry how to authenticate, and for a token to push.
    async fn authenticate(&self) -> Result<(), Error> {
        let step = "authenticating";
        tokio::time::timeout(TIMEOUT, self.session.authenticate(step, &self.scope))
            .await
            .map_err(|_| self.session.timed_out())
            .and_then(|r| r)
            .map_err(self.fail(step))
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let to = self.session.endpoint();
        to.http.request(method, to.url(path))
    }

    /// Whether the registry has the blob `digest` already.
    async fn has_blob(&self, digest: &Digest) -> Result<bool, Error> {
        let step = "checking which blobs the registry has";
        let path = format!("/v2/{}/blobs/{digest}", self.repository);
        let resp = self
            .send(step, self.request(Method::HEAD, &path), true)
            .await?;
        match resp.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(self.session.endpoint().refused_push(step, resp).await),
        }
    }

    /// Uploads the blob `digest` in one request: `POST` starts an upload,
    /// `PUT` to where it answered (`Location`) sends the blob and ends it.
    async fn upload_blob(&self, digest: &Digest, bytes: &[u8]) -> Result<(), Error> {
        let step = "uploading a blob";
        let to = self.session.endpoint();
        let path = format!("/v2/{}/blobs/uploads/", self.repository);
        let resp = self
            .send(step, self.request(Method::POST, &path), true)
            .await?;
        if !resp.status().is_success() {
            return Err(to.refused_push(step, resp).await);
        }
        let mut url = self.location(step, &resp)?;
        url.query_pairs_mut().append_pair("digest", digest.as_str());
        let request = self
            .upload
            .put(url)
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec());
        let resp = self.send(step, request, false).await?;
        if !resp.status().is_success() {
            // The upload client has no read timeout: the error answer is
            // read within one.
            return Err(tokio::time::timeout(TIMEOUT, to.refused_push(step, resp))
                .await
                .unwrap_or_else(|_| self.fail(step)(self.session.timed_out())));
        }
        Ok(())
    }

    /// Where an upload continues: the answer's `Location`, resolved against
    /// the registry. It is the registry's to say, so it is data: one on
    /// another host, port or scheme is refused (the registry's credentials
    /// go only to the registry).
    fn location(&self, step: &'static str, resp: &reqwest::Response) -> Result<Url, Error> {
        let to = self.session.endpoint();
        let fail = |said: String| Error::Push {
            reference: text(self.session.reference()),
            step,
            source: Box::new(RegistryText::new(&said)),
        };
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| {
                fail(format!(
                    "the registry answered HTTP {} to starting an upload, without a Location                      saying where to send the blob",
                    resp.status()
                ))
            })?;
        let shown = text(location);
        let url = to
            .base
            .join(location)
            .map_err(|_| fail(format!("the upload location {shown:?} is not a URL")))?;
        let same_origin = url.scheme() == to.base.scheme()
            && url.host_str() == to.base.host_str()
            && url.port_or_known_default() == to.base.port_or_known_default();
        if !same_origin {
            return Err(fail(format!(
                "the registry {} named an upload location on another host, port or scheme                  ({shown}); the registry's credentials go only to the registry itself, so                  nothing was sent there",
                to.registry
            )));
        }
        Ok(url)
    }

    /// `PUT`s `manifest` (an image manifest or an index, of `media_type`)
    /// at the reference's tag, byte for byte.
    async fn put_manifest(
        &self,
        manifest: Vec<u8>,
        media_type: &'static str,
        step: &'static str,
    ) -> Result<(), Error> {
        let path = format!("/v2/{}/manifests/{}", self.repository, self.tag);
        let request = self
            .request(Method::PUT, &path)
            .header(CONTENT_TYPE, media_type)
            .body(manifest);
        let resp = self.send(step, request, true).await?;
        if !resp.status().is_success() {
            return Err(self.session.endpoint().refused_push(step, resp).await);
        }
        Ok(())
    }
}

/// One image of an image index: a manifest already in the repository and
/// the platform it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// The image's manifest digest.
    pub digest: Digest,
    /// The manifest's size in bytes.
    pub size: u64,
    /// Operating system, as Go spells it (`linux`).
    pub os: String,
    /// CPU architecture, as Go spells it (`amd64`, `arm64`).
    pub architecture: String,
}

/// Pushes an image index (a multi-platform image) naming `platforms`,
/// whose manifests must already be in `reference`'s repository. Returns the
/// index's digest.
pub async fn push_index(
    reference: &str,
    platforms: &[Platform],
    auth: &Auth,
    tls: &Tls,
) -> Result<Digest, Error> {
    unwinding(
        reference,
        "pushing an index",
        push_index_unguarded(reference, platforms, auth, tls),
    )
    .await
}

async fn push_index_unguarded(
    reference: &str,
    platforms: &[Platform],
    auth: &Auth,
    tls: &Tls,
) -> Result<Digest, Error> {
    let image = crate::reference::parse(reference)?;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": platforms.iter().map(|p| serde_json::json!({
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": p.digest.as_str(),
            "size": p.size,
            "platform": {"os": p.os, "architecture": p.architecture},
        })).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec(&index).map_err(Error::Json)?;
    let policy = RegistryPolicy::default();
    let to = Uploads::new(reference, &image, auth, tls, &policy)?;
    to.authenticate().await?;
    let digest = Digest::of(&bytes);
    to.put_manifest(bytes, INDEX_MEDIA_TYPE, "uploading the index")
        .await?;
    Ok(digest)
}

#[cfg(test)]
#[path = "push_tests.rs"]
mod tests;
