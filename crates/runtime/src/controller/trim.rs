//! Caches that keep only what a controller reads. A reflector's store holds
//! every object it watches for as long as the process runs, so whatever a
//! controller never reads is dropped before it is stored: always
//! `metadata.managedFields` (often as large as the rest of the object), and
//! whatever else the controller's own trim function says.
//!
//! A trim function must leave every field that any reader of that store
//! reads, including the status a reconcile starts its status write from.

use std::{fmt::Debug, hash::Hash};

use kube::{
    Api, Resource,
    runtime::{Controller, WatchStreamExt, reflector, watcher},
};
use serde::de::DeserializeOwned;

/// Drops what no controller reads from any cached object:
/// `metadata.managedFields`.
pub fn managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Keeps everything but `metadata.managedFields`.
pub fn nothing_else<K>(_: &mut K) {}

/// A controller of `K` whose own store keeps each object as `trim` leaves
/// it, without managedFields. Otherwise as `Controller::new(api, config)`:
/// the same watch, the same triggers.
pub fn controller<K>(api: Api<K>, config: watcher::Config, trim: fn(&mut K)) -> Controller<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync + Unpin,
{
    let (store, events) = reflected(api, config, trim);
    let events = events.applied_objects();
    Controller::for_stream(events, store)
}

/// A cache of `K` as `trim` leaves it (without managedFields) and the
/// events of the watch that fills it: each event reaches the stream after
/// it reached the store, so whoever the stream wakes reads a store at least
/// as new as the change that woke it. The watch retries with the default
/// backoff.
pub fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (
    reflector::Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let events = watch(api, config, trim).default_backoff().reflect(writer);
    (store, events)
}

/// A watch of `K` whose objects come out as `trim` leaves them, without
/// managedFields.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config).modify(move |obj| {
        managed_fields(obj);
        trim(obj);
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    #[test]
    fn managed_fields_are_dropped_and_nothing_else() {
        let mut cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "labels": {"a": "b"},
                         "managedFields": [{"manager": "m", "operation": "Apply",
                                            "fieldsV1": {"f:data": {"f:k": {}}}}]},
            "data": {"k": "v"},
        }))
        .unwrap();
        let mut want = cm.clone();
        want.metadata.managed_fields = None;
        managed_fields(&mut cm);
        nothing_else(&mut cm);
        assert_eq!(cm, want);
        assert!(
            cm.data
                .is_some_and(|d| d.get("k").is_some_and(|v| v == "v"))
        );
    }
}
