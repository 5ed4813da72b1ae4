//! The cache of remote clients, one per owner and credential, bounded in
//! size and idle time.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Config, client::ClientBuilder};
use prometheus::IntCounterVec;

use super::answers::Answers;
use super::cluster::RemoteCluster;
use super::counting::{ClusterLabels, CountingLayer};
use super::error::RemoteError;
use super::{
    CONNECT_TIMEOUT, IDLE_TIMEOUT, MAX_CLIENTS, MAX_CLUSTER_LABELS, READ_TIMEOUT,
    WATCH_READ_TIMEOUT,
};
use crate::{kubeconfig, lru::Lru, metrics::Metrics};

/// What an owner's client was built from: it is valid while all three are
/// unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Credential {
    secret_uid: String,
    key: String,
    resource_version: String,
}

pub(super) struct Entry {
    credential: Credential,
    cluster: RemoteCluster,
    last_used: Instant,
}

/// The clients, by owner; beyond its capacity the least recently used
/// owner's client is dropped.
pub(super) struct Cache {
    pub(super) by_owner: Lru<String, Entry>,
}

/// The cache of remote clusters, one client per owner and credential (see
/// the module documentation). Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct RemoteClients {
    pub(super) labels: ClusterLabels,
    allow_insecure_tls: bool,
    idle_timeout: Duration,
    pub(super) cache: Arc<Mutex<Cache>>,
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

    pub(super) fn with_limits(
        counter: IntCounterVec,
        allow_insecure_tls: bool,
        capacity: usize,
        idle_timeout: Duration,
        max_labels: usize,
    ) -> Self {
        Self {
            labels: ClusterLabels::new(counter, max_labels),
            allow_insecure_tls,
            idle_timeout,
            cache: Arc::new(Mutex::new(Cache {
                by_owner: Lru::new(capacity),
            })),
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
        let answers = Arc::new(Answers::default());
        let layer = CountingLayer {
            counter: self.labels.counter.clone(),
            label: self.labels.acquire(owner),
            answers: answers.clone(),
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
        let mut cluster = RemoteCluster::with_watch_client(client, watch_client, owner, answers);
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
        let entry = cache.by_owner.get(owner)?;
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
            .map(|mut cache| cache.by_owner.retain(|o, e| keep(o, e)))
            .unwrap_or_default();
        drop(dropped);
    }

    fn insert(&self, owner: &str, credential: Credential, cluster: RemoteCluster) {
        let entry = Entry {
            credential,
            cluster,
            last_used: Instant::now(),
        };
        // Dropped after the lock is released.
        let dropped = self
            .cache
            .lock()
            .map(|mut cache| cache.by_owner.insert(owner.to_owned(), entry))
            .unwrap_or_default();
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
