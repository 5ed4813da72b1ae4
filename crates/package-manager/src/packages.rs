//! Reading packages from registries for the controllers: credentials from a
//! package's pull secrets (else `--registry-pull-secret`), the CA bundle of
//! `--ca-bundle-path`, registry rewrites (`--registry-rewrite`), and the
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
    rewrites: Arc<Rewrites>,
    pull_secret: Option<String>,
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

/// Registry rewrites: a reference starting with a prefix is read from
/// another place (`registry.crossplane.io` → `10.0.0.1:5000/stacks`), in
/// the spirit of Crossplane's ImageConfig rewrites. Objects keep the name
/// the user wrote; only where it is read from changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rewrites(Vec<(String, String)>);

impl Rewrites {
    /// Parses `FROM=TO` settings; the longest matching prefix wins.
    pub fn parse(settings: &[String]) -> Result<Self, String> {
        let mut rules = Vec::new();
        for s in settings {
            let Some((from, to)) = s.split_once('=') else {
                return Err(format!(
                    "--registry-rewrite {s:?}: write FROM=TO, e.g. registry.crossplane.io=10.0.0.1:5000/stacks"
                ));
            };
            let (from, to) = (
                from.trim().trim_end_matches('/'),
                to.trim().trim_end_matches('/'),
            );
            if from.is_empty() || to.is_empty() || to.contains("://") || from.contains("://") {
                return Err(format!(
                    "--registry-rewrite {s:?}: FROM and TO are host[:port][/path] prefixes, without a scheme"
                ));
            }
            rules.push((from.to_owned(), to.to_owned()));
        }
        rules.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        Ok(Self(rules))
    }

    /// Where `reference` is read from: the first prefix it starts with (at
    /// a path boundary) replaced, else itself.
    pub fn apply(&self, reference: &str) -> String {
        for (from, to) in &self.0 {
            if let Some(rest) = reference.strip_prefix(from.as_str())
                && (rest.is_empty() || rest.starts_with(['/', ':', '@']))
            {
                return format!("{to}{rest}");
            }
        }
        reference.to_owned()
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
}

impl Packages {
    /// Packages fetched through `fetcher`, trusting `tls`, with pull secrets
    /// read from `secrets` (the package manager's namespace).
    pub fn new(fetcher: xpkg::Fetcher, tls: Tls, secrets: Api<Secret>) -> Self {
        Self {
            fetcher: Arc::new(fetcher),
            tls,
            secrets,
            rewrites: Arc::new(Rewrites::default()),
            pull_secret: None,
        }
    }

    /// Reads through `rewrites`, and with the credentials of `pull_secret`
    /// (a dockerconfigjson Secret in the package manager's namespace) for
    /// any registry a package's own pull secrets do not cover.
    pub fn with_registry_settings(
        mut self,
        rewrites: Rewrites,
        pull_secret: Option<String>,
    ) -> Self {
        self.rewrites = Arc::new(rewrites);
        self.pull_secret = pull_secret;
        self
    }

    /// Where `reference` is read from (after the registry rewrites).
    pub fn location(&self, reference: &str) -> String {
        self.rewrites.apply(reference)
    }

    /// The credentials for `reference` among `pull_secrets` (the first
    /// Secret with an entry for its registry), else anonymous.
    pub async fn auth(
        &self,
        reference: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Auth, FetchError> {
        let registry = xpkg::registry_of(&self.location(reference));
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
        // The package manager's own credentials are optional: a registry
        // that needs them and does not get them says so (see `explain`).
        if let Some(name) = &self.pull_secret {
            let secret = self.secrets.get_opt(name).await.map_err(|e| {
                FetchError::PullSecret(format!(
                    "cannot read --registry-pull-secret {name}: {}",
                    runtime::events::error_chain(&e)
                ))
            })?;
            let json = secret
                .as_ref()
                .and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(DOCKER_CONFIG_KEY));
            if let Some(auth) = json.and_then(|j| xpkg::auth_from_docker_config(&j.0, &registry)) {
                return Ok(auth);
            }
        }
        Ok(Auth::Anonymous)
    }

    /// A registry failure, with where the package manager's own
    /// credentials come from when the registry wants some.
    fn explain(&self, e: oci::Error) -> FetchError {
        match (&e, &self.pull_secret) {
            (oci::Error::Unauthorized { registry, .. }, Some(name)) => {
                FetchError::PullSecret(format!(
                    "{e}; the package manager's credentials come from Secret {}/{name} (--registry-pull-secret, type kubernetes.io/dockerconfigjson): give it an entry for {registry}",
                    self.secrets_namespace()
                ))
            }
            _ => FetchError::Oci(e),
        }
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
        self.fetcher
            .resolve(&self.location(reference), &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))
    }

    /// The tags of `repository` (`host/repository`).
    pub async fn tags(
        &self,
        repository: &str,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Vec<String>, FetchError> {
        let auth = self.auth(repository, pull_secrets).await?;
        self.fetcher
            .tags(&self.location(repository), &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))
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
        let mut package = self
            .fetcher
            .fetch(&self.location(reference), digest, &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))?;
        package.reference = reference.to_owned();
        Ok(package)
    }

    /// The stack package at `digest` of `reference`'s repository (from the
    /// cache when it is there).
    pub async fn fetch_stack(
        &self,
        reference: &str,
        digest: &Digest,
    ) -> Result<oci::pull::StackPackage, FetchError> {
        let auth = self.auth(reference, &[]).await?;
        let mut package = self
            .fetcher
            .fetch_stack(&self.location(reference), digest, &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))?;
        package.reference = reference.to_owned();
        Ok(package)
    }

    /// The runtime image of a package that names none in its meta
    /// (`spec.controller.image`): the package image itself, pinned to
    /// `digest` at the location it is pulled from, when it carries a
    /// runtime; `None` for a package of files alone. One manifest read.
    pub async fn runtime_image(
        &self,
        reference: &str,
        digest: &Digest,
        pull_secrets: &[LocalObjectReference],
    ) -> Result<Option<String>, FetchError> {
        let auth = self.auth(reference, pull_secrets).await?;
        let location = self.location(reference);
        let info = self
            .fetcher
            .layer_info(&location, digest, &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))?;
        Ok(info
            .carries_runtime()
            .then(|| format!("{}@{}", xpkg::repository_of(&location), digest.as_str())))
    }

    /// What the package layer of the image at `digest` says about itself
    /// (its annotations, its size): one manifest read.
    pub async fn layer_info(
        &self,
        reference: &str,
        digest: &Digest,
    ) -> Result<oci::pull::LayerInfo, FetchError> {
        let auth = self.auth(reference, &[]).await?;
        self.fetcher
            .layer_info(&self.location(reference), digest, &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))
    }

    /// The repositories of the registry `source` (`host[:port][/path]`)
    /// names, under its path, as `source/<rest>`.
    pub async fn repositories(&self, source: &str) -> Result<Vec<String>, FetchError> {
        let location = self.location(source);
        let (host, path) = location.split_once('/').unwrap_or((&location, ""));
        let auth = self.auth(&format!("{host}/x"), &[]).await?;
        let all = self
            .fetcher
            .catalog(host, &auth, &self.tls)
            .await
            .map_err(|e| self.explain(e))?;
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
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn rewrites_replace_the_longest_prefix_at_a_boundary() {
        let r = Rewrites::parse(&[
            "registry.crossplane.io=10.0.0.1:5000".to_owned(),
            "registry.crossplane.io/special=10.0.0.2:5000/x".to_owned(),
        ])
        .unwrap();
        assert_eq!(
            r.apply("registry.crossplane.io/redis:v0.1.0"),
            "10.0.0.1:5000/redis:v0.1.0"
        );
        assert_eq!(
            r.apply("registry.crossplane.io/special/a:v1"),
            "10.0.0.2:5000/x/a:v1"
        );
        assert_eq!(r.apply("registry.crossplane.io"), "10.0.0.1:5000");
        assert_eq!(
            r.apply("registry.crossplane.iox/a:v1"),
            "registry.crossplane.iox/a:v1"
        );
        assert_eq!(r.apply("other.example/a:v1"), "other.example/a:v1");
        assert!(Rewrites::parse(&["nope".to_owned()]).is_err());
        assert!(Rewrites::parse(&["https://a=b".to_owned()]).is_err());
    }
}
