//! The allow-list: the ClusterRole (`--allowed-permissions-clusterrole`)
//! whose rules bound what a package's runtime or an Extension may be
//! granted beyond its own kinds. One watch of it by name keeps it; the
//! revision and Extension controllers both read it from here, and a change
//! looks at every revision again ([`crate::revisions::controller`] polls
//! the watch). [`crate::boundary`] decides with its rules.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, reflector::Store, watcher},
};
use runtime::controller::Runtime;

/// The allow-list ClusterRole (`--allowed-permissions-clusterrole`), as
/// one watch of it by name keeps it; both controllers read it from here.
#[derive(Clone)]
pub struct AllowList {
    /// Its name.
    pub name: String,
    /// The watch's cache (the one ClusterRole, or none).
    pub store: Store<ClusterRole>,
}

impl AllowList {
    /// The watch of the ClusterRole `name` and the cache it fills; the
    /// stream must be polled (the revision controller does: a change looks
    /// at every revision again).
    pub fn watch(
        rt: &Runtime,
        name: String,
    ) -> (
        Self,
        impl futures::Stream<Item = Result<ClusterRole, watcher::Error>> + Send + use<>,
    ) {
        let (store, writer) = kube::runtime::reflector::store();
        let stream = watcher(
            Api::<ClusterRole>::all(rt.client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .reflect(writer)
        .touched_objects();
        (Self { name, store }, stream)
    }

    /// Its rules (none while the ClusterRole is missing: then nothing is
    /// allowed).
    pub fn rules(&self) -> Vec<PolicyRule> {
        self.store
            .state()
            .iter()
            .find(|c| c.name_any() == self.name)
            .and_then(|c| c.rules.clone())
            .unwrap_or_default()
    }
}
