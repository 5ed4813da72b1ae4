//! Clients for remote clusters, built from kubeconfig bytes held in a Secret.
//!
//! The bytes are checked by [`crate::kubeconfig::sanitise`] before any client
//! is built: only inline material is accepted, so a Secret can never make a
//! controller run a command, read a file or send its traffic elsewhere.
//!
//! Clients are cached per owner (the KubernetesCluster or ProviderConfig that
//! names the Secret) and are valid for one (Secret UID, key,
//! resourceVersion): two owners that read different keys of one Secret get
//! different clients, and a rotated kubeconfig takes effect at once. An
//! owner's entry goes when its credential changes, when the owner or its
//! Secret is gone ([`RemoteClients::release`]), after [`IDLE_TIMEOUT`]
//! unused, or when the cache is full ([`MAX_CLIENTS`], least recently used
//! first). Each cluster has its own discovery cache, which goes with its
//! client: templated kinds are resolved in the cluster that serves them,
//! never from a compiled-in list.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use http::Request;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client, Config,
    api::GroupVersionKind,
    client::ClientBuilder,
    discovery::{ApiCapabilities, ApiResource},
};
use prometheus::IntCounterVec;
use tower::{Layer, Service};

use crate::{
    kubeconfig::{self, Refusal},
    metrics::Metrics,
};

/// Bound on connecting to a remote cluster: an unreachable cluster must fail
/// a reconcile quickly rather than hold a worker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request to a remote cluster. Watches use
/// [`WATCH_READ_TIMEOUT`] instead, through [`RemoteCluster::watch_client`].
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on waiting for the next bytes of a watch (or of the list that
/// starts it) from a remote cluster. It is longer than the time a watch stays
/// open on the server (kube's watcher asks for 290 s and gives up on a
/// silent stream 5 s after that), so a quiet but healthy watch is never cut
/// by it, while a cluster that stops answering still frees the connection.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);
/// How many remote clients a binary keeps at most. Each holds a connection
/// pool and a discovery cache; beyond this many owners the least recently
/// used client is dropped and rebuilt on its next use.
pub const MAX_CLIENTS: usize = 256;
/// A client unused this long is dropped (its owner has most likely gone);
/// live owners use theirs at least every --poll-interval.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How many remote clusters get their own value of the `cluster` label of
/// `crossplane_rs_kube_api_requests_total` in one binary; requests to any
/// further cluster are counted under `other`. A value is freed, and its
/// series removed, when the last client using it is dropped.
pub const MAX_CLUSTER_LABELS: usize = 50;
/// The `cluster` label of the control cluster; never capped.
pub const CONTROL_LABEL: &str = "control";
/// The `cluster` label shared by remote clusters beyond
/// [`MAX_CLUSTER_LABELS`].
pub const OTHER_LABEL: &str = "other";

/// Why a remote cluster could not be reached. No message quotes what the
/// Secret holds.
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
    /// The kubeconfig was refused: it does not parse, or it asks for more
    /// than inline material.
    #[error("Secret {secret} key {key:?} does not hold a valid kubeconfig")]
    Refused {
        /// namespace/name of the Secret.
        secret: String,
        /// The key.
        key: String,
        /// What is wrong, by field path or YAML position.
        #[source]
        refusal: Refusal,
    },
    /// The kubeconfig passed the checks but no client could be built from
    /// it. The cause is not kept: TLS errors may describe the material.
    #[error(
        "cannot build a client from the kubeconfig in Secret {secret} key {key:?}: check that certificate-authority-data holds the server's CA certificate and that client-key-data is the key of client-certificate-data"
    )]
    Client {
        /// namespace/name of the Secret.
        secret: String,
        /// The key.
        key: String,
    },
}

/// A connected remote cluster.
#[derive(Clone)]
pub struct RemoteCluster {
    /// The client, counting its requests by verb; each request is bounded by
    /// [`READ_TIMEOUT`].
    pub client: Client,
    /// The client for long-running watches (see [`crate::watches`]): the
    /// same cluster, credential and request counting as `client`, but
    /// bounded by [`WATCH_READ_TIMEOUT`] so that a watch outlives
    /// [`READ_TIMEOUT`].
    pub watch_client: Client,
    /// The cluster's key in metrics (the KubernetesCluster or ProviderConfig name).
    pub name: String,
    label: String,
    id: u64,
    discovery: Arc<DiscoveryCache>,
}

/// The source of [`RemoteCluster::id`].
static NEXT_CLUSTER_ID: AtomicU64 = AtomicU64::new(1);

impl RemoteCluster {
    /// A cluster reached with an existing client (e.g. the control cluster
    /// itself), with its own discovery cache. The one client serves requests
    /// and watches alike.
    pub fn new(client: Client, name: &str) -> Self {
        Self::with_watch_client(client.clone(), client, name)
    }

    /// A cluster with a separate client for watches (see
    /// [`Self::watch_client`]).
    pub fn with_watch_client(client: Client, watch_client: Client, name: &str) -> Self {
        Self {
            client,
            watch_client,
            name: name.to_owned(),
            label: name.to_owned(),
            id: NEXT_CLUSTER_ID.fetch_add(1, Ordering::Relaxed),
            discovery: Arc::default(),
        }
    }

    /// The `cluster` label this client's requests are counted under in
    /// `crossplane_rs_kube_api_requests_total`: its name, or `other` once
    /// [`MAX_CLUSTER_LABELS`] remote clusters have theirs. Other per-cluster
    /// metrics use the same value, so they can be compared.
    pub fn metric_label(&self) -> &str {
        &self.label
    }

    /// This client's identity, unique in the process: clones share it, a
    /// client built again (e.g. for a rotated credential) gets a new one.
    /// Shared watches are kept per id, so a new credential gets new watches.
    pub fn id(&self) -> u64 {
        self.id
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

/// What an owner's client was built from: it is valid while all three are
/// unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Credential {
    secret_uid: String,
    key: String,
    resource_version: String,
}

struct Entry {
    credential: Credential,
    cluster: RemoteCluster,
    last_used: Instant,
}

#[derive(Default)]
struct Cache {
    by_owner: HashMap<String, Entry>,
}

/// The cache of remote clusters, one client per owner and credential (see
/// the module documentation). Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct RemoteClients {
    labels: ClusterLabels,
    allow_insecure_tls: bool,
    capacity: usize,
    idle_timeout: Duration,
    cache: Arc<Mutex<Cache>>,
}

impl RemoteClients {
    /// An empty cache whose clients count requests into `metrics`.
    /// `allow_insecure_tls` is `--allow-insecure-remote-tls`: whether a
    /// kubeconfig may turn off verification of the server's certificate.
    pub fn new(metrics: Metrics, allow_insecure_tls: bool) -> Self {
        Self::with_limits(
            metrics.api_requests,
            allow_insecure_tls,
            MAX_CLIENTS,
            IDLE_TIMEOUT,
            MAX_CLUSTER_LABELS,
        )
    }

    fn with_limits(
        counter: IntCounterVec,
        allow_insecure_tls: bool,
        capacity: usize,
        idle_timeout: Duration,
        max_labels: usize,
    ) -> Self {
        Self {
            labels: ClusterLabels::new(counter, max_labels),
            allow_insecure_tls,
            capacity,
            idle_timeout,
            cache: Arc::default(),
        }
    }

    /// The client of `owner` (the KubernetesCluster's namespace/name or the
    /// ProviderConfig's name; also its name in metrics) for the kubeconfig
    /// under `key` in `secret`. Built once per (Secret UID, key,
    /// resourceVersion); a different credential replaces the owner's
    /// previous client, and its discovery cache with it.
    pub fn for_secret(
        &self,
        owner: &str,
        secret: &Secret,
        key: &str,
    ) -> Result<RemoteCluster, RemoteError> {
        let credential = Credential {
            secret_uid: secret.metadata.uid.clone().unwrap_or_default(),
            key: key.to_owned(),
            resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
        };
        self.drop_idle();
        if let Some(hit) = self.lookup(owner, &credential) {
            return Ok(hit);
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
            .map(|b| b.0.as_slice())
            .ok_or_else(|| RemoteError::MissingKey {
                secret: secret_name.clone(),
                key: key.to_owned(),
            })?;
        let inline = kubeconfig::sanitise(bytes, self.allow_insecure_tls).map_err(|refusal| {
            RemoteError::Refused {
                secret: secret_name.clone(),
                key: key.to_owned(),
                refusal,
            }
        })?;
        let mut config = inline.config();
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        let mut watch_config = config.clone();
        watch_config.read_timeout = Some(WATCH_READ_TIMEOUT);
        let layer = CountingLayer {
            counter: self.labels.counter.clone(),
            label: self.labels.acquire(owner),
        };
        let label = layer.label.value.clone();
        let build = |config: Config| {
            ClientBuilder::try_from(config)
                .map(|b| b.with_layer(&layer).build())
                .map_err(|_| RemoteError::Client {
                    secret: secret_name.clone(),
                    key: key.to_owned(),
                })
        };
        let client = build(config)?;
        let watch_client = build(watch_config)?;
        let mut cluster = RemoteCluster::with_watch_client(client, watch_client, owner);
        cluster.label = label;
        self.insert(owner, credential, cluster.clone());
        Ok(cluster)
    }

    /// The client `owner` already has for the kubeconfig under `key` of the
    /// Secret with this UID and resourceVersion, if there is one: a
    /// controller that knows the Secret by its metadata (from a
    /// metadata-only watch) asks here first, and reads the Secret's data
    /// and calls [`Self::for_secret`] only when this answers None.
    pub fn cached(
        &self,
        owner: &str,
        secret_uid: &str,
        key: &str,
        resource_version: &str,
    ) -> Option<RemoteCluster> {
        self.drop_idle();
        self.lookup(
            owner,
            &Credential {
                secret_uid: secret_uid.to_owned(),
                key: key.to_owned(),
                resource_version: resource_version.to_owned(),
            },
        )
    }

    fn lookup(&self, owner: &str, credential: &Credential) -> Option<RemoteCluster> {
        let mut cache = self.cache.lock().ok()?;
        let entry = cache.by_owner.get_mut(owner)?;
        if entry.credential != *credential {
            return None;
        }
        entry.last_used = Instant::now();
        Some(entry.cluster.clone())
    }

    fn drop_idle(&self) {
        let idle = self.idle_timeout;
        self.retain_where(|_, e| e.last_used.elapsed() < idle);
    }

    /// Keeps the entries `keep` accepts; the others are dropped after the
    /// lock is released.
    fn retain_where(&self, keep: impl Fn(&str, &Entry) -> bool) {
        let dropped: Vec<Entry> = self
            .cache
            .lock()
            .map(|mut cache| {
                let gone: Vec<String> = cache
                    .by_owner
                    .iter()
                    .filter(|(o, e)| !keep(o, e))
                    .map(|(o, _)| o.clone())
                    .collect();
                gone.iter()
                    .filter_map(|o| cache.by_owner.remove(o))
                    .collect()
            })
            .unwrap_or_default();
        drop(dropped);
    }

    fn insert(&self, owner: &str, credential: Credential, cluster: RemoteCluster) {
        let now = Instant::now();
        // Dropped after the lock is released.
        let mut dropped = Vec::new();
        if let Ok(mut cache) = self.cache.lock() {
            dropped.extend(cache.by_owner.insert(
                owner.to_owned(),
                Entry {
                    credential,
                    cluster,
                    last_used: now,
                },
            ));
            while cache.by_owner.len() > self.capacity {
                let Some(lru) = cache
                    .by_owner
                    .iter()
                    .filter(|(o, _)| o.as_str() != owner)
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(o, _)| o.clone())
                else {
                    break;
                };
                dropped.extend(cache.by_owner.remove(&lru));
            }
        }
        drop(dropped);
    }

    /// Drops the client of an owner that is gone, or whose Secret is: call it
    /// when the KubernetesCluster, the ProviderConfig or the connection
    /// Secret is not found.
    pub fn release(&self, owner: &str) {
        let dropped = self
            .cache
            .lock()
            .ok()
            .and_then(|mut c| c.by_owner.remove(owner));
        drop(dropped);
    }

    /// Keeps only the clients of owners for which `exists` is true: a
    /// controller that knows its owners (e.g. from a watch cache) calls it so
    /// the clients of deleted owners go at once.
    pub fn retain_owners(&self, exists: impl Fn(&str) -> bool) {
        self.retain_where(|owner, _| exists(owner));
    }

    /// How many clients the cache holds.
    pub fn len(&self) -> usize {
        self.cache
            .lock()
            .map(|c| c.by_owner.len())
            .unwrap_or_default()
    }

    /// Whether the cache holds no client.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The `cluster` label values given to remote clusters: at most `max`
/// distinct ones, held while a client uses them.
#[derive(Clone)]
struct ClusterLabels {
    counter: IntCounterVec,
    max: usize,
    /// Label value -> how many live clients count under it.
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl ClusterLabels {
    fn new(counter: IntCounterVec, max: usize) -> Self {
        Self {
            counter,
            max,
            held: Arc::default(),
        }
    }

    /// The label for a remote cluster named `name`: its name while fewer
    /// than `max` names are held, else `other`. A remote cluster named like
    /// the fixed labels counts as `other`, so `control` always means the
    /// control cluster.
    fn acquire(&self, name: &str) -> Arc<ClusterLabel> {
        let shared = || {
            Arc::new(ClusterLabel {
                value: OTHER_LABEL.to_owned(),
                release: None,
            })
        };
        if name == CONTROL_LABEL || name == OTHER_LABEL {
            return shared();
        }
        let Ok(mut held) = self.held.lock() else {
            return shared();
        };
        if let Some(n) = held.get_mut(name) {
            *n += 1;
        } else if held.len() < self.max {
            held.insert(name.to_owned(), 1);
        } else {
            return shared();
        }
        Arc::new(ClusterLabel {
            value: name.to_owned(),
            release: Some(self.clone()),
        })
    }

    fn release(&self, name: &str) {
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        let Some(n) = held.get_mut(name) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            held.remove(name);
            // No client counts under it any more: its series go, so the
            // number of series stays bounded as clusters come and go.
            for verb in VERBS {
                let _ = self.counter.remove_label_values(&[name, verb]);
            }
        }
    }
}

/// One value of the `cluster` label, held by the clients that count under
/// it.
struct ClusterLabel {
    value: String,
    release: Option<ClusterLabels>,
}

impl Drop for ClusterLabel {
    fn drop(&mut self) {
        if let Some(labels) = &self.release {
            labels.release(&self.value);
        }
    }
}

/// Builds a client for the control cluster from `config`, its requests
/// counted by verb under the cluster label `control`.
pub fn counted_client(config: Config, metrics: &Metrics) -> Result<Client, kube::Error> {
    let layer = CountingLayer {
        counter: metrics.api_requests.clone(),
        label: Arc::new(ClusterLabel {
            value: CONTROL_LABEL.to_owned(),
            release: None,
        }),
    };
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// A tower layer that counts requests by cluster and verb. The cluster's
/// label value is held as long as a client carrying the layer lives.
#[derive(Clone)]
pub struct CountingLayer {
    counter: IntCounterVec,
    label: Arc<ClusterLabel>,
}

impl<S> Layer<S> for CountingLayer {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counting {
            inner,
            counter: self.counter.clone(),
            label: self.label.clone(),
        }
    }
}

/// The service [`CountingLayer`] wraps around a client's stack.
#[derive(Clone)]
pub struct Counting<S> {
    inner: S,
    counter: IntCounterVec,
    label: Arc<ClusterLabel>,
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
            .with_label_values(&[self.label.value.as_str(), verb])
            .inc();
        self.inner.call(req)
    }
}

/// Every value [`verb`] returns.
pub const VERBS: [&str; 8] = [
    "watch", "list", "get", "create", "update", "patch", "delete", "other",
];

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

    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use prometheus::{Opts, core::Collector as _};

    const CERT_PEM: &str = include_str!("testdata/cert.pem");

    fn counter() -> IntCounterVec {
        IntCounterVec::new(Opts::new("requests", "test"), &["cluster", "verb"]).unwrap()
    }

    fn clients(capacity: usize, idle: Duration, labels: usize) -> RemoteClients {
        RemoteClients::with_limits(counter(), false, capacity, idle, labels)
    }

    fn kubeconfig(port: u16, token: &str) -> String {
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(CERT_PEM);
        format!(
            "clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', certificate-authority-data: {ca}}}}}]\n\
             users: [{{name: u, user: {{token: {token}}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             current-context: c\n"
        )
    }

    fn secret(uid: &str, rv: &str, data: &[(&str, String)]) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("creds".into()),
                namespace: Some("team".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.clone().into_bytes())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    fn two_keys(rv: &str) -> Secret {
        secret(
            "uid-1",
            rv,
            &[
                ("control", kubeconfig(1, "a")),
                ("remote", kubeconfig(2, "b")),
            ],
        )
    }

    fn refusal(r: Result<RemoteCluster, RemoteError>) -> RemoteError {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e,
        }
    }

    fn same(a: &RemoteCluster, b: &RemoteCluster) -> bool {
        Arc::ptr_eq(&a.discovery, &b.discovery)
    }

    fn holds(rc: &RemoteClients, owner: &str) -> bool {
        rc.cache.lock().unwrap().by_owner.contains_key(owner)
    }

    #[tokio::test]
    async fn owners_reading_different_keys_of_one_secret_get_different_clients() {
        let rc = clients(10, IDLE_TIMEOUT, 10);
        let s = two_keys("1");
        let control = rc.for_secret("team/control", &s, "control").unwrap();
        let remote = rc.for_secret("team/remote", &s, "remote").unwrap();
        assert!(!same(&control, &remote));
        assert_eq!(rc.len(), 2);
        // The same (Secret UID, key, resourceVersion) is served from the cache.
        assert!(same(
            &control,
            &rc.for_secret("team/control", &s, "control").unwrap()
        ));
        // An owner that switches keys gets a new client; the old one goes.
        let switched = rc.for_secret("team/control", &s, "remote").unwrap();
        assert!(!same(&control, &switched));
        assert_eq!(rc.len(), 2);
    }

    #[tokio::test]
    async fn a_client_is_found_by_the_secrets_metadata_alone() {
        let rc = clients(10, IDLE_TIMEOUT, 10);
        assert!(rc.cached("team/c", "uid-1", "control", "1").is_none());
        let built = rc.for_secret("team/c", &two_keys("1"), "control").unwrap();
        let found = rc.cached("team/c", "uid-1", "control", "1").unwrap();
        assert!(same(&built, &found));
        assert!(rc.cached("team/c", "uid-1", "control", "2").is_none());
        assert!(rc.cached("team/c", "uid-1", "remote", "1").is_none());
        assert!(rc.cached("team/other", "uid-1", "control", "1").is_none());
    }

    #[tokio::test]
    async fn a_new_resource_version_replaces_the_older_client() {
        let rc = clients(10, IDLE_TIMEOUT, 10);
        let v1 = rc.for_secret("team/c", &two_keys("1"), "control").unwrap();
        let v2 = rc.for_secret("team/c", &two_keys("2"), "control").unwrap();
        assert!(!same(&v1, &v2));
        // A new client has a new identity (and so new shared watches); a
        // cached one keeps its identity.
        assert_ne!(v1.id(), v2.id());
        assert_eq!(
            v2.id(),
            rc.for_secret("team/c", &two_keys("2"), "control")
                .unwrap()
                .id()
        );
        assert_eq!(rc.len(), 1);
        assert!(same(
            &v2,
            &rc.for_secret("team/c", &two_keys("2"), "control").unwrap()
        ));
        // A Secret deleted and created again has a new UID: a new client.
        let recreated = secret("uid-2", "2", &[("control", kubeconfig(1, "a"))]);
        let v3 = rc.for_secret("team/c", &recreated, "control").unwrap();
        assert!(!same(&v2, &v3));
        assert_eq!(rc.len(), 1);
    }

    #[tokio::test]
    async fn released_owners_lose_their_client() {
        let rc = clients(10, IDLE_TIMEOUT, 10);
        rc.for_secret("team/a", &two_keys("1"), "control").unwrap();
        rc.for_secret("team/b", &two_keys("1"), "remote").unwrap();
        rc.release("team/a");
        assert!(!holds(&rc, "team/a") && holds(&rc, "team/b"));
        rc.release("team/gone-already");
        assert_eq!(rc.len(), 1);
    }

    #[tokio::test]
    async fn the_cache_is_bounded_and_drops_the_least_recently_used() {
        let rc = clients(2, IDLE_TIMEOUT, 10);
        let s = two_keys("1");
        rc.for_secret("a", &s, "control").unwrap();
        rc.for_secret("b", &s, "control").unwrap();
        // a is used again, so b is now the least recently used.
        rc.for_secret("a", &s, "control").unwrap();
        rc.for_secret("c", &s, "control").unwrap();
        assert_eq!(rc.len(), 2);
        assert!(holds(&rc, "a") && holds(&rc, "c") && !holds(&rc, "b"));
    }

    #[tokio::test]
    async fn clients_of_owners_that_no_longer_exist_are_dropped() {
        let rc = clients(10, IDLE_TIMEOUT, 10);
        let s = two_keys("1");
        rc.for_secret("team/a", &s, "control").unwrap();
        rc.for_secret("team/b", &s, "remote").unwrap();
        rc.retain_owners(|owner| owner == "team/b");
        assert!(!holds(&rc, "team/a") && holds(&rc, "team/b"));
    }

    #[tokio::test]
    async fn idle_clients_are_dropped() {
        let rc = clients(10, Duration::ZERO, 10);
        let s = two_keys("1");
        rc.for_secret("a", &s, "control").unwrap();
        rc.for_secret("b", &s, "control").unwrap();
        assert!(!holds(&rc, "a") && holds(&rc, "b"));
    }

    #[tokio::test]
    async fn refused_or_missing_kubeconfigs_build_nothing_and_quote_nothing() {
        let rc = clients(10, IDLE_TIMEOUT, 10);
        let s = secret("uid-1", "1", &[("kubeconfig", "s3cr3t-token".to_owned())]);
        let e = refusal(rc.for_secret("team/c", &s, "kubeconfig"));
        let chain = crate::events::error_chain(&e);
        assert!(
            chain.starts_with(
                "Secret team/creds key \"kubeconfig\" does not hold a valid kubeconfig"
            ),
            "{chain}"
        );
        assert!(!chain.contains("s3cr3t"), "{chain}");
        let e = refusal(rc.for_secret("team/c", &s, "other"));
        assert!(matches!(e, RemoteError::MissingKey { .. }), "{e}");
        let exec = kubeconfig(1, "t").replace("{token: t}", "{exec: {command: sh}}");
        let s = secret("uid-1", "2", &[("kubeconfig", exec)]);
        let e = refusal(rc.for_secret("team/c", &s, "kubeconfig"));
        assert!(crate::events::error_chain(&e).contains("users[0].user.exec runs a command"));
        assert!(rc.is_empty());
    }

    fn series(counter: &IntCounterVec) -> Vec<String> {
        let mut out: Vec<String> = counter
            .collect()
            .iter()
            .flat_map(|f| f.get_metric().to_vec())
            .map(|m| {
                m.get_label()
                    .iter()
                    .find(|l| l.name() == "cluster")
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default()
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn cluster_labels_are_capped_then_other_and_freed_with_their_clients() {
        let labels = ClusterLabels::new(counter(), 2);
        let a = labels.acquire("team/a");
        let b = labels.acquire("team/b");
        let a2 = labels.acquire("team/a");
        let c = labels.acquire("team/c");
        assert_eq!(
            [&a, &b, &a2, &c].map(|l| l.value.as_str()),
            ["team/a", "team/b", "team/a", "other"]
        );
        // "control" always means the control cluster.
        assert_eq!(labels.acquire("control").value, "other");
        for l in [&a, &b, &c] {
            labels
                .counter
                .with_label_values(&[l.value.as_str(), "get"])
                .inc();
        }
        assert_eq!(series(&labels.counter), ["other", "team/a", "team/b"]);
        drop(a);
        // Still held by a2.
        assert_eq!(labels.acquire("team/d").value, "other");
        drop(a2);
        assert_eq!(series(&labels.counter), ["other", "team/b"]);
        assert_eq!(labels.acquire("team/d").value, "team/d");
    }

    #[tokio::test]
    async fn remote_clients_count_under_bounded_labels_and_control_under_its_own() {
        let rc = clients(10, IDLE_TIMEOUT, 1);
        let s = two_keys("1");
        let a = rc.for_secret("team/a", &s, "control").unwrap();
        let b = rc.for_secret("team/b", &s, "remote").unwrap();
        // Nothing listens on ports 1 and 2: the requests fail, but are counted.
        let _ = a.client.apiserver_version().await;
        let _ = b.client.apiserver_version().await;
        assert_eq!(series(&rc.labels.counter), ["other", "team/a"]);
        assert_eq!((a.metric_label(), b.metric_label()), ("team/a", "other"));
        let metrics = Metrics::new().unwrap();
        let config = kubeconfig::sanitise(kubeconfig(3, "t").as_bytes(), false)
            .unwrap()
            .config();
        let control = counted_client(config, &metrics).unwrap();
        let _ = control.apiserver_version().await;
        assert_eq!(series(&metrics.api_requests), ["control"]);
        // Once a's client is gone its label is free for another cluster.
        drop(a);
        rc.release("team/a");
        let deadline = Instant::now() + Duration::from_secs(10);
        while rc.labels.held.lock().unwrap().contains_key("team/a") {
            assert!(Instant::now() < deadline, "team/a still held");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(series(&rc.labels.counter), ["other"]);
    }

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
