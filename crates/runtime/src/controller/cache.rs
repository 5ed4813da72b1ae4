//! Whether a reflector's cache can be decided from yet.

use std::hash::Hash;

use kube::Resource;

/// How soon a reconcile that found a cache not yet ready looks again.
pub const CACHE_NOT_READY_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// Whether `store` holds its watch's first complete list. A reconcile must
/// not wait for that: a store fed through `Controller::watches_stream` is
/// filled only while the controller polls its triggers, which it stops doing
/// while every worker is busy, so workers waiting on the store would wait
/// for ever (until --reconcile-timeout). A reconcile that finds it not ready
/// returns `Action::requeue(CACHE_NOT_READY_RETRY)` instead, freeing its
/// worker.
pub async fn cache_ready<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    // A ready store answers at once; a short grace covers the common case of
    // a list that is just completing.
    tokio::time::timeout(
        std::time::Duration::from_millis(20),
        store.wait_until_ready(),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}
