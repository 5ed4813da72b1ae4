//! Clients for remote clusters, built from kubeconfig bytes held in a Secret.
//!
//! Clients are cached by the Secret's UID and resourceVersion, so a rotated
//! kubeconfig takes effect at once and an unchanged one costs nothing. Each
//! cluster has its own discovery cache: templated kinds are resolved in the
//! cluster that serves them, never from a compiled-in list.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use http::Request;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client, Config,
    api::GroupVersionKind,
    client::ClientBuilder,
    config::{KubeConfigOptions, Kubeconfig},
    discovery::{ApiCapabilities, ApiResource},
};
use prometheus::IntCounterVec;
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// Bound on connecting to a remote cluster: an unreachable cluster must fail
/// a reconcile quickly rather than hold a worker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request to a remote cluster (watches are not used remotely).
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a remote cluster could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The Secret lacks the kubeconfig key.
    #[error("Secret {secret} has no key {key:?}; put a kubeconfig under that key")]
    MissingKey {
        /// namespace/name of the Secret.
        secret: String,
        /// The expected key.
        key: String,
    },
    /// The kubeconfig does not parse.
    #[error("Secret {secret} key {key:?} does not hold a valid kubeconfig")]
    InvalidKubeconfig {
        /// namespace/name of the Secret.
        secret: String,
        /// The key.
        key: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A client could not be built from the kubeconfig.
    #[error("cannot build a client from the kubeconfig in Secret {secret}")]
    Client {
        /// namespace/name of the Secret.
        secret: String,
        /// Cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A connected remote cluster.
#[derive(Clone)]
pub struct RemoteCluster {
    /// The client, counting its requests by verb.
    pub client: Client,
    /// The cluster's key in metrics (the KubernetesCluster or ProviderConfig name).
    pub name: String,
    discovery: Arc<DiscoveryCache>,
}

impl RemoteCluster {
    /// A cluster reached with an existing client (e.g. the control cluster
    /// itself), with its own discovery cache.
    pub fn new(client: Client, name: &str) -> Self {
        Self {
            client,
            name: name.to_owned(),
            discovery: Arc::default(),
        }
    }

    /// Resolves a kind served by this cluster, caching the answer. A miss is
    /// not cached, so a CRD installed later is found on the next try.
    pub async fn resolve(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, ApiCapabilities), ResolveError> {
        self.discovery
            .resolve(&self.client, gvk)
            .await
            .map_err(|e| match e {
                // Only an answer that the kind is not there means "not served";
                // any other failure means the cluster did not answer, and must
                // not be taken for "nothing of that kind can exist there".
                kube::Error::Api(ref s) if s.code == 404 => ResolveError::NotServed(e),
                kube::Error::Discovery(_) => ResolveError::NotServed(e),
                other => ResolveError::Unreachable(other),
            })
    }

    /// Forgets what discovery learned (e.g. after a NotFound that suggests a
    /// CRD was removed).
    pub fn forget(&self, gvk: &GroupVersionKind) {
        self.discovery.forget(gvk);
    }
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The cluster answered: it does not serve the kind.
    #[error("the cluster does not serve this kind")]
    NotServed(#[source] kube::Error),
    /// The cluster did not answer discovery.
    #[error("the cluster did not answer discovery")]
    Unreachable(#[source] kube::Error),
}

/// Per-cluster cache of resolved kinds.
#[derive(Default)]
pub struct DiscoveryCache {
    kinds: Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>,
}

impl DiscoveryCache {
    /// Resolves `gvk`, from the cache when possible.
    pub async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, ApiCapabilities), kube::Error> {
        if let Some(hit) = self.kinds.lock().ok().and_then(|k| k.get(gvk).cloned()) {
            return Ok(hit);
        }
        let found = kube::discovery::pinned_kind(client, gvk).await?;
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.insert(gvk.clone(), found.clone());
        }
        Ok(found)
    }

    /// Drops one cached kind.
    pub fn forget(&self, gvk: &GroupVersionKind) {
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.remove(gvk);
        }
    }
}

struct Entry {
    resource_version: String,
    cluster: RemoteCluster,
}

/// The cache of remote clusters, keyed by connection Secret UID.
#[derive(Clone)]
pub struct RemoteClients {
    metrics: Metrics,
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

impl RemoteClients {
    /// An empty cache whose clients count requests into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            entries: Arc::default(),
        }
    }

    /// The client for the kubeconfig under `key` in `secret`, built once per
    /// Secret resourceVersion. `name` labels the cluster in metrics.
    pub async fn for_secret(
        &self,
        name: &str,
        secret: &Secret,
        key: &str,
    ) -> Result<RemoteCluster, RemoteError> {
        let uid = secret.metadata.uid.clone().unwrap_or_default();
        let rv = secret.metadata.resource_version.clone().unwrap_or_default();
        if let Some(entry) = self.entries.lock().ok().and_then(|e| {
            e.get(&uid)
                .filter(|e| e.resource_version == rv)
                .map(|e| e.cluster.clone())
        }) {
            return Ok(entry);
        }
        let secret_name = format!(
            "{}/{}",
            secret.metadata.namespace.as_deref().unwrap_or_default(),
            secret.metadata.name.as_deref().unwrap_or_default()
        );
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .ok_or_else(|| RemoteError::MissingKey {
                secret: secret_name.clone(),
                key: key.to_owned(),
            })?;
        let client = client_from_kubeconfig(&bytes, name, &self.metrics)
            .await
            .map_err(|e| match e {
                KubeconfigClientError::Parse(source) => RemoteError::InvalidKubeconfig {
                    secret: secret_name.clone(),
                    key: key.to_owned(),
                    source,
                },
                KubeconfigClientError::Build(source) => RemoteError::Client {
                    secret: secret_name.clone(),
                    source,
                },
            })?;
        let cluster = RemoteCluster {
            client,
            name: name.to_owned(),
            discovery: Arc::default(),
        };
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                uid,
                Entry {
                    resource_version: rv,
                    cluster: cluster.clone(),
                },
            );
        }
        Ok(cluster)
    }

    /// Drops the client of a deleted Secret.
    pub fn evict(&self, secret_uid: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(secret_uid);
        }
    }
}

/// Why a kubeconfig did not become a client.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigClientError {
    /// It does not parse.
    #[error("invalid kubeconfig")]
    Parse(#[source] kube::config::KubeconfigError),
    /// It parses but no client can be built from it.
    #[error("cannot build a client")]
    Build(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Builds a client from kubeconfig bytes, with bounded timeouts, counting
/// requests under the cluster label `name`.
pub async fn client_from_kubeconfig(
    bytes: &[u8],
    name: &str,
    metrics: &Metrics,
) -> Result<Client, KubeconfigClientError> {
    let text = String::from_utf8_lossy(bytes);
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(KubeconfigClientError::Parse)?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(KubeconfigClientError::Parse)?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    counted_client(config, name, metrics).map_err(|e| KubeconfigClientError::Build(Box::new(e)))
}

/// Builds a client from a config whose requests are counted by verb under the
/// cluster label `name`.
pub fn counted_client(
    config: Config,
    name: &str,
    metrics: &Metrics,
) -> Result<Client, kube::Error> {
    let layer = CountingLayer {
        counter: metrics.api_requests.clone(),
        cluster: name.to_owned(),
    };
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// A tower layer that counts requests by verb.
#[derive(Clone)]
pub struct CountingLayer {
    counter: IntCounterVec,
    cluster: String,
}

impl<S> Layer<S> for CountingLayer {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counting {
            inner,
            counter: self.counter.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

/// The service [`CountingLayer`] wraps around a client's stack.
#[derive(Clone)]
pub struct Counting<S> {
    inner: S,
    counter: IntCounterVec,
    cluster: String,
}

impl<S, B> Service<Request<B>> for Counting<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let verb = verb(
            req.method(),
            req.uri().path(),
            req.uri().query().unwrap_or_default(),
        );
        self.counter
            .with_label_values(&[self.cluster.as_str(), verb])
            .inc();
        self.inner.call(req)
    }
}

/// The Kubernetes verb of a request, from its method and URL.
pub fn verb(method: &http::Method, path: &str, query: &str) -> &'static str {
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if is_collection(path) => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether a resource path names a collection rather than one object:
/// /api/v1/<res>, /api/v1/namespaces/<ns>/<res>, /apis/<g>/<v>/<res>,
/// /apis/<g>/<v>/namespaces/<ns>/<res>; subresources count as objects.
fn is_collection(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..),
        Some(&"apis") => parts.get(3..),
        _ => return false,
    };
    matches!(rest, Some([_res] | ["namespaces", _, _res]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_told_apart_by_method_and_path() {
        let get = http::Method::GET;
        assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps", ""), "list");
        assert_eq!(verb(&get, "/api/v1/namespaces/a/configmaps/b", ""), "get");
        assert_eq!(
            verb(&get, "/apis/apps/v1/deployments", "watch=true&rv=1"),
            "watch"
        );
        assert_eq!(verb(&get, "/api/v1/namespaces", ""), "list");
        assert_eq!(verb(&get, "/api/v1/namespaces/wordpress", ""), "get");
        assert_eq!(
            verb(
                &http::Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/b",
                ""
            ),
            "patch"
        );
        assert_eq!(
            verb(&http::Method::DELETE, "/api/v1/namespaces/a/secrets/b", ""),
            "delete"
        );
    }
}
