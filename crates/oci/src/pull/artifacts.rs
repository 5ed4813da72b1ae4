//! Artifacts attached to an image by tag, as cosign stores signatures and
//! attestations (`sha256-<hex>.sig`, `sha256-<hex>.att` in the image's own
//! repository): their layers read whole, each checked against its digest.
//! They are small; what a registry serves is bounded all the same.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{
    Fetcher,
    manifest::{annotations_of, layer_descriptors, manifest_json},
};
use crate::{Auth, Digest, Error, guard::unwinding};

/// The most layers of one artifact read (each signature is one).
pub const MAX_ARTIFACT_LAYERS: usize = 32;
/// The largest artifact layer read (a signature payload or an attestation
/// envelope is a few KiB).
pub const MAX_ARTIFACT_LAYER_BYTES: usize = 1024 * 1024;

/// One layer of an artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactLayer {
    /// Its media type.
    pub media_type: String,
    /// Its annotations (a cosign signature layer carries the signature in
    /// one).
    pub annotations: BTreeMap<String, String>,
    /// Its bytes, checked against its digest.
    pub body: Vec<u8>,
}

/// The tag cosign gives an artifact of the image at `digest`: `sha256-<hex>.<suffix>`.
pub fn cosign_tag(digest: &Digest, suffix: &str) -> String {
    format!("sha256-{}.{suffix}", digest.hex())
}

impl Fetcher {
    /// The layers of the artifact tagged `tag` in `reference`'s repository
    /// (at most [`MAX_ARTIFACT_LAYERS`], each at most
    /// [`MAX_ARTIFACT_LAYER_BYTES`]); `None` when there is no such tag.
    pub async fn artifact(
        &self,
        reference: &str,
        tag: &str,
        auth: &Auth,
    ) -> Result<Option<Vec<ArtifactLayer>>, Error> {
        unwinding(reference, "reading an attached artifact", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth)?;
            let repository = image.repository();
            let bytes = match session.manifest(repository, tag).await {
                Ok(b) => b,
                Err(Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let json = manifest_json(reference, &bytes)?;
            let layers = layer_descriptors(&json);
            if layers.len() > MAX_ARTIFACT_LAYERS {
                return Err(Error::invalid(
                    reference,
                    tag,
                    format!(
                        "{} layers; at most {MAX_ARTIFACT_LAYERS} are read",
                        layers.len()
                    ),
                ));
            }
            let mut out = Vec::with_capacity(layers.len());
            for descriptor in layers {
                let Some(digest) = descriptor
                    .get("digest")
                    .and_then(Value::as_str)
                    .and_then(Digest::parse)
                else {
                    return Err(Error::invalid(reference, tag, "a layer without a digest"));
                };
                let body = session
                    .small_body(
                        "reading an attached artifact",
                        &format!("/v2/{repository}/blobs/{}", digest.as_str()),
                        &format!("repository:{repository}:pull"),
                        None,
                        MAX_ARTIFACT_LAYER_BYTES,
                    )
                    .await?
                    .map_err(|max| {
                        Error::invalid(
                            reference,
                            digest.as_str(),
                            format!("an artifact layer over {max} bytes"),
                        )
                    })?;
                if Digest::of(&body) != digest {
                    return Err(Error::invalid(
                        reference,
                        digest.as_str(),
                        "the layer's bytes do not match its digest",
                    ));
                }
                out.push(ArtifactLayer {
                    media_type: descriptor
                        .get("mediaType")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    annotations: annotations_of(descriptor),
                    body,
                });
            }
            Ok(Some(out))
        })
        .await
    }
}
