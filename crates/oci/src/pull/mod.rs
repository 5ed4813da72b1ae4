//! Pulling Crossplane packages from registries: a tag is resolved to a
//! manifest digest, the package is pulled by digest (never by tag), its
//! `package.yaml` is found, checked with [`crate::xpkg::parse`] and kept in
//! the [`cache`] keyed by digest, so a digest is downloaded once.
//!
//! Everything a registry serves is data ([`crate::registry`] for the
//! requests, [`crate::limits`] for the bounds): layers are downloaded to
//! temporary files in the cache directory (the only writable place of the
//! shipped pod), unpacked and parsed off the async workers, within
//! [`Limits`] ([`layers`]); a panic on the way is an error, not a crashed
//! process.
//!
//! Every request has a deadline ([`crate::registry::TIMEOUT`] to connect
//! and per read, and the same for each manifest or tag list request as a
//! whole): a registry that accepts connections and never answers fails
//! quickly, as [`Error::Unreachable`], which [`Error::is_transient`] tells
//! apart from a package that is wrong.

use std::path::PathBuf;

use oci_spec::distribution::Reference;

mod artifacts;
mod cache;
mod format;
mod layers;
mod manifest;

pub use crate::{
    reference::{registry_of, repository_of, tag_of},
    registry::auth_from_docker_config,
};
pub use artifacts::{ArtifactLayer, MAX_ARTIFACT_LAYER_BYTES, MAX_ARTIFACT_LAYERS, cosign_tag};
pub use format::Format;
pub use layers::Pulled;
pub use manifest::LayerInfo;

use self::{
    cache::Cache,
    layers::Layers,
    manifest::{image_manifest, is_index, manifest_json, platform_manifest, tag_or_digest},
};
use crate::{
    Auth, Digest, Error, Limits, RegistryPolicy, Tls,
    guard::{off_workers, unwinding},
    registry::{Session, http::Transport, pages},
    stack::Stack,
    xpkg::Contents,
};

/// A package read from a registry, in the format `F`.
#[derive(Clone, Debug)]
pub struct Fetched<F> {
    /// The reference it was read by.
    pub reference: String,
    /// Its manifest digest.
    pub digest: Digest,
    /// What it holds.
    pub contents: F,
    /// How long reading it took, step by step.
    pub took: Took,
}

/// How long a fetch took, step by step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Took {
    /// Reading the manifest and downloading the package layer; `None` when
    /// the package came from the cache.
    pub pull: Option<std::time::Duration>,
    /// Parsing (and checking) what was read, and caching it when pulled.
    pub parse: std::time::Duration,
}

/// A Crossplane package read from a registry.
pub type Package = Fetched<Contents>;

/// A stack package read from a registry.
pub type StackPackage = Fetched<Stack>;

/// Pulls packages, keeping what each format reads of them by digest in a
/// size-bounded directory. How registries are reached (TLS, and where
/// credentials may go) is fixed when it is made; one HTTP client serves
/// every request. The credentials are each request's own.
#[derive(Debug)]
pub struct Fetcher {
    cache: Cache,
    limits: Limits,
    policy: RegistryPolicy,
    transport: Transport,
}

impl Fetcher {
    /// Packages cached in `cache_dir` (made when first written), which is
    /// kept under `max_cache_bytes` (the least recently used go first).
    /// Layers are downloaded to temporary files in `cache_dir` too: the one
    /// place the shipped pod may write. Default [`Limits`],
    /// [`RegistryPolicy`] and [`Tls`].
    pub fn new(cache_dir: PathBuf, max_cache_bytes: u64) -> Self {
        Self {
            cache: Cache::new(cache_dir, max_cache_bytes),
            limits: Limits::default(),
            policy: RegistryPolicy::default(),
            transport: Transport::default(),
        }
    }

    /// Reaches registries as `tls` says (a CA bundle, plain HTTP).
    pub fn with_tls(mut self, tls: &Tls) -> Self {
        self.transport = Transport::new(tls);
        self
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
    ) -> Result<Session<'a>, Error> {
        Session::new(
            reference,
            image.resolve_registry(),
            auth,
            &self.transport,
            &self.policy,
        )
    }

    /// The manifest digest `reference` (a tag or a digest) names now; for
    /// an image index, the digest of its linux/amd64 manifest (an index
    /// without one is [`Error::Invalid`], naming the platforms it has).
    pub async fn resolve(&self, reference: &str, auth: &Auth) -> Result<Digest, Error> {
        unwinding(reference, "resolving the reference", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth)?;
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
    pub async fn tags(&self, repository: &str, auth: &Auth) -> Result<Vec<String>, Error> {
        unwinding(repository, "listing tags", async {
            let image = crate::reference::parse(&repository_of(repository))?;
            let session = self.session(repository, &image, auth)?;
            pages::all_tags(&session, image.repository()).await
        })
        .await
    }

    /// The repositories of `registry` (`host[:port]`), every page of them
    /// (the registry's catalog).
    pub async fn catalog(&self, registry: &str, auth: &Auth) -> Result<Vec<String>, Error> {
        unwinding(registry, "listing the registry's repositories", async {
            let image = crate::reference::parse(&format!("{registry}/catalog"))?;
            let session = self.session(registry, &image, auth)?;
            pages::all_repositories(&session).await
        })
        .await
    }

    /// How many bytes of files the cache holds for the package at `digest`
    /// in the format `F`, if it holds it: what a caller may weigh the
    /// package by before reading it.
    pub fn cached_size<F: Format>(&self, digest: &Digest) -> Option<u64> {
        self.cache.size(F::NAME, digest)
    }

    /// The package at `digest` in `reference`'s repository, in the format
    /// `F` ([`Contents`] for a Crossplane package, [`Stack`] for a stack):
    /// from the cache, else pulled (by digest), checked and cached.
    /// Unpacking and parsing run off the async workers.
    pub async fn fetch<F: Format>(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
    ) -> Result<Fetched<F>, Error> {
        unwinding(reference, F::READING, async {
            let cache = self.cache.clone();
            let key = digest.clone();
            let hit = off_workers(reference, "reading the package cache", move || {
                Ok(cache.get(F::NAME, &key))
            })
            .await?;
            let (layer, files, pull) = match hit {
                Some((layer, files)) => (layer, files, None),
                None => {
                    let started = std::time::Instant::now();
                    let pulled = self.pull_files(reference, digest, auth, F::wanted).await?;
                    (pulled.layer, pulled.files, Some(started.elapsed()))
                }
            };
            let (fresh, parsing) = (pull.is_some(), std::time::Instant::now());
            let (cache, key, limits) = (self.cache.clone(), digest.clone(), self.limits.clone());
            let owned = reference.to_owned();
            let contents = off_workers(reference, F::PARSING, move || {
                if !fresh {
                    return F::parse_kept(&owned, &layer, &files, &limits);
                }
                let contents = F::parse(&owned, &layer, &files, &limits)?;
                // Checked before it is cached: a bad package is never kept.
                cache.store(F::NAME, &key, &layer, &contents.kept(files));
                Ok(contents)
            })
            .await?;
            Ok(Fetched {
                reference: reference.to_owned(),
                digest: digest.clone(),
                contents,
                took: Took {
                    pull,
                    parse: parsing.elapsed(),
                },
            })
        })
        .await
    }

    /// What the manifest of the image at `digest` says about its package
    /// layer: one manifest read (two for an index), no layer downloaded.
    pub async fn layer_info(
        &self,
        reference: &str,
        digest: &Digest,
        auth: &Auth,
    ) -> Result<LayerInfo, Error> {
        unwinding(reference, "reading the manifest", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth)?;
            let json = image_manifest(&session, reference, &image, digest).await?;
            Ok(LayerInfo::of(&json))
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
        wanted: fn(&str) -> bool,
    ) -> Result<Pulled, Error> {
        unwinding(reference, "pulling the package", async {
            let image = crate::reference::parse(reference)?;
            let session = self.session(reference, &image, auth)?;
            let json = image_manifest(&session, reference, &image, digest).await?;
            let layers = Layers {
                session: &session,
                reference,
                limits: &self.limits,
                cache: &self.cache,
            };
            layers.read(&image, &json, wanted).await
        })
        .await
    }
}

#[cfg(test)]
impl Fetcher {
    /// A temporary file as a layer is downloaded to (tests check where).
    fn temp_file(&self) -> std::io::Result<std::fs::File> {
        self.cache.temp_file()
    }
}

#[cfg(test)]
mod hostile_tests;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::time::{Duration, SystemTime};

    use crate::registry::TIMEOUT;

    const META: &str =
        "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-test\n";
    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.example.org\nspec:\n  group: example.org\n";

    fn package_yaml(yaml: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
        [("package.yaml".to_owned(), yaml.as_bytes().to_vec())].into()
    }

    #[tokio::test]
    async fn a_cached_package_is_read_without_the_registry_and_kept_used() {
        let dir = tempfile::tempdir().unwrap();
        let fetcher = Fetcher::new(dir.path().to_path_buf(), 1 << 20).with_tls(&Tls::PlainHttp);
        let digest = Digest::of(b"manifest");
        fetcher.cache.store(
            "package",
            &digest,
            "sha256:layer",
            &package_yaml(&format!("{META}---\n{CRD}")),
        );
        let path = dir.path().join(format!("{}.package.cache", digest.hex()));
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH)
            .unwrap();
        // Port 9 on loopback: nothing is asked of it.
        let p = fetcher
            .fetch::<Contents>("127.0.0.1:9/x:v1", &digest, &Auth::Anonymous)
            .await
            .unwrap();
        assert_eq!(p.contents.meta.name, "provider-test");
        assert_eq!(p.contents.objects.len(), 1);
        assert_eq!(p.took.pull, None, "a hit pulls nothing");
        let touched = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(
            touched > SystemTime::UNIX_EPOCH,
            "a hit marks the file used"
        );
        // The same digest read as a stack is not that entry: it is pulled
        // (and port 9 refuses).
        let e = fetcher
            .fetch::<Stack>("127.0.0.1:9/x:v1", &digest, &Auth::Anonymous)
            .await
            .unwrap_err();
        assert!(e.is_transient(), "{e}");
        // A cached package that is (no longer) valid names the cached layer.
        fetcher
            .cache
            .store("package", &digest, "sha256:layer", &package_yaml(CRD));
        let f = fetcher
            .fetch::<Contents>("127.0.0.1:9/x:v1", &digest, &Auth::Anonymous)
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
        let fetcher = Fetcher::new(std::env::temp_dir(), 0).with_tls(&Tls::PlainHttp);
        let e = fetcher
            .resolve(&reference, &Auth::Anonymous)
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
        let fetcher = Fetcher::new(std::env::temp_dir(), 0).with_tls(&Tls::PlainHttp);
        let started = std::time::Instant::now();
        let e = fetcher
            .resolve(&reference, &Auth::Anonymous)
            .await
            .unwrap_err();
        let took = started.elapsed();
        held.abort();
        assert!(took < TIMEOUT + Duration::from_secs(3), "{took:?}");
        assert!(e.is_transient(), "{e:?}");
        assert!(e.to_string().ends_with("no answer within 10s"), "{e}");
    }
}
