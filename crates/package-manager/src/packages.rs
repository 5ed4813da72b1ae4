//! Reading packages from registries for the controllers: credentials from a
//! package's pull secrets, the CA bundle of `--ca-bundle-path`, and the
//! digest-keyed cache of `oci::xpkg::Fetcher`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use oci::{Auth, Digest, Tls, xpkg};
use types::common::LocalObjectReference;

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// Where packages come from.
#[derive(Clone)]
pub struct Packages {
    fetcher: Arc<xpkg::Fetcher>,
    tls: Tls,
    secrets: Api<Secret>,
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
}

impl Packages {
    /// Packages fetched through `fetcher`, trusting `tls`, with pull secrets
    /// read from `secrets` (the package manager's namespace).
    pub fn new(fetcher: xpkg::Fetcher, tls: Tls, secrets: Api<Secret>) -> Self {
        Self {
            fetcher: Arc::new(fetcher),
            tls,
            secrets,
        }
    }

    /// The credentials for `reference` among `pull_secrets` (the first
    /// Secret with an entry for its registry), else anonymous.
    pub async fn auth(
        &self,
        reference: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Auth, FetchError> {
        let registry = xpkg::registry_of(reference);
        for s in pull_secrets {
            let secret = self.secrets.get_opt(&s.name).await.map_err(|e| {
                FetchError::PullSecret(format!(
                    "cannot read packagePullSecret {}: {}",
                    s.name,
                    runtime::events::error_chain(&e)
                ))
            })?;
            let Some(secret) = secret else {
                return Err(FetchError::PullSecret(format!(
                    "packagePullSecret {} does not exist in namespace {}; create it (type kubernetes.io/dockerconfigjson) or remove it from spec.packagePullSecrets",
                    s.name,
                    self.secrets_namespace()
                )));
            };
            let Some(json) = secret.data.as_ref().and_then(|d| d.get(DOCKER_CONFIG_KEY)) else {
                return Err(FetchError::PullSecret(format!(
                    "packagePullSecret {} has no {DOCKER_CONFIG_KEY} key; it must be of type kubernetes.io/dockerconfigjson",
                    s.name
                )));
            };
            if let Some(auth) = xpkg::auth_from_docker_config(&json.0, &registry) {
                return Ok(auth);
            }
        }
        Ok(Auth::Anonymous)
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
        let auth = self.auth(reference, pull_secrets).await?;
        Ok(self.fetcher.resolve(reference, &auth, &self.tls).await?)
    }

    /// The tags of `repository` (`host/repository`).
    pub async fn tags(
        &self,
        repository: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Vec<String>, FetchError> {
        let auth = self.auth(repository, pull_secrets).await?;
        Ok(self.fetcher.tags(repository, &auth, &self.tls).await?)
    }

    /// The package at `digest` of `reference`'s repository (from the cache
    /// when it is there).
    pub async fn fetch(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<xpkg::Package, FetchError> {
        let auth = self.auth(reference, pull_secrets).await?;
        Ok(self
            .fetcher
            .fetch(reference, digest, &auth, &self.tls)
            .await?)
    }
}
