//! Pulling Crossplane packages from registries: a tag is resolved to a
//! manifest digest, the package is pulled by digest (never by tag), its
//! `package.yaml` is found, checked with [`crate::xpkg::parse`] and kept in a
//! size-bounded directory keyed by digest, so a digest is downloaded once.
//!
//! Everything a registry serves is data (`crate::registry` for the
//! requests, [`crate::limits`] for the bounds): layers are downloaded to
//! temporary files in the cache directory (the only writable place of the
//! shipped pod), unpacked and parsed off the async workers, within
//! [`Limits`]; a panic on the way is an error, not a crashed process.
//!
//! Every request has a deadline ([`crate::push::TIMEOUT`] to connect and per
//! read, and the same for each manifest or tag list request as a whole): a
//! registry that accepts connections and never answers fails quickly, as
//! [`Error::Unreachable`], which [`Error::is_transient`] tells apart from a
//! package that is wrong.

use std::{
    collections::BTreeMap,
    io::{BufReader, Seek as _, Write as _},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use base64::Engine as _;
use oci_client::Reference;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

pub use crate::reference::{registry_of, repository_of, tag_of};
use crate::{
    Auth, Digest, Error, Limits, RegistryPolicy, Tls,
    limits::{off_workers, over, unwinding},
    registry::Session,
    stack,
    unpack::{Found, Layer, Spent, layer_files},
    xpkg::{self, BASE_ANNOTATION, Contents, PACKAGE_FILE},
};

/// Tags asked for per page of a tag list.
const TAGS_PER_PAGE: usize = 1000;

/// The most pages of tags read (a registry that ignores `last` would
/// otherwise be asked forever).
const MAX_TAG_PAGES: usize = 100;

/// The first line of a cache file: the layer package.yaml came from.
const CACHE_LAYER_PREFIX: &str = "# layer: ";

/// The longest a layer's download may take as a whole (each read has
/// [`crate::push::TIMEOUT`]): a registry trickling a byte every few seconds
/// does not hold a download for ever. 200 MiB in 10 minutes is 350 KB/s.
const MAX_DOWNLOAD_TIME: Duration = Duration::from_secs(600);

/// A package read from a registry.
#[derive(Clone, Debug)]
pub struct Package {
    /// The reference it was read by.
    pub reference: String,
    /// Its manifest digest.
    pub digest: Digest,
    /// What it holds.
    pub contents: Contents,
}

/// A stack package read from a registry.
#[derive(Clone, Debug)]
pub struct StackPackage {
    /// The reference it was read by.
    pub reference: String,
    /// Its manifest digest.
    pub digest: Digest,
    /// What it holds.
    pub stack: stack::Stack,
}

/// Pulls packages, keeping their `package.yaml` by digest in a
/// size-bounded directory.
#[derive(Debug)]
pub struct Fetcher {
    cache: Cache,
    limits: Limits,
    policy: RegistryPolicy,
}

/// The credentials for `registry` (`host[:port]`) in a
/// `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`:
/// `{"auths": {"host": {"username", "password"} or {"auth":
/// base64("user:password")}}}`. Keys may be written as URLs
/// (`https://host/v2/`); the host must match exactly.
pub fn auth_from_docker_config(json: &[u8], registry: &str) -> Option<Auth> {
    let config: Value = serde_json::from_slice(json).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let host = |k: &str| {
        let k = k
            .strip_prefix("https://")
            .or_else(|| k.strip_prefix("http://"))
            .unwrap_or(k);
        k.split('/').next().unwrap_or_default().to_owned()
    };
    let entry = auths.iter().find(|(k, _)| host(k) == registry)?.1;
    let field = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let (Some(username), Some(password)) = (field("username"), field("password")) {
        return Some(Auth::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        });
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(field("auth")?.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (username, password) = decoded.split_once(':')?;
    Some(Auth::Basic {
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

/// The linux/amd64 entry of an image index, or why there is none.
fn platform_manifest(reference: &str, index: &Value) -> Result<Digest, Error> {
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
        platforms.push(crate::registry::text(&format!("{os}/{arch}")));
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

fn is_index(manifest: &Value) -> bool {
    manifest.get("manifests").is_some()
}

fn manifest_json(reference: &str, bytes: &[u8]) -> Result<Value, Error> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::invalid(
            reference,
            "manifest",
            format!("the manifest is not JSON: {e}"),
        )
    })
}

/// The tag (else `latest`) or digest a reference names.
fn tag_or_digest(image: &Reference) -> &str {
    image.digest().or(image.tag()).unwrap_or("latest")
}

impl Fetcher {
    /// Packages cached in `cache_dir` (made when first written), which is
    /// kept under `max_cache_bytes` (the least recently used go first).
    /// Layers are downloaded to temporary files in `cache_dir` too: the one
    /// place the shipped pod may write. Default [`Limits`] and
    /// [`RegistryPolicy`].
    pub fn new(cache_dir: PathBuf, max_cache_bytes: u64) -> Self {
        Self {
            cache: Cache {
                dir: cache_dir,
                max: max_cache_bytes,
            },
            limits: Limits::default(),
            policy: RegistryPolicy::default(),
        }
    }

    /// Reads registries as `policy` allows (token services on other hosts,
    /// registries over plain HTTP).
    pub fn with_policy(mut self, policy: RegistryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Reads packages within `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// A session with `image`'s registry for `reference`.
    fn session<'a>(
        &'a self,
        reference: &'a str,
        image: &Reference,
        auth: &'a Auth,
        tls: &Tls,
    ) -> Result<Session<'a>, Error> {
        Session::new(reference, image.resolve_registry(), auth, tls, &self.policy)
    }

    /// The manifest digest `reference` (a tag or a digest) names now; for
    /// an image index, the digest of its linux/amd64 manifest (an index
    /// without one is [`Error::Invalid`], naming the platforms it has).
    pub async fn resolve(&self, reference: &str, auth: &Auth, tls: &Tls) -> Result<Digest, Error> {
        unwinding(reference, "resolving the reference", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth, tls)?;
            let bytes = session
                .manifest(image.repository(), tag_or_digest(&image))
                .await?;
            let json = manifest_json(reference, &bytes)?;
            if is_index(&json) {
                return platform_manifest(reference, &json);
            }
            Ok(Digest::of(&bytes))
        })
        .await
    }

    /// The tags of `repository` (`host[:port]/repository`, a tag or digest
    /// is ignored), every page of them.
    pub async fn tags(
        &self,
        repository: &str,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Vec<String>, Error> {
        unwinding(repository, "listing tags", async {
            let image = crate::reference::parse(&repository_of(repository))?;
            let session = self.session(repository, &image, auth, tls)?;
            let (session, name) = (&session, image.repository());
            all_pages(
                |last| async move { session.tags(name, TAGS_PER_PAGE, last.as_deref()).await },
            )
            .await
        })
        .await
    }

    /// The repositories of `registry` (`host[:port]`), every page of them
    /// (the registry's catalog).
    pub async fn catalog(
        &self,
        registry: &str,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Vec<String>, Error> {
        unwinding(registry, "listing the registry's repositories", async {
            let image = crate::reference::parse(&format!("{registry}/catalog"))?;
            let session = self.session(registry, &image, auth, tls)?;
            let session = &session;
            all_pages(|last| async move { session.catalog(TAGS_PER_PAGE, last.as_deref()).await })
                .await
        })
        .await
    }

    /// The package at `digest` in `reference`'s repository: from the cache,
    /// else pulled (by digest), checked and cached. Unpacking and parsing
    /// run off the async workers.
    pub async fn fetch(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Package, Error> {
        unwinding(reference, "reading the package", async {
            let cache = self.cache.clone();
            let key = digest.clone();
            let hit = off_workers(reference, "reading the package cache", move || {
                Ok(cache.package(&key))
            })
            .await?;
            let (layer, yaml, fresh) = match hit {
                Some((layer, yaml)) => (layer, yaml, false),
                None => {
                    let (layer, yaml) = self.pull(reference, digest, auth, tls).await?;
                    (layer, yaml, true)
                }
            };
            let (cache, key, limits) = (self.cache.clone(), digest.clone(), self.limits.clone());
            let owned = reference.to_owned();
            let contents = off_workers(reference, "parsing package.yaml", move || {
                let contents = xpkg::parse_within(&owned, &layer, &yaml, &limits)?;
                // Checked before it is cached: a bad package is never kept.
                if fresh {
                    cache.store_package(&key, &layer, &yaml);
                }
                Ok(contents)
            })
            .await?;
            Ok(Package {
                reference: reference.to_owned(),
                digest: digest.clone(),
                contents,
            })
        })
        .await
    }

    /// The stack package (seed 001) at `digest` in `reference`'s
    /// repository: from the cache, else pulled (by digest), checked and
    /// cached. Its tag (when `reference` has one) gives app.yaml's version
    /// when it has none.
    pub async fn fetch_stack(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<StackPackage, Error> {
        unwinding(reference, "reading the stack", async {
            let cache = self.cache.clone();
            let key = digest.clone();
            let hit = off_workers(reference, "reading the package cache", move || {
                Ok(cache.stack(&key))
            })
            .await?;
            let (layer, files, fresh) = match hit {
                Some((layer, files)) => (layer, files, false),
                None => {
                    let pulled = self
                        .pull_files(reference, digest, auth, tls, stack::is_stack_file)
                        .await?;
                    (pulled.layer, pulled.files, true)
                }
            };
            let (cache, key, limits) = (self.cache.clone(), digest.clone(), self.limits.clone());
            let (owned, tag) = (reference.to_owned(), tag_of(reference));
            let stack = off_workers(reference, "parsing the stack", move || {
                let stack = stack::parse_within(&owned, &layer, &files, tag.as_deref(), &limits)?;
                if fresh {
                    cache.store_stack(&key, &layer, &files);
                }
                Ok(stack)
            })
            .await?;
            Ok(StackPackage {
                reference: reference.to_owned(),
                digest: digest.clone(),
                stack,
            })
        })
        .await
    }

    /// Pulls `repository@digest` and returns the layer package.yaml is in
    /// and its bytes.
    async fn pull(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<(String, Vec<u8>), Error> {
        let pulled = self
            .pull_files(reference, digest, auth, tls, is_package_file)
            .await?;
        let layer = pulled.layer;
        pulled
            .files
            .into_iter()
            .find(|(p, _)| p == PACKAGE_FILE)
            .map(|(_, yaml)| (layer.clone(), yaml))
            .ok_or_else(|| {
                Error::invalid(
                    reference,
                    &layer,
                    format!("no {PACKAGE_FILE} in the package"),
                )
            })
    }

    /// What the manifest of the image at `digest` says about its package
    /// layer: one manifest read (two for an index), no layer downloaded.
    pub async fn layer_info(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<LayerInfo, Error> {
        unwinding(reference, "reading the manifest", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth, tls)?;
            let json = image_manifest(&session, reference, &image, digest).await?;
            let layers = layer_descriptors(&json);
            let size = |l: &Value| l.get("size").and_then(Value::as_u64).unwrap_or(0);
            Ok(match base_layer(layers) {
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
            })
        })
        .await
    }

    /// Pulls `repository@digest` and reads the files `wanted` picks from
    /// its package layer (the one annotated `io.crossplane.xpkg: base`,
    /// else every layer in order), each layer checked against its digest
    /// and read within the [`Limits`].
    pub async fn pull_files(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
        wanted: fn(&str) -> bool,
    ) -> Result<Pulled, Error> {
        unwinding(reference, "pulling the package", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth, tls)?;
            let json = image_manifest(&session, reference, &image, digest).await?;
            self.read_layers(&session, reference, &image, &json, wanted)
                .await
        })
        .await
    }

    /// The files `wanted` picks from the package layers of `manifest`.
    async fn read_layers(
        &self,
        session: &Session<'_>,
        reference: &str,
        image: &Reference,
        manifest: &Value,
        wanted: fn(&str) -> bool,
    ) -> Result<Pulled, Error> {
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
                .map(crate::registry::text)
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
                        crate::registry::text(field("digest"))
                    ),
                ));
            };
            let layer = layer_digest.to_string();
            let size = descriptor.get("size").and_then(Value::as_u64).unwrap_or(0);
            self.check_layer_size(reference, &layer, size)?;
            let file = self
                .download(session, image.repository(), reference, &layer_digest)
                .await?;
            let compressed = file.metadata().map(|m| m.len()).unwrap_or(size);
            let (owned, media_type) = (
                reference.to_owned(),
                crate::registry::text(field("mediaType")),
            );
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
    fn check_layer_size(&self, reference: &str, layer: &str, size: u64) -> Result<(), Error> {
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

    /// An anonymous temporary file in the cache directory (made if
    /// missing): the shipped pod's root filesystem is read-only, and its
    /// cache directory (an emptyDir) the one place it may write.
    fn temp_file(&self) -> std::io::Result<std::fs::File> {
        std::fs::create_dir_all(&self.cache.dir)?;
        tempfile::tempfile_in(&self.cache.dir)
    }

    /// Downloads a blob into a temporary file (memory stays bounded),
    /// refusing more than [`Limits::layer_bytes`] and checking its digest.
    /// Returns the file, rewound.
    async fn download(
        &self,
        session: &Session<'_>,
        repository: &str,
        reference: &str,
        digest: &Digest,
    ) -> Result<std::fs::File, Error> {
        let layer = digest.as_str();
        let mut answer = session.blob(repository, layer).await?;
        if let Some(len) = answer.content_length() {
            self.check_layer_size(reference, layer, len)?;
        }
        let local = |e: std::io::Error| Error::Read {
            path: format!(
                "a temporary file in {} for layer {layer}",
                self.cache.dir.display()
            ),
            source: e,
        };
        let mut file = self.temp_file().map_err(local)?;
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
            self.check_layer_size(reference, layer, total)?;
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

fn is_package_file(path: &str) -> bool {
    path == PACKAGE_FILE
}

/// The package cache: package.yaml (and stacks' files) by digest, in a
/// directory kept under `max` bytes.
#[derive(Clone, Debug)]
struct Cache {
    dir: PathBuf,
    max: u64,
}

impl Cache {
    fn package_file(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}.yaml", digest.hex()))
    }

    fn stack_file(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}.stack.json", digest.hex()))
    }

    /// The layer and package.yaml cached for `digest`, marking the file
    /// used (trimming removes the least recently used first).
    fn package(&self, digest: &Digest) -> Option<(String, Vec<u8>)> {
        read_cached(&self.package_file(digest), |bytes| {
            let text = std::str::from_utf8(bytes).ok()?;
            let (first, yaml) = text.split_once('\n')?;
            let layer = first.strip_prefix(CACHE_LAYER_PREFIX)?.trim().to_owned();
            Some((layer, yaml.as_bytes().to_vec()))
        })
    }

    /// The layer and `.registry/` files cached for `digest`, marking the
    /// file used.
    fn stack(&self, digest: &Digest) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
        read_cached(&self.stack_file(digest), |bytes| {
            let json: Value = serde_json::from_slice(bytes).ok()?;
            let layer = json.get("layer")?.as_str()?.to_owned();
            let mut files = BTreeMap::new();
            for (k, v) in json.get("files")?.as_object()? {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str()?)
                    .ok()?;
                files.insert(k.clone(), bytes);
            }
            Some((layer, files))
        })
    }

    /// Writes a checked package.yaml to the cache.
    fn store_package(&self, digest: &Digest, layer: &str, yaml: &[u8]) {
        self.write(
            &self.package_file(digest),
            &[format!("{CACHE_LAYER_PREFIX}{layer}\n").as_bytes(), yaml],
        );
    }

    fn store_stack(&self, digest: &Digest, layer: &str, files: &BTreeMap<String, Vec<u8>>) {
        let encoded: serde_json::Map<String, Value> = files
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
                )
            })
            .collect();
        let json = serde_json::json!({"layer": layer, "files": encoded});
        self.write(&self.stack_file(digest), &[json.to_string().as_bytes()]);
    }

    /// Writes `parts` as the cache file `path` (atomically: a temporary
    /// file renamed) and trims the cache. A cache that cannot be written
    /// only costs a pull later.
    fn write(&self, path: &Path, parts: &[&[u8]]) {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let mut tmp = tempfile::Builder::new()
                .prefix(".tmp-")
                .tempfile_in(&self.dir)?;
            for part in parts {
                tmp.write_all(part)?;
            }
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            trim(&self.dir, self.max);
        }
    }
}

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

/// The image manifest at `digest` in `image`'s repository (an index is
/// followed to its linux/amd64 manifest), checked against its digest.
async fn image_manifest(
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

fn layer_descriptors(json: &Value) -> &[Value] {
    json.get("layers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn base_layer(layers: &[Value]) -> Option<&Value> {
    layers.iter().find(|l| {
        l.get("annotations")
            .and_then(|a| a.get(BASE_ANNOTATION.0))
            .and_then(Value::as_str)
            == Some(BASE_ANNOTATION.1)
    })
}

fn annotations_of(descriptor: &Value) -> BTreeMap<String, String> {
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

/// Every page of a paginated list (tags, the catalog): `page(last)` reads
/// the page after `last`. At most [`MAX_TAG_PAGES`] pages are read, and a
/// registry that ignores `last` (sending the same page again) ends it.
async fn all_pages<F, Fut>(mut page: F) -> Result<Vec<String>, Error>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Vec<String>, Error>>,
{
    let mut all: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    for _ in 0..MAX_TAG_PAGES {
        let items = page(last.clone()).await?;
        let next = items.last().cloned();
        if next.is_none() || next == last || next.as_ref().is_some_and(|n| all.contains(n)) {
            break;
        }
        all.extend(items);
        last = next;
    }
    Ok(all)
}

/// The largest cache file read: a package.yaml or a stack's files (base64)
/// within the default bounds, with room to spare.
const MAX_CACHE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// What `parse` reads from the cache file `path`, marking the file used
/// when it holds something (trimming removes the least recently used
/// first).
fn read_cached<T>(path: &Path, parse: impl FnOnce(&[u8]) -> Option<T>) -> Option<T> {
    if std::fs::metadata(path).ok()?.len() > MAX_CACHE_FILE_BYTES {
        return None;
    }
    let found = parse(&std::fs::read(path).ok()?)?;
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
    Some(found)
}

/// Deletes the least recently modified files of `dir` (not the temporary
/// files of writes under way) until it holds at most `max` bytes.
fn trim(dir: &Path, max: u64) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = read
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with(".tmp"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file().then(|| {
                (
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    m.len(),
                    e.path(),
                )
            })
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

#[cfg(test)]
mod hostile_tests;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;
    use crate::push::TIMEOUT;

    const META: &str =
        "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\n";
    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\nspec:\n  group: example.org\n";

    #[test]
    fn docker_config_credentials_in_both_forms() {
        let plain = br#"{"auths":{"reg.example:5000":{"username":"u","password":"p"}}}"#;
        let basic = |u: &str, p: &str| {
            Some(Auth::Basic {
                username: u.into(),
                password: p.into(),
            })
        };
        assert_eq!(
            auth_from_docker_config(plain, "reg.example:5000"),
            basic("u", "p")
        );
        // base64("u:p:q"): the password may hold colons.
        let encoded = br#"{"auths":{"https://reg.example/v2/":{"auth":"dTpwOnE="}}}"#;
        assert_eq!(
            auth_from_docker_config(encoded, "reg.example"),
            basic("u", "p:q")
        );
        // The host must match exactly: no port, another port, a suffix.
        assert_eq!(auth_from_docker_config(plain, "reg.example"), None);
        assert_eq!(auth_from_docker_config(plain, "reg.example:5001"), None);
        assert_eq!(auth_from_docker_config(encoded, "xreg.example"), None);
        assert_eq!(auth_from_docker_config(b"not json", "reg.example"), None);
        assert_eq!(
            auth_from_docker_config(br#"{"auths":{"reg.example":{"auth":"!!"}}}"#, "reg.example"),
            None
        );
        // Never printed.
        let debug = format!("{:?}", basic("u", "secret-pw"));
        assert!(!debug.contains("secret-pw"), "{debug}");
    }

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

    #[test]
    fn the_cache_keeps_the_newest_files_under_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        for (i, name) in ["a.yaml", "b.yaml", "c.yaml", ".tmp-x"].iter().enumerate() {
            std::fs::write(dir.path().join(name), vec![0u8; 100]).unwrap();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000 + i as u64);
            std::fs::File::options()
                .write(true)
                .open(dir.path().join(name))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        trim(dir.path(), 250);
        let left = |n: &str| dir.path().join(n).exists();
        assert!(!left("a.yaml"));
        assert!(left("b.yaml") && left("c.yaml"));
        assert!(left(".tmp-x"), "a write under way is not trimmed");
        trim(dir.path(), 0);
        assert!(!left("b.yaml") && !left("c.yaml"));
    }

    #[tokio::test]
    async fn a_cached_package_is_read_without_the_registry_and_kept_used() {
        let dir = tempfile::tempdir().unwrap();
        let fetcher = Fetcher::new(dir.path().to_path_buf(), 1 << 20);
        let digest = Digest::of(b"manifest");
        fetcher.cache.store_package(
            &digest,
            "sha256:layer",
            format!("{META}---\n{CRD}").as_bytes(),
        );
        let path = dir.path().join(format!("{}.yaml", digest.hex()));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# layer: sha256:layer\napiVersion"),
            "{text}"
        );
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH)
            .unwrap();
        // Port 9 on loopback: nothing is asked of it.
        let p = fetcher
            .fetch(
                "127.0.0.1:9/x:v1",
                &digest,
                &Auth::Anonymous,
                &Tls::PlainHttp,
            )
            .await
            .unwrap();
        assert_eq!(p.contents.meta.name, "provider-test");
        assert_eq!(p.contents.objects.len(), 1);
        let touched = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(
            touched > SystemTime::UNIX_EPOCH,
            "a hit marks the file used"
        );
        // A cached package that is (no longer) valid names the cached layer.
        fetcher
            .cache
            .store_package(&digest, "sha256:layer", CRD.as_bytes());
        let f = fetcher
            .fetch(
                "127.0.0.1:9/x:v1",
                &digest,
                &Auth::Anonymous,
                &Tls::PlainHttp,
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(
            f.starts_with("package 127.0.0.1:9/x:v1, layer sha256:layer: "),
            "{f}"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_transient() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let reference = format!("127.0.0.1:{port}/pkg/x:v1");
        let fetcher = Fetcher::new(std::env::temp_dir(), 0);
        let e = fetcher
            .resolve(&reference, &Auth::Anonymous, &Tls::PlainHttp)
            .await
            .unwrap_err();
        assert!(e.is_transient(), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "failed to read {reference} from its registry 127.0.0.1:{port}: connection refused"
            )
        );
    }

    #[tokio::test]
    async fn a_registry_that_never_answers_fails_within_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let reference = format!("{address}/pkg/x:v1");
        let fetcher = Fetcher::new(std::env::temp_dir(), 0);
        let started = std::time::Instant::now();
        let e = fetcher
            .resolve(&reference, &Auth::Anonymous, &Tls::PlainHttp)
            .await
            .unwrap_err();
        let took = started.elapsed();
        held.abort();
        assert!(took < TIMEOUT + Duration::from_secs(3), "{took:?}");
        assert!(e.is_transient(), "{e:?}");
        assert!(e.to_string().ends_with("no answer within 10s"), "{e}");
    }
}
