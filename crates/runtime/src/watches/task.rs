//! The task that runs one shared watch, starting it again from a fresh
//! list when it fails.

use std::{
    sync::Weak,
    time::{Duration, Instant},
};

use futures::StreamExt;
use kube::{
    Resource,
    api::{DynamicObject, TypeMeta},
    runtime::watcher::{self, DefaultBackoff},
};

use super::state::{Change, Shared};
use super::target::{Target, WatchKey};

/// The longest pause between two attempts of a failing watch, should kube's
/// default backoff ever run out.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// Runs one shared watch until it is stopped (its task aborted) or its
/// [`Watches`] are dropped.
pub(super) async fn run<K>(shared: Weak<Shared<K>>, key: WatchKey, id: u64, target: Target)
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let (api, config) = target.watcher();
    let mut backoff = DefaultBackoff::default();
    loop {
        let mut events = std::pin::pin!(watcher::watcher(api.clone(), config.clone()));
        while let Some(event) = events.next().await {
            let change = match event {
                Ok(watcher::Event::Init) => Change::Init,
                Ok(watcher::Event::InitApply(o)) => Change::InitApply(typed(o, &target)),
                Ok(watcher::Event::InitDone) => Change::InitDone,
                Ok(watcher::Event::Apply(o)) => Change::Apply(typed(o, &target)),
                Ok(watcher::Event::Delete(o)) => Change::Delete(typed(o, &target)),
                // The resourceVersion the watch resumed from is too old:
                // the watcher lists again by itself, and the cache stays
                // trusted meanwhile (it is as good as it was a moment ago).
                Err(watcher::Error::WatchError(s)) if s.code == 410 => continue,
                Err(e) => {
                    report(&target, &e);
                    Change::Failed
                }
            };
            let failed = matches!(change, Change::Failed);
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if failed {
                shared.failures.inc();
            }
            if let Ok(mut state) = shared.state.lock() {
                let woken = state.change(&key, id, change, Instant::now());
                shared.wake(woken);
            }
            if failed {
                break;
            }
        }
        // Start again from a fresh list, after kube's default backoff.
        let delay = backoff.next().unwrap_or(MAX_RETRY_DELAY);
        tokio::time::sleep(delay).await;
    }
}

/// `object` with its apiVersion and kind. A list of a built-in kind says
/// them once for all its items, which come without: cached like that, an
/// object would differ from the same object read alone or written, and be
/// taken for changed by someone else (a read to confirm on every reconcile)
/// or for not what the reconcile wants (a write).
pub(super) fn typed(mut object: DynamicObject, target: &Target) -> DynamicObject {
    if object.types.is_none() {
        object.types = Some(TypeMeta {
            api_version: target.resource.api_version.clone(),
            kind: target.resource.kind.clone(),
        });
    }
    object
}

/// Logs why a watch failed, by kind of failure and HTTP status only: the
/// error's text may quote what the server sent, which for a Secret is
/// secret.
pub(super) fn report(target: &Target, error: &watcher::Error) {
    let (what, status) = match error {
        watcher::Error::InitialListFailed(e) => ("list failed", api_status(e)),
        watcher::Error::WatchStartFailed(e) => ("watch failed to start", api_status(e)),
        watcher::Error::WatchError(s) => ("watch ended with an error", Some(s.code)),
        watcher::Error::WatchFailed(e) => ("watch stream failed", api_status(e)),
        watcher::Error::NoResourceVersion => ("answer without resourceVersion", None),
    };
    tracing::warn!(
        cluster = %target.cluster.name,
        kind = %target.resource.kind,
        api_version = %target.resource.api_version,
        status = status.map(|s| s.to_string()).unwrap_or_default(),
        "shared watch: {what}; reads go to the server until it has listed again"
    );
}

pub(super) fn api_status(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
