//! What the Object reconciles share: the controller's caches, its connector
//! to target clusters, its shared watches and what it applied and
//! published. A leaf: every room of the Object controller uses it, and it
//! uses none of them but the memories it holds.

use kube::runtime::reflector::Store;
use runtime::{
    controller::Runtime,
    managed::{AppliedMemory, Connector, Lifecycle, Reasons, Wording},
    reconciler::{CONTROL_REQUEST_FAILED, Skeleton},
    remote::RemoteCluster,
    watches::Watches,
};
use types::kubernetes::{v1alpha1::ProviderConfig, v1alpha2::Object};

use super::metrics::ObjectMetrics;
use super::published::Published;

/// Name of this controller in metrics and events.
pub const CONTROLLER: &str = "object";
/// The finalizer every Object carries until its managed object is handled.
pub const FINALIZER: &str = types::kubernetes::v1alpha1::OBJECT_FINALIZER;

/// How this controller's messages and reasons name a target's credentials.
pub static WORDING: Wording = Wording {
    owner: "ProviderConfig",
    fix: "set spec.providerConfigRef.name",
    secret: "credentials Secret",
    connect: "with",
    read_from: "",
    reasons: Reasons {
        owner_not_found: "ProviderConfigNotFound",
        secret_not_found: "CredentialsNotFound",
        cannot_connect: "CannotConnectToTarget",
        cannot_read: CONTROL_REQUEST_FAILED,
    },
};

/// The Object reconciler: what its reconciles share.
pub struct Objects {
    pub(crate) rt: Runtime,
    pub(crate) skeleton: Skeleton,
    pub(crate) connector: Connector,
    pub(crate) local: RemoteCluster,
    pub(crate) objects: Store<Object>,
    /// Which Objects carry each referrer finalizer.
    pub(crate) holds: super::holds::Holds,
    pub(crate) configs: Store<ProviderConfig>,
    pub(crate) watches: Watches<Object>,
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
pub fn target_of(obj: &Object) -> String {
    format!(
        "the target cluster of ProviderConfig {}",
        obj.spec.provider_config_ref.name
    )
}
