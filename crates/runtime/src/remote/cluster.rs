//! One connected cluster: its clients, its identity in metrics and shared
//! watches, and its own discovery cache.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use super::answers::Answers;
use kube::{
    Client,
    api::GroupVersionKind,
    discovery::{ApiCapabilities, ApiResource},
};

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
    pub(super) label: String,
    id: u64,
    pub(super) discovery: Arc<DiscoveryCache>,
    /// How the cluster has been answering, recorded by both clients.
    answers: Arc<Answers>,
}

/// The source of [`RemoteCluster::id`].
static NEXT_CLUSTER_ID: AtomicU64 = AtomicU64::new(1);

impl RemoteCluster {
    /// The control cluster, reached with the client of
    /// [`super::counted_client`], with its own discovery cache. The one
    /// client serves requests and watches alike; its answers are
    /// [`Answers::control`].
    pub fn new(client: Client, name: &str) -> Self {
        Self::with_watch_client(client.clone(), client, name, Answers::control())
    }

    /// A cluster with a separate client for watches (see
    /// [`Self::watch_client`]); both record into `answers`.
    pub(super) fn with_watch_client(
        client: Client,
        watch_client: Client,
        name: &str,
        answers: Arc<Answers>,
    ) -> Self {
        Self {
            client,
            watch_client,
            name: name.to_owned(),
            label: name.to_owned(),
            id: NEXT_CLUSTER_ID.fetch_add(1, Ordering::Relaxed),
            discovery: Arc::default(),
            answers,
        }
    }

    /// How the cluster has been answering its clients' requests: what
    /// [`crate::limits::Clusters`] tells a silent cluster from slow work by.
    pub fn answers(&self) -> &Answers {
        &self.answers
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

/// What one kind resolves to.
type Resolved = (ApiResource, ApiCapabilities);

/// Per-cluster cache of resolved kinds. Reconciles that miss on the same
/// kind at once (a controller's workers on first use of a cluster) wait for
/// one lookup rather than each making their own.
#[derive(Default)]
pub struct DiscoveryCache {
    kinds: Mutex<HashMap<GroupVersionKind, Arc<tokio::sync::OnceCell<Resolved>>>>,
}

impl DiscoveryCache {
    /// Resolves `gvk`, from the cache when possible.
    pub async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Resolved, kube::Error> {
        let cell = match self.kinds.lock() {
            Ok(mut kinds) => kinds.entry(gvk.clone()).or_default().clone(),
            Err(_) => Arc::default(),
        };
        let found = cell
            .get_or_try_init(|| kube::discovery::pinned_kind(client, gvk))
            .await
            .cloned();
        if found.is_err() {
            // A kind that is not served (or a cluster that did not answer)
            // leaves nothing behind: the map holds only kinds that resolved.
            if let Ok(mut kinds) = self.kinds.lock()
                && kinds
                    .get(gvk)
                    .is_some_and(|c| Arc::ptr_eq(c, &cell) && !c.initialized())
            {
                kinds.remove(gvk);
            }
        }
        found
    }

    /// Drops one cached kind.
    pub fn forget(&self, gvk: &GroupVersionKind) {
        if let Ok(mut kinds) = self.kinds.lock() {
            kinds.remove(gvk);
        }
    }
}
