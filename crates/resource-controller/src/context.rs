//! What the KubernetesApplicationResource reconciles share: the controller's
//! caches, its connector to remote clusters, what it applied, and the
//! status a successful submit writes. A leaf: the reconciler and the remote
//! side both use it, and it uses neither.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::reflector::{ObjectRef, Store},
};
use prometheus::Histogram;
use runtime::{
    conditions,
    controller::{Runtime, cache_ready},
    managed::{
        AppliedMemory, ConnectError, Connector, Known, Lifecycle, SecretKey, Wording, drift,
    },
    reconciler::{Draft, Skeleton},
    remote::RemoteCluster,
    watches::Watches,
};
use serde_json::Value;
use types::{
    compute::v1alpha1::KubernetesCluster,
    workload::v1alpha1::{KubernetesApplicationResource, KubernetesApplicationResourceState},
};

use crate::health::Health;
use crate::strategy::Strategy;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "kubernetesapplicationresource";
/// Finalizer that holds a resource until its remote objects are gone.
pub const FINALIZER: &str = types::workload::v1alpha1::RESOURCE_FINALIZER;

/// How this controller's messages and reasons name a cluster's credentials.
pub static WORDING: Wording = Wording {
    owner: "KubernetesCluster",
    fix: "fix spec.clusterRef",
    secret: "connection Secret",
    connect: "to",
    read_from: " from the control cluster",
    reasons: runtime::managed::Reasons {
        owner_not_found: "ClusterNotFound",
        secret_not_found: "ConnectionSecretNotFound",
        cannot_connect: "CannotConnectToCluster",
        cannot_read: "CannotReadLocalObject",
    },
};

type Res = KubernetesApplicationResource;

/// The KubernetesApplicationResource reconciler: what its reconciles share.
pub struct ApplicationResources {
    pub(crate) skeleton: Skeleton,
    pub(crate) rt: Runtime,
    pub(crate) connector: Connector,
    pub(crate) watches: Watches<Res>,
    pub(crate) clusters: Store<KubernetesCluster>,
    pub(crate) secrets: Store<PartialObjectMeta<Secret>>,
    pub(crate) applied: AppliedMemory,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) submit_latency: Histogram,
    /// UIDs whose submit latency was observed. NB: a reconcile can see a
    /// cached object from before its own Submitted status write arrived, so
    /// the previous state alone would count some resources twice.
    pub(crate) observed: Mutex<HashSet<String>>,
    /// Compiled CEL health rules, by source.
    pub(crate) rules: runtime::cel::Queries,
    /// Drift corrections, by kind.
    pub(crate) drift: prometheus::IntCounterVec,
}

impl ApplicationResources {
    /// A local Secret, by its metadata (from the metadata-only watch).
    pub(crate) fn secret_meta(
        &self,
        ns: &str,
        name: &str,
    ) -> Option<Arc<PartialObjectMeta<Secret>>> {
        self.secrets
            .get(&ObjectRef::<PartialObjectMeta<Secret>>::new(name).within(ns))
    }

    pub(crate) async fn caches_ready(&self) -> bool {
        cache_ready(&self.clusters).await && cache_ready(&self.secrets).await
    }

    /// Connects to the resource's cluster: the KubernetesCluster and its
    /// connection Secret come from watch caches; the Secret's data is read
    /// only when no client is cached for its current version.
    pub(crate) async fn connect(
        &self,
        res: &Res,
        cluster: &str,
    ) -> Result<RemoteCluster, ConnectError> {
        let ns = res.namespace().unwrap_or_default();
        let owner = format!("{ns}/{cluster}");
        // A cluster missing from the cache may only be newer than the cache
        // (it was created a moment ago): the server confirms before anything
        // is reported or, when deleting, left in place. Costs a request only
        // then.
        let kc = match self
            .clusters
            .get(&ObjectRef::<KubernetesCluster>::new(cluster).within(&ns))
        {
            Some(kc) => kc,
            None => match Api::<KubernetesCluster>::namespaced(self.rt.client.clone(), &ns)
                .get_opt(cluster)
                .await
                .map_err(|e| {
                    self.connector
                        .read_failed(format!("KubernetesCluster {owner}"), e)
                })? {
                Some(kc) => Arc::new(kc),
                None => return Err(self.connector.owner_not_found(&owner)),
            },
        };
        let secret_ref = &kc.spec.connection_secret_ref;
        // The Secret's metadata from the cache says which client is current;
        // a Secret the cache does not show (yet) is read from the server.
        let meta = self.secret_meta(&ns, &secret_ref.name);
        let (uid, resource_version) = meta
            .as_ref()
            .map(|m| (m.uid().unwrap_or_default(), m.resource_version()))
            .unwrap_or_default();
        let known = match &meta {
            Some(_) => Known::Metadata {
                uid: &uid,
                resource_version: resource_version.as_deref().unwrap_or_default(),
            },
            None => Known::Nothing,
        };
        let at = SecretKey {
            namespace: &ns,
            name: &secret_ref.name,
            key: &secret_ref.key,
        };
        self.connector.connect(&owner, at, known).await
    }

    /// Records a successful submit in `status`; the first one of a resource
    /// is also a submit-latency sample. (No event: the state says it, and an
    /// event would be one more request per resource.)
    /// Returns the message of a health rule that newly failed, for an
    /// event.
    pub(crate) fn submitted(
        &self,
        res: &Res,
        status: &mut Draft<Res>,
        live: Option<&Value>,
        health: Health,
        kind: &str,
        strategy: &Strategy,
    ) -> Option<String> {
        // Feedback rules name what comes back instead of the whole status.
        let feedback = crate::feedback::values(&res.spec.feedback_rules, kind, live);
        let remote = live
            .and_then(|l| l.get("status"))
            .cloned()
            .filter(|s| !s.is_null() && feedback.is_none());
        let (ready, failed) = match health {
            Health::Healthy => (conditions::available(), None),
            Health::Unhealthy(why) => (conditions::unavailable(why), None),
            Health::RuleFailed(why) => (
                conditions::custom(
                    conditions::TYPE_READY,
                    false,
                    types::workload::v1alpha1::REASON_HEALTH_RULE_FAILED,
                    Some(why.clone()),
                ),
                Some(why),
            ),
        };
        let changed = conditions::set(&mut status.conditions, ready, &conditions::now());
        let first = status.state != Some(KubernetesApplicationResourceState::Submitted)
            && self
                .observed
                .lock()
                .is_ok_and(|mut seen| seen.insert(res.uid().unwrap_or_default()));
        status.state = Some(KubernetesApplicationResourceState::Submitted);
        status.remote = remote;
        status.feedback = feedback;
        status.delivery = strategy.delivery();
        status.observed_generation = res.metadata.generation;
        if let (true, Some(created)) = (first, res.creation_timestamp()) {
            let ms =
                k8s_openapi::jiff::Timestamp::now().as_millisecond() - created.0.as_millisecond();
            self.submit_latency.observe((ms as f64 / 1000.0).max(0.0));
        }
        failed.filter(|_| changed)
    }

    /// How this controller reports drift (runtime::managed::drift).
    pub(crate) fn drift_reporter(&self) -> drift::Reporter<'_> {
        drift::Reporter {
            metric: &self.drift,
            events: &self.skeleton.reporting.events,
            threshold: self.rt.args.drift_loop_threshold,
        }
    }
}

/// The remote object's name, as the template gives it.
pub(crate) fn remote_name(res: &Res) -> String {
    let template = runtime::packed::unpacked(&res.spec.template);
    template
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
