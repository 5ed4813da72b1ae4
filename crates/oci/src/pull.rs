//! Pulling Crossplane packages from registries: a tag is resolved to a
//! manifest digest, the package is pulled by digest (never by tag), its
//! `package.yaml` is found, checked with [`crate::xpkg::parse`] and kept in a
//! size-bounded directory keyed by digest, so a digest is downloaded once.
//!
//! Every request has a deadline ([`crate::push::TIMEOUT`] to connect and per
//! read, and the same for each manifest or tag list request as a whole): a
//! registry that accepts connections and never answers fails quickly, as
//! [`Error::Unreachable`], which [`Error::is_transient`] tells apart from a
//! package that is wrong.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read as _, Seek as _, Write as _},
    path::{Path, PathBuf},
    time::SystemTime,
};

use base64::Engine as _;
use futures::StreamExt as _;
use oci_client::{Client, Reference, errors::OciDistributionError, secrets::RegistryAuth};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::{
    Auth, Digest, Error, Tls,
    push::TIMEOUT,
    stack,
    xpkg::{self, BASE_ANNOTATION, Contents, MAX_BYTES, PACKAGE_FILE},
};

/// The manifest media types a pull accepts.
const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// The largest manifest (or index) a pull reads.
const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// Tags asked for per page of a tag list.
const TAGS_PER_PAGE: usize = 1000;

/// The most pages of tags read (a registry that ignores `last` would
/// otherwise be asked forever).
const MAX_TAG_PAGES: usize = 100;

/// The first line of a cache file: the layer package.yaml came from.
const CACHE_LAYER_PREFIX: &str = "# layer: ";

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

/// The tag a reference names explicitly, if it does (a reference without
/// one is not taken to mean `latest` here).
pub fn tag_of(reference: &str) -> Option<String> {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':')
        .map(|(_, tag)| tag.to_owned())
        .filter(|t| !t.is_empty())
}

/// Pulls packages, keeping their `package.yaml` by digest in a
/// size-bounded directory.
#[derive(Debug)]
pub struct Fetcher {
    cache_dir: PathBuf,
    max_cache_bytes: u64,
}

/// The registry host of a reference (`host[:port]`; `docker.io` for a
/// reference without one).
pub fn registry_of(reference: &str) -> String {
    reference
        .parse::<Reference>()
        .map(|r| r.resolve_registry().to_owned())
        .unwrap_or_else(|_| reference.split('/').next().unwrap_or_default().to_owned())
}

/// A reference without its tag or digest (`host[:port]/repository`).
pub fn repository_of(reference: &str) -> String {
    match reference.parse::<Reference>() {
        Ok(r) => format!("{}/{}", r.registry(), r.repository()),
        Err(_) => {
            let without_digest = reference.split('@').next().unwrap_or(reference);
            // A ':' after the last '/' starts the tag (one before it is a port).
            match without_digest.rsplit_once('/') {
                Some((head, tail)) => {
                    format!("{head}/{}", tail.split(':').next().unwrap_or(tail))
                }
                None => without_digest.to_owned(),
            }
        }
    }
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

fn registry_auth(auth: &Auth) -> RegistryAuth {
    auth.to_registry()
}

fn parse_reference(reference: &str) -> Result<Reference, Error> {
    reference.parse().map_err(|e| Error::Reference {
        reference: reference.to_owned(),
        reason: format!("{e}"),
    })
}

/// Why a request never got an answer, in a few words; `None` when it did
/// get one (the failure is the registry's answer).
fn unreachable_reason(e: &OciDistributionError) -> Option<String> {
    let (request, io) = match e {
        OciDistributionError::RequestError(r) => (Some(r), None),
        OciDistributionError::IoError(io) => (None, Some(io)),
        _ => return None,
    };
    if let Some(r) = request
        && r.status().is_some()
    {
        return None;
    }
    // Walk the causes; an io::Error hides the error it wraps from
    // `source()`, so look inside it too.
    let mut causes: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = match (request, io) {
        (Some(r), _) => Some(r),
        (_, Some(io)) => Some(io),
        _ => None,
    };
    while let Some(cause) = next {
        causes.push(cause);
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _).or(cause.source()),
            None => cause.source(),
        };
    }
    for cause in &causes {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return Some(match tls {
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                    "TLS failed: its certificate is not trusted (signed by an unknown authority; \
                     give the CA that signed it)"
                        .to_owned()
                }
                rustls::Error::InvalidCertificate(c) => {
                    format!("TLS failed: its certificate is not valid ({c:?})")
                }
                other => format!("TLS failed: {other}"),
            });
        }
    }
    for cause in &causes {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            match io.kind() {
                K::ConnectionRefused => return Some("connection refused".to_owned()),
                K::TimedOut => return Some(format!("no answer within {}s", TIMEOUT.as_secs())),
                K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof => {
                    return Some("the connection was closed before an answer".to_owned());
                }
                _ => {}
            }
        }
    }
    let text: Vec<String> = causes.iter().map(|c| c.to_string()).collect();
    let text = text.join(": ");
    let lower = text.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        return Some(format!(
            "TLS failed: its certificate is not trusted ({text})"
        ));
    }
    if lower.contains("dns error") || lower.contains("failed to lookup") {
        return Some(format!("the host name does not resolve ({text})"));
    }
    let connect = request.is_some_and(|r| r.is_connect() || r.is_timeout());
    if request.is_some_and(|r| r.is_timeout()) {
        return Some(format!("no answer within {}s", TIMEOUT.as_secs()));
    }
    (connect || io.is_some() || request.is_some_and(|r| r.is_request() || r.is_body()))
        .then_some(text)
}

/// Classifies a failed registry request for `reference`.
fn failed(reference: &str, step: &'static str, auth: &Auth, e: OciDistributionError) -> Error {
    if crate::push::is_unauthorized(&e) {
        return Error::Unauthorized {
            registry: registry_of(reference),
            with_credentials: *auth != Auth::Anonymous,
            source: Box::new(e),
        };
    }
    let not_found = match &e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RequestError(r) => r.status().is_some_and(|s| s.as_u16() == 404),
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            use oci_client::errors::OciErrorCode as C;
            matches!(
                e.code,
                C::ManifestUnknown | C::NameUnknown | C::BlobUnknown | C::NotFound
            )
        }),
        _ => false,
    };
    if not_found {
        return Error::NotFound {
            reference: reference.to_owned(),
        };
    }
    if let Some(reason) = unreachable_reason(&e) {
        return Error::Unreachable {
            reference: reference.to_owned(),
            registry: registry_of(reference),
            reason,
            source: Box::new(e),
        };
    }
    let transient = match &e {
        OciDistributionError::ServerError { code, .. } => *code >= 500 || *code == 429,
        OciDistributionError::RequestError(r) => r
            .status()
            .is_some_and(|s| s.is_server_error() || s.as_u16() == 429),
        _ => false,
    };
    Error::Registry {
        reference: reference.to_owned(),
        step,
        detail: e.to_string(),
        transient,
        source: Box::new(e),
    }
}

/// A request that had no answer within [`TIMEOUT`] as a whole.
fn timed_out(reference: &str) -> Error {
    let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer");
    Error::Unreachable {
        reference: reference.to_owned(),
        registry: registry_of(reference),
        reason: format!("no answer within {}s", TIMEOUT.as_secs()),
        source: Box::new(OciDistributionError::IoError(io)),
    }
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
        platforms.push(format!("{os}/{arch}"));
    }
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
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(Error::invalid(
            reference,
            "manifest",
            format!(
                "the manifest is {} bytes; at most {MAX_MANIFEST_BYTES} are read",
                bytes.len()
            ),
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        Error::invalid(
            reference,
            "manifest",
            format!("the manifest is not JSON: {e}"),
        )
    })
}

/// What a layer says about package.yaml.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// The layer holds it.
    File(Vec<u8>),
    /// The layer deletes it (an OCI whiteout).
    Deleted,
}

impl Fetcher {
    /// Packages cached in `cache_dir` (made when first written), which is
    /// kept under `max_cache_bytes` (the least recently used go first).
    pub fn new(cache_dir: PathBuf, max_cache_bytes: u64) -> Self {
        Self {
            cache_dir,
            max_cache_bytes,
        }
    }

    /// The manifest digest `reference` (a tag or a digest) names now; for
    /// an image index, the digest of its linux/amd64 manifest (an index
    /// without one is [`Error::Invalid`], naming the platforms it has).
    pub async fn resolve(&self, reference: &str, auth: &Auth, tls: &Tls) -> Result<Digest, Error> {
        let image = parse_reference(reference)?;
        let client = crate::push::client(tls, true)
            .map_err(|e| failed(reference, "setting up the HTTP client", auth, e))?;
        let bytes = manifest(&client, &image, reference, auth).await?;
        let json = manifest_json(reference, &bytes)?;
        if is_index(&json) {
            return platform_manifest(reference, &json);
        }
        Ok(Digest::of(&bytes))
    }

    /// The tags of `repository` (`host[:port]/repository`, a tag or digest
    /// is ignored), every page of them.
    pub async fn tags(
        &self,
        repository: &str,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Vec<String>, Error> {
        let image = parse_reference(&repository_of(repository))?;
        let client = crate::push::client(tls, true)
            .map_err(|e| failed(repository, "setting up the HTTP client", auth, e))?;
        let ra = registry_auth(auth);
        let (client, image, ra) = (&client, &image, &ra);
        all_pages(|last| async move {
            tokio::time::timeout(
                TIMEOUT,
                client.list_tags(image, ra, Some(TAGS_PER_PAGE), last.as_deref()),
            )
            .await
            .map_err(|_| timed_out(repository))?
            .map(|page| page.tags)
            .map_err(|e| failed(repository, "listing tags", auth, e))
        })
        .await
    }

    fn cache_file(&self, digest: &Digest) -> PathBuf {
        self.cache_dir.join(format!("{}.yaml", digest.hex()))
    }

    /// The package at `digest` in `reference`'s repository: from the cache,
    /// else pulled (by digest), checked and cached.
    pub async fn fetch(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Package, Error> {
        let (layer, yaml) = match self.cached(digest) {
            Some(hit) => hit,
            None => {
                let (layer, yaml) = self.pull(reference, digest, auth, tls).await?;
                // Checked before it is cached: a bad package is never kept.
                xpkg::parse(reference, &layer, &yaml)?;
                self.store(digest, &layer, &yaml);
                (layer, yaml)
            }
        };
        Ok(Package {
            reference: reference.to_owned(),
            digest: digest.clone(),
            contents: xpkg::parse(reference, &layer, &yaml)?,
        })
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
        let tag = tag_of(reference);
        let (layer, files) = match self.cached_stack(digest) {
            Some(hit) => hit,
            None => {
                let pulled =
                    pull_files(reference, digest, auth, tls, &stack::is_stack_file).await?;
                stack::parse(reference, &pulled.layer, &pulled.files, tag.as_deref())?;
                self.store_stack(digest, &pulled.layer, &pulled.files);
                (pulled.layer, pulled.files)
            }
        };
        Ok(StackPackage {
            reference: reference.to_owned(),
            digest: digest.clone(),
            stack: stack::parse(reference, &layer, &files, tag.as_deref())?,
        })
    }

    fn stack_cache_file(&self, digest: &Digest) -> PathBuf {
        self.cache_dir.join(format!("{}.stack.json", digest.hex()))
    }

    /// The layer and `.registry/` files cached for `digest`, marking the
    /// file used.
    fn cached_stack(&self, digest: &Digest) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
        read_cached(&self.stack_cache_file(digest), |bytes| {
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
        self.write_cached(
            &self.stack_cache_file(digest),
            &[json.to_string().as_bytes()],
        );
    }

    /// The repositories of `registry` (`host[:port]`), every page of them
    /// (the registry's catalog).
    pub async fn catalog(
        &self,
        registry: &str,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Vec<String>, Error> {
        let image = parse_reference(&format!("{registry}/catalog"))?;
        let client = crate::push::client(tls, true)
            .map_err(|e| failed(registry, "setting up the HTTP client", auth, e))?;
        let ra = registry_auth(auth);
        let (client, image, ra) = (&client, &image, &ra);
        all_pages(|last| async move {
            tokio::time::timeout(
                TIMEOUT,
                client.catalog(image, ra, Some(TAGS_PER_PAGE), last.as_deref()),
            )
            .await
            .map_err(|_| timed_out(registry))?
            .map(|page| page.repositories)
            .map_err(|e| failed(registry, "listing the registry's repositories", auth, e))
        })
        .await
    }

    /// The layer and package.yaml cached for `digest`, marking the file
    /// used (trimming removes the least recently used first).
    fn cached(&self, digest: &Digest) -> Option<(String, Vec<u8>)> {
        read_cached(&self.cache_file(digest), |bytes| {
            let text = std::str::from_utf8(bytes).ok()?;
            let (first, yaml) = text.split_once('\n')?;
            let layer = first.strip_prefix(CACHE_LAYER_PREFIX)?.trim().to_owned();
            Some((layer, yaml.as_bytes().to_vec()))
        })
    }

    /// Writes a checked package.yaml to the cache.
    fn store(&self, digest: &Digest, layer: &str, yaml: &[u8]) {
        self.write_cached(
            &self.cache_file(digest),
            &[format!("{CACHE_LAYER_PREFIX}{layer}\n").as_bytes(), yaml],
        );
    }

    /// Writes `parts` as the cache file `path` (atomically: a temporary
    /// file renamed) and trims the cache. A cache that cannot be written
    /// only costs a pull later.
    fn write_cached(&self, path: &Path, parts: &[&[u8]]) {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.cache_dir)?;
            let mut tmp = tempfile::Builder::new()
                .prefix(".tmp-")
                .tempfile_in(&self.cache_dir)?;
            for part in parts {
                tmp.write_all(part)?;
            }
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            trim(&self.cache_dir, self.max_cache_bytes);
        }
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
        let pulled = pull_files(reference, digest, auth, tls, &|p| p == PACKAGE_FILE).await?;
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
}

/// What [`pull_files`] read from an image.
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

/// The image manifest at `digest` in `reference`'s repository (an index is
/// followed to its linux/amd64 manifest), checked against its digest.
async fn image_manifest(
    client: &Client,
    reference: &str,
    digest: &Digest,
    auth: &Auth,
) -> Result<(Reference, Value), Error> {
    let repository = repository_of(reference);
    let image = parse_reference(&format!("{repository}@{digest}"))?;
    let bytes = manifest(client, &image, reference, auth).await?;
    if Digest::of(&bytes) != *digest {
        return Err(Error::invalid(
            reference,
            "manifest",
            format!("the registry's manifest does not match {digest}"),
        ));
    }
    let json = manifest_json(reference, &bytes)?;
    if !is_index(&json) {
        return Ok((image, json));
    }
    let platform = platform_manifest(reference, &json)?;
    let image = parse_reference(&format!("{repository}@{platform}"))?;
    let bytes = manifest(client, &image, reference, auth).await?;
    if Digest::of(&bytes) != platform {
        return Err(Error::invalid(
            reference,
            "manifest",
            format!("the registry's manifest does not match {platform}"),
        ));
    }
    Ok((image, manifest_json(reference, &bytes)?))
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
}

/// What the manifest of the image at `digest` says about its package
/// layer: one manifest read (two for an index), no layer downloaded.
pub async fn layer_info(
    reference: &str,
    digest: &Digest,
    auth: &Auth,
    tls: &Tls,
) -> Result<LayerInfo, Error> {
    let client = crate::push::client(tls, true)
        .map_err(|e| failed(reference, "setting up the HTTP client", auth, e))?;
    let (_, json) = image_manifest(&client, reference, digest, auth).await?;
    let layers = layer_descriptors(&json);
    let size = |l: &Value| l.get("size").and_then(Value::as_u64).unwrap_or(0);
    Ok(match base_layer(layers) {
        Some(b) => LayerInfo {
            annotations: annotations_of(b),
            has_base: true,
            size: size(b),
        },
        None => LayerInfo {
            annotations: layers.iter().flat_map(annotations_of).collect(),
            has_base: false,
            size: layers.iter().map(size).sum(),
        },
    })
}

/// Pulls `repository@digest` and reads the files `wanted` picks from its
/// package layer (the one annotated `io.crossplane.xpkg: base`, else every
/// layer in order), each layer bounded by [`MAX_BYTES`] and checked
/// against its digest.
pub async fn pull_files(
    reference: &str,
    digest: &Digest,
    auth: &Auth,
    tls: &Tls,
    wanted: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Pulled, Error> {
    let client = crate::push::client(tls, true)
        .map_err(|e| failed(reference, "setting up the HTTP client", auth, e))?;
    let (image, json) = image_manifest(&client, reference, digest, auth).await?;
    let layers = layer_descriptors(&json);
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
            .unwrap_or("all layers")
            .to_owned(),
        ..Pulled::default()
    };
    for descriptor in chosen {
        let field = |k: &str| {
            descriptor
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let layer = field("digest").to_owned();
        let media_type = field("mediaType").to_owned();
        let Some(layer_digest) = Digest::parse(&layer) else {
            return Err(Error::invalid(
                reference,
                "manifest",
                format!("a layer has the digest {layer:?}; only sha256 digests are read"),
            ));
        };
        let size = descriptor.get("size").and_then(Value::as_u64).unwrap_or(0);
        if size > MAX_BYTES {
            return Err(Error::invalid(
                reference,
                &layer,
                format!("the layer is {size} bytes; a package layer may have at most {MAX_BYTES}"),
            ));
        }
        let blob = download(&client, &image, reference, &layer_digest, auth).await?;
        for (path, found) in
            layer_files(reference, &layer, &media_type, BufReader::new(blob), wanted)?
        {
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

/// A manifest's bytes, within [`TIMEOUT`] as a whole.
async fn manifest(
    client: &Client,
    image: &Reference,
    reference: &str,
    auth: &Auth,
) -> Result<Vec<u8>, Error> {
    let (bytes, _) = tokio::time::timeout(
        TIMEOUT,
        client.pull_manifest_raw(image, &registry_auth(auth), &MANIFEST_TYPES),
    )
    .await
    .map_err(|_| timed_out(reference))?
    .map_err(|e| failed(reference, "reading the manifest", auth, e))?;
    Ok(bytes.to_vec())
}

/// Downloads a blob into an anonymous temporary file (memory stays
/// bounded), refusing more than [`MAX_BYTES`] and checking its digest.
/// Returns the file, rewound.
async fn download(
    client: &Client,
    image: &Reference,
    reference: &str,
    digest: &Digest,
    auth: &Auth,
) -> Result<std::fs::File, Error> {
    let layer = digest.as_str();
    let mut stream = client
        .pull_blob_stream(image, layer)
        .await
        .map_err(|e| failed(reference, "downloading a layer", auth, e))?;
    if let Some(len) = stream.content_length
        && len > MAX_BYTES
    {
        return Err(Error::invalid(
            reference,
            layer,
            format!("the layer is {len} bytes; a package layer may have at most {MAX_BYTES}"),
        ));
    }
    let local = |e: std::io::Error| Error::Read {
        path: format!("a temporary file for layer {layer}"),
        source: e,
    };
    let mut file = tempfile::tempfile().map_err(local)?;
    let mut hash = Sha256::new();
    let mut total: u64 = 0;
    while let Some(chunk) = stream.stream.next().await {
        let chunk = chunk.map_err(|e| {
            failed(
                reference,
                "downloading a layer",
                auth,
                OciDistributionError::IoError(e),
            )
        })?;
        total += chunk.len() as u64;
        if total > MAX_BYTES {
            return Err(Error::invalid(
                reference,
                layer,
                format!("the layer is over {MAX_BYTES} bytes, the most a package layer may have"),
            ));
        }
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

/// package.yaml from a layer (gzip tar, or plain tar when the media type
/// says so): `None` when the layer does not mention it.
#[cfg(test)]
fn package_file(
    reference: &str,
    layer: &str,
    media_type: &str,
    blob: impl BufRead,
) -> Result<Option<Found>, Error> {
    Ok(
        layer_files(reference, layer, media_type, blob, &|p| p == PACKAGE_FILE)?
            .into_iter()
            .next_back()
            .map(|(_, f)| f),
    )
}

/// The files of a layer (gzip tar, or plain tar when the media type says
/// so) that `wanted` picks, in archive order, and the whiteouts of such
/// files.
fn layer_files(
    reference: &str,
    layer: &str,
    media_type: &str,
    mut blob: impl BufRead,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, Found)>, Error> {
    let head = blob
        .fill_buf()
        .map_err(|e| Error::invalid(reference, layer, format!("reading the layer: {e}")))?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let plain_tar = media_type.ends_with(".tar") || media_type.ends_with(".tar.diff");
    let reader: Box<dyn std::io::Read + '_> = if gzip {
        Box::new(flate2::bufread::GzDecoder::new(blob))
    } else if plain_tar {
        Box::new(blob)
    } else {
        return Err(Error::invalid(
            reference,
            layer,
            format!(
                "the layer ({}) is not gzip-compressed; package layers are gzip tar archives",
                if media_type.is_empty() {
                    "no media type"
                } else {
                    media_type
                }
            ),
        ));
    };
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(|e| {
        Error::invalid(
            reference,
            layer,
            format!("the layer is not a tar archive: {e}"),
        )
    })?;
    let mut found = Vec::new();
    let mut total: u64 = 0;
    for entry in entries {
        let entry = entry.map_err(|e| {
            Error::invalid(
                reference,
                layer,
                format!("the layer is not a valid tar archive: {e}"),
            )
        })?;
        let path = entry
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = path.trim_start_matches("./").trim_start_matches('/');
        let size = entry.header().size().unwrap_or(0);
        if size > MAX_BYTES {
            return Err(Error::invalid(
                reference,
                layer,
                format!("{path} is {size} bytes; a file in a package may have at most {MAX_BYTES}"),
            ));
        }
        let (dir, name) = path.rsplit_once('/').map_or(("", path), |(d, n)| (d, n));
        if let Some(deleted) = name.strip_prefix(".wh.") {
            let deleted = if dir.is_empty() {
                deleted.to_owned()
            } else {
                format!("{dir}/{deleted}")
            };
            if wanted(&deleted) {
                found.push((deleted, Found::Deleted));
            }
        } else if wanted(path) && entry.header().entry_type().is_file() {
            total += size;
            if total > MAX_BYTES {
                return Err(Error::invalid(
                    reference,
                    layer,
                    format!("the package's files are over {MAX_BYTES} bytes in all"),
                ));
            }
            let path = path.to_owned();
            let mut bytes = Vec::new();
            entry
                .take(MAX_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|e| Error::invalid(reference, layer, format!("reading {path}: {e}")))?;
            found.push((path, Found::File(bytes)));
        }
    }
    Ok(found)
}

/// What `parse` reads from the cache file `path`, marking the file used
/// when it holds something (trimming removes the least recently used
/// first).
fn read_cached<T>(path: &Path, parse: impl FnOnce(&[u8]) -> Option<T>) -> Option<T> {
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::LayerBuilder;

    const META: &str =
        "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\n";
    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\nspec:\n  group: example.org\n";

    #[test]
    fn only_a_written_tag_is_a_tag() {
        assert_eq!(
            tag_of("reg.example:5000/a/redis:v0.1.0").as_deref(),
            Some("v0.1.0")
        );
        assert_eq!(tag_of("reg.example:5000/a/redis"), None);
        assert_eq!(tag_of("reg.example:5000/a/redis@sha256:00"), None);
        assert_eq!(tag_of("redis:v1@sha256:00").as_deref(), Some("v1"));
    }

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
    fn registry_and_repository_of_a_reference() {
        assert_eq!(registry_of("10.0.0.1:5000/x/y:v1"), "10.0.0.1:5000");
        assert_eq!(
            registry_of("registry.example/a/b@sha256:{}"),
            "registry.example"
        );
        assert_eq!(repository_of("10.0.0.1:5000/x/y:v1"), "10.0.0.1:5000/x/y");
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            repository_of(&format!("reg.example/a/b@{digest}")),
            "reg.example/a/b"
        );
        assert_eq!(repository_of("reg.example/a/b"), "reg.example/a/b");
        assert_eq!(
            repository_of("reg.example:5000/a/b"),
            "reg.example:5000/a/b"
        );
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

    fn gzip_tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut layer = LayerBuilder::new();
        for (path, bytes) in files {
            layer = layer.file(*path, 0o644, bytes.to_vec());
        }
        layer.build().unwrap().blob().to_vec()
    }

    #[test]
    fn package_yaml_is_found_in_gzip_or_plain_tar_layers_only() {
        let blob = gzip_tar(&[("etc/x", b"x"), ("package.yaml", b"yaml")]);
        assert_eq!(
            package_file("r", "l", crate::LAYER_MEDIA_TYPE, blob.as_slice()).unwrap(),
            Some(Found::File(b"yaml".to_vec()))
        );
        let blob = gzip_tar(&[("other.yaml", b"x")]);
        assert_eq!(
            package_file("r", "l", crate::LAYER_MEDIA_TYPE, blob.as_slice()).unwrap(),
            None
        );
        let blob = gzip_tar(&[(".wh.package.yaml", b"")]);
        assert_eq!(
            package_file("r", "l", crate::LAYER_MEDIA_TYPE, blob.as_slice()).unwrap(),
            Some(Found::Deleted)
        );
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(4);
        header.set_mode(0o644);
        tar.append_data(&mut header, "package.yaml", &b"tar!"[..])
            .unwrap();
        let tar = tar.into_inner().unwrap();
        assert_eq!(
            package_file(
                "r",
                "l",
                "application/vnd.oci.image.layer.v1.tar",
                tar.as_slice()
            )
            .unwrap(),
            Some(Found::File(b"tar!".to_vec()))
        );
        let f = package_file("r", "sha256:x", crate::LAYER_MEDIA_TYPE, tar.as_slice())
            .unwrap_err()
            .to_string();
        assert!(
            f.starts_with("package r, layer sha256:x: the layer (application/vnd.oci.image.layer.v1.tar+gzip) is not gzip-compressed"),
            "{f}"
        );
    }

    #[test]
    fn a_file_over_the_bound_is_refused_from_its_header() {
        // A header claiming 300 MB, with no data behind it: refused before
        // anything is read.
        let mut header = tar::Header::new_gnu();
        header.set_path("huge.bin").unwrap();
        header.set_size(300 * 1024 * 1024);
        header.set_mode(0o644);
        header.set_cksum();
        let mut tar = header.as_bytes().to_vec();
        tar.extend_from_slice(&[0; 1024]);
        let f = package_file(
            "r",
            "sha256:x",
            "application/vnd.oci.image.layer.v1.tar",
            tar.as_slice(),
        )
        .unwrap_err()
        .to_string();
        assert!(f.contains("huge.bin is 314572800 bytes"), "{f}");
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
        fetcher.store(
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
        fetcher.store(&digest, "sha256:layer", CRD.as_bytes());
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
