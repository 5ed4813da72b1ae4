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

/// Waits until `store` holds its watch's first complete list, for code that
/// cannot go on without it and is not a reconcile (a reconcile returns
/// `Action::requeue(CACHE_NOT_READY_RETRY)` on [`cache_ready`] instead).
/// Many may wait at once: kube's `Store::wait_until_ready` keeps one waker
/// (its one-shot channel's), so of several tasks waiting on it only the
/// last to look is woken and the others wait for ever; here each waiter
/// looks again every [`CACHE_NOT_READY_RETRY`].
pub async fn wait_cache_ready<K>(store: &kube::runtime::reflector::Store<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    while !cache_ready(store).await {
        tokio::time::sleep(CACHE_NOT_READY_RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{reflector, watcher};

    use super::*;

    #[tokio::test]
    async fn every_one_of_many_waiters_sees_the_cache_become_ready() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { wait_cache_ready(&store).await })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!cache_ready(&store).await);
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for w in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(2), w)
                .await
                .expect("a waiter was never woken")
                .unwrap();
        }
    }
}
