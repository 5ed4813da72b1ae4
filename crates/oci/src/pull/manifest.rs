//! An image's manifest as a pull reads it: an index followed to its
//! linux/amd64 manifest, each checked against its digest, and which layer
//! holds the package (the one annotated `io.crossplane.xpkg: base`, else
//! every layer).

use std::collections::BTreeMap;

use oci_spec::distribution::Reference;
use serde_json::Value;

use crate::{Digest, Error, registry::Session, text::text, xpkg::BASE_ANNOTATION};

/// The linux/amd64 entry of an image index, or why there is none.
pub(crate) fn platform_manifest(reference: &str, index: &Value) -> Result<Digest, Error> {
    let entries = index
        .get("manifests")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut platforms = Vec::new();
    for e in entries {
        let field = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or("?");
        let (os, arch) = (field("/platform/os"), field("/platform/architecture"));
        if os == "linux"
            && arch == "amd64"
            && let Some(d) = e
                .get("digest")
                .and_then(Value::as_str)
                .and_then(Digest::parse)
        {
            return Ok(d);
        }
        platforms.push(text(&format!("{os}/{arch}")));
    }
    platforms.truncate(20);
    Err(Error::invalid(
        reference,
        "index",
        format!(
            "the image index has no linux/amd64 manifest (it has {})",
            if platforms.is_empty() {
                "none".to_owned()
            } else {
                platforms.join(", ")
            }
        ),
    ))
}

pub(crate) fn is_index(manifest: &Value) -> bool {
    manifest.get("manifests").is_some()
}

pub(crate) fn manifest_json(reference: &str, bytes: &[u8]) -> Result<Value, Error> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::invalid(
            reference,
            "manifest",
            format!("the manifest is not JSON: {e}"),
        )
    })
}

/// The tag (else `latest`) or digest a reference names.
pub(crate) fn tag_or_digest(image: &Reference) -> &str {
    image.digest().or(image.tag()).unwrap_or("latest")
}

/// The image manifest at `digest` in `image`'s repository (an index is
/// followed to its linux/amd64 manifest), checked against its digest.
pub(crate) async fn image_manifest(
    session: &Session<'_>,
    reference: &str,
    image: &Reference,
    digest: &Digest,
) -> Result<Value, Error> {
    let repository = image.repository();
    let bytes = session.manifest(repository, digest.as_str()).await?;
    if Digest::of(&bytes) != *digest {
        return Err(Error::invalid(
            reference,
            "manifest",
            format!("the registry's manifest does not match {digest}"),
        ));
    }
    let json = manifest_json(reference, &bytes)?;
    if !is_index(&json) {
        return Ok(json);
    }
    let platform = platform_manifest(reference, &json)?;
    let bytes = session.manifest(repository, platform.as_str()).await?;
    if Digest::of(&bytes) != platform {
        return Err(Error::invalid(
            reference,
            "manifest",
            format!("the registry's manifest does not match {platform}"),
        ));
    }
    manifest_json(reference, &bytes)
}

pub(crate) fn layer_descriptors(json: &Value) -> &[Value] {
    json.get("layers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

pub(crate) fn base_layer(layers: &[Value]) -> Option<&Value> {
    layers.iter().find(|l| {
        l.get("annotations")
            .and_then(|a| a.get(BASE_ANNOTATION.0))
            .and_then(Value::as_str)
            == Some(BASE_ANNOTATION.1)
    })
}

pub(crate) fn annotations_of(descriptor: &Value) -> BTreeMap<String, String> {
    descriptor
        .get("annotations")
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// What an image's manifest says about its package layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerInfo {
    /// The annotations of the package layer (the one annotated
    /// `io.crossplane.xpkg: base`, else every layer's, merged in order).
    pub annotations: BTreeMap<String, String>,
    /// Whether a layer is annotated `io.crossplane.xpkg: base`.
    pub has_base: bool,
    /// The bytes a pull of its files would download (the base layer, else
    /// every layer).
    pub size: u64,
    /// How many layers the image has.
    pub layers: usize,
}

impl LayerInfo {
    /// Whether the image carries a runtime beside its package: layers
    /// other than the one annotated `io.crossplane.xpkg: base`, as an
    /// image built with an embedded runtime image has (the package image
    /// is then the runtime). A package of one layer holds files only.
    pub fn carries_runtime(&self) -> bool {
        self.has_base && self.layers > 1
    }
}

impl LayerInfo {
    /// What the image manifest `json` says about its package layer.
    pub(crate) fn of(json: &Value) -> Self {
        let layers = layer_descriptors(json);
        let size = |l: &Value| l.get("size").and_then(Value::as_u64).unwrap_or(0);
        match base_layer(layers) {
            Some(b) => LayerInfo {
                annotations: annotations_of(b),
                has_base: true,
                size: size(b),
                layers: layers.len(),
            },
            None => LayerInfo {
                annotations: layers.iter().flat_map(annotations_of).collect(),
                has_base: false,
                size: layers.iter().map(size).sum(),
                layers: layers.len(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn an_index_without_linux_amd64_names_the_reference_and_what_it_has() {
        let index = json!({"manifests": [
            {"digest": "sha256:1", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:2", "platform": {"os": "windows", "architecture": "amd64"}},
        ]});
        let f = platform_manifest("reg/x:v1", &index)
            .unwrap_err()
            .to_string();
        assert_eq!(
            f,
            "package reg/x:v1, layer index: the image index has no linux/amd64 manifest (it has \
             linux/arm64, windows/amd64)"
        );
    }
}
