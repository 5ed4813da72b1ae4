//! Reading packages from registries for the controllers: where from and
//! with which credentials as the ImageConfigs say (`crate::image_configs`),
//! else a package's own pull secrets, through the one `oci::xpkg::Fetcher`
//! (the CA bundle of `--ca-bundle-path` and the digest-keyed cache are
//! its own). Every read is the same three steps: [`Packages::access`]
//! (where and as whom), the fetcher's call, and [`Access::answer`] (a
//! refusal explained with where credentials come from).

use std::{ops::Deref, sync::Arc};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use oci::{
    Auth, Digest,
    pull::{Fetched, Format, LayerInfo, StackPackage},
    xpkg,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use types::common::LocalObjectReference;
use types::pkg::v1beta1::Resolved;

use crate::image_configs::ImageConfigs;

/// A package read into memory, holding one of the
/// `--max-packages-in-memory` places while it lives: a Provider package of
/// hundreds of large CRDs is tens of MiB as objects, and every Provider and
/// revision controller worker could hold one at once.
pub struct Held<T> {
    value: T,
    _place: Option<OwnedSemaphorePermit>,
}

impl<T> Held<T> {
    /// The same place, holding what `f` keeps of the package.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Held<U> {
        Held {
            value: f(self.value),
            _place: self._place,
        }
    }
}

impl<T> Deref for Held<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// Where packages come from.
#[derive(Clone)]
pub struct Packages {
    fetcher: Arc<xpkg::Fetcher>,
    secrets: Api<Secret>,
    image_configs: Arc<ImageConfigs>,
    /// The places for Provider packages in memory ([`Held`]).
    in_memory: Arc<Semaphore>,
    /// Seconds each fetch spent pulling and parsing ([`fetch_steps`]).
    steps: prometheus::HistogramVec,
}

/// The package-manager's histogram of fetch steps, registered with its
/// metrics (once, however often its controllers are built again):
/// `crossplane_rs_package_fetch_seconds{step="pull"|"parse"}`, pull only
/// when the package was not cached yet.
pub fn fetch_steps(
    metrics: &runtime::metrics::Metrics,
) -> Result<prometheus::HistogramVec, prometheus::Error> {
    let steps = prometheus::HistogramVec::new(
        prometheus::HistogramOpts::new(
            "crossplane_rs_package_fetch_seconds",
            "Time spent reading a package, by step: pull (its manifest and package layer from the registry, when it was not cached) and parse (reading and checking its objects).",
        )
        .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
        &["step"],
    )?;
    metrics.register(steps)
}

/// A place in memory ([`Held`]) is this many units of a MiB: what a
/// package may take at most as objects (the parse bound).
const UNITS_PER_PLACE: u32 = 40;
/// About how many bytes of objects a byte of a package's files becomes
/// once parsed.
const OBJECTS_PER_FILE_BYTE: u64 = 8;

/// The cache keeps a package's objects as compact JSON, about two thirds
/// of its package.yaml (provider-kubernetes v1.3.1: 79642 bytes of JSON
/// for 119577 of YAML): its files' size, about, from the size kept (an
/// entry that still holds the YAML is counted half again: never lighter).
fn file_bytes_of_kept(kept_bytes: u64) -> u64 {
    kept_bytes.saturating_mul(3) / 2
}

/// How many units of a place a package takes, by the size of its files in
/// the cache: a whole place when it is not there yet (its size is not
/// known before it is read), else its files' size as objects, so that
/// packages of a few small CRDs are read side by side while one of
/// hundreds of large ones takes a place of its own.
fn weight(cached_bytes: Option<u64>) -> u32 {
    let Some(bytes) = cached_bytes else {
        return UNITS_PER_PLACE;
    };
    let mib = bytes
        .saturating_mul(OBJECTS_PER_FILE_BYTE)
        .div_ceil(1 << 20);
    u32::try_from(mib)
        .unwrap_or(UNITS_PER_PLACE)
        .clamp(1, UNITS_PER_PLACE)
}

/// Where a reference is read from and as whom: what the ImageConfigs and
/// the pull secrets make of it.
struct Access {
    resolved: Resolved,
    auth: Auth,
    /// The namespace pull secrets are read from (for messages).
    secrets_namespace: String,
}

impl Access {
    /// The reference to read, after the ImageConfigs.
    fn image(&self) -> &str {
        &self.resolved.image
    }

    /// What a registry answered, a refusal explained with where
    /// credentials come from.
    fn answer<T>(&self, answered: Result<T, oci::Error>) -> Result<T, FetchError> {
        answered.map_err(|e| match (&e, &self.resolved.pull_secret) {
            (oci::Error::Unauthorized { registry, .. }, Some((config, secret))) => {
                FetchError::PullSecret(format!(
                    "{e}; the credentials come from Secret {}/{secret} (ImageConfig {config}): give it an entry for {registry}",
                    self.secrets_namespace
                ))
            }
            (oci::Error::Unauthorized { registry, .. }, None) => FetchError::PullSecret(format!(
                "{e}; give the package a packagePullSecret, or make an ImageConfig whose spec.registry.authentication.pullSecretRef names a kubernetes.io/dockerconfigjson Secret with an entry for {registry}"
            )),
            _ => FetchError::Oci(e),
        })
    }
}

/// An object name for a repository (`host/path/name`): its last path
/// segment as a DNS label (lower case, other characters as '-', at most 63),
/// else `fallback`.
pub fn object_name(repository: &str, fallback: &str) -> String {
    let last = repository.rsplit('/').next().unwrap_or(repository);
    let mut name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(63);
    let name = name.trim_matches('-');
    if name.is_empty() {
        fallback.to_owned()
    } else {
        name.to_owned()
    }
}

/// Why a package could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A pull secret is missing or unusable; the message says which.
    #[error("{0}")]
    PullSecret(String),
    /// The registry or the package failed.
    #[error(transparent)]
    Oci(#[from] oci::Error),
}

impl FetchError {
    /// Whether trying again later may succeed without anyone changing
    /// anything (the registry is down or slow).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::PullSecret(_) => false,
            Self::Oci(e) => e.is_transient(),
        }
    }

    /// Whether credentials are missing or refused (a pull Secret, the
    /// registry's 401).
    pub fn is_credentials(&self) -> bool {
        matches!(
            self,
            Self::PullSecret(_) | Self::Oci(oci::Error::Unauthorized { .. })
        )
    }
}

impl Packages {
    /// Packages fetched through `fetcher` (which fixes how registries are
    /// reached), with pull secrets read from `secrets` (the runtimes'
    /// namespace), read where and with the credentials `image_configs` say.
    pub fn new(
        fetcher: Arc<xpkg::Fetcher>,
        secrets: Api<Secret>,
        image_configs: Arc<ImageConfigs>,
        max_in_memory: usize,
        steps: prometheus::HistogramVec,
    ) -> Self {
        Self {
            fetcher,
            secrets,
            image_configs,
            steps,
            in_memory: Arc::new(Semaphore::new(
                max_in_memory
                    .max(1)
                    .saturating_mul(UNITS_PER_PLACE as usize),
            )),
        }
    }

    /// Whether the ImageConfigs have been listed.
    pub async fn ready(&self) -> bool {
        self.image_configs.ready().await
    }

    /// What the ImageConfigs make of `reference`: where it is read from,
    /// the pull secret they give it, and which applied.
    pub async fn resolved(&self, reference: &str) -> Resolved {
        self.image_configs.resolve(reference).await
    }

    /// The ImageConfig that requires `image` (as it is read) to be
    /// verified, if one does: its name, resourceVersion and verification.
    pub async fn verifying(
        &self,
        image: &str,
    ) -> Option<(String, String, types::pkg::v1beta1::ImageVerification)> {
        self.image_configs.verifying(image).await
    }

    /// The layers of the artifact tagged `tag` beside `reference` (where
    /// the ImageConfigs say it is read from, with its credentials), `None`
    /// when there is none: a cosign signature or attestation.
    pub async fn artifact(
        &self,
        reference: &str,
        tag: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Option<Vec<oci::pull::ArtifactLayer>>, FetchError> {
        let to = self.access(reference, pull_secrets).await?;
        to.answer(self.fetcher.artifact(to.image(), tag, &to.auth).await)
    }

    /// The text at `key` of the Secret `name` (in the runtimes' namespace,
    /// where pull secrets are): a public key an ImageConfig names. The
    /// message of a failure says what to fix.
    pub async fn secret_text(&self, name: &str, key: &str) -> Result<String, String> {
        let secret = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| format!("cannot read Secret {name}: {}", runtime::events::error_chain(&e)))?
            .ok_or_else(|| {
                format!(
                    "Secret {name} does not exist in namespace {}; create it with the public key at {key}",
                    self.secrets_namespace()
                )
            })?;
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .ok_or_else(|| format!("Secret {name} has no key {key}"))?;
        String::from_utf8(bytes.0.clone())
            .map_err(|_| format!("Secret {name} key {key} is not text"))
    }

    /// The runtime config the ImageConfigs pick for a package read as
    /// `image` (after rewrites), with the picking ImageConfig's name.
    pub async fn runtime_config_for(
        &self,
        image: &str,
    ) -> Option<(String, types::pkg::v1::RuntimeConfigReference)> {
        self.image_configs.runtime_config_for(image).await
    }

    /// Where `reference` is read from (after the ImageConfigs) and as
    /// whom (see [`Packages::auth`]).
    async fn access(
        &self,
        reference: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Access, FetchError> {
        let resolved = self.resolved(reference).await;
        self.access_to(resolved, pull_secrets).await
    }

    /// As whom `resolved` is read.
    async fn access_to(
        &self,
        resolved: Resolved,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Access, FetchError> {
        Ok(Access {
            auth: self.auth(&resolved, pull_secrets).await?,
            resolved,
            secrets_namespace: self.secrets_namespace(),
        })
    }

    /// The credentials for `resolved` (a reference after the ImageConfigs):
    /// the first of `pull_secrets` with an entry for its registry, else the
    /// ImageConfig's pull secret, else anonymous.
    async fn auth(
        &self,
        resolved: &Resolved,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Auth, FetchError> {
        let registry = xpkg::registry_of(&resolved.image);
        for s in pull_secrets {
            let named = format!("packagePullSecret {}", s.name);
            let fix = "create it (type kubernetes.io/dockerconfigjson) or remove it from spec.packagePullSecrets";
            if let Some(auth) = self.auth_from(&s.name, &named, fix, &registry).await? {
                return Ok(auth);
            }
        }
        if let Some((config, secret)) = &resolved.pull_secret {
            let named = format!("pull Secret {secret} of ImageConfig {config}");
            let fix = "create it (type kubernetes.io/dockerconfigjson) or change the ImageConfig's spec.registry.authentication.pullSecretRef";
            if let Some(auth) = self.auth_from(secret, &named, fix, &registry).await? {
                return Ok(auth);
            }
        }
        Ok(Auth::Anonymous)
    }

    /// The credentials for `registry` in the dockerconfigjson Secret
    /// `name` (`named` says whose it is, `fix` what to do when it is
    /// missing); `None` when it has no entry for that registry.
    async fn auth_from(
        &self,
        name: &str,
        named: &str,
        fix: &str,
        registry: &str,
    ) -> Result<Option<Auth>, FetchError> {
        let secret = self.secrets.get_opt(name).await.map_err(|e| {
            FetchError::PullSecret(format!(
                "cannot read {named}: {}",
                runtime::events::error_chain(&e)
            ))
        })?;
        let Some(secret) = secret else {
            return Err(FetchError::PullSecret(format!(
                "{named} does not exist in namespace {}; {fix}",
                self.secrets_namespace()
            )));
        };
        let Some(json) = secret.data.as_ref().and_then(|d| d.get(DOCKER_CONFIG_KEY)) else {
            return Err(FetchError::PullSecret(format!(
                "{named} has no {DOCKER_CONFIG_KEY} key; it must be of type kubernetes.io/dockerconfigjson"
            )));
        };
        Ok(xpkg::auth_from_docker_config(&json.0, registry))
    }

    fn secrets_namespace(&self) -> String {
        self.secrets.namespace().unwrap_or("default").to_owned()
    }

    /// The digest `reference` (a tag or a digest) names now.
    pub async fn resolve(
        &self,
        reference: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Digest, FetchError> {
        let to = self.access(reference, pull_secrets).await?;
        to.answer(self.fetcher.resolve(to.image(), &to.auth).await)
    }

    /// The tags of `repository` (`host/repository`).
    pub async fn tags(
        &self,
        repository: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Vec<String>, FetchError> {
        let to = self.access(repository, pull_secrets).await?;
        to.answer(self.fetcher.tags(to.image(), &to.auth).await)
    }

    /// The package at `digest` of `reference`'s repository in the format
    /// `F`, from the cache when it is there, named by `reference`.
    async fn fetch_as<F: Format>(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Fetched<F>, FetchError> {
        let to = self.access(reference, pull_secrets).await?;
        let fetched = to.answer(self.fetcher.fetch::<F>(to.image(), digest, &to.auth).await)?;
        if let Some(pull) = fetched.took.pull {
            self.steps
                .with_label_values(&["pull"])
                .observe(pull.as_secs_f64());
        }
        self.steps
            .with_label_values(&["parse"])
            .observe(fetched.took.parse.as_secs_f64());
        Ok(Fetched {
            reference: reference.to_owned(),
            ..fetched
        })
    }

    /// The package at `digest` of `reference`'s repository (from the cache
    /// when it is there), once a place in memory is free; the place is held
    /// until the package is dropped, so the caller must not fetch another
    /// while it holds one.
    pub async fn fetch(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Held<xpkg::Package>, FetchError> {
        // The semaphore is never closed: a place always comes.
        let cached = self.fetcher.cached_size::<xpkg::Contents>(digest);
        let weight = weight(cached.map(file_bytes_of_kept));
        let place = self.in_memory.clone().acquire_many_owned(weight).await.ok();
        let value = self.fetch_as(reference, digest, pull_secrets).await?;
        Ok(Held {
            value,
            _place: place,
        })
    }

    /// The stack package at `digest` of `reference`'s repository (from the
    /// cache when it is there).
    pub async fn fetch_stack(
        &self,
        reference: &str,
        digest: &Digest,
    ) -> Result<StackPackage, FetchError> {
        self.fetch_as(reference, digest, &[]).await
    }

    /// The runtime image of a package that names none in its meta
    /// (`spec.controller.image`): the package image itself, pinned to
    /// `digest` under the name the package has (the ImageConfigs rewrite
    /// it where the runtime is rendered), when it carries a runtime; `None`
    /// for a package of files alone. One manifest read.
    pub async fn runtime_image(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Option<String>, FetchError> {
        let info = self.layer_info(reference, digest, pull_secrets).await?;
        Ok(info
            .carries_runtime()
            .then(|| format!("{}@{}", xpkg::repository_of(reference), digest.as_str())))
    }

    /// What the package layer of the image at `digest` says about itself
    /// (its annotations, its size): one manifest read.
    pub async fn layer_info(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<LayerInfo, FetchError> {
        let to = self.access(reference, pull_secrets).await?;
        to.answer(self.fetcher.layer_info(to.image(), digest, &to.auth).await)
    }

    /// The repositories of the registry `source` (`host[:port][/path]`)
    /// names, under its path, as `source/<rest>`; read with the
    /// credentials the ImageConfigs give `source` for its registry.
    pub async fn repositories(&self, source: &str) -> Result<Vec<String>, FetchError> {
        let resolved = self.resolved(source).await;
        let location = resolved.image.clone();
        let (host, path) = location.split_once('/').unwrap_or((&location, ""));
        let registry = Resolved {
            image: format!("{host}/x"),
            ..resolved
        };
        let to = self.access_to(registry, &[]).await?;
        let all = to.answer(self.fetcher.catalog(host, &to.auth).await)?;
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        Ok(all
            .into_iter()
            .filter_map(|r| {
                r.strip_prefix(&prefix)
                    .map(|rest| format!("{source}/{rest}"))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_weighs_its_files_as_objects_and_an_unread_one_a_whole_place() {
        assert_eq!(weight(None), UNITS_PER_PLACE);
        // A Provider of a few small CRDs: one unit, forty side by side.
        assert_eq!(weight(Some(20 * 1024)), 1);
        assert_eq!(weight(Some(0)), 1);
        // 1 MiB of YAML: about 8 MiB as objects.
        assert_eq!(weight(Some(1 << 20)), 8);
        // One of hundreds of large CRDs: a place of its own.
        assert_eq!(weight(Some(30 << 20)), UNITS_PER_PLACE);
        assert_eq!(weight(Some(u64::MAX)), UNITS_PER_PLACE);
    }

    #[test]
    fn a_package_kept_as_json_weighs_as_its_yaml_did() {
        // Two thirds of a MiB of JSON: the MiB of YAML it was parsed from.
        assert_eq!(weight(Some(file_bytes_of_kept((2 << 20) / 3))), 8);
        assert_eq!(weight(Some(file_bytes_of_kept(u64::MAX))), UNITS_PER_PLACE);
    }
}
