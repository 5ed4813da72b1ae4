//! Crossplane packages (xpkg): an OCI image whose layer annotated
//! `io.crossplane.xpkg: base` (else the image's flattened filesystem)
//! holds `package.yaml`: one `meta.pkg.crossplane.io` Provider and the
//! package's CustomResourceDefinitions.
//!
//! [`build`] writes a package from a directory, [`parse`] checks one, and
//! [`Fetcher`] pulls packages from registries (a tag is resolved to a
//! digest once; packages are cached by digest in a size-bounded directory).

use std::{
    collections::BTreeMap,
    io::Read as _,
    path::{Path, PathBuf},
};

use base64::Engine as _;
use futures::StreamExt as _;
use oci_client::{Reference, errors::OciDistributionError, secrets::RegistryAuth};
use serde_json::Value;

use crate::{Auth, Config, Digest, Error, Image, LayerBuilder, Tls};

/// The annotation (and value) that marks the layer holding package.yaml.
pub const BASE_ANNOTATION: (&str, &str) = ("io.crossplane.xpkg", "base");
/// The file a package's layer holds.
pub const PACKAGE_FILE: &str = "package.yaml";
/// The largest layer, and the largest file in a layer, a package may have.
pub const MAX_BYTES: u64 = 200 * 1024 * 1024;
/// The API group of package metadata.
pub const META_GROUP: &str = "meta.pkg.crossplane.io";

const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A package's metadata (its `meta.pkg.crossplane.io` Provider).
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// metadata.name.
    pub name: String,
    /// spec.controller.image: the runtime image.
    pub controller_image: Option<String>,
    /// spec.crossplane.version: the Crossplane versions it supports.
    pub crossplane_version: Option<String>,
    /// spec.dependsOn.
    pub depends_on: Vec<Dependency>,
    /// The whole object.
    pub raw: Value,
}

/// One entry of a package's spec.dependsOn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The package (repository) depended on.
    pub package: String,
    /// A semver range (`>=v1.0.0, <v2.0.0`) or a digest.
    pub version: String,
}

/// What a package holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Contents {
    /// Its metadata.
    pub meta: Meta,
    /// Its CustomResourceDefinitions, in order.
    pub objects: Vec<Value>,
}

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

fn invalid(reference: &str, layer: &str, fault: impl Into<String>) -> Error {
    Error::Invalid {
        reference: reference.to_owned(),
        layer: layer.to_owned(),
        fault: fault.into(),
    }
}

/// Splits a YAML stream into documents with the line each starts on.
fn documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") {
            docs.push((start, std::mem::take(&mut current)));
            start = i + 2;
            continue;
        }
        if trimmed == "..." {
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push((start, current));
    docs
}

/// Checks `package_yaml` (of package `reference`, found in `layer`) and
/// returns what it holds: exactly one `meta.pkg.crossplane.io` Provider and
/// any number of CustomResourceDefinitions; anything else is refused with
/// a message naming the reference, the layer and the fault.
pub fn parse(reference: &str, layer: &str, package_yaml: &[u8]) -> Result<Contents, Error> {
    let text = std::str::from_utf8(package_yaml).map_err(|e| {
        invalid(
            reference,
            layer,
            format!("{PACKAGE_FILE} is not UTF-8: {e}"),
        )
    })?;
    let mut meta: Option<(usize, Value)> = None;
    let mut objects = Vec::new();
    let mut number = 0;
    for (line, doc) in documents(text) {
        if doc.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        }) {
            continue;
        }
        number += 1;
        let at = format!("document {number} (line {line})");
        let value: Value = serde_saphyr::from_str(&doc)
            .map_err(|e| invalid(reference, layer, format!("{at}: malformed YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        match (group, kind) {
            (META_GROUP, "Provider") => {
                if let Some((first, _)) = &meta {
                    return Err(invalid(
                        reference,
                        layer,
                        format!(
                            "{at}: a second {META_GROUP} Provider (the first is document {first}); a package has exactly one"
                        ),
                    ));
                }
                meta = Some((number, value));
            }
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                let name = value.pointer("/metadata/name").and_then(Value::as_str);
                let crd_group = value.pointer("/spec/group").and_then(Value::as_str);
                match (name, crd_group) {
                    (Some(n), Some(g)) if !n.is_empty() && !g.is_empty() => objects.push(value),
                    _ => {
                        return Err(invalid(
                            reference,
                            layer,
                            format!(
                                "{at}: a CustomResourceDefinition needs metadata.name and spec.group"
                            ),
                        ));
                    }
                }
            }
            _ => {
                let what = if kind.is_empty() {
                    "an object without kind".to_owned()
                } else {
                    format!("kind {kind} ({api_version})")
                };
                return Err(invalid(
                    reference,
                    layer,
                    format!(
                        "{at}: {what} is not allowed; a package holds one {META_GROUP} Provider and CustomResourceDefinitions"
                    ),
                ));
            }
        }
    }
    let Some((_, raw)) = meta else {
        return Err(invalid(
            reference,
            layer,
            format!("{PACKAGE_FILE} has no {META_GROUP}/v1 Provider; a package has exactly one"),
        ));
    };
    Ok(Contents {
        meta: meta_of(raw),
        objects,
    })
}

fn meta_of(raw: Value) -> Meta {
    let text = |p: &str| raw.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let depends_on = raw
        .pointer("/spec/dependsOn")
        .and_then(Value::as_array)
        .map(|deps| {
            deps.iter()
                .filter_map(|d| {
                    let package = ["provider", "configuration", "function", "package"]
                        .iter()
                        .find_map(|k| d.get(*k).and_then(Value::as_str))?;
                    Some(Dependency {
                        package: package.to_owned(),
                        version: d
                            .get("version")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Meta {
        name: text("/metadata/name").unwrap_or_default(),
        controller_image: text("/spec/controller/image"),
        crossplane_version: text("/spec/crossplane/version"),
        depends_on,
        raw,
    }
}

/// Builds a package from `dir`: `package.yaml` (the meta, and possibly
/// CRDs) and every `.yaml`/`.yml` file under `crds/` (by name). With
/// `runtime_image` the meta's spec.controller.image is set to it. The
/// image has one layer, annotated `io.crossplane.xpkg: base`, holding the
/// checked `package.yaml`; the same input gives the same digest.
pub fn build(dir: &Path, runtime_image: Option<&str>) -> Result<Image, Error> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| Error::read(p, e));
    let source = dir.display().to_string();
    let mut contents = parse(&source, PACKAGE_FILE, &read(&dir.join(PACKAGE_FILE))?)?;
    let crds = dir.join("crds");
    if crds.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
            .map_err(|e| Error::read(&crds, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let text = read(&f)?;
            let mut with_meta = serde_json::to_vec(&contents.meta.raw).map_err(Error::Json)?;
            with_meta.extend_from_slice(b"\n---\n");
            with_meta.extend_from_slice(&text);
            let more = parse(&f.display().to_string(), "crds", &with_meta)?;
            contents.objects.extend(more.objects);
        }
    }
    if let Some(image) = runtime_image
        && let Some(spec) = contents.meta.raw.as_object_mut().map(|m| {
            m.entry("spec")
                .or_insert_with(|| Value::Object(Default::default()))
        })
        && let Some(spec) = spec.as_object_mut()
    {
        let controller = spec
            .entry("controller")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(c) = controller.as_object_mut() {
            c.insert("image".into(), Value::String(image.to_owned()));
        }
    }
    let mut yaml = String::new();
    for object in std::iter::once(&contents.meta.raw).chain(contents.objects.iter()) {
        yaml.push_str("---\n");
        yaml.push_str(&serde_json::to_string(object).map_err(Error::Json)?);
        yaml.push('\n');
    }
    let layer = LayerBuilder::new()
        .file(PACKAGE_FILE, 0o644, yaml.into_bytes())
        .build()?
        .annotate(BASE_ANNOTATION.0, BASE_ANNOTATION.1);
    Ok(Image::new(Config {
        architecture: "amd64".to_owned(),
        ..Config::default()
    })
    .layer(layer))
}

/// The registry host of a reference (`host[:port]`).
pub fn registry_of(reference: &str) -> String {
    reference
        .parse::<Reference>()
        .map(|r| r.resolve_registry().to_owned())
        .unwrap_or_else(|_| reference.split('/').next().unwrap_or_default().to_owned())
}

/// A reference without its tag or digest (`host/repository`).
pub fn repository_of(reference: &str) -> String {
    match reference.parse::<Reference>() {
        Ok(r) => format!("{}/{}", r.registry(), r.repository()),
        Err(_) => reference.to_owned(),
    }
}

/// The credentials for `registry` in a `kubernetes.io/dockerconfigjson`
/// Secret's `.dockerconfigjson`: `{"auths": {"host": {"username",
/// "password"} or {"auth": base64("user:password")}}}`.
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
    if let (Some(u), Some(p)) = (field("username"), field("password")) {
        return Some(Auth::Basic {
            username: u.to_owned(),
            password: p.to_owned(),
        });
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(field("auth")?)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (u, p) = decoded.split_once(':')?;
    Some(Auth::Basic {
        username: u.to_owned(),
        password: p.to_owned(),
    })
}

/// Pulls packages, keeping them by digest in a size-bounded directory.
#[derive(Debug)]
pub struct Fetcher {
    cache_dir: PathBuf,
    max_cache_bytes: u64,
}

fn registry_auth(auth: &Auth) -> RegistryAuth {
    match auth {
        Auth::Anonymous => RegistryAuth::Anonymous,
        Auth::Basic { username, password } => {
            RegistryAuth::Basic(username.clone(), password.clone())
        }
    }
}

/// Classifies a failed registry request.
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
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                oci_client::errors::OciErrorCode::ManifestUnknown
                    | oci_client::errors::OciErrorCode::NameUnknown
            )
        }),
        _ => false,
    };
    if not_found {
        return Error::NotFound {
            reference: reference.to_owned(),
        };
    }
    let transient = match &e {
        OciDistributionError::ServerError { code, .. } => *code >= 500,
        OciDistributionError::RequestError(r) => {
            r.is_connect() || r.is_timeout() || r.status().is_some_and(|s| s.is_server_error())
        }
        _ => false,
    };
    Error::Registry {
        reference: reference.to_owned(),
        step,
        transient,
        source: Box::new(e),
    }
}

fn parse_reference(reference: &str) -> Result<Reference, Error> {
    reference.parse().map_err(|e| Error::Reference {
        reference: reference.to_owned(),
        reason: format!("{e}"),
    })
}

/// The linux/amd64 entry of an image index, or why there is none.
fn platform_manifest(reference: &str, index: &Value) -> Result<Digest, Error> {
    let entries = index
        .get("manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut platforms = Vec::new();
    for e in &entries {
        let os = e
            .pointer("/platform/os")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let arch = e
            .pointer("/platform/architecture")
            .and_then(Value::as_str)
            .unwrap_or("?");
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
    Err(invalid(
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

impl Fetcher {
    /// Packages cached in `cache_dir`, which is kept under
    /// `max_cache_bytes` (oldest packages go first).
    pub fn new(cache_dir: PathBuf, max_cache_bytes: u64) -> Self {
        Self {
            cache_dir,
            max_cache_bytes,
        }
    }

    /// The manifest digest `reference` names now (for an image index, the
    /// digest of its linux/amd64 manifest).
    pub async fn resolve(&self, reference: &str, auth: &Auth, tls: &Tls) -> Result<Digest, Error> {
        let image = parse_reference(reference)?;
        let client = crate::push::client(tls, true)
            .map_err(|e| failed(reference, "setting up the HTTP client", auth, e))?;
        let (bytes, digest) = client
            .pull_manifest_raw(&image, &registry_auth(auth), &MANIFEST_TYPES)
            .await
            .map_err(|e| failed(reference, "reading the manifest", auth, e))?;
        let manifest: Value = serde_json::from_slice(&bytes).map_err(|e| {
            invalid(
                reference,
                "manifest",
                format!("the manifest is not JSON: {e}"),
            )
        })?;
        if is_index(&manifest) {
            return platform_manifest(reference, &manifest);
        }
        Digest::parse(&digest)
            .ok_or_else(|| {
                invalid(
                    reference,
                    "manifest",
                    format!("the registry gave the digest {digest:?}"),
                )
            })
            .or_else(|_| Ok(Digest::of(&bytes)))
    }

    /// The tags of `repository` (`host/repository`).
    pub async fn tags(
        &self,
        repository: &str,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Vec<String>, Error> {
        let image = parse_reference(repository)?;
        let client = crate::push::client(tls, true)
            .map_err(|e| failed(repository, "setting up the HTTP client", auth, e))?;
        let mut tags = Vec::new();
        let mut last: Option<String> = None;
        loop {
            let page = client
                .list_tags(&image, &registry_auth(auth), Some(1000), last.as_deref())
                .await
                .map_err(|e| failed(repository, "listing tags", auth, e))?;
            let n = page.tags.len();
            last = page.tags.last().cloned();
            tags.extend(page.tags);
            if n < 1000 || tags.len() > 100_000 {
                return Ok(tags);
            }
        }
    }

    fn cached(&self, digest: &Digest) -> PathBuf {
        self.cache_dir.join(format!("{}.json", digest.hex()))
    }

    /// The package at `digest` in `reference`'s repository: from the cache,
    /// else pulled, checked and cached.
    pub async fn fetch(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<Package, Error> {
        if let Ok(bytes) = std::fs::read(self.cached(digest))
            && let Ok(entry) = serde_json::from_slice::<Value>(&bytes)
            && let (Some(layer), Some(yaml)) = (
                entry.get("layer").and_then(Value::as_str),
                entry.get("yaml").and_then(Value::as_str),
            )
        {
            let contents = parse(reference, layer, yaml.as_bytes())?;
            return Ok(Package {
                reference: reference.to_owned(),
                digest: digest.clone(),
                contents,
            });
        }
        let (layer, yaml) = self.pull(reference, digest, auth, tls).await?;
        let contents = parse(reference, &layer, &yaml)?;
        self.store(digest, &layer, &yaml);
        Ok(Package {
            reference: reference.to_owned(),
            digest: digest.clone(),
            contents,
        })
    }

    /// Writes a checked package.yaml to the cache (atomically) and trims
    /// the cache. A cache that cannot be written only costs a pull later.
    fn store(&self, digest: &Digest, layer: &str, yaml: &[u8]) {
        let entry = serde_json::json!({"layer": layer, "yaml": String::from_utf8_lossy(yaml)});
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.cache_dir)?;
            let mut tmp = tempfile::NamedTempFile::new_in(&self.cache_dir)?;
            std::io::Write::write_all(&mut tmp, entry.to_string().as_bytes())?;
            tmp.persist(self.cached(digest)).map_err(|e| e.error)?;
            Ok(())
        };
        if write().is_ok() {
            trim(&self.cache_dir, self.max_cache_bytes);
        }
    }

    async fn pull(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
        tls: &Tls,
    ) -> Result<(String, Vec<u8>), Error> {
        let repository = repository_of(reference);
        let pinned = format!("{repository}@{digest}");
        let image = parse_reference(&pinned)?;
        let client = crate::push::client(tls, true)
            .map_err(|e| failed(reference, "setting up the HTTP client", auth, e))?;
        let ra = registry_auth(auth);
        let (bytes, _) = client
            .pull_manifest_raw(&image, &ra, &MANIFEST_TYPES)
            .await
            .map_err(|e| failed(reference, "reading the manifest", auth, e))?;
        if Digest::of(&bytes) != *digest {
            return Err(invalid(
                reference,
                "manifest",
                format!("the registry's manifest does not match {digest}"),
            ));
        }
        let mut manifest: Value = serde_json::from_slice(&bytes).map_err(|e| {
            invalid(
                reference,
                "manifest",
                format!("the manifest is not JSON: {e}"),
            )
        })?;
        if is_index(&manifest) {
            let platform = platform_manifest(reference, &manifest)?;
            let image = parse_reference(&format!("{repository}@{platform}"))?;
            let (bytes, _) = client
                .pull_manifest_raw(&image, &ra, &MANIFEST_TYPES)
                .await
                .map_err(|e| failed(reference, "reading the platform manifest", auth, e))?;
            manifest = serde_json::from_slice(&bytes).map_err(|e| {
                invalid(
                    reference,
                    "manifest",
                    format!("the manifest is not JSON: {e}"),
                )
            })?;
        }
        let layers = manifest
            .get("layers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let base = layers.iter().find(|l| {
            l.pointer(&format!(
                "/annotations/{}",
                BASE_ANNOTATION.0.replace('/', "~1")
            ))
            .and_then(Value::as_str)
                == Some(BASE_ANNOTATION.1)
        });
        let chosen: Vec<&Value> = match base {
            Some(b) => vec![b],
            None => layers.iter().collect(),
        };
        let mut found: Option<(String, Vec<u8>)> = None;
        for l in chosen {
            let layer_digest = l
                .get("digest")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let size = l.get("size").and_then(Value::as_u64).unwrap_or(0);
            if size > MAX_BYTES {
                return Err(invalid(
                    reference,
                    &layer_digest,
                    format!(
                        "the layer is {size} bytes; a package layer may have at most {MAX_BYTES}"
                    ),
                ));
            }
            let media = l
                .get("mediaType")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let blob = self
                .blob(&client, &image, reference, &layer_digest, auth)
                .await?;
            if let Some(yaml) = package_file(reference, &layer_digest, &media, &blob)? {
                found = Some((layer_digest, yaml));
            }
        }
        found.ok_or_else(|| {
            invalid(
                reference,
                base.and_then(|b| b.get("digest"))
                    .and_then(Value::as_str)
                    .unwrap_or("all layers"),
                format!("no {PACKAGE_FILE} in the package"),
            )
        })
    }

    /// Downloads a blob, refusing more than [`MAX_BYTES`] and checking its
    /// digest.
    async fn blob(
        &self,
        client: &oci_client::Client,
        image: &Reference,
        reference: &str,
        digest: &str,
        auth: &Auth,
    ) -> Result<Vec<u8>, Error> {
        let mut stream = client
            .pull_blob_stream(image, digest)
            .await
            .map_err(|e| failed(reference, "downloading a layer", auth, e))?;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.stream.next().await {
            let chunk = chunk.map_err(|e| Error::Registry {
                reference: reference.to_owned(),
                step: "downloading a layer",
                transient: true,
                source: Box::new(OciDistributionError::IoError(e)),
            })?;
            if (bytes.len() + chunk.len()) as u64 > MAX_BYTES {
                return Err(invalid(
                    reference,
                    digest,
                    format!("the layer is over {MAX_BYTES} bytes"),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        if Digest::of(&bytes).as_str() != digest {
            return Err(invalid(
                reference,
                digest,
                "the layer does not match its digest",
            ));
        }
        Ok(bytes)
    }
}

/// package.yaml from a layer blob, if the layer has it.
fn package_file(
    reference: &str,
    layer: &str,
    media_type: &str,
    blob: &[u8],
) -> Result<Option<Vec<u8>>, Error> {
    let gzip = blob.starts_with(&[0x1f, 0x8b]);
    let plain_tar = media_type.ends_with(".tar") || media_type.ends_with("tar");
    let reader: Box<dyn std::io::Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(blob))
    } else if plain_tar {
        Box::new(blob)
    } else {
        return Err(invalid(
            reference,
            layer,
            format!("the layer ({media_type}) is not gzip-compressed"),
        ));
    };
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(|e| {
        invalid(
            reference,
            layer,
            format!("the layer is not a tar archive: {e}"),
        )
    })?;
    for entry in entries {
        let entry = entry.map_err(|e| {
            invalid(
                reference,
                layer,
                format!("the layer is not a valid tar archive: {e}"),
            )
        })?;
        let size = entry.header().size().unwrap_or(0);
        if size > MAX_BYTES {
            let path = entry
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            return Err(invalid(
                reference,
                layer,
                format!("{path} is {size} bytes; a package file may have at most {MAX_BYTES}"),
            ));
        }
        let is_package = entry
            .path()
            .is_ok_and(|p| p.strip_prefix("./").unwrap_or(&p) == Path::new(PACKAGE_FILE));
        if is_package {
            let mut bytes = Vec::new();
            entry
                .take(MAX_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|e| invalid(reference, layer, format!("reading {PACKAGE_FILE}: {e}")))?;
            return Ok(Some(bytes));
        }
    }
    Ok(None)
}

/// Deletes the oldest files of `dir` until it holds at most `max` bytes.
fn trim(dir: &Path, max: u64) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = read
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            m.is_file().then(|| {
                (
                    m.modified().unwrap_or(std::time::UNIX_EPOCH),
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

/// Returns the tags that are full semver versions (`v1.2.3` or `1.2.3`,
/// pre-releases included), with their parsed versions.
pub fn semver_tags(tags: &[String]) -> Vec<(semver::Version, String)> {
    tags.iter()
        .filter_map(|t| {
            let v = t.strip_prefix('v').unwrap_or(t);
            semver::Version::parse(v).ok().map(|v| (v, t.clone()))
        })
        .collect()
}

/// BTreeMap alias kept for callers that collect annotations.
pub type Annotations = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const META: &str = "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\nspec:\n  controller:\n    image: example/runtime:v1\n  dependsOn:\n  - provider: example/b\n    version: \">=v1.0.0, <v2.0.0\"\n";
    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\nspec:\n  group: example.org\n";

    fn fault(yaml: &str) -> String {
        parse("reg/pkg:v1", "sha256:abc", yaml.as_bytes())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_meta_and_crds_parse() {
        let c = parse("r", "l", format!("{META}---\n{CRD}").as_bytes()).unwrap();
        assert_eq!(c.meta.name, "provider-test");
        assert_eq!(
            c.meta.controller_image.as_deref(),
            Some("example/runtime:v1")
        );
        assert_eq!(
            c.meta.depends_on,
            [Dependency {
                package: "example/b".into(),
                version: ">=v1.0.0, <v2.0.0".into()
            }]
        );
        assert_eq!(c.objects.len(), 1);
    }

    #[test]
    fn other_kinds_are_refused_naming_reference_layer_and_document() {
        let f = fault(&format!(
            "{META}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"
        ));
        assert!(f.contains("reg/pkg:v1") && f.contains("sha256:abc"), "{f}");
        assert!(
            f.contains("document 2 (line 12)") && f.contains("kind Secret"),
            "{f}"
        );
    }

    #[test]
    fn zero_or_two_metas_are_refused() {
        assert!(fault(CRD).contains("has no meta.pkg.crossplane.io/v1 Provider"));
        let f = fault(&format!("{META}---\n{META}"));
        assert!(
            f.contains("a second meta.pkg.crossplane.io Provider"),
            "{f}"
        );
    }

    #[test]
    fn malformed_yaml_names_its_document_and_line() {
        let f = fault(&format!("{META}---\n{CRD}---\nkind: [unclosed\n"));
        assert!(
            f.contains("document 3 (line 19)") && f.contains("malformed YAML"),
            "{f}"
        );
    }

    #[test]
    fn a_crd_without_group_is_refused() {
        let f = fault(&format!(
            "{META}---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x\n"
        ));
        assert!(f.contains("needs metadata.name and spec.group"), "{f}");
    }

    #[test]
    fn build_is_deterministic_annotated_and_sets_the_runtime_image() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("package.yaml"), META).unwrap();
        std::fs::create_dir(dir.path().join("crds")).unwrap();
        std::fs::write(dir.path().join("crds/a.yaml"), CRD).unwrap();
        let a = build(dir.path(), Some("reg/runtime:v2")).unwrap();
        let b = build(dir.path(), Some("reg/runtime:v2")).unwrap();
        assert_eq!(a.serialize().unwrap().digest, b.serialize().unwrap().digest);
        let manifest = String::from_utf8(a.serialize().unwrap().manifest).unwrap();
        assert!(
            manifest.contains(r#""annotations":{"io.crossplane.xpkg":"base"}"#),
            "{manifest}"
        );
        let blob = a.layers()[0].blob();
        let yaml = package_file("r", "l", crate::LAYER_MEDIA_TYPE, blob)
            .unwrap()
            .unwrap();
        let c = parse("r", "l", &yaml).unwrap();
        assert_eq!(c.meta.controller_image.as_deref(), Some("reg/runtime:v2"));
        assert_eq!(c.objects.len(), 1);
    }

    #[test]
    fn a_layer_that_is_not_gzip_is_refused() {
        let f = package_file("r", "sha256:x", crate::LAYER_MEDIA_TYPE, b"plain")
            .unwrap_err()
            .to_string();
        assert!(
            f.contains("not gzip-compressed") && f.contains("sha256:x"),
            "{f}"
        );
    }

    #[test]
    fn docker_config_credentials_in_both_forms() {
        let plain = br#"{"auths":{"reg.example:5000":{"username":"u","password":"p"}}}"#;
        assert_eq!(
            auth_from_docker_config(plain, "reg.example:5000"),
            Some(Auth::Basic {
                username: "u".into(),
                password: "p".into()
            })
        );
        let encoded = br#"{"auths":{"https://reg.example":{"auth":"dTpwOnE="}}}"#;
        assert_eq!(
            auth_from_docker_config(encoded, "reg.example"),
            Some(Auth::Basic {
                username: "u".into(),
                password: "p:q".into()
            })
        );
        assert_eq!(auth_from_docker_config(plain, "other"), None);
        assert_eq!(auth_from_docker_config(b"not json", "other"), None);
    }

    #[test]
    fn an_index_without_linux_amd64_names_what_it_has() {
        let index = serde_json::json!({"manifests": [{"digest": "sha256:1", "platform": {"os": "linux", "architecture": "arm64"}}]});
        let f = platform_manifest("r", &index).unwrap_err().to_string();
        assert!(
            f.contains("no linux/amd64") && f.contains("linux/arm64"),
            "{f}"
        );
    }

    #[test]
    fn the_cache_keeps_the_newest_files_under_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            std::fs::write(dir.path().join(name), vec![0u8; 100]).unwrap();
            let t =
                std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            std::fs::File::options()
                .write(true)
                .open(dir.path().join(name))
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        trim(dir.path(), 250);
        assert!(!dir.path().join("a").exists());
        assert!(dir.path().join("b").exists() && dir.path().join("c").exists());
    }

    #[test]
    fn semver_tags_skip_partial_and_other_tags() {
        let tags: Vec<String> = ["v0.9.0", "v1.0.0", "v1.2.0", "v1", "latest", "2.0.0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let got: Vec<String> = semver_tags(&tags).into_iter().map(|t| t.1).collect();
        assert_eq!(got, ["v0.9.0", "v1.0.0", "v1.2.0", "2.0.0"]);
    }
}
