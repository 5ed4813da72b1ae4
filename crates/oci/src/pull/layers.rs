//! Reading a package's files out of its layers: each layer downloaded to
//! a temporary file in the cache directory (memory stays bounded), checked
//! against its digest, and unpacked off the async workers within the
//! [`Limits`].

use std::{
    collections::BTreeMap,
    io::{BufReader, Seek as _, Write as _},
    time::Duration,
};

use oci_spec::distribution::Reference;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{
    cache::Cache,
    manifest::{annotations_of, base_layer, layer_descriptors},
};
use crate::{
    Digest, Error, Limits,
    guard::off_workers,
    limits::over,
    registry::Session,
    text::text,
    unpack::{Found, Layer, Spent, layer_files},
};

/// The longest a layer's download may take as a whole (each read has
/// [`crate::registry::TIMEOUT`]): a registry trickling a byte every few seconds
/// does not hold a download for ever. 200 MiB in 10 minutes is 350 KB/s.
const MAX_DOWNLOAD_TIME: Duration = Duration::from_secs(600);

/// What [`Fetcher::pull_files`] read from an image.
#[derive(Debug, Default)]
pub struct Pulled {
    /// The layer the files came from (its digest), or "all layers".
    pub layer: String,
    /// The files asked for, by path (later layers win; whiteouts delete).
    pub files: BTreeMap<String, Vec<u8>>,
    /// The annotations of the chosen layer (the base layer), or of all
    /// layers merged.
    pub annotations: BTreeMap<String, String>,
}

/// Where layers are read from and within what: one session with the
/// registry, for one reference.
pub(crate) struct Layers<'a> {
    pub(crate) session: &'a Session<'a>,
    pub(crate) reference: &'a str,
    pub(crate) limits: &'a Limits,
    /// Where layers are downloaded to.
    pub(crate) cache: &'a Cache,
}

impl Layers<'_> {
    /// The files `wanted` picks from the package layers of `manifest`.
    pub(crate) async fn read(
        &self,
        image: &Reference,
        manifest: &Value,
        wanted: fn(&str) -> bool,
    ) -> Result<Pulled, Error> {
        let reference = self.reference;
        let layers = layer_descriptors(manifest);
        if layers.is_empty() {
            return Err(Error::invalid(
                reference,
                "manifest",
                "the image has no layers; a package has one holding its files",
            ));
        }
        let base = base_layer(layers);
        let chosen: Vec<&Value> = match base {
            Some(b) => vec![b],
            None => layers.iter().collect(),
        };
        let mut pulled = Pulled {
            layer: base
                .and_then(|b| b.get("digest"))
                .and_then(Value::as_str)
                .map(text)
                .unwrap_or_else(|| "all layers".to_owned()),
            ..Pulled::default()
        };
        let mut spent = Spent::default();
        for descriptor in chosen {
            let field = |k: &str| {
                descriptor
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let Some(layer_digest) = Digest::parse(field("digest")) else {
                return Err(Error::invalid(
                    reference,
                    "manifest",
                    format!(
                        "a layer has the digest {:?}; only sha256 digests are read",
                        text(field("digest"))
                    ),
                ));
            };
            let layer = layer_digest.to_string();
            let size = descriptor.get("size").and_then(Value::as_u64).unwrap_or(0);
            self.check_layer_size(&layer, size)?;
            let file = self.download(image.repository(), &layer_digest).await?;
            let compressed = file.metadata().map(|m| m.len()).unwrap_or(size);
            let (owned, media_type) = (reference.to_owned(), text(field("mediaType")));
            let (limits, at) = (self.limits.clone(), layer.clone());
            let (found, back) = off_workers(reference, "unpacking a layer", move || {
                let layer = Layer {
                    reference: &owned,
                    layer: &at,
                    media_type: &media_type,
                    compressed,
                    limits: &limits,
                };
                let found = layer_files(&layer, BufReader::new(file), wanted, &mut spent)?;
                Ok((found, spent))
            })
            .await?;
            spent = back;
            for (path, found) in found {
                match found {
                    Found::File(bytes) => {
                        pulled.files.insert(path, bytes);
                    }
                    Found::Deleted => {
                        pulled.files.remove(&path);
                    }
                }
            }
            pulled.annotations.extend(annotations_of(descriptor));
            if base.is_none() && pulled.files.keys().any(|p| wanted(p)) {
                pulled.layer.clone_from(&layer);
            }
        }
        Ok(pulled)
    }

    /// Refuses a layer over [`Limits::layer_bytes`].
    fn check_layer_size(&self, layer: &str, size: u64) -> Result<(), Error> {
        let reference = self.reference;
        let bound = self.limits.layer_bytes;
        if size > bound {
            return Err(Error::invalid(
                reference,
                layer,
                over(
                    &format!("the layer ({size} bytes)"),
                    "compressed bytes per layer",
                    bound,
                ),
            ));
        }
        Ok(())
    }

    /// Downloads a blob into a temporary file (memory stays bounded),
    /// refusing more than [`Limits::layer_bytes`] and checking its digest.
    /// Returns the file, rewound.
    async fn download(&self, repository: &str, digest: &Digest) -> Result<std::fs::File, Error> {
        let (session, reference) = (self.session, self.reference);
        let layer = digest.as_str();
        let mut answer = session.blob(repository, layer).await?;
        if let Some(len) = answer.content_length() {
            self.check_layer_size(layer, len)?;
        }
        let local = |e: std::io::Error| Error::Read {
            path: format!(
                "a temporary file in {} for layer {layer}",
                self.cache.dir.display()
            ),
            source: e,
        };
        let mut file = self.cache.temp_file().map_err(local)?;
        let mut hash = Sha256::new();
        let mut total: u64 = 0;
        let deadline = tokio::time::Instant::now() + MAX_DOWNLOAD_TIME;
        let step = "downloading a layer";
        while let Some(chunk) = tokio::time::timeout_at(deadline, answer.chunk())
            .await
            .map_err(|_| session.timed_out())?
            .map_err(|e| session.transport(step, &e))?
        {
            total += chunk.len() as u64;
            self.check_layer_size(layer, total)?;
            hash.update(&chunk);
            file.write_all(&chunk).map_err(local)?;
        }
        if format!("sha256:{}", hex::encode(hash.finalize())) != layer {
            return Err(Error::invalid(
                reference,
                layer,
                "the layer does not match its digest",
            ));
        }
        file.rewind().map_err(local)?;
        Ok(file)
    }
}
