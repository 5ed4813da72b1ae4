//! What the Object reconciles share: the controller's caches, its connector
//! to target clusters, its shared watches and what it applied and
//! published. A leaf: every room of the Object controller uses it, and it
//! uses none of them but the memories it holds.

use super::kind::ObjectKind;
use kube::runtime::reflector::Store;
use runtime::{
    controller::Runtime,
    managed::{AppliedMemory, Lifecycle, Reasons, Wording},
    reconciler::{CONTROL_REQUEST_FAILED, Skeleton},
    watches::Watches,
};

use super::metrics::ObjectMetrics;
use super::published::Published;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "object";
/// Name of the namespaced Objects' controller in metrics and events.
pub const NAMESPACED_CONTROLLER: &str = "namespaced-object";
/// The finalizer every Object carries until its managed object is handled.
pub const FINALIZER: &str = types::kubernetes::v1alpha1::OBJECT_FINALIZER;

/// How an Object controller's messages and reasons name a target's
/// credentials: its config is the `owner`; `fix` says what to set.
const fn wording(owner: &'static str, fix: &'static str) -> Wording {
    Wording {
        owner,
        fix,
        secret: "credentials Secret",
        connect: "with",
        read_from: "",
        reasons: Reasons {
            owner_not_found: "ProviderConfigNotFound",
            secret_not_found: "CredentialsNotFound",
            cannot_connect: "CannotConnectToTarget",
            cannot_read: CONTROL_REQUEST_FAILED,
        },
    }
}

/// How the cluster Objects' messages name a target's credentials.
pub static WORDING: Wording = wording("ProviderConfig", "set spec.providerConfigRef.name");

/// How the namespaced Objects' messages name a target's credentials: the
/// owner is "ProviderConfig ns/name" or "ClusterProviderConfig name"
/// ([`super::configs::ConfigRef`]).
pub static NAMESPACED_WORDING: Wording = wording("the", "set spec.providerConfigRef");

/// The Object reconciler of one kind of Object: what its reconciles share.
pub struct Objects<K: ObjectKind> {
    pub(crate) rt: Runtime,
    pub(crate) skeleton: Skeleton,
    /// The configs' caches and the connector to their clusters.
    pub(crate) reach: super::connect::Reach,
    pub(crate) objects: Store<K>,
    /// Which Objects carry each referrer finalizer.
    pub(crate) holds: super::holds::Holds<K>,
    pub(crate) watches: Watches<K>,
    pub(crate) applied: AppliedMemory,
    pub(crate) published: Published,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) field_manager: String,
    pub(crate) metrics: ObjectMetrics,
    /// Compiled readiness queries (`readiness.celQuery`), by source.
    pub(crate) queries: runtime::cel::Queries,
}

/// The target cluster of an Object, as messages and --remote-timeout's
/// circuit breaker name it.
pub fn target_of<K: ObjectKind>(obj: &K) -> String {
    target_named(&super::configs::config_of(obj))
}

/// The target cluster of the config `of`, as messages and
/// --remote-timeout's circuit breaker name it.
pub fn target_named(of: &super::configs::ConfigRef) -> String {
    format!("the target cluster of {of}")
}

/// How the Objects' keys name an Object: `namespace/name`, or `name` for
/// a cluster Object.
pub fn key_of(obj: &impl kube::Resource) -> String {
    let name = obj.meta().name.as_deref().unwrap_or_default();
    match obj.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// The reference to the Object a key names.
pub fn ref_of<K: ObjectKind>(key: &str) -> kube::runtime::reflector::ObjectRef<K> {
    match key.split_once('/') {
        Some((ns, name)) => kube::runtime::reflector::ObjectRef::new(name).within(ns),
        None => kube::runtime::reflector::ObjectRef::new(key),
    }
}

/// The target cluster of an Object's config.
pub async fn connect<K: ObjectKind>(
    ctx: &Objects<K>,
    obj: &K,
) -> Result<runtime::remote::RemoteCluster, super::errors::Error> {
    ctx.reach.connect(&super::configs::config_of(obj)).await
}
